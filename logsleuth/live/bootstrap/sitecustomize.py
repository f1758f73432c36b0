"""Dump the flight recorder of a rank that dies of an uncaught exception or of SIGTERM.

``logsleuth live`` puts this directory first on the job's ``PYTHONPATH``, so every Python
process of the job imports it at start-up (as ``ddtrace-run`` and ``opentelemetry-instrument``
do). In a process that has joined a ``torch.distributed`` process group, when an uncaught
exception reaches ``sys.excepthook`` or SIGTERM arrives, the flight-recorder buffer is
written to ``<TORCH_FR_DUMP_TEMP_FILE><rank>`` (else ``<TORCH_NCCL_DEBUG_INFO_TEMP_FILE><rank>``),
the name torch gives its own dumps, unless torch already wrote one there. Then the process
goes on as it would have: the exception is reported, SIGTERM ends it with the usual status.

Why: torch writes the flight recorder on a watchdog timeout only with NCCL. When one rank of
a gloo job fails (it aborts on a message of the wrong size), its peers raise "Connection
reset by peer" and torchrun sends SIGTERM to the rest; every buffer is lost, and those
buffers hold what each rank passed to the failing collective.

The cost: the SIGTERM handler is Python code, which runs only when the main thread is in
Python; a rank blocked inside a C++ call (a collective it waits in) runs it once the call
returns, as it does when its peers die. So that a rank blocked for good still ends, a
thread woken by the signal (``signal.set_wakeup_fd``) ends the process with the default
SIGTERM action after :data:`SIGTERM_GRACE_S` seconds, without a dump: SIGTERM takes effect
that much later than it would have. The handler is installed only where SIGTERM had its
default action, code that installs its own handler later replaces it, and a forked child
gets the default action back.

It runs inside the user's job, under whatever Python the job uses: standard library only,
and it never raises. A ``sitecustomize`` of the user's further down the path is imported too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from types import TracebackType
from typing import Any

PREFIX_VARIABLES = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
SIGTERM_GRACE_S = 3.0
"""How long a SIGTERM waits for the main thread to run the handler before it ends the process."""
_PID = os.getpid()
"""A child forked later inherits the handlers and the process group, not the right to dump."""


def _dump_target() -> str | None:
    """Return where this rank's dump goes, or None outside a process group."""
    dist: Any = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    try:
        if not (dist.is_available() and dist.is_initialized()):
            return None
        rank = int(dist.get_rank())
    except Exception:  # A half-torn-down process group: nothing to dump.
        return None
    for name in PREFIX_VARIABLES:
        prefix = os.environ.get(name)
        if prefix:
            return f"{prefix}{rank}"
    return None


@contextlib.contextmanager
def _sigterm_deferred() -> Iterator[None]:
    """Hold SIGTERM back until the block ends, then deliver it as it would have been.

    The launcher sends SIGTERM to the survivors as soon as one rank dies, and a dump cut
    short is worth nothing; writing it takes milliseconds. Blocking the signal in this
    thread would not do: the kernel hands it to any other thread of the process.
    """
    previous = signal.getsignal(signal.SIGTERM)
    if previous is None:  # A handler installed outside Python: leave it alone.
        yield
        return
    pending: list[int] = []
    try:
        signal.signal(signal.SIGTERM, lambda signum, frame: pending.append(signum))
    except ValueError:  # Not the main thread: only it may set handlers.
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        if pending:
            os.kill(os.getpid(), signal.SIGTERM)


def dump_flight_recorder() -> str | None:
    """Write this rank's flight-recorder dump; return its path, or None when none was written."""
    if os.getpid() != _PID:
        return None
    target = _dump_target()
    torch: Any = sys.modules.get("torch")
    if target is None or torch is None or os.path.exists(target):
        return None
    dump = getattr(torch._C._distributed_c10d, "_dump_fr_trace", None)
    if dump is None:
        return None
    partial = f"{target}.partial"
    with _sigterm_deferred():
        try:
            data = dump(includeCollectives=True, includeStackTraces=True, onlyActive=False)
            with open(partial, "wb") as handle:
                handle.write(data)
            os.replace(partial, target)
        except Exception:
            with contextlib.suppress(OSError):
                os.unlink(partial)
            return None
    return target


def _report(written: str | None) -> None:
    if written:
        sys.stderr.write(f"logsleuth: wrote the flight-recorder dump {written}\n")
        sys.stderr.flush()


def _excepthook(
    kind: type[BaseException], value: BaseException, traceback: TracebackType | None
) -> None:
    with contextlib.suppress(Exception):  # The user's exception matters more than this dump.
        _report(dump_flight_recorder())
    _previous_excepthook(kind, value, traceback)


def _on_sigterm(signum: int, frame: object) -> None:
    try:
        _report(dump_flight_recorder())
    finally:
        # End the process the way SIGTERM would have: the launcher reports the signal.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)


_previous_excepthook = sys.excepthook


def _default_sigterm() -> None:
    """Give SIGTERM its default action again, from any thread (``signal.signal`` needs the main)."""
    import ctypes

    ctypes.CDLL(None).signal(signal.SIGTERM, ctypes.c_void_p(0))  # SIG_DFL


def _watch_sigterm(wakeups: int) -> None:
    """End the process if the handler has not run :data:`SIGTERM_GRACE_S` after a SIGTERM."""
    while True:
        try:
            woken = os.read(wakeups, 64)
        except OSError:
            return
        if not woken:
            return
        if signal.SIGTERM in woken:
            time.sleep(SIGTERM_GRACE_S)
            if signal.getsignal(signal.SIGTERM) is not _on_sigterm:
                continue  # The job's own handler took over: its shutdown is its own.
            with contextlib.suppress(Exception):
                _default_sigterm()
                os.kill(os.getpid(), signal.SIGTERM)


def _after_fork_in_child(read_end: int, write_end: int) -> None:
    """Give a forked child (a DataLoader worker) SIGTERM's default action and no wake-ups.

    The watching thread is not forked and the pipe is the parent's: a child's SIGTERM must
    not wake the parent's watcher. Writes go to /dev/null even where the child was forked
    from another thread, which may not undo the wake-up fd.
    """
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, write_end, inheritable=False)
        os.close(null)
        os.close(read_end)
    with contextlib.suppress(ValueError, OSError):
        signal.set_wakeup_fd(-1)
        if signal.getsignal(signal.SIGTERM) is _on_sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _install() -> None:
    sys.excepthook = _excepthook
    if signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        return
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    previous = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    if previous != -1:  # Someone set one before us: theirs stays, SIGTERM keeps its action.
        signal.set_wakeup_fd(previous)
        os.close(read_end)
        os.close(write_end)
        return
    signal.signal(signal.SIGTERM, _on_sigterm)
    os.register_at_fork(after_in_child=lambda: _after_fork_in_child(read_end, write_end))
    threading.Thread(
        target=_watch_sigterm, args=(read_end,), name="logsleuth-sigterm", daemon=True
    ).start()


def _chain_user_sitecustomize() -> None:
    """Import the ``sitecustomize`` this one shadows, if the path holds another."""
    here = os.path.dirname(os.path.abspath(__file__))
    saved_path = list(sys.path)
    saved_module = sys.modules.pop("sitecustomize", None)
    try:
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
        import importlib

        importlib.import_module("sitecustomize")
    except ImportError as exc:
        if exc.name != "sitecustomize":
            raise
    finally:
        sys.path[:] = saved_path
        if saved_module is not None:
            sys.modules["sitecustomize"] = saved_module


_install()
_chain_user_sitecustomize()
