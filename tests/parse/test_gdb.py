"""gdb ``thread apply all bt`` / ``py-bt`` and pstack output, read through the dispatcher."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from logsleuth.analysis.stack_classify import classify_thread
from logsleuth.errors import InputError
from logsleuth.model.stacks import GDB, StackDump
from logsleuth.parse.discover import InputSource
from logsleuth.parse.dispatch import InputResult, read_input
from logsleuth.parse.gdb import native_frame

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "real" / "stacks"
BT = "gloo-hang_gdb_thread_apply_all_bt_rank0.txt"
PY_BT = "gloo-hang_gdb_thread_apply_all_py-bt_rank0.txt"
GDB_SAMPLES = tuple(
    sorted(p.name for p in FIXTURES.glob("*.txt") if "gdb" in p.name or "pstack" in p.name)
)


def read(name: str, data: bytes | None = None) -> InputResult:
    if data is None:
        return read_input(InputSource(name=name, path=FIXTURES / name))
    return read_input(InputSource(name=name, path=None, data=data))


def dumps(result: InputResult) -> list[StackDump]:
    return [e for e in result.events if isinstance(e, StackDump)]


def test_thread_apply_all_bt_is_one_dump_with_the_main_thread_first() -> None:
    result = read(BT)
    assert (result.summary.kind, result.summary.unrecognized) == ("stack-dump", 0)
    (dump,) = dumps(result)
    assert (dump.fmt, dump.pid, dump.origin.pid, dump.truncated) == (GDB, 13270, 13270, False)
    assert (dump.ref.line, dump.last_line) == (1, 89)
    assert [(t.tid, t.name, t.is_main) for t in dump.threads] == [
        (13270, "python3", True),
        (13344, "gloo_tcp_loop", False),
        (13351, "pt_gloo_runloop", False),
        (13352, "pt_gloo_runloop", False),
    ]
    main = dump.threads[0]
    assert len(main.frames) == 34
    assert all(f.native for f in main.frames)
    assert [(f.func, f.file, f.line) for f in main.frames[5:7]] == [
        ("std::condition_variable::wait", "libstdc++.so.6", None),
        ("c10d::Work::wait", "libtorch_cpu.so", None),
    ]
    assert (main.frames[0].func, main.frames[0].file, main.frames[0].line) == (
        "__futex_abstimed_wait_common64",
        "./nptl/futex-internal.c",
        57,
    )
    assert main.frames[-1].func == "_start"
    runloop = dump.threads[2]
    assert [f.func for f in runloop.frames[5:8]] == [
        "gloo::transport::tcp::UnboundBuffer::waitSend",
        "gloo::(anonymous namespace)::ring",
        "gloo::(anonymous namespace)::allreduce",
    ]


def test_frames_quote_their_own_lines() -> None:
    (dump,) = dumps(read(BT))
    lines = (FIXTURES / BT).read_text(encoding="utf-8").splitlines()
    for frame in (f for t in dump.threads for f in t.frames):
        quoted = dump.quote(frame)
        assert quoted is not None and frame.at is not None
        assert quoted.text == lines[frame.at - 1]


def test_py_bt_gives_python_frames_most_recent_first() -> None:
    result = read(PY_BT)
    assert result.summary.unrecognized == 0
    (dump,) = dumps(result)
    main = dump.main_thread()
    assert main is not None and main.tid == 13270
    assert [
        (f.func, f.file.rsplit("/", 1)[-1] if f.file else None, f.line) for f in main.frames
    ] == [
        ("all_reduce", "distributed_c10d.py", 3252),
        ("wrapper", "c10d_logger.py", 83),
        ("train_step", "hang_dist.py", 15),
        ("main", "hang_dist.py", 28),
        ("<module>", "hang_dist.py", 31),
    ]
    assert [len(t.frames) for t in dump.threads[1:]] == [0, 0, 0]  # "Unable to locate python frame"


def test_nccl_proxy_threads_from_an_interactive_session() -> None:
    result = read("issue_nccl-901_gdb_proxy_threads.txt")
    assert result.summary.unrecognized == 0
    (dump,) = dumps(result)
    assert [t.tid for t in dump.threads] == [500875, 500879]  # thread 9, then thread 10
    proxy = dump.threads[1].frames
    assert [f.func for f in proxy[3:5]] == ["ncclProxyGetPostedOps", "ncclProxyProgress"]
    assert (proxy[4].file, proxy[4].line, proxy[4].at) == ("proxy.cc", 868, 8)
    assert dump.truncated  # thread 9 is cut after ncclProxyService


def test_bootstrap_accept_classifies_as_init() -> None:
    (dump,) = dumps(read("issue_pytorch-52916_gdb_bootstrap_accept.txt"))
    (thread,) = dump.threads
    assert [f.func for f in thread.frames[:3]] == [
        "__libc_accept",
        "bootstrapNetAccept",
        "bootstrapInit",
    ]
    assert classify_thread(thread)[0] == "init"


def test_wrapped_from_line_completes_its_frame() -> None:
    result = read("issue_pytorch-94864_gdb_wrapped_from.txt")
    assert result.summary.unrecognized == 0
    (dump,) = dumps(result)
    frames = dump.threads[0].frames
    # `#9 ... WorkNCCL::wait(...) ()` continued on the next line by `   from .../libtorch_cuda.so`
    assert (frames[3].func, frames[3].file, frames[3].at) == (
        "c10d::ProcessGroupNCCL::WorkNCCL::wait",
        "libtorch_cuda.so",
        4,
    )
    assert classify_thread(dump.threads[0])[:2] == ("collective", "wait")


def test_pstack_without_blank_lines_and_header_without_colon() -> None:
    (pstack,) = dumps(read("issue_deepep-330_pstack.txt"))
    assert [t.name for t in pstack.threads] == ["pt_main_thread", "cuda-EvtHandlr"]
    assert pstack.threads[0].frames[0].func == "pthread_join"
    assert len(pstack.threads[1].frames) == 3  # `...` elides the middle
    result = read("issue_nccl-829_gdb_header_without_colon.txt")
    assert result.summary.unrecognized == 0
    (dump,) = dumps(result)
    assert [(t.tid, len(t.frames), t.is_main) for t in dump.threads] == [
        (1811075, 0, True),
        (1823817, 7, False),
    ]
    assert dump.pid == 1811075  # thread 1's LWP


def test_native_frame_bodies() -> None:
    assert native_frame("0x00007f in ?? () from /lib64/libcuda.so.1").func == "??"
    frame = native_frame(
        "0x00007ffbaff12501 in c10d::ProcessGroupGloo::runLoop(int) () from /x/libtorch_cpu.so"
    )
    assert (frame.func, frame.file, frame.line, frame.native) == (
        "c10d::ProcessGroupGloo::runLoop",
        "libtorch_cpu.so",
        None,
        True,
    )
    frame = native_frame("ncclProxyProgress (proxyState_=0x55d847bc00c0) at proxy.cc:868")
    assert (frame.func, frame.file, frame.line) == ("ncclProxyProgress", "proxy.cc", 868)
    assert native_frame("foo::bar(int) const (this=0x1)").func == "foo::bar"
    assert native_frame("cudaStreamSynchronize ()").func == "cudaStreamSynchronize"


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(GDB_SAMPLES), st.integers(min_value=0, max_value=120))
def test_gdb_sample_cut_at_any_line_still_parses(name: str, cut: int) -> None:
    lines = (FIXTURES / name).read_bytes().split(b"\n")
    result = read(name, b"\n".join(lines[:cut]) + b"\n" if cut else b"x\n")
    s = result.summary
    assert s.recognized + s.unrecognized + s.blank == s.lines
    for dump in dumps(result):
        assert dump.last_line <= max(cut, 1)


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(GDB_SAMPLES),
    st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 255)), max_size=30),
)
def test_gdb_sample_with_corrupted_bytes_still_parses(
    name: str, edits: list[tuple[int, int]]
) -> None:
    data = bytearray((FIXTURES / name).read_bytes())
    for position, value in edits:
        data[position % len(data)] = value
    try:
        result = read(name, bytes(data))
    except InputError as exc:
        assert exc.reason == "binary data, not a log or a stack dump"
        return
    s = result.summary
    assert s.recognized + s.unrecognized + s.blank == s.lines


def test_flight_recorder_trace_lines_in_a_log_are_not_gdb_frames() -> None:
    data = (
        b"Stack trace of the failed collective: \n"
        b"#0 all_reduce from pytorch/torch/distributed/distributed_c10d.py:2696\n"
        b"#1 wrapper from pytorch/torch/distributed/c10d_logger.py:83\n"
    )
    assert dumps(read("fr.log", data)) == []
    assert dumps(read("x.log", b"#0  cudaStreamSynchronize () from /lib/libcudart.so.12\n")) != []


_GDB_SHAPES = st.sampled_from(
    [
        "[New LWP 13344]",
        "[Thread debugging using libthread_db enabled]",
        'Thread 4 (Thread 0x7ffba543c6c0 (LWP 13352) "pt_gloo_runloop"):',
        "Thread 1 (Thread 0x15555518b740 (LWP 1811075))",
        "#0  __futex_abstimed_wait_common64 (private=0) at ./nptl/futex-internal.c:57",
        "#6  0x00007ffbaff12501 in c10d::ProcessGroupGloo::runLoop(int) () from /x/libtorch_cpu.so",
        "#9  0x00007f8fd4f93773 in c10d::ProcessGroupNCCL::WorkNCCL::wait(std::chrono::duration<",
        "   from /opt/conda/lib/libtorch_cuda.so",
        "Traceback (most recent call first):",
        '  File "/a/x.py", line 15, in train_step',
        "    dist.all_reduce(p.grad)",
        "Unable to locate python frame",
        "...",
        "[Inferior 1 (process 13270) detached]",
        "#" + "9" * 5000 + " x ()",
    ]
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=60), _GDB_SHAPES), min_size=1, max_size=40))
def test_arbitrary_gdb_lines_never_raise(lines: list[str]) -> None:
    data = "\n".join(lines).encode("utf-8", errors="replace") + b"\n"
    try:
        result = read("x.txt", data)
    except InputError:
        return  # empty or binary-looking input: the dispatcher's own refusal
    s = result.summary
    assert s.recognized + s.unrecognized + s.blank == s.lines
