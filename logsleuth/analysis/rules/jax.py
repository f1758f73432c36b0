"""The coordination service of JAX and TensorFlow (TSL): the tasks that never reached a
barrier, stopped beating, or could not be reached over gRPC."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace
from itertools import chain, groupby

from logsleuth.analysis.index import EvidenceIndex
from logsleuth.analysis.rules.base import Rule
from logsleuth.model.base import Event
from logsleuth.model.diagnosis import Finding
from logsleuth.model.messages import LogMessage
from logsleuth.model.ranks import format_ranks
from logsleuth.model.torch import PythonTraceback

_LISTED = re.compile(r"^\s*/job:[\w.\-]+/replica:\d+/task:(\d+)\s*[,.]?\s*$")
_BARRIER = re.compile(r"\bBarrier timed out\b")
_BARRIER_ID = re.compile(r"\bBarrier timed out\. (?:Barrier_id|Id): ([\w.\-:()]+?)\.?(?:\s|$)")
_STARTUP_BARRIER = re.compile(r"connect|initiali[sz]e|register", re.IGNORECASE)
"""A barrier id of the start-up (JAX's ``PjRT_Client_Connect``): the late tasks never
joined the job, which is an initialization that did not complete."""
_UNHEALTHY = re.compile(r"\bstopped sending heartbeats\b")
_LATE_LIST = re.compile(r"\b(?:[Tt]imed out task names|did not reach the barrier):?")
"""Where a barrier's message begins its list of late tasks (the first task at the barrier,
named before it, waited)."""
_TASK = re.compile(r"/job:[\w.\-]+/replica:\d+/task:(\d+)")
_HEARTBEAT = re.compile(r"\bTask /job:([\w.\-]+)/replica:\d+/task:(\d+) heartbeat timeout\b")
_REMOTE = re.compile(r"\bfrom remote target /job:([\w.\-]+)/replica:\d+/task:(\d+)")
_UNREACHABLE = re.compile(
    r"failed to connect to all addresses|Socket closed|Connection reset|Connection refused"
    r"|Broken pipe|Connect Failed|Failed to pick subchannel|\"grpc_status\":14\b",
    re.IGNORECASE,
)
"""What a failed gRPC call says when the process it called is gone (gRPC's UNAVAILABLE)."""
_WORDS = ("/job:", "arrier", "heartbeat", "onnect", "ocket closed", "subchannel", "Broken pipe")
"""Words of the lines this rule reads: a cheap filter before its expressions."""
_JOB = re.compile(r"/job:([\w.\-]+)/")


class JaxCoordination(Rule):
    """The coordination service (JAX, TensorFlow) names the tasks that did not reach a
    barrier, died, or could not be reached.

    Symptom:
        ``DEADLINE_EXCEEDED: Barrier timed out. Id: ...`` with ``# of tasks that reached the
        barrier: 7/8`` and ``Some timed out task names:`` followed by
        ``/job:jax_worker/replica:0/task:N`` lines; or ``Task /job:.../task:N heartbeat
        timeout``, ``The following tasks are unhealthy (stopped sending heartbeats):``; a
        failed gRPC call's ``Additional GRPC error information from remote target
        /job:worker/replica:0/task:N`` whose error says the target could not be reached
        (``failed to connect to all addresses``, ``Socket closed``), as TensorFlow's
        ``Collective ops is aborted by: ...`` reports a lost worker.

    Likely causes:
        A task that never reached the barrier: it is slower (still compiling, loading data,
        stuck in I/O) or took another code path; a task that stopped sending heartbeats
        died, hung hard or was preempted; so did a task that no longer answers gRPC calls.
        JAX task N is process index N (the rank); TensorFlow's is the task index of its job
        in the cluster spec.

    What to check:
        The logs and stacks of the listed tasks (``py-spy dump`` of that process); whether
        every process runs the same jitted functions in the same order; for heartbeats, the
        host of that task (OOM killer, preemption, GPU faults in dmesg).
    """

    code = "LS126"
    name = "jax.coordination"
    kind = "missing-collective"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        # By text, not family: ``jaxlib.xla_extension.XlaRuntimeError: ...`` may be read as a
        # plain Python exception line.
        # An exception line is read as the traceback it ends (with its frames or none).
        said: Iterable[tuple[Event, str]] = chain(
            ((m, m.message) for m in index.all_of(LogMessage)),
            (
                (t, f"{t.exc_type}: {t.exc_message or ''}")
                for t in index.torch
                if isinstance(t, PythonTraceback)
            ),
        )
        messages = sorted(
            ((e, text) for e, text in said if any(word in text for word in _WORDS)),
            key=lambda pair: (pair[0].ref.source, pair[0].ref.line),
        )
        late: dict[int, list[Event]] = {}
        dead: dict[int, list[Event]] = {}
        gone: dict[int, list[Event]] = {}
        context: list[Event] = []
        jobs: set[str] = set()
        startup = False
        for _source, group in groupby(messages, key=lambda pair: pair[0].ref.source):
            lines = list(group)
            listing: dict[int, list[Event]] | None = None
            for at, (message, text) in enumerate(lines):
                jobs.update(_JOB.findall(text))
                if _BARRIER.search(text):
                    listing = late
                    barrier = _BARRIER_ID.search(text)
                    startup |= bool(barrier and _STARTUP_BARRIER.search(barrier.group(1)))
                    context.append(message)
                    _listed_after(_LATE_LIST, text, message, late)
                elif found := _UNHEALTHY.search(text):
                    listing = dead
                    context.append(message)
                    _listed_after(found, text, message, dead)
                elif found := _HEARTBEAT.search(text):
                    dead.setdefault(int(found.group(2)), []).append(message)
                elif found := _REMOTE.search(text):
                    # The error a call to that task failed with is on the line itself, the
                    # line before it (``UNAVAILABLE: ...``) or its JSON detail after it.
                    near = lines[max(at - 1, 0) : at + 2]
                    if any(_UNREACHABLE.search(said) for _, said in near):
                        gone.setdefault(int(found.group(2)), []).append(message)
                        context.extend(m for m, _ in near[:1] if m is not message)
                elif (found := _LISTED.match(text)) and listing is not None:
                    # A bare task line belongs to the list the last header opened.
                    listing.setdefault(int(found.group(1)), []).append(message)
        if dead or gone:
            yield self._found(
                "process-died",
                dead or gone,
                context,
                "stopped sending heartbeats to the coordination service"
                if dead
                else "could not be reached over gRPC",
                "A task that stops sending heartbeats or answering calls died, hung hard or "
                "was preempted; the others then fail at their next barrier or collective.",
                (
                    "On the host of the listed task(s): dmesg -T (OOM killer, Xid), the "
                    "scheduler's record (preemption, node failure), the task's own last output.",
                ),
                jobs,
            )
        elif late and startup:
            yield self._found(
                "init-stall",
                late,
                context,
                "never joined the job: the start-up barrier timed out without them",
                "The coordination service's start-up barrier (the connect of "
                "jax.distributed.initialize) lists the tasks that never connected; the tasks "
                "that arrived only waited for them.",
                (
                    "Check that the listed task(s) started at all and reach the coordinator's "
                    "address (scheduler record, the task's own first lines, its host's network).",
                    "Check that every process was given the same coordinator address, "
                    "num_processes and a distinct process_id.",
                ),
                jobs,
            )
        elif late:
            yield self._found(
                "missing-collective",
                late,
                context,
                "never reached the barrier the other tasks timed out in",
                "JAX's coordination service lists the tasks that had not arrived when the "
                "barrier timed out; the tasks that arrived only waited for them.",
                (
                    "Dump the stacks of the listed task(s) while the job hangs (py-spy dump "
                    "--pid PID): slow compilation, data loading, or another code path.",
                    "Check that every process calls the same jitted functions in the same "
                    "order (a branch on jax.process_index()).",
                ),
                jobs,
            )

    def _found(
        self,
        kind: str,
        tasks: dict[int, list[Event]],
        context: list[Event],
        what: str,
        detail: str,
        steps: tuple[str, ...],
        jobs: set[str],
    ) -> Finding:
        ranks = sorted(tasks)
        # JAX names its job ``jax_worker``; TensorFlow's cluster spec ``worker``, ``chief``.
        framework = "JAX" if jobs and all("jax" in j for j in jobs) else None
        job = f" of /job:{next(iter(jobs))}" if len(jobs) == 1 and not framework else ""
        events = [*context[:2], *(e for r in ranks for e in tasks[r][:1])]
        finding = self.finding(
            severity="error",
            title=f"{framework + ' task' if framework else 'Task'}(s) {format_ranks(ranks)}{job} "
            f"{what}",
            detail=f"{detail} "
            + (
                "JAX task N is process index N (the rank)."
                if framework
                else "Task N is the process index in JAX and the task index of its job in "
                "TensorFlow's cluster spec."
            ),
            events=events,
            ranks=ranks,
            confidence=0.6,
            next_steps=steps,
        )
        return replace(finding, kind=kind)


def _listed_after(
    head: re.Pattern[str] | re.Match[str], text: str, message: Event, into: dict[int, list[Event]]
) -> None:
    """Add the tasks listed in ``text`` after its list's head: a list joined to its header
    line (an excerpt that lost its line breaks, a wrapped paste) names them on that line."""
    found = head.search(text) if isinstance(head, re.Pattern) else head
    if found is None:
        return
    for task in _TASK.finditer(text, found.end()):
        into.setdefault(int(task.group(1)), []).append(message)
