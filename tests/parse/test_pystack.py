"""pystack's dumps (``pystack remote PID``, ``--native``, ``--locals``), captured here.

pystack prints each thread's calls oldest first, like a Python traceback, with the source
line under each frame; logsleuth keeps every stack innermost first, as py-spy prints it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from logsleuth.api import analyze
from logsleuth.model.stacks import PYSTACK, StackDump
from logsleuth.parse.discover import InputSource
from logsleuth.parse.dispatch import InputResult, read_input

STACKS = Path(__file__).resolve().parents[2] / "fixtures" / "real" / "stacks"


def read(name: str) -> InputResult:
    path = STACKS / name
    return read_input(InputSource(name=name, path=path))


def dump_of(result: InputResult) -> StackDump:
    (dump,) = [e for e in result.events if isinstance(e, StackDump)]
    return dump


@pytest.mark.parametrize(
    "name",
    [
        "pystack-1.7.2_py3.11_threads.txt",
        "pystack-1.7.2_py3.11_threads_native.txt",
        "pystack-1.7.2_py3.11_threads_locals.txt",
    ],
)
def test_every_line_of_a_pystack_dump_is_read_into_one_dump(name: str) -> None:
    result = read(name)
    dump = dump_of(result)
    assert dump.fmt == PYSTACK
    assert result.summary.unrecognized == 0
    # The main thread is the one started by <module>; its id is the process's pid.
    assert dump.pid == 14683
    (main,) = [t for t in dump.threads if t.is_main]
    assert main.tid == 14683
    python = [(f.func, f.file, f.line) for f in main.frames if not f.native]
    assert python == [("main", "/tmp/hang.py", 8), ("<module>", "/tmp/hang.py", 9)]
    (loader,) = [t for t in dump.threads if t.tid == 14725]
    # Innermost first: the lock the thread waits on, then the queue, then the thread's start.
    assert [f.func for f in loader.frames if not f.native][:3] == ["wait", "get", "worker"]
    assert dump.truncated is False


def test_pystack_native_frames_name_their_function_without_the_library() -> None:
    dump = dump_of(read("pystack-1.7.2_py3.11_threads_native.txt"))
    (loader,) = [t for t in dump.threads if t.tid == 14725]
    innermost = loader.frames[0]
    assert innermost.native
    assert (innermost.func, innermost.file, innermost.line) == (
        "__futex_abstimed_wait_common64",
        "./nptl/futex-internal.c",
        57,
    )
    assert loader.frames[-1].func == "__clone3"


def test_pystack_dumps_of_a_hung_job_find_the_rank_that_does_not_wait(tmp_path: Path) -> None:
    # Real captures: rank 2 sleeps in load_batch; ranks 0, 1 and 3 wait in all_reduce.
    names = [f"pystack-1.7.2_gloo-hang_rank{r}.txt" for r in range(4)]
    result = analyze([str(STACKS / n) for n in names])
    verdict = result.diagnosis.verdict
    assert verdict.kind == "non-collective-stall"
    assert (verdict.culprit_ranks, verdict.culprit_pids) == ((2,), (15189,))
    assert "load_batch" in verdict.summary
