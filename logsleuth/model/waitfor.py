"""The wait-for graph: who waits for whom, and where the waiting ends.

Every process the evidence knows of is a node, including ranks known only to exist (the
world size, a bundle manifest) that left no evidence. An edge A -> B says that A waits for
B, with the reason and the line that shows it. The culprit is where waiting ends: a node
that waits for nobody and is not inside communication (stuck elsewhere, dead, exited
early, silent); a cycle is a deadlock or an order mismatch, resolved by the majority.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # diagnosis.py carries a WaitFor: import the other way round at run time
    from logsleuth.model.diagnosis import Evidence

NODE_STATES = (
    "waiting",
    "elsewhere",
    "init",
    "dead",
    "exited",
    "silent",
    "progressing",
    "unknown",
)
"""``waiting``: inside a collective, a barrier or a store wait; ``elsewhere``: its stack is
outside communication (compute, data loading, I/O, a lock, sleep, user code);
``init``: inside process-group set-up; ``dead``: it failed on its own account;
``exited``: it ended with status 0 while others still needed it; ``silent``: known to
exist but no evidence at all; ``progressing``: its stack moved between snapshots;
``unknown``: evidence, but none that says where it is."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitNode:
    """One process of the job."""

    id: str
    """``rank 3``, or ``host pid 123`` when the rank is not known."""
    rank: int | None = None
    host: str | None = None
    pid: int | None = None
    state: str = "unknown"
    where: str = ""
    """What the state is about: ``all_reduce at train (train.py:12)``, ``exit code 0``."""
    category: str = ""
    """Where its stack is, as the stack classifier says (``data-loading``, ``unknown``, ...)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitEdge:
    """``waiter`` waits for ``waits_for``: the reason, the source and the line that shows it."""

    waiter: str
    waits_for: str
    reason: str
    source: str
    """``stacks``, ``flight-recorder``, ``watchdog``, ``nccl``, ``store``, ``launcher``."""
    evidence: Evidence | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitFor:
    """The wait-for graph of a job and what it concludes."""

    nodes: tuple[WaitNode, ...] = ()
    edges: tuple[WaitEdge, ...] = ()
    culprits: tuple[str, ...] = ()
    """Node ids where waiting ends, strongest first."""
    victims: tuple[tuple[str, str], ...] = ()
    """(node id, the reason of the edge that makes it a victim)."""
    cycles: tuple[tuple[str, ...], ...] = ()
    """Groups of nodes that wait for each other (each sorted)."""
    resolution: str = ""
    """How the culprit was chosen, in a sentence (``sink``, ``majority order``, ...)."""

    def node(self, node_id: str) -> WaitNode | None:
        """Return the node called ``node_id``, if any."""
        for each in self.nodes:
            if each.id == node_id:
                return each
        return None

    def chain(self, start: str, limit: int = 6) -> tuple[WaitEdge, ...]:
        """Return the edges followed from ``start`` until a culprit (or a repeat) is reached."""
        by_waiter: dict[str, list[WaitEdge]] = {}
        for edge in self.edges:
            by_waiter.setdefault(edge.waiter, []).append(edge)
        culprits = set(self.culprits)
        chain: list[WaitEdge] = []
        seen = {start}
        here = start
        while here not in culprits and len(chain) < limit:
            options = by_waiter.get(here, [])
            if not options:
                break
            step = next((e for e in options if e.waits_for in culprits), options[0])
            chain.append(step)
            if step.waits_for in seen:
                break
            seen.add(step.waits_for)
            here = step.waits_for
        return tuple(chain)
