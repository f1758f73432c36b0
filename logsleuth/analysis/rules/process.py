"""Rules about processes that died: exceptions, signals, exits, and their aftermath."""

from __future__ import annotations

import re
from collections.abc import Iterable

from logsleuth import knowledge
from logsleuth.analysis.correlate import first_errors, peer_warns, watchdog_ranks
from logsleuth.analysis.index import EvidenceIndex
from logsleuth.analysis.rules.base import Rule, culprits, describe
from logsleuth.analysis.rules.knowledge import raised_type
from logsleuth.analysis.waitfor import global_rank
from logsleuth.model.base import Event
from logsleuth.model.diagnosis import Finding
from logsleuth.model.messages import LogMessage
from logsleuth.model.ranks import absent_ranks, format_ranks
from logsleuth.model.torch import (
    ChildFailure,
    PythonTraceback,
    WatchdogProgress,
    WatchdogTimeout,
    exception_line,
)


class ProcessDied(Rule):
    """A rank raised an exception, crashed or was killed; the others failed or hung after it.

    Symptom:
        A Python traceback on one rank, torchrun's failure summary with a non-zero exit
        code or a signal (``exitcode: -9 (pid: N)``, ``Signal 9 (SIGKILL)``), and peers
        that then time out or lose connections.

    Likely causes:
        An exception in user code on one rank, host OOM killer (SIGKILL), a segfault in an
        extension, a node failure. torchrun's "Root Cause" is the first failure it
        *observed*, which after a hang is often the process it killed, not the cause.

    What to check:
        The traceback of the first failing rank; ``dmesg`` for the OOM killer; whether the
        signal came from torchrun itself (SIGTERM to the survivors) or from outside.
    """

    code = "LS204"
    name = "process.died"
    kind = "process-died"

    def _left_early(self, index: EvidenceIndex, failures: list[ChildFailure]) -> Finding | None:
        """A rank that finished (exit 0) while the others still needed it.

        torchrun lists only failed workers. When every listed rank failed because its
        peers went away (connection closed/reset) and some ranks of the world are not
        listed, those ranks left the job early: they are the cause.
        """
        failed = {f.rank for f in failures if f.rank is not None}
        absent = _absent(index, failed)
        if not failed or not absent or len(absent) >= len(failed):
            return None
        # One pass: the tracebacks and gloo errors that say a peer went away.
        gone = [
            e
            for e in index.torch
            if (
                isinstance(e, PythonTraceback)
                and _PEER_GONE.search(f"{e.exc_type or ''} {e.exc_message or ''}")
            )
            or (type(e).__name__ == "GlooError" and _PEER_GONE.search(getattr(e, "message", "")))
        ]
        if not gone:
            return None
        hosts: list[str] = []
        pids: list[int] = []
        for rank in absent:
            proc = index.proc_of_rank(rank)
            if proc is not None and proc.host:
                hosts.append(proc.host)
            if proc is not None and proc.pid is not None:
                pids.append(proc.pid)
        peer_errors = [e for e in gone if isinstance(e, PythonTraceback)]
        return self.finding(
            severity="critical",
            title=f"rank(s) {format_ranks(absent)} left the job early; the other ranks then lost their peers",
            detail=(
                f"torchrun's failure summary lists ranks {format_ranks(failed)}, all failing because "
                f"a peer closed its connection, and not rank(s) {format_ranks(absent)}: those "
                "exited without error while the others still expected them in a collective."
            ),
            events=[*peer_errors[:3], *failures[:3]],
            ranks=absent,
            hosts=hosts,
            pids=pids,
            confidence=0.7,
            next_steps=(
                _early_return_step(absent),
                "Give every rank the same number of steps (DistributedSampler with drop_last, or "
                "the Join context manager for uneven inputs).",
            ),
        )

    def _gone_before_capture(self, index: EvidenceIndex) -> Finding | None:
        """A rank of a stalled bundle that live could not dump: it had exited, peers say so.

        Live mode dumps every living rank when the job stalls. A rank the manifest lists
        without a dump, while the others were dumped and logged that a peer went away (NCCL's
        ``remote process exited``, a closed connection), was gone before the capture: a
        rank that exits without an error (an early ``return``) leaves only this.
        """
        from logsleuth.analysis.rules.stacks import proc_stacks

        stalled = [m for m in index.manifests if m.stalled_at]
        listed = {e.rank: e for m in stalled for e in m.ranks}
        dumped = {p.rank for p in proc_stacks(index) if p.rank is not None}
        gone = sorted(set(listed) - dumped)
        if not gone or not dumped or len(gone) >= len(dumped):
            return None
        texts: list[tuple[Event, str]] = [(w, w.message) for w in index.warns]
        texts += [(e, getattr(e, "message", "") or "") for e in index.torch]
        peer_errors = [e for e, text in texts if _PEER_GONE.search(text)]
        if not peer_errors:
            return None
        hosts = sorted({h for r in gone if (h := listed[r].host)})
        pids = sorted(p for r in gone if (p := listed[r].pid) is not None)
        return self.finding(
            severity="critical",
            title=f"rank(s) {format_ranks(gone)} had exited when the job stalled; the other "
            "ranks lost their peer",
            detail=(
                f"The bundle lists rank(s) {format_ranks(gone)}, but live mode found no living "
                "process to dump when the job stalled, while the other ranks were dumped and "
                "logged that a peer had gone away. A rank that exits without an error (an "
                "early return, the end of its data) leaves the others waiting in the next "
                "collective."
            ),
            events=[*peer_errors[:3], *stalled[:1]],
            ranks=gone,
            hosts=hosts,
            pids=pids,
            confidence=0.75,
            next_steps=(
                _early_return_step(gone),
                "Read that rank's last lines in the launcher log and its exit status.",
            ),
        )

    def _unranked_exception(self, index: EvidenceIndex) -> Finding | None:
        """A traceback whose process the excerpt does not place by rank (no launcher tag).

        The exception still ended that process (or a thread it needed): it is the failure
        the evidence shows, named by host and pid where a prefix gives them.
        """
        raised = [
            t
            for t in index.torch
            if isinstance(t, PythonTraceback)
            and t.rank is None
            and t.exc_type is not None
            and not _benign_exception(t.exc_type, t.exc_message)
        ]
        raised = raised or [t for t in raised_messages(index) if t.rank is None]
        if not raised:
            return None
        first = raised[0]
        host, pid = first.origin.host, first.origin.pid
        rank = index.rank_of(host, pid) if host or pid is not None else None
        placed = (
            " The excerpt does not say which rank printed it (no launcher prefix such as "
            "[rank3]:); its peers' timeouts and connection errors would follow from it."
        )
        if first.process is not None:
            placed = (
                f" torch.multiprocessing names it process {first.process}: its index among "
                "the processes its parent spawned, its local rank (the global rank only when "
                "one node runs the job). Its peers' timeouts and connection errors would "
                "follow from it."
            )
        elif (local := first.origin.local_rank) is not None:
            placed = (
                f" torchrun's --tee tag names it by its local rank ({local}), which does not "
                "say which node's: no line of that launcher names a worker's global rank "
                "too. Its peers' timeouts and connection errors would follow from it."
            )
        severity, confidence = "error", 0.5
        lone, waiting = _lone_silent_rank(index)
        if rank is None and pid is None and not host and lone is not None:
            rank = lone
            # Placed: the death of the rank the others wait for is the cause, as a
            # prefixed traceback's is (it outranks "rank N never entered ...").
            severity, confidence = "critical", 0.7
            placed = (
                f" No prefix says which rank printed it, but ranks {format_ranks(waiting)} "
                f"report waiting in a collective and rank {rank}, also in the evidence, "
                "does not: the rank that stopped waiting for nothing is the one that raised."
            )
        elif rank is not None and rank == lone:
            # Placed by its host or pid as the one rank the others wait for.
            severity, confidence = "critical", 0.7
            placed = (
                f" Ranks {format_ranks(waiting)} report waiting in a collective and rank "
                f"{rank} does not: its death is what they wait for."
            )
        where = first.frames[-1] if first.frames else None
        who = f"rank {rank}" if rank is not None else "a process"
        if rank is None and first.process is not None:
            who = f"spawned process {first.process} (local rank {first.process})"
        elif rank is None and first.origin.local_rank is not None:
            who = f"local rank {first.origin.local_rank} of a node"
        if pid is not None:
            who += f" (pid {pid}{f' on {host}' if host else ''})"
        return self.finding(
            severity=severity,
            title=f"{who} raised {first.exc_type}"
            + (f" at {where[2]} ({where[0]}:{where[1]})" if where else ""),
            detail=f"{first.exc_type}: {first.exc_message or ''}".rstrip(":. ") + "." + placed,
            events=[first],
            ranks=[rank] if rank is not None else [],
            hosts=[host] if host else [],
            pids=[pid] if pid is not None else [],
            confidence=confidence,
            next_steps=(
                *_advice(first),
                "Find which rank printed this traceback (run with torchrun --tee 3 or "
                "--log-dir, so that each line carries its rank) and fix the exception.",
                "Read the lines before it in the same output for the first error.",
            ),
        )

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        tracebacks = [
            e for e in index.torch if isinstance(e, PythonTraceback) and e.rank is not None
        ]
        # A traceback cut before its exception line shows where a rank was, not that it
        # failed on its own: it names no cause.
        tracebacks = [
            t
            for t in tracebacks
            if t.exc_type is not None and not _benign_exception(t.exc_type, t.exc_message)
        ]
        tracebacks = tracebacks or [t for t in raised_messages(index) if t.rank is not None]
        failures = [f for f in index.failures if f.exitcode not in (None, 0)]
        if not tracebacks and not failures:
            exited = self._gone_before_capture(index) or self._unranked_exception(index)
            if exited is not None:
                yield exited
            return
        early = None if tracebacks else self._left_early(index, failures)
        if early is not None:
            yield early
            return
        if tracebacks:
            first = tracebacks[0]
            if all(t.origin.time is not None for t in tracebacks):
                first = min(tracebacks, key=lambda t: (t.origin.time or 0.0, t.ref.line))
            rank = first.rank
            assert rank is not None
            proc = index.proc_of_rank(rank)
            listed = [f for f in failures if f.rank == rank]
            where = first.frames[-1] if first.frames else None
            yield self.finding(
                severity="critical",
                title=f"rank {rank} raised {first.exc_type or 'an exception'}"
                + (f" at {where[2]} ({where[0]}:{where[1]})" if where else ""),
                detail=(
                    f"rank {rank} died with {first.exc_type}: {first.exc_message or ''}".rstrip(
                        ": ."
                    )
                    + ". Other ranks' timeouts and connection errors after it are consequences."
                ),
                events=[first, *listed],
                ranks=[rank],
                # The summary's entry names host and pid where the traceback's lines do not.
                hosts=sorted(
                    {h for h in (proc.host if proc else None, *(f.host for f in listed)) if h}
                ),
                pids=sorted(
                    {
                        p
                        for p in (proc.pid if proc else None, *(f.pid for f in listed))
                        if p is not None
                    }
                ),
                confidence=0.8,
                next_steps=(
                    *_advice(first),
                    f"Fix the exception on rank {rank} (the traceback is quoted as evidence).",
                    "Wrap the training entry point with torch.distributed.elastic's @record to get "
                    "the error file in torchrun's summary.",
                ),
            )
            return
        # A rank whose own watchdog timed out and that then died of SIGABRT/SIGTERM was taken
        # down by the watchdog or by torchrun: that is the aftermath, not the cause.
        reported = watchdog_ranks(index)
        # So was a rank whose own traceback says it only waited or lost its peer (a gloo
        # timeout, a closed connection): its non-zero exit is the aftermath, not a death.
        reported |= {
            t.rank
            for t in index.torch
            if isinstance(t, PythonTraceback)
            and t.rank is not None
            and _benign_exception(t.exc_type or "Error", t.exc_message)
        }
        aftermath = [f for f in failures if f.rank in reported or f.signal == "SIGTERM"]
        gone = {id(f) for f in aftermath}
        failures = [f for f in failures if id(f) not in gone]
        if not failures:
            yield self.finding(
                severity="info",
                title=f"{len(aftermath)} rank(s) were taken down after the failure "
                "(watchdog abort or torchrun's SIGTERM)",
                detail="torchrun's summary lists these processes, but each of them had already "
                "reported a timeout or error, or was stopped by torchrun itself: they are the "
                "aftermath. torchrun's 'Root Cause' names the first exit it observed, not the cause.",
                events=aftermath,
                ranks=[f.rank for f in aftermath if f.rank is not None],
                confidence=0.8,
            )
            return
        roots = [f for f in failures if f.root_cause] or failures
        # A signal sent from outside (SIGKILL, SIGTERM, ...) may follow a hang; a crash
        # signal (SIGSEGV, SIGBUS, SIGILL, SIGFPE) the process raised itself.
        signal_only = [f for f in roots if f.signal and f.signal not in _CRASH_SIGNALS]
        root = roots[0]
        killed_by = f"signal {root.signal}" if root.signal else f"exit code {root.exitcode}"
        # Peers that lost their connections to the dead rank's host afterwards (IB retry
        # exceeded, broken pipe) confirm that the death came first and the rest followed.
        echoes = peer_warns(index, {root.host}) if root.host else []
        detail = (
            f"torchrun reports rank {root.rank} (local rank {root.local_rank}, pid "
            f"{root.pid}, host {root.host}) as the first failure, with {killed_by}. "
        )
        # torchrun's "Root Cause" is only the first exit it observed; the death counts as the
        # cause when it is also the first error in time across all ranks' evidence.
        ordered = first_errors(index)
        leads = bool(ordered) and ordered[0].rank == root.rank and len(ordered) > 1
        if echoes:
            detail += (
                f"{len(echoes)} NCCL error(s) on other ranks name {root.host} as the peer they "
                "lost: they are the cascade of this death, not a network fault of their own."
            )
        elif leads:
            later = ordered[1].time - ordered[0].time
            detail += (
                f"It is the first error in time across the ranks: the next one, on rank "
                f"{ordered[1].rank}, came {later:.0f} s later, so the others failed or hung "
                "because of it."
            )
        elif root.signal in _CRASH_SIGNALS:
            detail += (
                f"{root.signal} is raised by the process itself: it crashed (native code, a "
                "CUDA or NCCL library, memory corruption), and its peers then lost it."
            )
        elif signal_only:
            detail += (
                "A signal from outside (SIGKILL by a user, the OOM killer, a scheduler) "
                "can follow a hang rather than cause it."
            )
        yield self.finding(
            severity="critical" if echoes or leads else "error",
            title=f"rank {root.rank} (pid {root.pid}) ended with {killed_by}",
            detail=detail,
            events=[*roots, *echoes[:3]],
            ranks=[root.rank] if root.rank is not None else [],
            hosts=[root.host] if root.host else [],
            pids=[root.pid] if root.pid is not None else [],
            confidence=0.8 if echoes or leads else (0.45 if signal_only else 0.7),
            next_steps=(
                (
                    "Rerun with PYTHONFAULTHANDLER=1 (the Python stack at the crash) and core "
                    "dumps enabled (ulimit -c unlimited); read the core with gdb for the "
                    "native frame."
                    if root.signal in _CRASH_SIGNALS
                    else "Check dmesg on that host for the OOM killer, and the scheduler's "
                    "log for a kill."
                ),
                "Read the rank's own output before the failure (the lines with its [rankN]: prefix).",
            ),
        )


_CRASH_SIGNALS = frozenset({"SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE"})
"""Signals a process raises on its own when it crashes."""

_CONSEQUENCE_TYPES = frozenset(
    {
        "ChildFailedError",
        "KeyboardInterrupt",
        "SignalException",
        "DistBackendError",
        "CalledProcessError",
    }
)
_CONSEQUENCE_TEXT = re.compile(
    r"communicator was aborted|Watchdog caught|timed out|NCCL error|remote process exited"
    r"|Connection reset|Broken pipe|Connection closed by peer"
    # A timer that fired, a peer or server that could not be reached: the wait's end, not
    # a failure of the waiting process's own.
    r"|timeout callback fired|Watchdog timeout|failed to connect|not listening for connections"
    r"|failed to accept a connection|Server is not available",
    re.IGNORECASE,
)


def raised_messages(index: EvidenceIndex) -> list[PythonTraceback]:
    """The known messages a process raised (``[rank2]: RuntimeError: Invalid backend``) that
    no knowledge entry reads and that report no failure elsewhere: each is the exception its
    process died of, as a traceback's last line is (read once per index)."""
    cached = index.derived.get("raised_messages")
    if isinstance(cached, list):
        return cached
    found: list[PythonTraceback] = []
    for message in index.all_of(LogMessage):
        exc_type = raised_type(message)
        text = message.message
        # A message that goes on below (``Last error:``) is not all said.
        if exc_type is None or not text or text.endswith(":"):
            continue
        if knowledge.lookup(text) is not None or _benign_exception(exc_type, text):
            continue
        rank = message.rank if message.rank is not None else message.origin.rank
        found.append(exception_line(message, rank, exc_type, text))
    index.derived["raised_messages"] = found
    return found


def _advice(raised: PythonTraceback) -> tuple[str, ...]:
    """What the knowledge base advises for the exception a rank died of (CUDA out of memory:
    what to lower), when it knows the message as a cause."""
    hit = knowledge.lookup(f"{raised.exc_type}: {raised.exc_message or ''}")
    return hit.entry.next_steps[:2] if hit is not None and hit.entry.role == "cause" else ()


def _early_return_step(ranks: list[int]) -> str:
    """The first next step for ranks that left the job early without an error."""
    return (
        f"Look for a return, break or sys.exit(0) on rank(s) {format_ranks(ranks)} before the "
        "end of the training loop (uneven data: one rank runs out of batches first)."
    )


def _lone_silent_rank(index: EvidenceIndex) -> tuple[int | None, list[int]]:
    """The one rank of the evidence that is not waiting while two or more others wait.

    Returns it (None when there is not exactly one) and the waiting ranks. The ranks whose
    watchdogs report a timeout or their last enqueued work are waiting in a collective; the
    ranks of the world (or, with no world size, the ranks any line names) besides them are
    the ones they wait for.
    """
    waiting = {
        r
        for e in index.torch
        if isinstance(e, WatchdogTimeout | WatchdogProgress)
        and (r := global_rank(e, e.rank, e.pg)) is not None
    }
    if len(waiting) < 2:
        return None, []
    if index.world_size:
        others = set(absent_ranks(index.world_size, waiting, 1) or ())
    else:
        others = index.named_ranks() - waiting
    lone = sorted(others)
    return (lone[0], sorted(waiting)) if len(lone) == 1 else (None, sorted(waiting))


def _absent(index: EvidenceIndex, failed: set[int]) -> list[int]:
    """Ranks of the world that are not in ``failed``; empty when they outnumber ``failed``."""
    if index.world_size:
        return absent_ranks(index.world_size, failed, len(failed)) or []
    return sorted({e.rank for m in index.manifests for e in m.ranks} - failed)


_PEER_GONE = re.compile(
    r"Connection closed by (?:remote )?peer|Connection reset by peer|Broken pipe"
    r"|remote process exited"
    r"|Connection refused",
    re.IGNORECASE,
)


def _benign_exception(exc_type: str | None, message: str | None = None) -> bool:
    """Return True for exceptions that report a failure elsewhere rather than cause one.

    Besides the exception types and texts every framework uses for that, a message the
    knowledge base reads as what a victim sees (Horovod's "has been shut down", a peer's
    closed connection) is a consequence too.
    """
    if not exc_type:
        return False
    if exc_type.rsplit(".", 1)[-1] in _CONSEQUENCE_TYPES:
        return True
    if not message:
        return False
    if _CONSEQUENCE_TEXT.search(message):
        return True
    hit = knowledge.lookup(message)
    return hit is not None and (
        hit.entry.role in ("symptom", "benign") or hit.entry.culprit == "peer"
    )


class LeftEarly(Rule):
    """A rank destroyed its communicator and left while its peers still waited in it.

    Symptom:
        One rank's NCCL log ends with ``comm 0x... rank R ... - Destroy COMPLETE`` (a clean
        ``destroy_process_group``) after an earlier opCount than the others reached; the
        others log the next collective and later time out in it (watchdog, ``Abort
        COMPLETE``). torchrun's failure summary lists the others, not the rank that left:
        it exited 0.

    Likely causes:
        Uneven work per rank: one rank's data shard ran out of batches first, an early
        ``break``/``return`` on one rank (a rank-local stopping criterion, a NaN check), a
        ``max_steps`` computed per rank.

    What to check:
        The number of batches per rank (``len(loader)`` with ``DistributedSampler``,
        ``drop_last``), the loop's exit conditions on the named rank, and whether the
        stopping decision is shared (all-reduce a stop flag, or use ``Join`` for uneven inputs).
    """

    code = "LS205"
    name = "process.left_early"
    kind = "process-died"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        for key in sorted(index.comms):
            state = index.comms[key]
            last = {s: max(r.op_count for r in ops) for s, ops in state.ops.items() if ops}
            if len(last) < 2:
                continue
            top = max(last.values())
            left = sorted(
                (
                    s
                    for s, end in state.ended.items()
                    if end.phase == "Destroy" and s in last and last[s] < top
                ),
                key=str,
            )
            stayed = [s for s, n in last.items() if n == top and s not in left]
            if not left or len(left) >= len(stayed):
                continue
            ranks, hosts, pids = culprits(index, left)
            events: list[Event] = [state.ended[s] for s in left]
            events += [r.event for s in left for r in list(state.ops[s])[-1:]]
            sample = next(r for r in reversed(state.ops[stayed[0]]) if r.op_count == top)
            events.append(sample.event)
            coverage = min(1.0, len(last) / state.nranks) if state.nranks else 1.0
            who = describe(index, left)
            yield self.finding(
                severity="critical",
                title=f"{who} left the job early (destroyed comm {key} after opCount "
                f"{min(last[s] for s in left):#x}); {len(stayed)} rank(s) wait in "
                f"{sample.op} #{top}",
                detail=(
                    f"{who} logged its last collective at opCount "
                    f"{', '.join(sorted({f'{last[s]:#x}' for s in left}))} and then destroyed "
                    f"communicator {key} cleanly; {len(stayed)} rank(s) went on to {sample.op} "
                    f"at opCount {top:#x} and wait for it there. The timeouts and aborts on "
                    "those ranks are the consequence."
                ),
                events=events,
                ranks=ranks,
                hosts=hosts,
                pids=pids,
                communicator=key,
                confidence=0.85 * (0.6 + 0.4 * coverage),
                next_steps=(
                    f"Look for a break, return or sys.exit(0) on {who} before the end of the "
                    "training loop; compare the number of batches per rank (len(loader)).",
                    "Make every rank run the same number of steps (DistributedSampler with "
                    "drop_last=True, an all-reduced stop flag, or the Join context manager).",
                ),
            )
