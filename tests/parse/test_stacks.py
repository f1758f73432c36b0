"""py-spy text/JSON and faulthandler dumps, read line by line as the dispatcher offers them."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logsleuth.errors import InputError
from logsleuth.model.base import Event
from logsleuth.model.diagnosis import Evidence
from logsleuth.model.stacks import Frame, StackDump, StackDumpError
from logsleuth.parse.base import Line, Sink
from logsleuth.parse.clean import clean, strip_prefixes
from logsleuth.parse.pyspy_json import looks_like_pyspy_json, parse_pyspy_json
from logsleuth.parse.stacks import StackReader

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "real" / "stacks"
# gdb and pstack samples belong to the gdb reader: tests/parse/test_gdb.py.
TEXT_SAMPLES = sorted(
    p.name for p in FIXTURES.glob("*.txt") if "gdb" not in p.name and "pstack" not in p.name
) + sorted(p.name for p in FIXTURES.glob("*.log"))
JSON_SAMPLES = sorted(p.name for p in FIXTURES.glob("*.json"))


def physical_lines(name: str) -> list[str]:
    """Decode and clean a fixture the way the dispatcher does (CR, NUL and ANSI removed)."""
    data = (FIXTURES / name).read_bytes().decode("utf-8", errors="replace").split("\n")
    if data and data[-1] == "":
        data.pop()
    return [clean(raw) for raw in data]


def feed_lines(cleaned: list[str], source: str = "dump.txt") -> tuple[list[Event], Sink, int]:
    """Offer non-blank lines to one StackReader; return events, the sink and lines offered."""
    reader = StackReader(source)
    sink = Sink()
    offered = 0
    for number, text in enumerate(cleaned, 1):
        stripped, hint = strip_prefixes(text)
        if not stripped.strip():
            continue
        offered += 1
        reader.feed(Line(number, stripped, text, hint), sink)
    reader.close(sink)
    return sink.events, sink, offered


def read_dumps(name: str) -> list[StackDump]:
    """Return the StackDump events of one fixture file, in input order."""
    events, _, _ = feed_lines(physical_lines(name), name)
    return [e for e in events if isinstance(e, StackDump)]


def frames_of(dump: StackDump, index: int = 0) -> list[tuple[str, str | None, int | None]]:
    return [(f.func, f.file, f.line) for f in dump.threads[index].frames]


# ---- every sample ----------------------------------------------------------------------------

# (dumps, errors, unrecognized lines) per sample; unrecognized lines are not stack output
# (torch warnings, the torchrun agent's log) or hand-edited frames.
EXPECTED_COUNTS = {
    "corpus018_pyspy_stale_jit_filebaton_rank0.txt": (1, 0, 0),
    "faulthandler_Py_FatalError_py3.11.txt": (1, 0, 0),
    "faulthandler_dump_traceback_later_py3.11.txt": (3, 0, 0),
    "faulthandler_dump_traceback_py3.11.7.txt": (1, 0, 0),
    "faulthandler_dump_traceback_py3.13.0.txt": (1, 0, 0),
    "faulthandler_dump_traceback_py3.8.18.txt": (1, 0, 0),
    "faulthandler_register_SIGUSR1_twice_py3.11.txt": (2, 0, 0),
    "faulthandler_segv_py3.11.txt": (1, 0, 0),
    "faulthandler_segv_with_torch_py3.11.txt": (1, 0, 2),
    "faulthandler_single_thread_py3.11.txt": (1, 0, 0),
    "gloo-hang_pyspy-0.3.14_rank0.txt": (1, 0, 0),
    "gloo-hang_pyspy-0.3.14_rank3_subprocesses_CORRUPTED_interleaving.txt": (7, 0, 0),
    "gloo-hang_pyspy-0.4.3_rank0_locals.txt": (1, 0, 0),
    "gloo-hang_pyspy-0.4.3_rank0_native.txt": (1, 0, 0),
    "gloo-hang_pyspy-0.4.3_rank_pid13270.txt": (1, 0, 0),
    "gloo-hang_pyspy-0.4.3_rank_pid13271.txt": (1, 0, 0),
    "gloo-hang_pyspy-0.4.3_rank_pid13272.txt": (1, 0, 0),
    "gloo-hang_pyspy-0.4.3_rank_pid13273.txt": (1, 0, 0),
    "gloo-hang_pyspy-0.4.3_torchrun_agent_subprocesses.txt": (7, 0, 0),
    "issue_accelerate-3104_zero3_backward_vs_allgather.txt": (1, 0, 0),
    "issue_ami-140_hand_edited_dataloader.txt": (1, 0, 2),
    "issue_returnn-1811_cuda_sync_active_headerless.txt": (1, 0, 0),
    "pyspy-0.3.14_error_no_such_pid.txt": (0, 1, 0),
    "pyspy-0.3.14_py3.11_threads.txt": (1, 0, 0),
    "pyspy-0.4.1_py3.11_threads.txt": (1, 0, 0),
    "pyspy-0.4.3_core_dump_with_NUL_bytes.txt": (1, 0, 0),
    "pyspy-0.4.3_error_no_such_pid.txt": (0, 1, 0),
    "pyspy-0.4.3_multiline_cmdline_header.txt": (1, 0, 0),
    "pyspy-0.4.3_py3.11_multiprocessing_spawn_subprocesses.txt": (4, 0, 0),
    "pyspy-0.4.3_py3.11_threads.txt": (1, 0, 0),
    "pyspy-0.4.3_py3.11_threads_locals.txt": (1, 0, 0),
    "pyspy-0.4.3_py3.11_threads_native.txt": (1, 0, 0),
    "pyspy-0.4.3_py3.8_blocking.txt": (1, 0, 0),
    "pyspy-0.4.3_py3.8_nonblocking_hex_threadids.txt": (1, 0, 0),
    "pyspy-0.4.3_tty_capture_crlf_ansi.txt": (1, 0, 0),
    "pystack-1.7.2_gloo-hang_rank0.txt": (1, 0, 0),
    "pystack-1.7.2_gloo-hang_rank1.txt": (1, 0, 0),
    "pystack-1.7.2_gloo-hang_rank2.txt": (1, 0, 0),
    "pystack-1.7.2_gloo-hang_rank3.txt": (1, 0, 0),
    "pystack-1.7.2_py3.11_threads.txt": (1, 0, 0),
    "pystack-1.7.2_py3.11_threads_locals.txt": (1, 0, 0),
    "pystack-1.7.2_py3.11_threads_native.txt": (1, 0, 0),
    "torchrun_fail_segv_with_record.log": (1, 0, 110),
    "torchrun_tee3_faulthandler.log": (1, 0, 11),
}


def test_every_text_sample_has_expected_counts() -> None:
    assert sorted(EXPECTED_COUNTS) == TEXT_SAMPLES


@pytest.mark.parametrize("name", TEXT_SAMPLES)
def test_text_sample_parses(name: str) -> None:
    events, sink, offered = feed_lines(physical_lines(name), name)
    dumps = [e for e in events if isinstance(e, StackDump)]
    errors = [e for e in events if isinstance(e, StackDumpError)]
    assert (len(dumps), len(errors), offered - len(sink.recognized)) == EXPECTED_COUNTS[name]
    for dump in dumps:
        assert dump.ref.line <= dump.last_line
        assert sum(t.is_main for t in dump.threads) <= 1


@pytest.mark.parametrize("name", JSON_SAMPLES)
def test_json_sample_parses(name: str) -> None:
    text = (FIXTURES / name).read_text(encoding="utf-8")
    assert looks_like_pyspy_json(text[:1024])
    dumps = parse_pyspy_json(text, name)
    assert len(dumps) == 1
    assert dumps[0].fmt == "py-spy-json"
    assert sum(t.is_main for t in dumps[0].threads) == 1


# ---- py-spy text -----------------------------------------------------------------------------

GLOO_CMDLINE = "/opt/venv/bin/python3 -u hang_dist.py"


def test_gloo_rank0_dump() -> None:
    (dump,) = read_dumps("gloo-hang_pyspy-0.4.3_rank_pid13270.txt")
    assert (dump.fmt, dump.pid, dump.cmdline) == ("py-spy", 13270, GLOO_CMDLINE)
    assert (dump.python, dump.exe) == ("3.11.7", "/usr/local/bin/python3.11")
    assert (dump.ref.line, dump.last_line, dump.truncated) == (1, 9, False)
    assert dump.text == "Process 13270: /opt/venv/bin/python3 -u hang_dist.py"
    assert dump.origin.pid == 13270
    (main,) = dump.threads
    assert (main.tid, main.name, main.state, main.is_main) == (13270, "MainThread", "idle", True)
    assert frames_of(dump) == [
        ("all_reduce", "torch/distributed/distributed_c10d.py", 3252),
        ("_exception_logger.<locals>.wrapper", "torch/distributed/c10d_logger.py", 83),
        ("train_step", "hang_dist.py", 15),
        ("main", "hang_dist.py", 28),
        ("<module>", "hang_dist.py", 31),
    ]


def test_gloo_rank3_threads_main_first() -> None:
    (dump,) = read_dumps("gloo-hang_pyspy-0.4.3_rank_pid13273.txt")
    assert [(t.tid, t.name, t.is_main) for t in dump.threads] == [
        (13273, "MainThread", True),
        (13364, "QueueFeederThread", False),
        (13365, "QueueFeederThread", False),
    ]
    assert dump.threads[0].frames[0] == Frame(
        func="_PollLikeSelector.select", file="selectors.py", line=415, at=5
    )


def test_rank_comes_from_the_launcher_prefix() -> None:
    cleaned = [
        f"[rank5]:{line}" for line in physical_lines("gloo-hang_pyspy-0.4.3_rank_pid13272.txt")
    ]
    (dump,) = [e for e in feed_lines(cleaned)[0] if isinstance(e, StackDump)]
    assert (dump.origin.rank, dump.origin.pid, dump.pid) == (5, 13272, 13272)
    assert dump.text == "[rank5]:Process 13272: /opt/venv/bin/python3 -u hang_dist.py"


def test_hex_thread_ids_and_heuristic_states() -> None:
    (dump,) = read_dumps("pyspy-0.4.3_py3.8_nonblocking_hex_threadids.txt")
    assert [(t.tid, t.name, t.state) for t in dump.threads] == [
        (0x7FE760C2CB80, "MainThread", "idle"),
        (0x7FE7603586C0, "EventWaiter", "idle"),
        (0x7FE75FB576C0, "QueueGetter", "idle"),
        (0x7FE75F3566C0, "LockWaiter", "active"),
        (0x7FE75EB556C0, "BusyLoop", "active+gil"),
        (0x7FE75E3546C0, "Thread-1", "active"),
    ]


def test_locals_attach_to_their_frame() -> None:
    (dump,) = read_dumps("gloo-hang_pyspy-0.4.3_rank0_locals.txt")
    frames = dump.threads[0].frames
    assert frames[0].locals == (
        ("tensor", "<Tensor at 0x7ffba6a68190>"),
        ("op", "<torch._C._distributed_c10d.RedOpType at 0x7ffba93d88f0>"),
        ("group", "<torch._C._distributed_c10d.ProcessGroup at 0x7ffba6b056b0>"),
        ("async_op", "False"),
        ("relevant_args", "(<Tensor at 0x7ffba6a68190>)"),
        ("opts", "<torch._C._distributed_c10d.AllreduceOptions at 0x7ffba6acf970>"),
        ("work", "<torch._C._distributed_c10d.Work at 0x7ffba68f45b0>"),
    )
    assert frames[1].locals == (("args", "(<Tensor at 0x7ffba6a68190>)"), ("kwargs", "{}"))
    assert frames[4].locals == ()


def test_native_frames_are_flagged() -> None:
    (dump,) = read_dumps("gloo-hang_pyspy-0.4.3_rank0_native.txt")
    frames = dump.threads[0].frames
    assert frames[0] == Frame(func="0x7ffbc06a3f16", file="libc.so.6", line=None, native=True, at=5)
    assert frames[4].func.startswith("pybind11::cpp_function::initialize<")
    assert (frames[4].file, frames[4].native) == ("libtorch_python.so", True)
    assert [f.func for f in frames if not f.native] == [
        "all_reduce",
        "_exception_logger.<locals>.wrapper",
        "train_step",
        "main",
        "<module>",
    ]


def test_multiline_cmdline_header() -> None:
    (dump,) = read_dumps("pyspy-0.4.3_multiline_cmdline_header.txt")
    assert (
        dump.cmdline == "/usr/local/bin/python3 -c import time\ndef f():\n    time.sleep(3600)\nf()"
    )
    assert frames_of(dump) == [("f", "<string>", 3), ("<module>", "<string>", 4)]


def test_tty_capture_with_crlf_and_ansi() -> None:
    (dump,) = read_dumps("pyspy-0.4.3_tty_capture_crlf_ansi.txt")
    assert (dump.pid, dump.python, dump.exe) == (20191, "3.11.7", "/usr/local/bin/python3.11")
    assert frames_of(dump) == [
        ("inner", "sleep1.py", 4),
        ("outer", "sleep1.py", 6),
        ("<module>", "sleep1.py", 7),
    ]


def test_core_dump_with_nul_padding() -> None:
    (dump,) = read_dumps("pyspy-0.4.3_core_dump_with_NUL_bytes.txt")
    assert (dump.reason, dump.pid, dump.cmdline) == (
        "Signal 6",
        19052,
        "/usr/local/bin/python3.11 abort.py",
    )
    assert (dump.python, dump.exe, dump.truncated) == ("3.11.7", None, False)
    assert [(t.tid, t.name, t.state, t.is_main) for t in dump.threads] == [
        (19052, "MainThread", "gil", True),
        (19053, "bg", None, False),
    ]
    assert dump.threads[0].frames[0] == Frame(
        func="crash_here", file="/home/train/job/coretest/abort.py", line=7, at=6
    )


def test_subprocesses_give_one_dump_per_process() -> None:
    name = "gloo-hang_pyspy-0.4.3_torchrun_agent_subprocesses.txt"
    dumps = read_dumps(name)
    assert [(d.pid, d.parent_pid) for d in dumps] == [
        (13167, None),
        (13270, 13167),
        (13273, 13167),
        (13363, 13273),
        (13361, 13273),
        (13272, 13167),
        (13271, 13167),
    ]
    assert all(d.threads[0].is_main and d.threads[0].name == "MainThread" for d in dumps)
    # the separators (an empty pair after the agent) belong to the dumps around them
    assert (dumps[0].last_line, dumps[1].ref.line) == (15, 18)


def test_corrupted_interleaving_keeps_every_block() -> None:
    dumps = read_dumps("gloo-hang_pyspy-0.3.14_rank3_subprocesses_CORRUPTED_interleaving.txt")
    assert [d.pid for d in dumps] == [13273, 13361, 13363, 13363, 13361, 13361, 13363]
    # py-spy 0.3.14 prints the parent's feeder thread inside a child's block
    assert [t.name for t in dumps[2].threads] == ["MainThread", "QueueFeederThread"]
    assert not any(d.truncated for d in dumps)


def test_hand_edited_dump_without_thread_ids() -> None:
    (dump,) = read_dumps("issue_ami-140_hand_edited_dataloader.txt")
    assert [(t.tid, t.name, len(t.frames)) for t in dump.threads] == [
        (None, "MainThread", 9),
        (None, "Thread-... (_pin_memory_loop)", 2),
    ]
    assert dump.truncated  # the excerpt stops inside the second thread


def test_headerless_dump_and_nameless_threads() -> None:
    (dump,) = read_dumps("issue_accelerate-3104_zero3_backward_vs_allgather.txt")
    assert (dump.pid, dump.cmdline, dump.python) == (None, None, None)
    assert [(t.tid, t.name, t.state, len(t.frames)) for t in dump.threads] == [
        (42, "MainThread", "idle", 13),
        (928, "Thread-1", "idle", 5),
        (4076, None, "idle", 0),
        (4077, None, "idle", 0),
        (4078, None, "idle", 0),
        (4079, None, "active", 6),
    ]
    assert dump.truncated


def test_pyspy_errors_old_and_new_format() -> None:
    message = (
        "Failed to get process executable name. Check that the process is running."
        " (No such file or directory (os error 2))"
    )
    for name in ("pyspy-0.3.14_error_no_such_pid.txt", "pyspy-0.4.3_error_no_such_pid.txt"):
        (error,) = feed_lines(physical_lines(name), name)[0]
        assert isinstance(error, StackDumpError)
        assert (error.message, error.ref.line) == (message, 1)


def test_error_line_of_another_program_is_not_a_pyspy_error() -> None:
    events, sink, _ = feed_lines(["Error: CUDA out of memory. Tried to allocate 2.00 GiB"])
    assert events == []
    assert sink.recognized == set()


# ---- faulthandler ----------------------------------------------------------------------------


def test_faulthandler_all_threads() -> None:
    (dump,) = read_dumps("faulthandler_dump_traceback_py3.11.7.txt")
    assert (dump.fmt, dump.pid, dump.reason, dump.last_line) == ("faulthandler", None, None, 17)
    assert [(t.tid, t.state, t.is_main) for t in dump.threads] == [
        (0x7F77EA3F26C0, None, False),
        (0x7F77EABF36C0, None, False),
        (0x7F77EBA36B80, "current", True),
    ]
    assert frames_of(dump, 2) == [
        ("step", "/home/train/job/fh_dump.py", 12),
        ("<module>", "/home/train/job/fh_dump.py", 13),
    ]


def test_faulthandler_repeated_dumps_split() -> None:
    dumps = read_dumps("faulthandler_register_SIGUSR1_twice_py3.11.txt")
    assert [(d.ref.line, d.last_line, len(d.threads)) for d in dumps] == [(1, 11, 2), (12, 22, 2)]
    assert [t.is_main for t in dumps[1].threads] == [False, True]


def test_faulthandler_timeouts_and_fatal_errors() -> None:
    later = read_dumps("faulthandler_dump_traceback_later_py3.11.txt")
    assert [d.reason for d in later] == [
        "Timeout (0:00:01)!",
        "Timeout (0:00:01)!",
        "Timeout (0:00:00.500000)!",
    ]
    assert all(d.threads[0].is_main for d in later)  # no "Current thread": the <module> frame
    (segv,) = read_dumps("faulthandler_segv_with_torch_py3.11.txt")
    assert (segv.reason, segv.ref.line, segv.last_line) == (
        "Fatal Python error: Segmentation fault",
        3,
        9,
    )
    (fatal,) = read_dumps("faulthandler_Py_FatalError_py3.11.txt")
    assert (fatal.reason, frames_of(fatal)[0]) == ("Fatal Python error: boom", ("g", "<string>", 4))
    (single,) = read_dumps("faulthandler_single_thread_py3.11.txt")
    assert [(t.tid, t.state, t.is_main) for t in single.threads] == [(None, "current", True)]


def test_faulthandler_under_torchrun_tee_prefix() -> None:
    (dump,) = read_dumps("torchrun_tee3_faulthandler.log")
    assert (dump.origin.local_rank, dump.ref.line, dump.last_line) == (0, 11, 12)
    assert frames_of(dump) == [("<module>", "/home/train/job/tee_fh.py", 6)]


# ---- truncation and the reader contract -------------------------------------------------------


def test_dump_cut_mid_thread_is_truncated() -> None:
    lines = physical_lines("gloo-hang_pyspy-0.4.3_rank_pid13273.txt")[:8]
    (dump,) = [e for e in feed_lines(lines)[0] if isinstance(e, StackDump)]
    assert dump.truncated
    assert (dump.last_line, len(dump.threads[0].frames)) == (8, 4)


def test_header_without_threads_is_truncated() -> None:
    (dump,) = feed_lines(["Process 13270: /opt/venv/bin/python3 -u hang_dist.py"])[0]
    assert isinstance(dump, StackDump)
    assert (dump.truncated, dump.threads, dump.cmdline) == (True, (), GLOO_CMDLINE)


def test_reader_is_busy_while_a_dump_is_open_and_closes_on_a_foreign_line() -> None:
    reader = StackReader("log")
    sink = Sink()
    assert not reader.feed(Line(1, "NCCL INFO Bootstrap", "NCCL INFO Bootstrap"), sink)
    assert reader.feed(
        Line(2, 'Thread 7 (idle): "MainThread"', 'Thread 7 (idle): "MainThread"'), sink
    )
    assert reader.busy()
    assert reader.feed(Line(3, "    f (x.py:1)", "    f (x.py:1)"), sink)
    assert not reader.feed(Line(4, "[I] training resumed", "[I] training resumed"), sink)
    assert not reader.busy()
    (dump,) = sink.events
    assert isinstance(dump, StackDump)
    assert (dump.ref.line, dump.last_line, dump.truncated) == (2, 3, True)
    assert sink.recognized == {2, 3}


# ---- frame lines as evidence quotes them --------------------------------------------------------


def file_line(name: str, number: int) -> str:
    """Return physical line ``number`` of a fixture as the file holds it, less trailing blanks/CR."""
    return (FIXTURES / name).read_bytes().decode("utf-8").split("\n")[number - 1].rstrip()


@pytest.mark.parametrize(
    "name", ["gloo-hang_pyspy-0.4.3_rank_pid13273.txt", "faulthandler_dump_traceback_py3.11.7.txt"]
)
def test_frame_lines_are_rebuilt_exactly_from_the_fields(name: str) -> None:
    (dump,) = read_dumps(name)
    frames = [f for t in dump.threads for f in t.frames]
    assert len(frames) == (21 if "pyspy" in name else 12)
    for frame in frames:
        assert frame.raw is None  # rebuilt, not stored
        quoted = dump.quote(frame)
        assert quoted is not None and frame.at is not None
        assert (quoted.source, quoted.line) == (name, frame.at)
        assert quoted.text == file_line(name, frame.at)


def dump_quote_texts(dump: StackDump, frames: tuple[Frame, ...]) -> list[tuple[int, str]]:
    """Return (line, text) of the evidence quoting each of ``frames``."""
    quoted = [dump.quote(f) for f in frames]
    return [(q.line, q.text) for q in quoted if q is not None]


def test_quoted_frame_lines_name_the_right_line() -> None:
    (dump,) = read_dumps("gloo-hang_pyspy-0.4.3_rank_pid13273.txt")
    main = dump.threads[0]
    assert [(f.at, f.func) for f in main.frames[:2]] == [
        (5, "_PollLikeSelector.select"),
        (6, "wait"),
    ]
    assert dump.quote(main.frames[0]) == Evidence(
        "gloo-hang_pyspy-0.4.3_rank_pid13273.txt",
        5,
        "    _PollLikeSelector.select (selectors.py:415)",
    )
    (fh,) = read_dumps("faulthandler_dump_traceback_py3.11.7.txt")
    current = next(t for t in fh.threads if t.state == "current")
    assert dump_quote_texts(fh, current.frames) == [
        (16, '  File "/home/train/job/fh_dump.py", line 12 in step'),
        (17, '  File "/home/train/job/fh_dump.py", line 13 in <module>'),
    ]


@pytest.mark.parametrize("name", TEXT_SAMPLES)
def test_every_frame_quotes_its_cleaned_line(name: str) -> None:
    """Evidence quotes lines cleaned (ANSI, CR, NUL removed) with launcher prefixes kept."""
    cleaned = physical_lines(name)
    for dump in read_dumps(name):
        for frame in (f for t in dump.threads for f in t.frames):
            quoted = dump.quote(frame)
            assert quoted is not None and frame.at is not None
            assert quoted.text == cleaned[frame.at - 1]


def test_launcher_prefix_is_kept_in_the_raw_frame_line() -> None:
    name = "torchrun_tee3_faulthandler.log"
    (dump,) = read_dumps(name)
    (frame,) = dump.threads[0].frames
    assert (frame.func, frame.at) == ("<module>", 12)
    assert frame.raw == '[default0]:  File "/home/train/job/tee_fh.py", line 6 in <module>'
    assert dump.quote(frame) == Evidence(name, 12, file_line(name, 12))


@pytest.mark.parametrize(
    ("line", "raw_kept"),
    [
        ("    sleep (<string>:0)", True),  # line 0 is read as "no line"
        ("    sleep (<string>:3)", False),
        ("    pthread_cond_wait (libc.so.6)", False),
        ("  File ???, line ??? in ???", False),
        (' File "/a.py", line 3 in f', True),  # one indent space lost with a launcher prefix
        ('  File "/a.py", line 3 in f   ', True),  # trailing blanks
    ],
)
def test_raw_line_is_kept_only_where_the_fields_cannot_rebuild_it(
    line: str, raw_kept: bool
) -> None:
    header = (
        'Thread 7 (idle): "MainThread"'
        if line.startswith("    ")
        else "Stack (most recent call first):"
    )
    (dump,) = [e for e in feed_lines([header, line])[0] if isinstance(e, StackDump)]
    (frame,) = dump.threads[0].frames
    assert frame.at == 2
    assert (frame.raw is not None) == raw_kept
    assert dump.quote(frame) == Evidence("dump.txt", 2, line)


# ---- py-spy --json ----------------------------------------------------------------------------


def test_json_matches_the_text_dump() -> None:
    name = "gloo-hang_pyspy-0.4.3_rank0.json"
    (dump,) = parse_pyspy_json((FIXTURES / name).read_text(encoding="utf-8"), name)
    (text_dump,) = read_dumps("gloo-hang_pyspy-0.4.3_rank_pid13270.txt")
    assert (dump.pid, dump.origin.pid, dump.ref.line, dump.last_line) == (13270, 13270, 1, 63)
    assert frames_of(dump) == frames_of(text_dump)
    (main,) = dump.threads
    assert (main.tid, main.name, main.state, main.is_main) == (13270, "MainThread", "idle", True)


def test_json_threads_come_oldest_first_with_native_and_locals() -> None:
    name = "pyspy-0.4.3_py3.11_threads_native.json"
    (dump,) = parse_pyspy_json((FIXTURES / name).read_text(encoding="utf-8"), name)
    assert [t.name for t in dump.threads][:2] == ["MainThread", "EventWaiter"]
    assert dump.threads[0].frames[0] == Frame(
        func="0x7fd8bbca3f16", file="libc.so.6", line=None, native=True
    )
    name = "pyspy-0.4.3_py3.11_sleep_locals.json"
    (dump,) = parse_pyspy_json((FIXTURES / name).read_text(encoding="utf-8"), name)
    assert dump.threads[0].frames[0].locals == (("n", "21"), ("x", "42"))
    assert dump.threads[0].frames[0].at is None
    assert dump.quote(dump.threads[0].frames[0]) is None  # JSON has no line per frame


def test_json_that_is_not_pyspy_raises_input_error() -> None:
    with pytest.raises(InputError) as info:
        parse_pyspy_json('{"schema": "other"}', "x.json")
    assert str(info.value) == "x.json: not py-spy JSON: expected an array of threads"
    with pytest.raises(InputError) as info:
        parse_pyspy_json('[{"pid": 1}]', "x.json")
    assert str(info.value) == "x.json: not py-spy JSON: element 0 is not a thread with frames"
    with pytest.raises(InputError) as info:
        parse_pyspy_json('[\n  {"pid": 1,\n', "x.json")
    assert info.value.line == 3
    assert info.value.reason.startswith("not valid JSON (")


def test_looks_like_pyspy_json() -> None:
    assert not looks_like_pyspy_json('{"schema": "logsleuth.bundle/1"}')
    assert not looks_like_pyspy_json("[]")
    assert not looks_like_pyspy_json("Process 1: python")
    assert looks_like_pyspy_json(
        '\ufeff[\n  {\n    "pid": 1,\n    "thread_id": 2,\n    "frames": []'
    )


# ---- properties ------------------------------------------------------------------------------

_SHAPES = st.sampled_from(
    [
        "Process 1: python x.py",
        "Python v3.11.7 (/usr/bin/python3)",
        'Thread 0x7F (active+gil): "x"',
        "Thread 12 (idle)",
        "    f (x.py:1)",
        "    g (libc.so.6)",
        "        Locals:",
        "            a: 1",
        "-" * 80,
        "Current thread 0x00007f (most recent call first):",
        '  File "x.py", line 3 in f',
        "Fatal Python error: Aborted",
        "Timeout (0:00:01)!",
        "Error: Failed to open process",
        "Caused by:",
        "    0: No such process (os error 3)",
        "Extension modules: a (total: 1)",
        "Process 9" + "9" * 5000 + ": x",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=60), _SHAPES), max_size=40))
def test_arbitrary_lines_never_raise(lines: list[str]) -> None:
    events, sink, _ = feed_lines(lines)
    fed = {n for n, text in enumerate(lines, 1) if strip_prefixes(text)[0].strip()}
    assert sink.recognized <= fed
    assert all(e.ref.line in fed for e in events)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(TEXT_SAMPLES), st.integers(min_value=0, max_value=200))
def test_sample_cut_at_any_line_still_parses(name: str, cut: int) -> None:
    lines = physical_lines(name)
    events, sink, offered = feed_lines(lines[: min(cut, len(lines))], name)
    assert len(sink.recognized) <= offered
    for event in events:
        if isinstance(event, StackDump):
            assert event.last_line <= cut


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(TEXT_SAMPLES),
    st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 255)), min_size=1, max_size=30),
)
def test_sample_with_corrupted_bytes_still_parses(name: str, edits: list[tuple[int, int]]) -> None:
    data = bytearray((FIXTURES / name).read_bytes())
    for position, value in edits:
        data[position % len(data)] = value
    cleaned = [clean(raw) for raw in bytes(data).decode("utf-8", errors="replace").split("\n")]
    events, sink, offered = feed_lines(cleaned, name)
    assert len(sink.recognized) <= offered
    for event in events:
        if isinstance(event, StackDump):
            assert event.ref.line <= event.last_line <= len(cleaned)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(JSON_SAMPLES),
    st.integers(min_value=0),
    st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 255)), max_size=10),
)
def test_json_cut_or_corrupted_parses_or_says_why(
    name: str, cut: int, edits: list[tuple[int, int]]
) -> None:
    data = bytearray((FIXTURES / name).read_bytes())
    data = data[: cut % (len(data) + 1)]
    for position, value in edits:
        if data:
            data[position % len(data)] = value
    try:
        dumps = parse_pyspy_json(bytes(data).decode("utf-8", errors="replace"), name)
    except InputError as exc:
        assert exc.reason.startswith("not ")
        return
    assert all(isinstance(d, StackDump) for d in dumps)


@pytest.mark.parametrize(
    ("argv", "rank"),
    [
        ("python train.py --rank 3", 3),
        ("python train.py --rank=3 --world_size 4", 3),
        ("python train.py --global_rank 12", 12),
        ("python train.py --local_rank=1", None),  # a place on its node, not a rank
        ("python train.py --node_rank 1", None),
    ],
)
def test_the_rank_on_a_dumped_processs_command_line_names_it(argv: str, rank: int | None) -> None:
    lines = [
        f"Process 2204: {argv}",
        "Python v3.10.12 (/usr/bin/python3.10)",
        "",
        'Thread 2204 (active): "MainThread"',
        "    step (train.py:81)",
    ]
    events, _, _ = feed_lines(lines)
    (dump,) = [e for e in events if isinstance(e, StackDump)]
    assert (dump.pid, dump.origin.rank) == (2204, rank)
