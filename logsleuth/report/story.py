"""The one story every report tells first: from the symptom, through who waits for whom, to the cause.

Built from the wait-for graph the diagnosis holds (:class:`~logsleuth.model.waitfor.WaitFor`):
it starts at a process that waits and that nobody waits for (the symptom: the rank that
timed out), follows its edges to the culprit (where waiting ends), and keeps the reason and
the evidence line of every hop. Edges are rendered whatever their source (stacks, flight
recorder, NCCL, P2P, store); the text and HTML reports place the same hops.
"""

from __future__ import annotations

from dataclasses import dataclass

from logsleuth.model.diagnosis import Diagnosis, Evidence
from logsleuth.model.ranks import format_ranks
from logsleuth.model.waitfor import WaitEdge, WaitFor, WaitNode

MAX_HOPS = 6
"""Hops followed before the chain is cut (a longer chain is shown up to here)."""

STATE_WORDS = {
    "waiting": "waits",
    "elsewhere": "is stuck outside communication",
    "init": "is still setting up its process group",
    "dead": "failed",
    "exited": "exited while the others still needed it",
    "silent": "left no evidence at all",
    "progressing": "is still making progress",
    "unknown": "left evidence that does not say where it is",
}
"""What each :data:`~logsleuth.model.waitfor.NODE_STATES` state says about a process."""


@dataclass(frozen=True, slots=True)
class Party:
    """One process of the story: its node id, rank, host and pid, and where it is."""

    id: str
    rank: int | None
    host: str | None
    pid: int | None
    state: str
    where: str

    def label(self) -> str:
        """Name the process as a reader looks it up: ``rank 5 (node-b pid 4105)``."""
        pid = f"pid {self.pid}" if self.pid is not None else ""
        extra = " ".join(x for x in (self.host or "", pid) if x)
        if not extra or (self.host and self.host in self.id):
            return self.id
        return f"{self.id} ({extra})"

    def doing(self) -> str:
        """Say what the process is doing: ``waits in all_reduce at train (train.py:12)``."""
        word = STATE_WORDS.get(self.state, self.state)
        if not self.where:
            return word
        if self.state == "waiting":
            return f"is waiting: {self.where}"
        return f"{word}: {self.where}"


@dataclass(frozen=True, slots=True)
class Hop:
    """``waiter`` waits for ``waits_for``: why, from which source, and the line that shows it."""

    waiter: Party
    waits_for: Party
    reason: str
    source: str
    evidence: Evidence | None
    alike: tuple[int, ...] = ()
    """Other ranks that wait for the same process (not counting ``waiter``)."""
    alike_unranked: int = 0
    """Other processes without a known rank that wait for it."""

    def alike_text(self) -> str:
        """Say who else waits for the same process: ``14 other ranks: 1-10,12-15``."""
        parts = []
        if self.alike:
            n = len(self.alike)
            ranges = format_ranks(self.alike)
            shown = ranges if len(ranges) <= 40 else ranges[:37].rsplit(",", 1)[0] + ",..."
            parts.append(f"{n:,} other {'rank' if n == 1 else 'ranks'}: {shown}")
        if self.alike_unranked:
            n = self.alike_unranked
            parts.append(f"{n:,} other {'process' if n == 1 else 'processes'}")
        return "; ".join(parts)


@dataclass(frozen=True, slots=True)
class Story:
    """The wait chain from the symptom to the culprit."""

    hops: tuple[Hop, ...]
    culprit: Party | None
    """Where waiting ends; None when the chain stops short of a culprit."""
    resolution: str
    cycle: bool = False
    """The chain came back to a process it had passed: a deadlock or an order mismatch."""


def _party(node: WaitNode | None, node_id: str) -> Party:
    if node is None:
        return Party(node_id, None, None, None, "unknown", "")
    return Party(node.id, node.rank, node.host, node.pid, node.state, node.where)


def _walk(start: str, by_waiter: dict[str, list[WaitEdge]], culprits: set[str]) -> list[WaitEdge]:
    chain: list[WaitEdge] = []
    seen = {start}
    here = start
    while here not in culprits and len(chain) < MAX_HOPS:
        options = by_waiter.get(here)
        if not options:
            break
        step = next((e for e in options if e.waits_for in culprits), options[0])
        chain.append(step)
        if step.waits_for in seen:
            break
        seen.add(step.waits_for)
        here = step.waits_for
    return chain


def _start(
    w: WaitFor, by_waiter: dict[str, list[WaitEdge]], order: dict[str, int], ends: tuple[str, ...]
) -> str | None:
    """Pick the symptom: a waiter whose chain reaches the strongest culprit.

    Preferred: a process nobody waits for (the outer end of the chain), then the longest
    chain, then one whose first edge quotes a line, then the first node in graph order.
    """
    waited_on = {e.waits_for for e in w.edges}
    target = ends[0] if ends else None
    culprits = set(ends)
    best: tuple[object, ...] | None = None
    chosen: str | None = None
    for waiter in by_waiter:
        chain = _walk(waiter, by_waiter, culprits)
        if not chain:
            continue
        reaches = chain[-1].waits_for == target
        key = (
            not reaches,
            waiter in waited_on,
            -len(chain),
            chain[0].evidence is None,
            order.get(waiter, len(order)),
        )
        if best is None or key < best:
            best, chosen = key, waiter
    return chosen


def build_story(d: Diagnosis) -> Story | None:
    """Return the wait chain of ``d``, or None when no process is known to wait for another."""
    w = d.waitfor
    if w is None or not w.edges:
        return None
    nodes = {n.id: n for n in w.nodes}
    order = {n.id: i for i, n in enumerate(w.nodes)}
    by_waiter: dict[str, list[WaitEdge]] = {}
    by_target: dict[str, set[str]] = {}
    for edge in w.edges:
        by_waiter.setdefault(edge.waiter, []).append(edge)
        by_target.setdefault(edge.waits_for, set()).add(edge.waiter)
    # Where waiting ends: the graph's culprits, else the processes the verdict blames.
    ends = w.culprits or tuple(
        n.id
        for n in w.nodes
        if (n.rank is not None and n.rank in d.verdict.culprit_ranks)
        or (n.rank is None and n.pid is not None and n.pid in d.verdict.culprit_pids)
    )
    start = _start(w, by_waiter, order, ends)
    if start is None:
        return None
    chain = _walk(start, by_waiter, set(ends))
    hops = []
    for edge in chain:
        others = [
            nodes.get(x) for x in sorted(by_target.get(edge.waits_for, ())) if x != edge.waiter
        ]
        alike = tuple(sorted(n.rank for n in others if n is not None and n.rank is not None))
        unranked = sum(1 for n in others if n is None or n.rank is None)
        hops.append(
            Hop(
                waiter=_party(nodes.get(edge.waiter), edge.waiter),
                waits_for=_party(nodes.get(edge.waits_for), edge.waits_for),
                reason=edge.reason,
                source=edge.source,
                evidence=edge.evidence,
                alike=alike,
                alike_unranked=unranked,
            )
        )
    end = chain[-1].waits_for if chain else start
    culprit = _party(nodes.get(end), end) if end in ends else None
    passed = {start, *(e.waiter for e in chain)}
    return Story(
        hops=tuple(hops),
        culprit=culprit,
        resolution=w.resolution,
        cycle=bool(chain) and chain[-1].waits_for in passed,
    )


def waiter_sentence(hop: Hop) -> str:
    """Say who waits and where: ``rank 0 (node-a pid 4100) waits in all_reduce at ...``."""
    return f"{hop.waiter.label()} {hop.waiter.doing()}"


def hop_sentence(hop: Hop) -> str:
    """Say whom the hop's waiter waits for and why: ``waits for rank 5 (as do ...): why``."""
    alike = hop.alike_text()
    also = f" (as do {alike})" if alike else ""
    return f"waits for {hop.waits_for.id}{also}: {hop.reason}"


def culprit_sentence(story: Story) -> str:
    """Say where waiting ends: ``rank 5 (node-b pid 4105) is stuck outside ...: data loading``."""
    if story.culprit is None:
        if story.cycle:
            return "the chain comes back to a process it passed: a deadlock or an order mismatch"
        return "the chain ends at a process that is not known to be the cause"
    return f"{story.culprit.label()} {story.culprit.doing()}"
