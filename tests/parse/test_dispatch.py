"""The dispatcher's promises over whole inputs: every line accounted for, never an exception."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logsleuth.errors import InputError
from logsleuth.model.base import Event, rank_in_file_name
from logsleuth.model.nccl import NcclCollective
from logsleuth.parse import dispatch
from logsleuth.parse.discover import InputSource
from logsleuth.parse.dispatch import InputResult, read_input, read_inputs
from logsleuth.parse.nccl import parse_nccl_line
from logsleuth.parse.nccl_compact import shape_of

ROOT = Path(__file__).resolve().parents[2]
REAL = sorted(
    p
    for p in (ROOT / "fixtures").rglob("*")
    if p.is_file() and p.suffix not in (".md",) and p.name not in ("truth.json",)
)


def _physical_lines(data: bytes) -> int:
    # A text whose first block has no LF but has CRs uses CR-only line endings (old macOS,
    # some terminal captures): each CR ends a line.
    if b"\n" not in data[: 1 << 20] and b"\r" in data:
        data = data.replace(b"\r", b"\n")
    return data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)


@pytest.mark.parametrize("path", REAL, ids=lambda p: str(p.relative_to(ROOT / "fixtures")))
def test_every_fixture_line_is_accounted_for(path: Path) -> None:
    data = path.read_bytes()
    result = read_input(InputSource(name=path.name, path=path))
    s = result.summary
    assert s.recognized + s.unrecognized + s.blank == s.lines
    if s.kind == "flight-recorder":  # a binary dump: its "lines" are its entries
        assert s.lines == max(1, len(getattr(result.events[0], "entries", ())))
    else:
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
    assert read_input(source, keep_ops=1).summary == s


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


# ---- the fast path: COLL lines of a known shape, compacted per writer and communicator

_KEEP = 3


@pytest.fixture(scope="module")
def synthetic_bundle(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """A small synthetic incident: 3 communicators, interleaved COLL lines, a hang."""
    from benchmarks.synth import generate

    out = tmp_path_factory.mktemp("bundle")
    generate(out, ranks=8, hosts=2, ops=40, fault="missing-collective", comms=3, launcher=True)
    return sorted(p for p in out.rglob("*.log"))


def _coll_key(event: Event) -> tuple[object, ...]:
    assert isinstance(event, NcclCollective)
    return (event.origin.host, event.origin.pid, event.comm)


def _assert_compaction_equivalent(full: InputResult, fast: InputResult) -> None:
    """``fast`` (keep_ops) holds every non-COLL event and, per writer and comm, the ends."""
    assert fast.summary == full.summary
    assert fast.unrecognized_samples == full.unrecognized_samples
    others = [e for e in full.events if not isinstance(e, NcclCollective)]
    assert [e for e in fast.events if not isinstance(e, NcclCollective)] == others
    kept = [e for e in fast.events if isinstance(e, NcclCollective)]
    assert set(kept) <= set(full.events)
    groups: dict[tuple[object, ...], list[Event]] = {}
    for event in full.events:
        if isinstance(event, NcclCollective):
            groups.setdefault(_coll_key(event), []).append(event)
    for events in groups.values():
        must = {events[0], *events[-_KEEP:]}
        assert must <= set(kept)
    assert [e.ref.line for e in fast.events] == sorted(e.ref.line for e in fast.events)


@pytest.mark.parametrize("path", REAL, ids=lambda p: str(p.relative_to(ROOT / "fixtures")))
def test_compacting_keeps_every_event_the_analysis_reads(path: Path) -> None:
    source = InputSource(name=path.name, path=path)
    try:
        full = read_input(source)
    except InputError:
        return
    _assert_compaction_equivalent(full, read_input(source, keep_ops=_KEEP))


def test_compacting_a_synthetic_incident_drops_only_middle_coll_lines(
    synthetic_bundle: list[Path],
) -> None:
    dropped = 0
    for path in synthetic_bundle:
        source = InputSource(name=path.name, path=path)
        full, fast = read_input(source), read_input(source, keep_ops=_KEEP)
        _assert_compaction_equivalent(full, fast)
        dropped += len(full.events) - len(fast.events)
    assert dropped > 8 * 30  # each rank logged ~40 ops per comm; most were never built


def test_every_line_the_fast_path_takes_is_a_coll_line_of_its_key(
    synthetic_bundle: list[Path],
) -> None:
    lines = [
        line
        for path in [*synthetic_bundle, *REAL]
        if path.suffix == ".log"
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines()
    ]
    taken = 0
    for text in lines:
        shape = shape_of(text)
        found = shape.pattern.fullmatch(text) if shape.pattern is not None else None
        event = parse_nccl_line(text)
        if found is None:
            continue
        taken += 1
        assert isinstance(event, NcclCollective), text
        assert found.group(len(found.groups())) == event.comm
        assert shape.kind == "NcclCollective" and shape.recognized
    assert taken > 100


def test_read_inputs_keeps_order_and_gives_the_same_results_in_workers(
    synthetic_bundle: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    sources = [InputSource(name=p.name, path=p) for p in synthetic_bundle]
    sources.append(InputSource(name="empty", path=None, data=b""))
    serial = list(read_inputs(sources, jobs=1, keep_ops=_KEEP))
    monkeypatch.setattr(dispatch, "_POOL_MIN_BYTES", 0)
    parallel = list(read_inputs(sources, jobs=2, keep_ops=_KEEP))
    assert [r.summary.source for r in serial[:-1] if isinstance(r, InputResult)] == [
        s.name for s in sources[:-1]
    ]
    assert serial[:-1] == parallel[:-1]
    assert isinstance(parallel[-1], InputError)
    assert (parallel[-1].source, parallel[-1].reason) == ("empty", "file is empty")


@pytest.mark.parametrize(
    ("line", "kept"),
    [
        (
            "AllReduce: opCount ffffffffffffffff sendbuff 0x1 recvbuff 0x2 count 8 datatype 7"
            " op 0 root 0 comm 0x3 [nranks=2] stream 0x4",
            True,
        ),
        (
            "AllReduce: opCount 1ffffffffffffffff sendbuff 0x1 recvbuff 0x2 count 8 datatype 7"
            " op 0 root 0 comm 0x3 [nranks=2] stream 0x4",
            False,
        ),
        ("Trees [0] -1/-1/-1->0->1 [1] 1/-1/-1->0->-1", True),
        ("Trees [0] -1/-1/-1->0->1 [1] 1/-1/-1->0->99999999999999999999", False),
    ],
    ids=["opcount-64-bit", "opcount-65-bit", "trees", "trees-wide-parent"],
)
def test_a_line_holding_a_number_wider_than_64_bits_is_counted_unrecognized(
    tmp_path: Path, line: str, kept: bool
) -> None:
    path = tmp_path / "rank0.log"
    path.write_text(f"host:1:1 [0] NCCL INFO {line}\n")
    result = read_input(InputSource(name=path.name, path=path))
    assert (result.summary.recognized, result.summary.unrecognized) == ((1, 0) if kept else (0, 1))
    assert bool(result.events) is kept


@pytest.mark.parametrize(
    ("name", "rank"),
    [
        ("nccl_rank3.log", 3),
        ("logs/rank_12.txt", 12),
        ("rank3.2.txt", 3),
        ("user_logs/std_log_process_07.txt", 7),
        ("train_local_rank3.log", None),
        ("rank3_pid4242.txt", None),
        ("frank3.log", None),
        ("worker-3.log", None),
        # Open MPI's --output-filename: a file named for its stream, in its rank's directory.
        ("hvd-out/1/rank.3/stderr", 3),
        ("out/1/rank.12/stdout", 12),
        # torchrun's --log-dir names the local rank only.
        ("run/attempt_0/3/stderr.log", None),
    ],
)
def test_a_file_name_gives_a_rank_only_where_it_says_rank(name: str, rank: int | None) -> None:
    assert rank_in_file_name(name) == rank


WATCHDOG = (
    "[rank{rank}]:[E1105 03:12:44.118203 41 ProcessGroupNCCL.cpp:616] [Rank {rank}] Watchdog "
    "caught collective operation timeout: WorkNCCL(SeqNum=5121, OpType=ALLREDUCE, "
    "NumelIn=262144, NumelOut=262144, Timeout(ms)=600000) ran for 600023 milliseconds before "
    "timing out.\r\n"
)


@pytest.mark.parametrize(
    "encode",
    [
        # Windows PowerShell's ``>`` and Out-File: UTF-16 LE with a byte-order mark.
        lambda text: b"\xff\xfe" + text.encode("utf-16-le"),
        lambda text: b"\xfe\xff" + text.encode("utf-16-be"),
        lambda text: text.encode("utf-16-le"),  # no mark: told by where the NULs fall
        lambda text: b"\xef\xbb\xbf" + text.encode("utf-8"),
        lambda text: text.encode("utf-32"),
    ],
    ids=["utf-16-le-bom", "utf-16-be-bom", "utf-16-le", "utf-8-bom", "utf-32"],
)
def test_a_log_saved_as_utf16_reads_as_its_text(tmp_path: Path, encode: Any) -> None:
    path = tmp_path / "worker-logs.txt"
    path.write_bytes(encode("".join(WATCHDOG.format(rank=rank) for rank in range(3))))
    result = read_input(InputSource(name=path.name, path=path))
    assert (result.summary.lines, result.summary.recognized, result.summary.unrecognized) == (
        3,
        3,
        0,
    )
    assert sorted(e.origin.rank for e in result.events) == [0, 1, 2]
