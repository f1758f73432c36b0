"""The dispatcher's promises over whole inputs: every line accounted for, never an exception."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logsleuth.errors import InputError
from logsleuth.parse.discover import InputSource
from logsleuth.parse.dispatch import read_input

ROOT = Path(__file__).resolve().parents[2]
REAL = sorted(
    p
    for p in (ROOT / "fixtures").rglob("*")
    if p.is_file() and p.suffix not in (".md",) and p.name not in ("truth.json",)
)


def _physical_lines(data: bytes) -> int:
    return data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)


@pytest.mark.parametrize("path", REAL, ids=lambda p: str(p.relative_to(ROOT / "fixtures")))
def test_every_fixture_line_is_accounted_for(path: Path) -> None:
    data = path.read_bytes()
    result = read_input(InputSource(name=path.name, path=path))
    s = result.summary
    assert s.recognized + s.unrecognized + s.blank == s.lines
    assert s.lines == _physical_lines(data)
    assert all(e.ref.source == path.name for e in result.events)
    assert all(1 <= e.ref.line <= s.lines for e in result.events)


def test_parsing_twice_gives_identical_events() -> None:
    path = (
        ROOT
        / "fixtures"
        / "real"
        / "corpus"
        / "024-socket-broken-pipe-abort-complete-watchdog"
        / "combined.log"
    )
    first = read_input(InputSource(name="a", path=path))
    second = read_input(InputSource(name="a", path=path))
    assert first == second


_FRAGMENTS = st.sampled_from(
    [
        "gpu-a01:4721:4790 [0] NCCL INFO ",
        "NCCL WARN ",
        "[rank3]:",
        "[1,2]<stdout>:",
        'Thread 13270 (idle): "MainThread"\n',
        "    all_reduce (torch/distributed/distributed_c10d.py:3252)\n",
        "Traceback (most recent call last):\n",
        '  File "x.py", line 3, in f\n',
        "Root Cause (first observed failure):\n",
        "comm 0x55 rank 1 nranks 4 cudaDev 0 busId 1000 - Init START\n",
        "AllReduce: opCount 2a sendbuff 0x1 recvbuff 0x1 count 3 datatype 7 op 0 root 0 comm 0x5 [nranks=4] stream 0x6\n",
        "\r\n",
        "\x1b[31m",
        "\x00",
        "\n",
    ]
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(_FRAGMENTS, st.text(max_size=40)), max_size=40))
def test_any_text_is_read_and_accounted(parts: list[str]) -> None:
    data = "".join(parts).encode("utf-8", errors="replace")
    source = InputSource(name="fuzz.log", path=None, data=data)
    try:
        result = read_input(source)
    except InputError as exc:  # only the documented whole-input refusals
        assert exc.reason in ("file is empty", "binary data, not a log or a stack dump")
        return
    s = result.summary
    assert s.recognized + s.unrecognized + s.blank == s.lines == _physical_lines(data)


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=1, max_value=10_000))
def test_a_file_cut_at_any_byte_still_parses(cut: int) -> None:
    path = (
        ROOT
        / "fixtures"
        / "real"
        / "corpus"
        / "007-roce-status12-then-status5-flush"
        / "combined.log"
    )
    data = path.read_bytes()[: cut % len(path.read_bytes()) + 1]
    try:
        result = read_input(InputSource(name="cut.log", path=None, data=data))
    except InputError as exc:
        assert exc.reason == "file is empty"
        return
    s = result.summary
    assert s.recognized + s.unrecognized + s.blank == s.lines
