"""The NCCL reader's fast lane reads exactly what the line-by-line path reads.

``NcclReader.take_lines`` skips the dispatcher for runs of plain ``NCCL INFO`` lines and keeps
connection lines as rows of ``NcclConnectRun``. Every fixture, a synthetic incident and
random mixes of hostile lines are read both ways; events, line accounting and samples of
unrecognized lines must be equal.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.synth import generate
from logsleuth.model.nccl import NcclChannelConnect, NcclConnectRun
from logsleuth.parse import lines
from logsleuth.parse.discover import InputSource
from logsleuth.parse.dispatch import InputError, InputResult, read_input

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"


def _read_both(source: InputSource, monkeypatch: pytest.MonkeyPatch) -> tuple[object, object]:
    outcomes = []
    for fast in (True, False):
        monkeypatch.setattr(lines, "FAST_LANE", fast)
        try:
            outcomes.append(read_input(source, keep_ops=8))
        except InputError as exc:
            outcomes.append((type(exc).__name__, str(exc)))
    monkeypatch.setattr(lines, "FAST_LANE", True)
    return outcomes[0], outcomes[1]


def _text_files() -> Iterator[Path]:
    for path in sorted(FIXTURES.rglob("*")):
        # The lane only ever takes NCCL INFO lines: files without one read the same.
        if path.is_file() and b"NCCL INFO" in path.read_bytes():
            yield path


def test_every_fixture_reads_the_same_with_and_without_the_fast_lane(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    files = list(_text_files())
    assert len(files) > 30
    for path in files:
        source = InputSource(name=str(path.relative_to(ROOT)), path=path)
        fast, slow = _read_both(source, monkeypatch)
        assert fast == slow, path


def test_a_synthetic_incident_reads_the_same_and_keeps_connections_as_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    generate(tmp_path, ranks=16, hosts=2, ops=20, fault="missing-collective", comms=2)
    logs = sorted((tmp_path / "nccl").glob("*.log"))
    assert logs
    runs = 0
    for path in logs:
        source = InputSource(name=path.name, path=path)
        fast, slow = _read_both(source, monkeypatch)
        assert fast == slow, path
        compact = read_input(source, keep_ops=8, compact=True)
        runs += sum(isinstance(e, NcclConnectRun) for e in compact.events)
        assert not any(isinstance(e, NcclConnectRun) for e in slow.events)  # type: ignore[union-attr]
    assert runs >= len(logs)


_PREFIX = "gpu-a01:4721:4790 [0] NCCL INFO "
_LINES = [
    _PREFIX + "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
    _PREFIX + "Channel 01/0 : 7[7] -> 0[0] [receive] via NET/IB/0/GDRDMA",
    _PREFIX + "Channel 02/0 : 0[0] -> 99999999999999999999999[1] via P2P/IPC",
    "gpu-a02:4722:4791 [1] NCCL INFO Channel 00/0 : 1[1] -> 2[2] via SHM/direct/direct",
    _PREFIX + "Connected all rings",
    _PREFIX + "Trees [0] 1/-1/-1->0->-1 [1] -1/-1/-1->0->1",
    _PREFIX + "AllReduce: opCount 3 sendbuff 0x7f recvbuff 0x7f count 8 datatype 7 op 0 root 0 "
    "comm 0x55 [nranks=8] stream 0x56",
    _PREFIX + "NCCL version 2.21.5+cuda12.4",
    _PREFIX + "comm 0x55 rank 0 nranks 8 cudaDev 0 busId 1b000 - Init COMPLETE",
    "gpu-a01:4721:4790 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
    "10.0.0.2<41231> failed : Connection refused",
    "gpu-a01:4721:4790 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2gpu-a01:4721:4790 [0] "
    "NCCL INFO Connected all trees",
    "[rank3]: " + _PREFIX + "Connected all trees",
    _PREFIX + "Channel 03/0 : 0[0] -> 1[1] via P2P/CUMEM &amp; more",
    _PREFIX + "Channel 04/0 : 0[0] -> 1[1] via \x1b[31mP2P\x1b[0m",
    "Rank 3:",
    "Traceback (most recent call last):",
    '  File "train.py", line 12, in <module>',
    "RuntimeError: NCCL error: unhandled system error",
    "",
    "   ",
    "x" * 130 + " ",
    _PREFIX + "Channel 05/0 : 0[0] -> 1[1] via P2P/CUMEM " + "y" * 1000,
]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(_LINES), min_size=1, max_size=40), st.booleans())
def test_random_mixes_read_the_same_both_ways(mix: list[str], newline_at_end: bool) -> None:
    data = ("\n".join(mix) + ("\n" if newline_at_end else "")).encode()
    source = InputSource(name="mix.log", path=None, data=data)
    outcomes = []
    for fast in (True, False):
        lines.FAST_LANE = fast
        try:
            outcomes.append(read_input(source, keep_ops=8))
        except InputError as exc:
            outcomes.append((type(exc).__name__, str(exc)))
        finally:
            lines.FAST_LANE = True
    assert outcomes[0] == outcomes[1]
    if isinstance(outcomes[0], InputResult):
        connects = [e for e in outcomes[0].events if isinstance(e, NcclChannelConnect)]
        assert all(e.text.startswith(e.text.split(" NCCL ", 1)[0]) for e in connects)
