"""Point-to-point operations across ranks: who sends to whom, and which one is stuck.

A :class:`P2POp` is one ``send`` or ``recv`` a rank posted, as one source of evidence saw
it (a stack with the call's arguments, an NCCL proxy-state dump, a flight-recorder entry,
an ``NCCL CALL`` line). Sends from A to B and receives at B from A are matched in order per
(src, dst, channel); what is left unmatched at the frontier is a :class:`P2PStuck`: the
waiting op, what its peer does instead, and the op counts on both sides.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # diagnosis.py carries a P2PView: import the other way round at run time
    from logsleuth.model.diagnosis import Evidence

P2P_OPS = ("send", "recv")
"""``P2POp.op``: the direction seen from the rank that posted it."""

STUCK_KINDS = ("peer-elsewhere", "peer-busy", "deadlock", "in-transport")
"""``P2PStuck.kind``: the peer never posted the matching op (it is elsewhere: a barrier, a
collective, its own code, gone); the peer waits on an op with another rank; both sides
receive from (or send to) each other; both sides posted and the transfer does not end."""


@dataclass(frozen=True, slots=True, kw_only=True)
class P2POp:
    """One send or receive a rank posted, and how far it got."""

    rank: int
    """The global rank that posted it."""
    op: str
    """``send`` or ``recv``."""
    peer: int | None
    """The global rank on the other side; None for a receive from any source."""
    channel: int | None = None
    """NCCL channel of the transfer (proxy dumps); None where the source has no channels."""
    tag: int | None = None
    """The user's tag (torch ``send``/``recv``), when known."""
    seq: int | None = None
    """The op's count on its rank: NCCL opCount (proxy dump, CALL line) or the flight
    recorder's ``p2p_seq_id``."""
    status: str = "posted"
    """``posted`` (waiting, not moving), ``sending``, ``receiving``, ``flushing``,
    ``waiting-gpu``, ``init``, ``done``."""
    group: str | None = None
    """The communicator or process group, when the source names it."""
    where: str = ""
    """Where the rank posted it, from its stack (``recv at train.py:88``)."""
    source: str = "stacks"
    """``stacks``, ``nccl-proxy``, ``flight-recorder`` or ``nccl-call``."""
    evidence: Evidence | None = None

    def describe(self) -> str:
        """Return the op in words: ``receive from rank 4 on channel 2 at opCount 0x1c``."""
        direction = "send to" if self.op == "send" else "receive from"
        peer = f"rank {self.peer}" if self.peer is not None else "any rank"
        parts = [f"{direction} {peer}"]
        if self.channel is not None:
            parts.append(f"on channel {self.channel}")
        if self.tag:
            parts.append(f"tag {self.tag}")
        if self.seq is not None:
            parts.append(f"at {_seq_name(self.source)} {_seq_text(self.source, self.seq)}")
        return " ".join(parts)


def _seq_name(source: str) -> str:
    return "p2p_seq_id" if source == "flight-recorder" else "opCount"


def _seq_text(source: str, seq: int) -> str:
    return str(seq) if source == "flight-recorder" else hex(seq)


@dataclass(frozen=True, slots=True, kw_only=True)
class P2PStuck:
    """An op at the frontier that no op on the peer's side answers, and what the peer does."""

    kind: str
    """One of :data:`STUCK_KINDS`."""
    waiter: int
    """The rank whose op waits."""
    peer: int
    """The rank it waits for."""
    op: P2POp
    """The waiting op."""
    peer_op: P2POp | None = None
    """The peer's own pending op (towards the waiter or another rank), when it has one."""
    peer_where: str = ""
    """Where the peer is instead (``barrier at train.py:90``, ``exited``), from its stack."""
    sent: int | None = None
    """Sends the evidence shows from the sender of this pair to the receiver (history)."""
    received: int | None = None
    """Receives the evidence shows at the receiver from the sender."""
    summary: str = ""
    """The op and its peer in one sentence."""


@dataclass(frozen=True, slots=True, kw_only=True)
class P2PView:
    """Every pending point-to-point op of the job and the frontier where they stop."""

    pending: tuple[P2POp, ...] = ()
    """Ops not done when the evidence was taken, by rank."""
    stuck: tuple[P2PStuck, ...] = ()
    """Unanswered ops, those of the culprits first."""
    culprits: tuple[int, ...] = ()
    """The ranks where the point-to-point waiting ends."""
    kind: str = "inconclusive"
    """The finding kind the frontier amounts to (``missing-collective``,
    ``collective-mismatch``, ``collective-timeout``)."""
    summary: str = ""
    """What happened, in a sentence that names the culprit, the peer pair and the channel."""
    sources: tuple[str, ...] = ()
    """The kinds of evidence the ops came from."""
