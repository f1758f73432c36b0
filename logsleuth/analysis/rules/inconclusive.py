"""The rule of last resort: something failed, and no other rule explains it."""

from __future__ import annotations

import re
from collections.abc import Iterable

from logsleuth.analysis.health import health_proofs, unproven_streams
from logsleuth.analysis.index import EvidenceIndex
from logsleuth.analysis.rules.base import Rule, describe, evidence_of
from logsleuth.analysis.rules.knowledge import explained_by_knowledge, lookup_event, raised
from logsleuth.model.base import Event
from logsleuth.model.diagnosis import Finding
from logsleuth.model.flight import FlightRecorderDump
from logsleuth.model.messages import LogMessage
from logsleuth.model.ranks import LISTED_RANKS, absent_ranks, format_ranks
from logsleuth.model.torch import ERROR_LEVELS, LauncherEvent, PythonTraceback, WatchdogError


class Inconclusive(Rule):
    """A hang or failure is evident, but the evidence does not show its cause.

    Symptom:
        NCCL WARNs, NCCL error back-traces, failed processes in torchrun's summary or a
        stall that ``logsleuth live`` detected, with no other finding of severity error or
        critical to explain them. The first lines of that evidence are quoted.

    Likely causes:
        Evidence that is missing the part that tells (NCCL logs without ``NCCL_DEBUG=INFO``,
        no stack dumps, logs of only some ranks), or a failure pattern logsleuth does not
        know yet.

    What to check:
        Collect ``NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL,NET`` logs of every rank, a
        ``py-spy dump`` of every rank while it hangs, and flight-recorder dumps
        (``TORCH_NCCL_TRACE_BUFFER_SIZE=2000 TORCH_NCCL_DUMP_ON_TIMEOUT=1``); then analyse
        again.
    """

    code = "LS001"
    name = "diagnosis.inconclusive"
    kind = "inconclusive"
    fallback = True

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        unexplained = _unexplained(index)
        stalled = [m for m in index.manifests if m.stalled_at]
        if not unexplained:
            return
        total = evidence_of(unexplained)[1]
        yield self.finding(
            severity="error",
            title="errors were logged but the evidence does not show their cause",
            detail=(
                (
                    f"logsleuth live saw the job stop making progress (at {stalled[0].stalled_at}), "
                    "but the evidence captured does not show why. "
                    if stalled
                    else ""
                )
                + f"{total} line(s) of evidence point at a failure (NCCL WARNs, error messages, error "
                "back-traces, failed processes or a detected stall), but none matches a known "
                "failure pattern. The first ones are quoted."
            ),
            events=unexplained,
            confidence=0.3,
            next_steps=_what_to_collect(index),
        )


class Unproven(Rule):
    """No failure was found, and nothing shows that the run ended normally either.

    Symptom:
        The evidence holds no error, but also no completion (communicators destroyed,
        torchrun's "worker group finished", a benchmark's closing summary, PyTorch's exit-time
        messages) and no progress (stack snapshots that differ): a log cut during init, one
        rank's side of a job, a lone stack dump, a traceback without its exception line.
        Calling that healthy would be a guess.

    Likely causes:
        The excerpt stops before the interesting part, or comes from only some ranks, or the
        job hangs silently (a hang prints nothing: that is what makes it a hang).

    What to check:
        The next steps name what is missing: the logs of the ranks not seen, NCCL INFO logs
        with COLL, two stack dumps of every rank a few seconds apart, flight-recorder dumps.
    """

    code = "LS002"
    name = "diagnosis.unproven"
    kind = "inconclusive"
    fallback = True

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        if _unexplained(index):
            return  # LS001 speaks for evidence of a failure
        proofs = health_proofs(index)
        unproven = unproven_streams(index, proofs)
        if proofs and not unproven:
            return
        if proofs:
            who = describe(index, unproven)
            title = f"no failure found, but nothing shows that {who} ended normally or progressed"
            detail = (
                f"The evidence holds no error. Some processes are shown to have finished or "
                f"progressed, but not {who}: its log stops without a sign of completion."
            )
        else:
            title = "no failure found, and nothing shows the run ended normally or progressed"
            detail = (
                "The evidence holds no error, but also nothing that shows completion "
                "(communicators destroyed, the launcher reporting success, a closing summary) "
                "or progress (stack snapshots that differ). An excerpt that stops early, or "
                "a silent hang, looks exactly like this."
            )
        last = [index.procs[s].last_event for s in unproven if index.procs[s].last_event]
        yield self.finding(
            severity="error",
            title=title,
            detail=detail,
            events=[e for e in last if e is not None][:4],
            confidence=0.3,
            next_steps=_what_to_collect(index),
        )


def _unexplained(index: EvidenceIndex) -> list[Event]:
    """Evidence of a failure: NCCL WARNs, error traces, failed processes, a detected stall.

    WARNs the knowledge base reads as harmless (adjusted settings, fallbacks, cleanup noise)
    are no evidence of a failure; the known symptoms are LS702's.
    """
    warns = [w for w in index.warns if not explained_by_knowledge(w)]
    unexplained: list[Event] = [w for w in warns if w.family != "other"]
    unexplained += [w for w in warns if w.family == "other"]
    # NCCL's "file:line -> N" traces unwind the failure a WARN reported; when every WARN is
    # explained (a fallback NCCL recovers from, a known symptom), so are they.
    if warns or not index.warns:
        unexplained += [t for t in index.traces if t.code != 0]
    unexplained += index.failures
    unexplained += [m for m in index.manifests if m.stalled_at]
    unexplained += [m for m in index.all_of(LogMessage) if _is_error(m)]
    # A framework's error about its communicator (``NCCL error in: ...``, a watchdog's
    # exception) that no entry reads is still an error: never "no failure found".
    unexplained += [
        e for e in index.torch if isinstance(e, WatchdogError) and lookup_event(e)[0] is None
    ]
    # An exception a process raised is a failure, also of a type that reports another's
    # (a launcher's CalledProcessError) when nothing reads it.
    unexplained += [
        e
        for e in index.torch
        if isinstance(e, PythonTraceback) and e.exc_type and lookup_event(e)[0] is None
    ]
    # c10's own error lines (``[E1125 ... TCPStoreBackend.cpp:100] [c10d] ... failed``): the
    # glog severity letter says error, whether or not an entry knows the message.
    unexplained += [
        e
        for e in index.all_of(LauncherEvent)
        if e.level in ERROR_LEVELS and lookup_event(e)[0] is None
    ]
    return unexplained


_ERROR_LEVELS = frozenset(
    ("ERROR", "FATAL", "CRITICAL", "ENFORCE", "CHECK", "THROW", "EXC", "ASSERT")
)
_WARNING_TYPE = re.compile(r"^\s*(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*Warning\b")


def _is_error(message: LogMessage) -> bool:
    """Say whether a message recognized by its text reports an error.

    The catalogs give the level: an error log (``ERROR``, ``LOG(FATAL)``), a failed check
    (``TORCH_CHECK``, ``C10D_CHECK``, ``ENFORCE``), an exception raised (``raise ...``,
    ``THROW``, or any message behind an exception type: ``RuntimeError: ...``), an NCCL WARN
    read by its text (its prefix cut or missing). A Python warning is none, nor a message the
    knowledge base calls harmless or reports as a known symptom (LS702).
    """
    level = message.level
    nccl_warn = message.family == "nccl" and level == "WARN"  # a bare or restored NCCL WARN
    if not (
        nccl_warn
        or raised(message)
        or level in _ERROR_LEVELS
        or level.startswith(("ERROR(", "raise "))
    ):
        return False
    return not _WARNING_TYPE.match(message.message) and not explained_by_knowledge(message)


def _what_to_collect(index: EvidenceIndex) -> tuple[str, ...]:
    """Name the evidence that is missing, most telling first; what is already there is skipped."""
    families = {f for p in index.procs.values() for f in p.families}
    known = {p.rank for p in index.procs.values() if p.rank is not None}
    steps: list[str] = []
    if index.world_size and known and len(known) < index.world_size:
        absent = absent_ranks(index.world_size, known, LISTED_RANKS)
        missing = format_ranks(absent) if absent is not None else "every rank without a log"
        steps.append(f"Collect the logs of the ranks with no evidence at all: {missing}.")
    if "nccl" not in families:
        steps.append(
            "Collect NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL,NET logs from every rank "
            "(NCCL_DEBUG_FILE=/tmp/nccl.%h.%p.log) and the launcher log."
        )
    elif not any(index.comms[k].ops for k in index.comms):
        steps.append(
            "The NCCL logs have no COLL lines: add COLL to NCCL_DEBUG_SUBSYS "
            "(NCCL_DEBUG_SUBSYS=INIT,COLL,NET) to see where each rank stopped."
        )
    if not index.dumps:
        steps.append(
            "Dump every rank's stacks while it hangs: py-spy dump --pid PID for each rank "
            "process (or run the job under logsleuth live, which does it for you)."
        )
    if not index.all_of(FlightRecorderDump):
        steps.append(
            "Enable the flight recorder: TORCH_NCCL_TRACE_BUFFER_SIZE=2000 "
            "TORCH_NCCL_DUMP_ON_TIMEOUT=1, and include the dumps."
        )
    if not steps:
        steps.append(
            "Every kind of evidence is there but matches no known pattern: read the quoted "
            "lines of the first failing rank and report the case to logsleuth's maintainers."
        )
    return tuple(steps)
