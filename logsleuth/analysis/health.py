"""Positive evidence that a run ended normally or was progressing: what ``healthy`` requires.

No finding is not the same as a healthy run: a log cut during init, a traceback without its
exception line or a lone stack in ``ncclCommAbort`` show no failure and prove nothing. A run
is healthy only when the evidence shows completion or progress:

* completion: a process destroyed (or finalized) every communicator it created; torchrun
  reported the worker group finished; a job run by ``logsleuth live`` exited 0 by itself; a benchmark printed its closing summary (nccl-tests'
  ``Avg bus bandwidth``); PyTorch's process-group destructor ran at program exit;
* progress: repeated stack snapshots of a process differ; a benchmark printed result rows
  with no wrong values.

A proof covers the processes it names. A proof that names no process (a launcher's
summary, a benchmark's closing line) covers the processes that wrote to the same input
before it (a process whose lines begin after a closing summary is another run, pasted
below it), or every process when the evidence holds only one.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from logsleuth.analysis.index import EvidenceIndex, Proc, Stream
from logsleuth.analysis.rules.stacks import proc_stacks
from logsleuth.model.base import Event
from logsleuth.model.messages import LogMessage
from logsleuth.model.nccl import NcclCommEnd, NcclCommInit
from logsleuth.model.torch import LauncherEvent, TorchUnrecognized

PROGRAM_EXIT = (
    re.compile(r"process group has NOT been destroyed before"),
    re.compile(r"At the time of process termination, there are still \d+ unwaited"),
)
"""PyTorch >= 2.4: the process-group destructor's warnings; the process that prints one is
leaving the program (by its end, or unwinding from an exception)."""

# Messages that are only printed when a run ends normally.
_COMPLETION = (
    # nccl-tests / rccl-tests: the closing summary after the last size
    re.compile(r"^#\s*Avg bus bandwidth\s*:"),
    re.compile(r"^#\s*Out of bounds values\s*:\s*0 OK"),
    # PyTorch >= 2.4: the process-group destructor at program exit
    *PROGRAM_EXIT,
    # Lightning: training stopped at its configured end
    re.compile(r"`?Trainer\.fit`? stopped: `?max_(?:epochs|steps)=\d+`? reached"),
    # DeepSpeed's launcher (launch.py): a worker exited with status 0
    re.compile(r"^Process \d+ exits successfully\."),
    # Hugging Face Trainer and Megatron-LM at the end of training
    re.compile(r"^Training completed\. Do not forget to share your model"),
    re.compile(r"^\[after training is done\] datetime:"),
)


_RUN_ENDED = _COMPLETION[len(PROGRAM_EXIT) + 2 :]
"""The markers a training framework prints when its loop reached its configured end (not the
process-group destructor's warnings, which an exception's unwinding prints too, nor a
benchmark's summary)."""


@dataclass(frozen=True, slots=True)
class EndedRun:
    """A process whose own line (or its launcher's) says its training loop reached its end."""

    rank: int | None
    host: str | None
    pid: int | None
    event: Event


def _worker_pid(event: Event) -> int | None:
    """The worker a launcher's line is about (DeepSpeed's ``Process 4242 exits
    successfully.``): it covers that worker, not the launcher that wrote it."""
    worker = dict(getattr(event, "fields", ())).get("pid")
    return int(worker) if isinstance(worker, str) and worker.isdigit() else None


def ended_runs(index: EvidenceIndex) -> list[EndedRun]:
    """Return the processes whose training loop reached its end, one each, in input order.

    A process that finished its loop while others still wait in a collective left them
    there (a ``max_steps`` reached on one rank, a shorter data shard). DeepSpeed's launcher
    names its worker by pid (``Process 4405 exits successfully.``).
    """
    ended: dict[tuple[object, ...], EndedRun] = {}
    texts: list[Event] = [*index.all_of(LogMessage), *index.all_of(TorchUnrecognized)]
    for event in texts:
        if not any(p.search(_message(event)) for p in _RUN_ENDED):
            continue
        rank, host, pid = event.origin.rank, event.origin.host, event.origin.pid
        if (worker := _worker_pid(event)) is not None:
            rank, pid = None, worker
        if rank is None and pid is not None:
            rank = index.rank_of(host, pid)
        if rank is None and pid is None:
            continue
        key = ("rank", rank) if rank is not None else ("pid", host, pid)
        ended.setdefault(key, EndedRun(rank, host, pid, event))
    return list(ended.values())


# nccl-tests result row: size count type redop root, then time algbw busbw #wrong (out of
# place), the same in place.
_RESULT_ROW = re.compile(r"^\s*\d+\s+\d+\s+[a-z]\w*\s+\w+\s+-?\d+\s+[\d.]+\s")


def _clean_row(message: str) -> bool:
    """Return True for a result row whose #wrong columns are all 0 (a size that ran right)."""
    if _RESULT_ROW.search(message) is None:
        return False
    columns = message.split()
    wrong = [columns[i] for i in (8, 12) if i < len(columns)]
    return bool(wrong) and all(w == "0" for w in wrong)


@dataclass(frozen=True, slots=True)
class HealthProof:
    """What shows a normal end or progress, and the processes it covers."""

    reason: str
    events: tuple[Event, ...]
    streams: frozenset[Stream]
    """The processes it covers; empty for a proof that names none (see the module doc)."""
    sources: frozenset[str]
    everyone: bool = False
    """It covers every process of the job (the job as a whole exited 0)."""
    until: frozenset[tuple[str, int]] = frozenset()
    """Per input, the last line that says it (a proof naming no process covers the
    processes that wrote there before it); empty: no bound."""


def _message(event: Event) -> str:
    return getattr(event, "message", "") or ""


def health_proofs(index: EvidenceIndex) -> list[HealthProof]:
    """Return every piece of positive evidence of a normal end or of progress."""
    proofs: list[HealthProof] = []
    created: dict[Stream, set[str]] = defaultdict(set)
    destroyed: dict[Stream, list[NcclCommEnd]] = defaultdict(list)
    for init in index.all_of(NcclCommInit):
        created[(init.origin.host, init.origin.pid)].add(init.comm)
    for end in index.all_of(NcclCommEnd):
        if end.phase == "Destroy" and end.stage == "COMPLETE":
            destroyed[(end.origin.host, end.origin.pid)].append(end)
    for stream, ends in sorted(destroyed.items(), key=lambda kv: str(kv[0])):
        if created[stream] <= {e.comm for e in ends}:
            proofs.append(
                HealthProof(
                    "destroyed every communicator it created",
                    tuple(ends[-1:]),
                    frozenset({stream}),
                    frozenset(e.ref.source for e in ends),
                )
            )
    ended = [
        m
        for m in index.manifests
        if m.outcome == "finished" and m.exit_status == 0 and m.exit_signal is None
    ]
    if ended:
        proofs.append(
            HealthProof(
                "the job ended by itself with exit status 0 (logsleuth live)",
                tuple(ended[:1]),
                frozenset(),
                frozenset(),
                everyone=True,
            )
        )
    finished = [e for e in index.all_of(LauncherEvent) if e.action == "finished"]
    if finished:
        proofs.append(
            HealthProof(
                "torchrun reported the worker group finished",
                tuple(finished[:2]),
                frozenset(),
                frozenset(e.ref.source for e in finished),
                until=_last_lines(finished),
            )
        )
    texts: list[Event] = [*index.all_of(LogMessage), *index.all_of(TorchUnrecognized)]
    closing = [e for e in texts if any(p.search(_message(e)) for p in _COMPLETION)]
    for event in closing[:4]:
        stream = (event.origin.host, event.origin.pid)
        if (worker := _worker_pid(event)) is not None:
            stream = (event.origin.host, worker)
        named = stream != (None, None) or event.origin.rank is not None
        proofs.append(
            HealthProof(
                "printed what a program prints only when it ends normally",
                (event,),
                frozenset({stream}) if named and stream != (None, None) else frozenset(),
                frozenset({event.ref.source}),
                until=_last_lines([event]),
            )
        )
    rows = [e for e in texts if _clean_row(_message(e))]
    if rows:
        proofs.append(
            HealthProof(
                "the benchmark printed result rows without errors",
                tuple(rows[-1:]),
                frozenset(),
                frozenset(e.ref.source for e in rows),
                until=_last_lines(rows),
            )
        )
    moving = [p for p in proc_stacks(index) if p.moved]
    if moving:
        proofs.append(
            HealthProof(
                "repeated stack snapshots show it progressing",
                tuple(p.dump for p in moving[:4]),
                frozenset((p.host, p.pid) for p in moving),
                frozenset(p.dump.ref.source for p in moving),
            )
        )
    return proofs


def unproven_streams(index: EvidenceIndex, proofs: list[HealthProof]) -> list[Stream]:
    """Return the processes of the evidence that no proof covers (all of them without one)."""
    streams = [
        stream
        for stream, proc in index.procs.items()
        if proc.families & {"nccl", "stacks"} or proc.rank is not None
    ]
    if not proofs:
        return streams
    if any(p.everyone for p in proofs):
        return []
    covered: dict[Stream, set[str]] = defaultdict(set)
    for proof in proofs:
        for stream in proof.streams:
            covered[stream] |= proof.sources
    ranks_covered = {index.rank_of(*s) for s in covered} - {None}
    anonymous = [(p.sources, dict(p.until)) for p in proofs if not p.streams]
    anonymous_sources = set().union(*(sources for sources, _ in anonymous))
    # A proof of a host's lines that name no process (a collector's prefix names the host
    # only: ``trainer-1  | # Avg bus bandwidth``) covers that host's processes as a proof
    # that names no one covers all: those that wrote to its input before it.
    of_host: dict[str, list[tuple[frozenset[str], dict[str, int]]]] = defaultdict(list)
    for proof in proofs:
        for host, pid in proof.streams:
            if host is not None and pid is None and proof.until:
                of_host[host].append((proof.sources, dict(proof.until)))
    # ... or all of them when the host shows one process (as a proof naming no one does).
    processes_on: dict[str | None, int] = defaultdict(int)
    for host, pid in streams:
        processes_on[host] += pid is not None
    left: list[Stream] = []
    for stream in streams:
        proc = index.procs[stream]
        # Without a pid (redacted, or a bare rank header) a host's processes share one
        # stream: a proof covers the inputs it stands in, not another process's input.
        whole = stream[1] is not None
        if stream in covered and (whole or proc.sources <= covered[stream]):
            continue
        if index.rank_of(*stream) in ranks_covered:
            continue
        if stream[0] in of_host and (
            processes_on[stream[0]] == 1 or _before_proof(proc, of_host[stream[0]])
        ):
            continue
        if (
            anonymous
            and (whole or proc.sources <= anonymous_sources)
            and (len(streams) == 1 or _before_proof(proc, anonymous))
        ):
            continue
        left.append(stream)
    return left


def _last_lines(events: Sequence[Event]) -> frozenset[tuple[str, int]]:
    """Per input, the last line of ``events``."""
    last: dict[str, int] = {}
    for event in events:
        last[event.ref.source] = max(last.get(event.ref.source, 0), event.ref.line)
    return frozenset(last.items())


def _before_proof(proc: Proc, proofs: list[tuple[frozenset[str], dict[str, int]]]) -> bool:
    """Whether ``proc`` wrote to an input of one of ``proofs`` (their inputs and the last
    line of each that says them) before the proof's line."""
    first = proc.first_line
    for sources, bounds in proofs:
        for source in proc.sources & sources:
            bound = bounds.get(source)
            starts_after = (
                bound is not None
                and first is not None
                and first.ref.source == source
                and first.ref.line > bound
            )
            if not starts_after:
                return True
    return False
