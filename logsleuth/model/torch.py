"""Events parsed from PyTorch / launcher output (torchrun, srun, mpirun, glog-style c10 lines)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from logsleuth.model.base import Event

ERROR_LEVELS = {"E": "ERROR", "F": "FATAL", "C": "CRITICAL"}
"""The severity letters of a c10 / glog / logging prefix that say the line reports an error."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TorchUnrecognized(Event):
    """A torch-prefixed line (``E1121 16:04:06.731000 13167 api.py:1002] ...``), unknown content."""

    RECOGNIZED: ClassVar[bool] = False
    message: str
    level: str | None = None
    """The prefix's severity letter (``E``, ``W``, ``I``, ``F``; ``C`` for Python's CRITICAL)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WatchdogTimeout(Event):
    """A ProcessGroupNCCL watchdog timeout.

    ``Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE,
    NumelIn=.., NumelOut=.., Timeout(ms)=600000) ran for 600060 milliseconds``. ``rank`` is
    the ``[Rank N]`` of the message (the rank in that process group), else the launcher's.
    """

    rank: int | None
    pg: str | None
    seq: int | None
    """The work's sequence number; None where torch printed none (before 1.10:
    ``WorkNCCL(OpType=ALLREDUCE, Timeout(ms)=1800000)``)."""
    op_type: str
    numel_in: int | None = None
    numel_out: int | None = None
    timeout_ms: int | None = None
    ran_ms: int | None = None
    backend: str = "nccl"  # "nccl" | "gloo" | ...
    blocking: bool = False
    """True for ``Work WorkNCCL(...) timed out in blocking wait`` (NCCL_BLOCKING_WAIT=1)."""

    @property
    def work(self) -> str:
        """``ALLREDUCE SeqNum 1580``, or the collective alone where no SeqNum was printed."""
        return work_label(self.op_type, self.seq)


def work_label(op_type: str, seq: int | None) -> str:
    """``ALLREDUCE SeqNum 1580``, or the collective alone where torch printed no SeqNum."""
    return op_type if seq is None else f"{op_type} SeqNum {seq}"


@dataclass(frozen=True, slots=True, kw_only=True)
class WatchdogProgress(Event):
    """Where a process group stood when the watchdog fired.

    ``Exception (either an error or timeout) detected by watchdog at work: 1580, last
    enqueued NCCL work: 1582, last completed NCCL work: 1579.``; also ``failure detected by
    watchdog at work sequence id: ... PG status: ...`` and the ``Received a dump signal
    ... Last enqueued NCCL work: N, last completed NCCL work: M`` line (``work`` None).
    """

    rank: int | None
    pg: str | None
    work: int | None
    last_enqueued: int | None
    last_completed: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class WatchdogError(Event):
    """Watchdog / ProcessGroupNCCL error text.

    ``Process group watchdog thread terminated with exception: NCCL error: ...``, ``Some
    NCCL operations have failed or timed out``, ``ncclRemoteError: ...``, ``Last error:``.
    ``kind`` ``"terminate"`` is a C++ ``terminate called after throwing an instance of``
    whose ``what():`` is not a known watchdog message; ``"nccl-error"`` is ``NCCL error in:
    file:line, reason, NCCL version V`` (usually a Python ``DistBackendError``).

    ``reason`` is the NCCL/c10 reason (``remote process exited or there was a network error``),
    ``detail`` the ``Last error:`` line that follows, when present.
    """

    rank: int | None
    pg: str | None
    kind: str  # "terminated", "failed-or-timed-out", "taking-down", "nccl-error", "terminate"
    reason: str
    detail: str | None = None
    nccl_version: str | None = None
    error_code: str | None = None
    """The NCCL result name of the continuation line (``ncclRemoteError``)."""
    raised_from: str | None = None
    """``checkForNCCLErrorsInternal at /pytorch/.../ProcessGroupNCCL.cpp:2363``."""
    cpp_frames: tuple[str, ...] = ()
    """The c10 backtrace (``frame #N: ...`` lines), innermost first, as printed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatMonitor(Event):
    """The heartbeat monitor gave up, or the watchdog itself is stuck.

    ``Heartbeat monitor timed out! Process will be terminated after dumping debug info.``,
    ``ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress ...``.
    """

    rank: int | None
    pg: str | None
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectiveFingerprint(Event):
    """``TORCH_DISTRIBUTED_DEBUG=DETAIL`` fingerprint / mismatch.

    ``Detected mismatch between collectives on ranks. Rank 0 is running collective:
    CollectiveFingerPrint(SequenceNumber=.., OpType=ALLREDUCE, TensorShape=[..],
    TensorDtypes=Float, ...), but Rank 1 is running collective: CollectiveFingerPrint(...)``.
    ``shape`` / ``dtype`` are the printed values (``"[1024]"``, ``"Float"``).
    """

    rank: int | None
    other_rank: int | None
    seq: int | None
    op_type: str | None
    other_op_type: str | None
    shape: str | None = None
    other_shape: str | None = None
    dtype: str | None = None
    other_dtype: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class MonitoredBarrierError(Event):
    """``Rank 1 failed to pass monitoredBarrier in 30000 ms`` / ``Ranks 1, 3 failed ...``."""

    missing_ranks: tuple[int, ...]
    timeout_ms: int | None
    rank: int | None = None
    """The rank that ran the barrier and reported (rank 0 of the group)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GlooError(Event):
    """Gloo transport errors after a ``[.../gloo/transport/tcp/pair.cc:534] `` location.

    ``Read error [10.0.0.2]:41234: Connection reset by peer``, ``Connection closed by peer
    [127.0.0.1]:7814``, ``Timed out waiting 1800000ms for recv operation to complete``.
    """

    rank: int | None
    message: str
    peer: str | None = None
    timeout_ms: int | None = None
    kind: str = "other"  # "connection-closed", "read-error", "timeout", "connect", "other"


@dataclass(frozen=True, slots=True, kw_only=True)
class PythonTraceback(Event):
    """A whole Python traceback: ``Traceback (most recent call last):`` ... ``ValueError: msg``.

    ``frames`` run outermost first as printed: (file, line, function).
    """

    rank: int | None
    frames: tuple[tuple[str, int, str], ...]
    exc_type: str | None
    exc_message: str | None
    last_line: int
    detail: str | None = None
    """The line after a ``Last error:`` continuation (NCCL's own reason), when present."""
    notes: tuple[str, ...] = ()
    """Further lines of a multi-line exception message (``ncclSystemError: ...``,
    ``Original exception:`` and the gloo error under it), c10 frames excluded."""
    causes: tuple[tuple[str | None, str | None], ...] = ()
    """Earlier exceptions of a chain (``During handling of the above exception``),
    oldest first, as (type, message); ``frames`` belong to the last one."""
    process: int | None = None
    """The index of the torch.multiprocessing child that raised (``-- Process 2 terminated
    with the following error:``): ``frames`` and the exception are that child's, and the
    parent's ``ProcessRaisedException`` that carried them is in ``causes``. The index is the
    child's place among the processes its parent spawned (its local rank)."""


def exception_line(
    line: Event, rank: int | None, exc_type: str, exc_message: str | None
) -> PythonTraceback:
    """An exception line read on its own (a ticket quotes a traceback's last line): the
    traceback it ends, without its frames."""
    return PythonTraceback(
        ref=line.ref,
        text=line.text,
        origin=line.origin,
        rank=rank,
        frames=(),
        exc_type=exc_type,
        exc_message=exc_message,
        last_line=line.ref.line,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ChildFailure(Event):
    """One entry of torchrun's ``ChildFailedError`` summary (``Failures:`` or ``Root Cause``)."""

    root_cause: bool
    rank: int | None
    local_rank: int | None
    host: str | None
    pid: int | None
    exitcode: int | None
    signal: str | None
    error_file: str | None
    traceback: str | None
    time: str | None
    exc_type: str | None = None
    """Exception type of the traceback field, when it holds a Python traceback."""
    exc_message: str | None = None
    frames: tuple[tuple[str, int, str], ...] = ()
    """Frames of that traceback, outermost first: (file, line, function)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LauncherEvent(Event):
    """torchrun agent lines about its workers.

    ``action`` is ``"closing-signal"`` (``Sending process 13270 closing signal SIGTERM``),
    ``"failed"`` (``failed (exitcode: -9) local_rank: 3 (pid: 13273) of binary: ...``),
    ``"rendezvous"``, ``"start"``, ``"env-warning"``; also ``"force-kill"`` (``Unable to
    shutdown process ... forcefully exiting via SIGKILL``), ``"death-signal"`` (the agent
    itself was signalled), ``"error-file"``, ``"stop"``, ``"finished"``, ``"restart"``,
    ``"banner"`` (OMP_NUM_THREADS banner and rule lines), ``"config"`` (launch config
    entries), ``"notice"``, ``"agent"`` (other ``[role]`` agent lines) and
    ``"failure-summary"`` (the header of a ChildFailedError summary; ``message`` is the
    failed script's name).
    """

    action: str
    pid: int | None = None
    local_rank: int | None = None
    exitcode: int | None = None
    signal: str | None = None
    message: str = ""
    level: str | None = None
    """The severity letter of the line's c10 / glog / logging prefix (``E``, ``W``, ``I``,
    ``F``, ``C``); None where the line has none (torchrun's summary, a bare message)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TorchVersion(Event):
    """A line that states the torch version (``torch 2.5.1``, ``PyTorch version: 2.5.1+cu124``)."""

    version: str


@dataclass(frozen=True, slots=True, kw_only=True)
class DebugDump(Event):
    """ProcessGroupNCCL debug-info / flight-recorder notes around a timeout.

    ``kind`` is ``"signal-dumping"`` (``First PG on this rank to signal dumping.``),
    ``"preparing"``, ``"finished"`` (``Finished writing NCCLPG debug info to <path>``),
    ``"trace-missing"`` (``Stack trace of the failed collective not found``) or
    ``"trace"`` (``Stack trace of the failed collective:`` followed by ``#N f from
    file:line`` lines, kept in ``frames`` innermost first as (function, file, line)).
    """

    rank: int | None
    pg: str | None
    kind: str
    path: str | None = None
    frames: tuple[tuple[str, str, int], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class PythonWarning(Event):
    """A Python warning (``/path/x.py:368: UserWarning: msg``) and its source line.

    Noise for diagnosis, but recognized: counting these as unrecognized would hide
    real gaps in the line accounting.
    """

    category: str
    message: str
    path: str
    lineno: int
    source: str | None = None
