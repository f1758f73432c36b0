"""TorchReader on real torch / torchrun output (fixtures/real/torch, sources in its README)."""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lark import Lark

from logsleuth.model.base import Event
from logsleuth.model.messages import LogMessage
from logsleuth.model.torch import (
    ChildFailure,
    CollectiveFingerprint,
    DebugDump,
    GlooError,
    HeartbeatMonitor,
    LauncherEvent,
    MonitoredBarrierError,
    PythonTraceback,
    PythonWarning,
    TorchVersion,
    WatchdogError,
    WatchdogProgress,
    WatchdogTimeout,
)
from logsleuth.parse.base import Line, Sink
from logsleuth.parse.clean import clean, strip_prefixes
from logsleuth.parse.numbering import detect_numbering
from logsleuth.parse.torchlog import TorchReader
from logsleuth.parse.torchshapes import STARTS, LineTransformer
from logsleuth.resources import read_grammar

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "real" / "torch"
E = TypeVar("E", bound=Event)


@dataclass
class Read:
    """What TorchReader made of one input, with the dispatcher's prefix stripping."""

    events: list[Event]
    sink: Sink
    taken: set[int]
    declined: list[int]
    blank: int

    def of(self, cls: type[E]) -> list[E]:
        return [e for e in self.events if type(e) is cls]


def read_lines(raw_lines: list[str], source: str = "test.log") -> Read:
    cleaned = [clean(raw) for raw in raw_lines]
    numbering = detect_numbering(cleaned[:200])
    reader, sink = TorchReader(source), Sink()
    taken: set[int] = set()
    declined: list[int] = []
    blank = 0
    for number, text in enumerate(cleaned, 1):
        stripped, hint = strip_prefixes(text, numbering)
        if not stripped.strip():
            blank += 1
            continue
        if reader.feed(Line(number, stripped, text, hint), sink):
            taken.add(number)
        else:
            declined.append(number)
    reader.close(sink)
    return Read(sink.events, sink, taken, declined, blank)


def read_fixture(name: str) -> Read:
    text = (FIXTURES / name).read_text(encoding="utf-8", errors="replace")
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return read_lines(lines, name)


def epoch_1970(month: int, day: int, clock: str) -> float:
    hours, minutes, seconds = clock.split(":")
    midnight = calendar.timegm((1970, month, day, 0, 0, 0))
    return midnight + int(hours) * 3600 + int(minutes) * 60 + float(seconds)


# ---------------------------------------------------------------- corpus 013


def test_corpus013_watchdog_timeouts_name_seq_op_and_sizes() -> None:
    got = read_fixture("corpus013_watchdog_allreduce_seq1580.log")
    timeouts = got.of(WatchdogTimeout)
    assert [(t.ref.line, t.rank, t.origin.rank) for t in timeouts] == [
        (1, 0, 0),
        (2, 4, 4),
        (5, 2, 2),
    ]
    first = timeouts[0]
    assert (first.seq, first.op_type, first.numel_in, first.numel_out) == (
        1580,
        "ALLREDUCE",
        466119168,
        466119168,
    )
    assert (first.timeout_ms, first.ran_ms, first.blocking, first.pg) == (
        600000,
        600060,
        False,
        None,
    )
    assert first.origin.time == pytest.approx(epoch_1970(3, 21, "02:07:08.408271257"))
    # The excerpt cuts the last line at "ran fo": the WorkNCCL fields still count.
    assert (timeouts[2].seq, timeouts[2].ran_ms) == (1580, None)


def test_corpus013_watchdog_progress_gives_enqueued_and_completed() -> None:
    got = read_fixture("corpus013_watchdog_allreduce_seq1580.log")
    progress = got.of(WatchdogProgress)
    assert [(p.rank, p.pg, p.work, p.last_enqueued, p.last_completed) for p in progress] == [
        (0, "1", 1580, 1582, 1579),
        (3, "1", 1580, 1582, 1579),
    ]
    assert got.taken == got.sink.recognized == {1, 2, 3, 4, 5}


# ---------------------------------------------------------------- corpus 024


def test_corpus024_unprefixed_continuation_fills_the_watchdog_error() -> None:
    got = read_fixture("corpus024_watchdog_broken_pipe.log")
    errors = got.of(WatchdogError)
    assert [(e.ref.line, e.kind, e.rank) for e in errors] == [
        (5, "failed-or-timed-out", 5),
        (6, "taking-down", 5),
        (7, "terminated", 5),
    ]
    terminated = errors[2]
    assert terminated.pg == "0"
    assert terminated.reason == "remote process exited or there was a network error"
    assert terminated.nccl_version == "2.21.5"
    assert terminated.error_code == "ncclRemoteError"
    assert (
        terminated.detail
        == "socketProgressOpt: Call to recv from 10.119.24.53<49901> failed : Broken pipe"
    )
    assert terminated.raised_from == (
        "checkForNCCLErrorsInternal at "
        "/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:2363"
    )
    assert terminated.cpp_frames == ("c10::Error::Error(c10::Source",)


def test_corpus024_leaves_nccl_lines_to_the_nccl_reader() -> None:
    got = read_fixture("corpus024_watchdog_broken_pipe.log")
    assert got.declined == [1, 2, 3, 4]
    assert got.sink.recognized == set(range(5, 13))


def test_corpus021_unprefixed_torchrun_warning_is_a_notice() -> None:
    got = read_fixture("corpus021_master_addr_notice.log")
    [notice] = got.of(LauncherEvent)
    assert (notice.action, notice.message) == (
        "notice",
        "master_addr is only used for static rdzv_backend and when rdzv_endpoint is not specified.",
    )


# ---------------------------------------------------------------- torchrun summaries


def test_sigkill_summary_root_cause_is_rank3_pid13273() -> None:
    got = read_fixture("gloo-hang_torchrun_log_after_SIGKILL_rank3.log")
    failures = got.of(ChildFailure)
    assert [(f.rank, f.pid, f.exitcode, f.signal, f.root_cause) for f in failures] == [
        (0, 13270, -15, "SIGTERM", False),
        (1, 13271, -15, "SIGTERM", False),
        (2, 13272, -15, "SIGTERM", False),
        (3, 13273, -9, "SIGKILL", True),
    ]
    root = failures[3]
    assert (root.local_rank, root.host, root.time, root.error_file) == (
        3,
        "localhost",
        "2026-11-21_16:04:06",
        "<N/A>",
    )
    assert root.traceback == "Signal 9 (SIGKILL) received by PID 13273"
    # The evidence is the line that says how it ended, not the entry's bare '[0]:' head.
    assert root.ref.line == 69
    assert root.text.strip() == "traceback : Signal 9 (SIGKILL) received by PID 13273"
    [header] = [e for e in got.of(LauncherEvent) if e.action == "failure-summary"]
    assert (header.message, header.ref.line) == ("hang_dist.py", 36)


def test_sigkill_agent_lines_map_pids_to_local_ranks() -> None:
    got = read_fixture("gloo-hang_torchrun_log_after_SIGKILL_rank3.log")
    agent = [e for e in got.of(LauncherEvent) if e.action in ("closing-signal", "failed")]
    assert [(e.action, e.pid, e.local_rank, e.exitcode, e.signal) for e in agent] == [
        ("closing-signal", 13270, None, None, "SIGTERM"),
        ("closing-signal", 13271, None, None, "SIGTERM"),
        ("closing-signal", 13272, None, None, "SIGTERM"),
        ("failed", 13273, 3, -9, "SIGKILL"),
    ]
    failed = agent[3]
    assert failed.message == "/opt/venv/bin/python3"
    assert failed.origin.pid == 13167
    assert failed.origin.time == pytest.approx(epoch_1970(11, 21, "16:04:06.731"))


def test_with_record_summary_keeps_the_child_traceback() -> None:
    got = read_fixture("torchrun_fail_exception_with_record.log")
    [root] = [f for f in got.of(ChildFailure) if f.root_cause]
    assert (root.rank, root.pid, root.exitcode, root.signal) == (1, 15146, 1, None)
    assert root.error_file == "/tmp/torchelastic_tefz4f62/none_xl056f35/attempt_0/1/error.json"
    assert (root.exc_type, root.exc_message) == ("RuntimeError", "shard file missing for rank 1")
    assert [(Path(f).name, n, fn) for f, n, fn in root.frames] == [
        ("__init__.py", 367, "wrapper"),
        ("fail_dist.py", 15, "main"),
        ("fail_dist.py", 7, "load_shard"),
    ]
    assert root.traceback is not None
    assert root.traceback.splitlines()[0] == "Traceback (most recent call last):"
    assert root.traceback.splitlines()[-1] == "RuntimeError: shard file missing for rank 1"
    others = [f for f in got.of(ChildFailure) if not f.root_cause]
    assert [(f.rank, f.signal, f.exc_type) for f in others] == [
        (0, "SIGTERM", "RuntimeError"),
        (2, "SIGTERM", "RuntimeError"),
    ]


@pytest.mark.parametrize(
    ("name", "root"),
    [
        ("torchrun_fail_exception_without_record.log", (1, 15278, 1, None)),
        ("torchrun_fail_segv_with_record.log", (2, 15223, -11, "SIGSEGV")),
        ("torchrun_fail_sys_exit3.log", (0, 15384, 3, None)),
        ("torchrun_gloo_timeout_5s.log", (0, 17621, 1, None)),
    ],
)
def test_summary_root_cause(name: str, root: tuple[int, int, int, str | None]) -> None:
    got = read_fixture(name)
    roots = [f for f in got.of(ChildFailure) if f.root_cause]
    assert [(f.rank, f.pid, f.exitcode, f.signal) for f in roots] == [root]


def test_summary_cut_at_end_of_input_still_emits_its_entries() -> None:
    text = (FIXTURES / "gloo-hang_torchrun_log_after_SIGKILL_rank3.log").read_text()
    got = read_lines(text.splitlines()[:51])  # ends inside entry [2], after its exitcode
    failures = got.of(ChildFailure)
    assert [(f.rank, f.pid, f.root_cause) for f in failures] == [
        (0, 13270, False),
        (1, 13271, False),
    ]
    assert got.sink.recognized == got.taken


# ---------------------------------------------------------------- tracebacks


def test_excepthook_traceback_frames_and_exception() -> None:
    got = read_fixture("torchrun_fail_exception_with_record.log")
    rank1 = next(t for t in got.of(PythonTraceback) if t.rank == 1)
    assert rank1.frames == (
        ("/home/train/job/fail_dist.py", 24, "<module>"),
        (
            "/opt/venv/lib/python3.11/site-packages/torch/distributed/elastic/multiprocessing/errors/__init__.py",
            367,
            "wrapper",
        ),
        ("/home/train/job/fail_dist.py", 15, "main"),
        ("/home/train/job/fail_dist.py", 7, "load_shard"),
    )
    assert (rank1.exc_type, rank1.exc_message) == ("RuntimeError", "shard file missing for rank 1")
    assert (rank1.ref.line, rank1.last_line, rank1.origin.rank) == (13, 23, 1)


def test_without_record_traceback_and_agent_traceback() -> None:
    got = read_fixture("torchrun_fail_exception_without_record.log")
    tracebacks = got.of(PythonTraceback)
    assert [(t.rank, t.exc_type) for t in tracebacks] == [
        (1, "RuntimeError"),
        (0, "RuntimeError"),
        (2, "RuntimeError"),
        (None, "torch.distributed.elastic.multiprocessing.errors.ChildFailedError"),
    ]
    assert [fn for _, _, fn in tracebacks[0].frames] == ["<module>", "main", "load_shard"]
    agent = tracebacks[3]
    assert agent.frames[0] == ("/opt/venv/bin/torchrun", 8, "<module>")
    assert agent.frames[-1][2] == "launch_agent"
    assert agent.exc_message == ""


def test_gloo_errors_in_exception_messages_become_gloo_events() -> None:
    got = read_fixture("torchrun_fail_exception_with_record.log")
    gloo = got.of(GlooError)
    assert [(g.ref.line, g.rank, g.kind, g.peer) for g in gloo] == [
        (37, 2, "connection-closed", "[127.0.0.1]:7814"),
        (51, 0, "connection-closed", "[127.0.0.1]:15051"),
    ]
    assert gloo[0].message.startswith(
        "Connection closed by peer [127.0.0.1]:7814. This is typically"
    )


def test_gloo_timeout_gives_the_timeout() -> None:
    got = read_fixture("torchrun_gloo_timeout_5s.log")
    [gloo] = got.of(GlooError)
    assert (gloo.rank, gloo.kind, gloo.timeout_ms, gloo.peer) == (0, "timeout", 5000, None)
    assert gloo.message == "Timed out waiting 5000ms for recv operation to complete"


def test_interleaved_tracebacks_of_two_ranks_are_kept_apart() -> None:
    lines = (FIXTURES / "torchrun_fail_exception_with_record.log").read_text().splitlines()
    rank1, rank2 = lines[12:23], lines[23:37]
    mixed = [line for pair in zip(rank1, rank2, strict=False) for line in pair] + rank2[
        len(rank1) :
    ]
    got = read_lines(mixed)
    by_rank = {t.rank: t for t in got.of(PythonTraceback)}
    assert [fn for _, _, fn in by_rank[1].frames] == ["<module>", "wrapper", "main", "load_shard"]
    assert [fn for _, _, fn in by_rank[2].frames] == [
        "<module>",
        "wrapper",
        "main",
        "wrapper",
        "barrier",
    ]
    assert by_rank[2].exc_type == "RuntimeError"
    assert got.sink.recognized == set(range(1, len(mixed) + 1))


def test_chained_exceptions_keep_the_cause() -> None:
    got = read_lines(
        [
            "Traceback (most recent call last):",
            '  File "a.py", line 3, in f',
            "    x = 1 / 0",
            "        ~~^~~",
            "ZeroDivisionError: division by zero",
            "",
            "During handling of the above exception, another exception occurred:",
            "",
            "Traceback (most recent call last):",
            '  File "a.py", line 5, in <module>',
            '    raise KeyError("k")',
            "KeyError: 'k'",
        ]
    )
    [tb] = got.of(PythonTraceback)
    assert tb.causes == (("ZeroDivisionError", "division by zero"),)
    assert (tb.frames, tb.exc_type, tb.exc_message) == (
        (("a.py", 5, "<module>"),),
        "KeyError",
        "'k'",
    )
    assert got.sink.recognized == got.taken == {1, 2, 3, 4, 5, 7, 9, 10, 11, 12}


SPAWNED = [
    "Traceback (most recent call last):",
    '  File "/work/train.py", line 88, in <module>',
    "    mp.spawn(main, args=(4,), nprocs=4, join=True)",
    '  File "/usr/lib/python3/dist-packages/torch/multiprocessing/spawn.py", line 246, in spawn',
    '    return start_processes(fn, args, nprocs, join, daemon, start_method="spawn")',
    "torch.multiprocessing.spawn.ProcessRaisedException: ",
    "",
    "-- Process 2 terminated with the following error:",
    "Traceback (most recent call last):",
    '  File "/usr/lib/python3/dist-packages/torch/multiprocessing/spawn.py", line 69, in _wrap',
    "    fn(i, *args)",
    '  File "/work/train.py", line 40, in main',
    "    loss = model(batch).sum()",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB.",
]


def test_a_spawned_childs_traceback_is_the_error_its_parent_reraised() -> None:
    # torch.multiprocessing prints the parent's ProcessRaisedException first; the child's
    # traceback inside its message is where the error happened.
    got = read_lines(SPAWNED)
    [tb] = got.of(PythonTraceback)
    assert (tb.exc_type, tb.process) == ("torch.OutOfMemoryError", 2)
    assert tb.frames[-1] == ("/work/train.py", 40, "main")
    assert tb.causes == (("torch.multiprocessing.spawn.ProcessRaisedException", ""),)
    assert got.sink.recognized == got.taken == set(range(1, len(SPAWNED) + 1)) - {7}


def test_dist_backend_error_with_nccl_continuation() -> None:
    # Shape of pytorch#131781 (the frame line is verbatim from it): the excepthook prefix is
    # on every line of the c10 message.
    got = read_lines(
        [
            "[rank10]: Traceback (most recent call last):",
            '[rank10]:   File "/home/joe/train.py", line 12, in <module>',
            "[rank10]:     dist.barrier()",
            "[rank10]: torch.distributed.DistBackendError: NCCL error in: "
            "../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, unhandled system error "
            "(run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3",
            "[rank10]: ncclSystemError: System call (e.g. socket, malloc) or external library "
            "call failed or device error. ",
            "[rank10]: Last error:",
            "[rank10]: socketStartConnect: Connect to 10.0.0.1<51234> failed : Connection refused",
            "[rank10]: frame #8: c10d::ProcessGroupNCCL::broadcastUniqueNCCLID("
            "ncclUniqueId*, bool, "
            "std::string const&, int) + 0xaf (0x7f8a793578ff in "
            "/home/joe/micromamba/lib/python3.10/site-packages/torch/lib/libtorch_cuda.so)",
        ]
    )
    [tb] = got.of(PythonTraceback)
    assert tb.exc_type == "torch.distributed.DistBackendError"
    assert tb.detail == "socketStartConnect: Connect to 10.0.0.1<51234> failed : Connection refused"
    [error] = got.of(WatchdogError)
    assert (error.kind, error.rank, error.ref.line) == ("nccl-error", 10, 4)
    assert error.reason == "unhandled system error (run with NCCL_DEBUG=INFO for details)"
    assert (error.nccl_version, error.error_code) == ("2.19.3", "ncclSystemError")
    assert error.detail == tb.detail
    assert got.sink.recognized == set(range(1, 9))


@pytest.mark.parametrize(
    "what",
    [
        "[Rank 3] NCCL watchdog thread terminated with exception: CUDA error: an illegal "
        "memory access was encountered",
        "[Rank 3] Some unknown failure of a later version",
    ],
    ids=["torch 2.0-2.2 wording", "unknown what()"],
)
def test_the_rank_tag_of_an_uncaught_exceptions_what_names_its_writer(what: str) -> None:
    got = read_lines(
        [
            "terminate called after throwing an instance of 'std::runtime_error'",
            f"  what():  {what}",
        ]
    )
    [error] = got.of(WatchdogError)
    assert (error.rank, error.origin.rank) == (3, 3)
    if "watchdog" in what:
        assert (error.kind, error.reason) == (
            "terminated",
            "CUDA error: an illegal memory access was encountered",
        )


# ---------------------------------------------------------------- DETAIL, monitored barrier


def test_detail_fingerprint_mismatch_names_both_shapes() -> None:
    got = read_fixture("captured_detail_fingerprint_mismatch.log")
    prints = got.of(CollectiveFingerprint)
    assert [(p.rank, p.other_rank, p.seq, p.shape, p.other_shape) for p in prints] == [
        (0, 1, 0, "[1024]", "[960]"),
        (1, 0, 0, "[960]", "[1024]"),
    ]
    assert (prints[0].op_type, prints[0].other_op_type, prints[0].dtype) == (
        "ALLREDUCE",
        "ALLREDUCE",
        "Float",
    )
    assert prints[0].origin.rank == 0


def test_old_fingerprint_without_separators() -> None:
    got = read_lines(
        [
            "  RuntimeError: Detected mismatch between collectives on ranks. Rank 1 is running "
            "collective: CollectiveFingerPrint(SequenceNumber=1OpType=BARRIER), but Rank 2 is "
            "running "
            "collective: CollectiveFingerPrint(SequenceNumber=0OpType=BARRIER).Collectives di"
        ]
    )
    assert got.declined == [1]  # an indented line outside any block is not torch's
    line = (
        "Detected mismatch between collectives on ranks. Rank 1 is running collective: "
        "CollectiveFingerPrint(SequenceNumber=1OpType=BARRIER), but Rank 2 is running collective: "
        "CollectiveFingerPrint(SequenceNumber=0OpType=BARRIER).Collectives di"
    )
    [fp] = read_lines([line]).of(CollectiveFingerprint)
    assert (fp.rank, fp.other_rank, fp.seq, fp.op_type, fp.other_op_type) == (
        1,
        2,
        1,
        "BARRIER",
        "BARRIER",
    )


def test_monitored_barrier_from_c10_line_and_exception() -> None:
    got = read_fixture("captured_monitored_barrier_rank1_late.log")
    barriers = got.of(MonitoredBarrierError)
    assert [(b.ref.line, b.rank, b.missing_ranks, b.timeout_ms) for b in barriers] == [
        (11, 0, (1,), 3000),
        (18, 0, (1,), 3000),
    ]
    [gloo] = got.of(GlooError)
    assert (gloo.ref.line, gloo.kind, gloo.timeout_ms) == (20, "timeout", 3000)
    tb = next(t for t in got.of(PythonTraceback) if t.rank == 0)
    assert tb.notes == (
        "Original exception:",
        "Timed out waiting 3000ms for recv operation to complete",
    )


# ---------------------------------------------------------------- issue quotes by era


def test_issue_quotes_by_era() -> None:
    got = read_fixture("issue_quotes_watchdog_by_era.log")
    timeouts = {t.ref.line: t for t in got.of(WatchdogTimeout)}
    assert (timeouts[1].seq, timeouts[1].numel_in, timeouts[1].ran_ms) == (469508, None, 1802212)
    assert (timeouts[3].seq, timeouts[3].blocking, timeouts[3].ran_ms) == (3, True, None)
    assert (timeouts[6].op_type, timeouts[6].numel_out) == ("_REDUCE_SCATTER_BASE", 68124672)
    assert (timeouts[15].seq, timeouts[15].timeout_ms, timeouts[15].ran_ms, timeouts[15].rank) == (
        1,
        1,
        90,
        3,
    )
    progress = got.of(WatchdogProgress)
    assert [(p.ref.line, p.pg, p.work, p.last_enqueued, p.last_completed) for p in progress] == [
        (7, "1", 7753, 7755, 7752),
        (9, "0", 20585, 20589, 20584),
        (12, "0", None, 20589, 20584),
    ]
    dumps = got.of(DebugDump)
    assert [(d.ref.line, d.kind) for d in dumps] == [(10, "trace-missing"), (11, "signal-dumping")]
    [stuck] = got.of(HeartbeatMonitor)
    assert (stuck.rank, stuck.pg) == (2, "2")
    assert stuck.message.startswith("ProcessGroupNCCL's watchdog got stuck for 480 seconds")
    terminated = next(e for e in got.of(WatchdogError) if e.kind == "terminated")
    assert terminated.ref.line == 15  # the what() line; the record spans 14-20
    assert terminated.raised_from == (
        "checkTimeout at /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:632"
    )
    assert len(terminated.cpp_frames) == 4
    assert terminated.reason.startswith("[Rank 3] Watchdog caught collective operation timeout")
    [failed] = [e for e in got.of(LauncherEvent) if e.action == "failed"]
    # 2024-era torch printed a thread ident where the pid now is: not a pid.
    assert (failed.pid, failed.exitcode, failed.signal, failed.origin.pid) == (
        970611,
        -6,
        "SIGABRT",
        None,
    )
    assert got.sink.recognized == got.taken == set(range(1, 22))


def test_torch_2_1_to_2_3s_logging_format_is_a_launcher_prefix() -> None:
    # "[%(asctime)s] %(name)s: [%(levelname)s] %(message)s"; the time goes with the prefixes.
    got = read_lines(
        [
            "[2024-03-18 17:38:50,208] torch.distributed.elastic.multiprocessing.api: [WARNING] "
            "Sending process 31102 closing signal SIGTERM",
            "[2024-03-18 17:38:50,374] torch.distributed.elastic.multiprocessing.api: [ERROR] "
            "failed (exitcode: -11) local_rank: 3 (pid: 31104) of binary: /usr/bin/python3",
        ]
    )
    closing, failed = got.of(LauncherEvent)
    assert (closing.action, closing.pid, closing.signal) == ("closing-signal", 31102, "SIGTERM")
    assert (failed.action, failed.local_rank, failed.pid, failed.signal) == (
        "failed",
        3,
        31104,
        "SIGSEGV",
    )
    assert got.sink.recognized == got.taken == {1, 2}


def test_flight_recorder_trace_lines_attach_to_their_record() -> None:
    got = read_lines(
        [
            "[rank1]:[E709 17:05:38.162832798 ProcessGroupNCCL.cpp:670] "
            "Stack trace of the failed collective: ",
            "#0 all_reduce from pytorch/torch/distributed/distributed_c10d.py:2696",
            "#1 wrapper from pytorch/torch/distributed/c10d_logger.py:83",
        ]
    )
    [dump] = got.of(DebugDump)
    assert (dump.kind, dump.rank) == ("trace", 1)
    assert dump.frames == (
        ("all_reduce", "pytorch/torch/distributed/distributed_c10d.py", 2696),
        ("wrapper", "pytorch/torch/distributed/c10d_logger.py", 83),
    )
    assert got.sink.recognized == {1, 2, 3}


# ---------------------------------------------------------------- small families


def test_python_warning_pairs_are_recognized_with_their_source_line() -> None:
    got = read_fixture("torchrun_tee3_faulthandler.log")
    warnings = got.of(PythonWarning)
    assert [(w.ref.line, w.origin.local_rank) for w in warnings] == [(1, None), (7, 0), (9, 1)]
    first = warnings[0]
    assert (first.category, first.lineno) == ("UserWarning", 368)
    assert (
        first.path
        == "/opt/venv/lib/python3.11/site-packages/torch/_subclasses/functional_tensor.py"
    )
    assert first.message.startswith("Failed to initialize NumPy: No module named 'numpy'")
    assert first.source == 'cpu = _conversion_method_template(device=torch.device("cpu"))'


def test_torch_version_lines() -> None:
    got = read_lines(["PyTorch version: 2.5.1+cu124", "torch 2.1.0", "torch is great 2.1"])
    assert [v.version for v in got.of(TorchVersion)] == ["2.5.1+cu124", "2.1.0"]
    assert got.declined == [3]


def test_unknown_message_under_a_torch_prefix_is_a_record_of_its_level() -> None:
    line = (
        "I1121 16:04:00.000000 13167 torch/distributed/elastic/agent/server/api.py:555] New thing"
    )
    got = read_lines([line, "hello from the app"])
    [record] = got.events
    # Typed by its prefix (level, pid, time), as a vLLM or DeepSpeed record is; not a failure.
    assert isinstance(record, LogMessage)
    assert (record.level, record.catalog, record.message) == ("INFO", None, "New thing")
    assert record.origin.pid == 13167
    assert got.taken == {1}
    assert got.sink.recognized == {1}
    assert got.declined == [2]


def test_known_keyword_with_a_broken_rest_is_still_a_torch_line() -> None:
    line = (
        "[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught "
        "collective operation timeout: WorkNCCL(garbage"
    )
    [cut] = read_lines([line]).events
    # The grammar cannot read the cut WorkNCCL(...), but the catalog knows the message.
    assert isinstance(cut, LogMessage)
    assert cut.family == "torch" and cut.catalog is not None
    assert cut.message.startswith("Watchdog caught collective operation timeout")
    assert cut.message.endswith("WorkNCCL(garbage")
    assert cut.rank == 0 and cut.label == "[Rank 0]"
    assert cut.origin.time == pytest.approx(epoch_1970(3, 21, "02:07:08.408271257"))


@pytest.mark.parametrize(
    ("line", "level"),
    [
        ("[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] Frobnicated the quux", "ERROR"),
        # absl / glog proper (XLA, JAX, TensorFlow's C++ runtime): pid, then file:line.
        (
            "E0502 11:03:12.221000 140213 collective_pipeliner.cc:38] Frobnication of "
            "`op 5` failed after 20 seconds.",
            "ERROR",
        ),
        ("F0502 11:03:12.221000 140213 nccl_clique.cc:12] Check failed: quux ok", "FATAL"),
        ("CRITICAL:torch.distributed.frob:the quux broke", "CRITICAL"),
        # A warning is a record too: typed by its level, it reports no failure.
        ("[W1021 09:46:51.585484034 ProcessGroupNCCL.cpp:1168] Frobnicated the quux", "WARNING"),
        ("I0502 11:03:12.221000 140213 collective_pipeliner.cc:38] Frobnicated `op 5`", "INFO"),
    ],
    ids=["c10", "glog", "glog-fatal", "stdlib", "c10-warning", "glog-info"],
)
def test_a_record_no_catalog_knows_is_kept_at_its_level(line: str, level: str) -> None:
    # The prefix's severity is evidence even when the message is news to every catalog.
    got = read_lines([line])
    [record] = got.events
    assert isinstance(record, LogMessage)
    assert (record.level, record.catalog) == (level, None)
    assert record.message == line.split("] ", 1)[-1].split("frob:", 1)[-1]
    assert got.sink.recognized == {1}


# ---------------------------------------------------------------- accounting


SAMPLES = {
    # file: lines left to other readers (faulthandler dumps, application output)
    "torchrun_fail_exception_with_record.log": [],
    "torchrun_fail_exception_without_record.log": [],
    "torchrun_fail_segv_with_record.log": [13, 15, 16, 17, 18, 20],
    "torchrun_fail_sys_exit3.log": [],
    "torchrun_gloo_timeout_5s.log": [],
    "torchrun_tee3_faulthandler.log": [11, 12, 13],
    "gloo-hang_torchrun_log_after_SIGKILL_rank3.log": [],
}


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_sample_line_accounting_is_complete(name: str) -> None:
    got = read_fixture(name)
    assert got.declined == SAMPLES[name]
    # Every line the reader took became part of a recognized event.
    assert got.sink.recognized == got.taken
    assert got.sink.unrecognized_events == 0


def test_events_come_out_in_input_order() -> None:
    got = read_fixture("torchrun_fail_exception_with_record.log")
    lines = [e.ref.line for e in got.events]
    assert lines == sorted(lines)


def test_every_grammar_rule_has_a_transformer_method() -> None:
    grammar = Lark(
        read_grammar("torch.lark"), parser="lalr", lexer="contextual", start=list(STARTS)
    )
    names = {
        str(r.alias or r.origin.name) for r in grammar.rules if r.alias or not r.options.expand1
    }
    # Lark's own helper rules (`__work_star_0`) are inlined and never reach the Transformer.
    missing = sorted(n for n in names if not n.startswith("_") and not hasattr(LineTransformer, n))
    assert missing == []


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=200), max_size=12))
def test_feed_never_raises(texts: list[str]) -> None:
    reader, sink = TorchReader("fuzz"), Sink()
    taken: set[int] = set()
    for number, text in enumerate(texts, 1):
        if reader.feed(Line(number, text, text), sink):
            taken.add(number)
    reader.close(sink)
    assert sink.recognized <= taken
    assert not reader.busy()


PIECES = [
    "[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] ",
    "E1121 16:04:06.731000 13167 torch/distributed/elastic/multiprocessing/api.py:1002] ",
    "[Rank 5] ",
    "[PG ID 0 PG GUID 0(default_pg) Rank 5] ",
    "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=",
    "Detected mismatch between collectives on ranks. Rank ",
    "CollectiveFingerPrint(SequenceNumber=",
    "Traceback (most recent call last):",
    '  File "x.py", line ',
    "Last error:",
    "ncclRemoteError: ",
    "=====",
    "[0]:",
    "  rank      : ",
    "  exitcode  : ",
    "Root Cause (first observed failure):",
    "failed (exitcode: ",
    "99999999999999999999999999",
    "(",
    ")",
    "[",
    "]",
    ", ",
    ":",
    " ",
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.sampled_from(PIECES), max_size=8).map("".join), max_size=12))
def test_feed_never_raises_on_torch_like_lines(texts: list[str]) -> None:
    reader, sink = TorchReader("fuzz"), Sink()
    for number, text in enumerate(texts, 1):
        reader.feed(Line(number, text, text), sink)
    reader.close(sink)
    assert all(e.ref.line <= len(texts) for e in sink.events)


def test_the_first_token_check_turns_away_only_what_the_parser_turns_away(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """parse_torch_record/line skip the parser when no first terminal of the rule matches at
    column 0: on every line of the real fixtures the results must be those of the parser."""
    from logsleuth.parse import torchshapes

    root = Path(__file__).resolve().parents[2] / "fixtures" / "real"
    lines = sorted(
        {
            line
            for path in root.rglob("*")
            if path.is_file() and path.stat().st_size < 1_000_000
            for line in path.read_text(errors="replace").splitlines()[:2000]
        }
    )
    assert len(lines) > 2000
    checked = torchshapes._cannot_start
    skipped = 0
    for text in lines:
        monkeypatch.setattr(torchshapes, "_cannot_start", checked)
        quick = [torchshapes.parse_torch_record(text)] + [
            torchshapes.parse_torch_line(text, rule) for rule in ("prefixed_any", "summary_line")
        ]
        skipped += checked(text, "line")
        monkeypatch.setattr(torchshapes, "_cannot_start", lambda _text, _rule: False)
        full = [torchshapes.parse_torch_record(text)] + [
            torchshapes.parse_torch_line(text, rule) for rule in ("prefixed_any", "summary_line")
        ]
        assert quick == full, text
    assert skipped > len(lines) // 2


def test_a_watchdog_timeout_of_torch_before_1_10_has_no_seqnum() -> None:
    # torch 1.8/1.9 printed the work without its sequence number.
    got = read_lines(
        [
            "[E ProcessGroupNCCL.cpp:587] [Rank 2] Watchdog caught collective operation timeout: "
            "WorkNCCL(OpType=BROADCAST, Timeout(ms)=1800000) ran for 1803772 milliseconds before "
            "timing out."
        ]
    )
    (timeout,) = got.of(WatchdogTimeout)
    assert (timeout.rank, timeout.seq, timeout.op_type) == (2, None, "BROADCAST")
    assert (timeout.timeout_ms, timeout.ran_ms) == (1800000, 1803772)
    assert timeout.work == "BROADCAST"
