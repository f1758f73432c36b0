"""JAX/XLA's coordination service: the tasks that never reached a barrier or stopped beating."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace
from itertools import groupby

from logsleuth.analysis.index import EvidenceIndex
from logsleuth.analysis.rules.base import Rule
from logsleuth.model.base import Event
from logsleuth.model.diagnosis import Finding
from logsleuth.model.messages import LogMessage
from logsleuth.model.ranks import format_ranks

_LISTED = re.compile(r"^\s*/job:[\w.\-]+/replica:\d+/task:(\d+)\s*[,.]?\s*$")
_BARRIER = re.compile(r"\bBarrier timed out\b")
_UNHEALTHY = re.compile(r"\bstopped sending heartbeats\b")
_HEARTBEAT = re.compile(r"\bTask /job:[\w.\-]+/replica:\d+/task:(\d+) heartbeat timeout\b")


class JaxCoordination(Rule):
    """JAX's coordination service names the tasks that did not reach a barrier or died.

    Symptom:
        ``DEADLINE_EXCEEDED: Barrier timed out. Id: ...`` with ``# of tasks that reached the
        barrier: 7/8`` and ``Some timed out task names:`` followed by
        ``/job:jax_worker/replica:0/task:N`` lines; or ``Task /job:.../task:N heartbeat
        timeout``, ``The following tasks are unhealthy (stopped sending heartbeats):``.

    Likely causes:
        A task that never reached the barrier: it is slower (still compiling, loading data,
        stuck in I/O) or took another code path; a task that stopped sending heartbeats
        died, hung hard or was preempted. JAX task N is process index N (the rank).

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
        messages = sorted(
            (
                m
                for m in index.all_of(LogMessage)
                if "/job:" in m.message or "arrier" in m.message or "heartbeat" in m.message
            ),
            key=lambda m: (m.ref.source, m.ref.line),
        )
        late: dict[int, list[Event]] = {}
        dead: dict[int, list[Event]] = {}
        context: list[Event] = []
        for _source, lines in groupby(messages, key=lambda m: m.ref.source):
            listing: dict[int, list[Event]] | None = None
            for message in lines:
                text = message.message
                if _BARRIER.search(text):
                    listing = late
                    context.append(message)
                elif _UNHEALTHY.search(text):
                    listing = dead
                    context.append(message)
                elif found := _HEARTBEAT.search(text):
                    dead.setdefault(int(found.group(1)), []).append(message)
                elif (found := _LISTED.match(text)) and listing is not None:
                    # A bare task line belongs to the list the last header opened.
                    listing.setdefault(int(found.group(1)), []).append(message)
        if dead:
            yield self._found(
                "process-died",
                dead,
                context,
                "stopped sending heartbeats to JAX's coordination service",
                "A task that stops sending heartbeats died, hung hard or was preempted; the "
                "others then fail at their next barrier or collective.",
                (
                    "On the host of the listed task(s): dmesg -T (OOM killer, Xid), the "
                    "scheduler's record (preemption, node failure), the task's own last output.",
                ),
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
            )

    def _found(
        self,
        kind: str,
        tasks: dict[int, list[Event]],
        context: list[Event],
        what: str,
        detail: str,
        steps: tuple[str, ...],
    ) -> Finding:
        ranks = sorted(tasks)
        events = [*context[:2], *(e for r in ranks for e in tasks[r][:1])]
        finding = self.finding(
            severity="error",
            title=f"JAX task(s) {format_ranks(ranks)} {what}",
            detail=f"{detail} JAX task N is process index N (the rank).",
            events=events,
            ranks=ranks,
            confidence=0.6,
            next_steps=steps,
        )
        return replace(finding, kind=kind)
