"""Match sends and receives across ranks and find the point-to-point op where waiting ends.

Every pending op (a rank blocked in ``send``/``recv``, a proxy-dump Send/Recv not done, a
flight-recorder P2P entry not completed) is answered when its peer has the opposite op
pending towards it (on the same channel where both sides name one). An op left
unanswered waits for its peer; what the peer does instead decides the story:

* the peer receives from (or sends to) this rank too: a deadlock of two ``recv`` (``send``);
* the peer is busy with another rank, or posted nothing at all (it is in a barrier, a
  collective, its own code): the waiting goes on to it.

The frontier, in order of what the evidence proves:

1. **wrong peer**: a rank receives from Y while another rank waits to send to it (or sends
   to Y while another rank waits to receive from it): it named the wrong peer
   (``collective-mismatch``);
2. **dropped op**: the chain of waiting ends at a rank with nothing pending towards its
   waiter: it never posted that send or recv (``missing-collective``);
3. **deadlock**: ranks wait for each other in a cycle, none of the above
   (``collective-mismatch``);
4. **stuck in transport**: both sides posted and the transfer does not end
   (``collective-timeout``): the link between them.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable

from logsleuth.analysis.index import EvidenceIndex
from logsleuth.analysis.p2p_sources import (
    flight_ops,
    last_proxy_dumps,
    proxy_collectives,
    proxy_ops,
    stack_ops,
)
from logsleuth.analysis.rules.stacks import proc_stacks
from logsleuth.analysis.stacks import ProcStack
from logsleuth.model.flight import FlightRecorderDump
from logsleuth.model.p2p import P2POp, P2PStuck, P2PView

MAX_PENDING = 64
"""Pending ops kept in the view: those of the frontier first."""
_PROGRESS = ("sending", "receiving", "flushing")


def _answers(op: P2POp, other: P2POp) -> bool:
    """Return True when ``other`` (posted by ``op``'s peer) is the counterpart of ``op``."""
    if other.rank != op.peer or other.peer != op.rank or other.op == op.op:
        return False
    return op.channel is None or other.channel is None or op.channel == other.channel


def _where_of(procs: list[ProcStack]) -> dict[int, str]:
    """Where each rank's main thread is, in words (``barrier at finish (harness.py:105)``)."""
    where: dict[int, str] = {}
    for proc in procs:
        if proc.rank is None or proc.dump.main_thread() is None:
            continue
        category, collective, site = proc.state()
        label = collective or ("its own code" if category == "unknown" else category)
        where[proc.rank] = label + (f" at {site}" if site else "")
    return where


class _Match:
    """The pending ops of a job, indexed for matching."""

    def __init__(self, ops: Iterable[P2POp], recorded: Iterable[int] = ()) -> None:
        # An op to the rank itself (NCCL copies it locally) has no peer to wait for.
        self.ops = sorted((o for o in ops if o.peer != o.rank), key=_op_key)
        self.pending = [o for o in self.ops if o.status != "done"]
        self.by_rank: dict[int, list[P2POp]] = defaultdict(list)
        for op in self.pending:
            self.by_rank[op.rank].append(op)
        self.recorded = set(recorded)
        """Ranks with a flight-recorder dump: their P2P history is known."""
        self.history: dict[tuple[int, int, str], int] = defaultdict(int)
        for op in self.ops:
            if op.peer is not None and op.source == "flight-recorder":
                self.history[(op.rank, op.peer, op.op)] += 1

    def count(self, rank: int, peer: int, op: str) -> int | None:
        """Ops ``rank`` posted towards ``peer`` in its flight record; None without one."""
        if rank not in self.recorded:
            return None
        return self.history.get((rank, peer, op), 0)

    def answer(self, op: P2POp) -> P2POp | None:
        if op.peer is None:
            return None
        return next((o for o in self.by_rank.get(op.peer, []) if _answers(op, o)), None)

    def unanswered(self) -> list[P2POp]:
        return [o for o in self.pending if o.peer is not None and self.answer(o) is None]


def _op_key(op: P2POp) -> tuple[int, int, int, int, str, str]:
    return (
        op.rank,
        op.peer if op.peer is not None else -1,
        op.channel if op.channel is not None else -1,
        op.seq if op.seq is not None else -1,
        op.op,
        op.source,
    )


def _at(op: P2POp) -> str:
    return f" in {op.where}" if op.where and op.source == "stacks" else ""


def _stuck(match: _Match, op: P2POp, where: dict[int, str]) -> P2PStuck:
    """Describe the unanswered ``op``: what its peer does instead."""
    peer = op.peer if op.peer is not None else -1
    theirs = match.by_rank.get(peer, [])
    back = next((o for o in theirs if o.peer == op.rank and o.op == op.op), None)
    busy = next((o for o in theirs if o.peer != op.rank), None)
    sender, receiver = (op.rank, peer) if op.op == "send" else (peer, op.rank)
    sent = match.count(sender, receiver, "send")
    received = match.count(receiver, sender, "recv")
    mine = f"rank {op.rank} waits to {op.describe()}{_at(op)}"
    elsewhere = where.get(peer, "")
    if back is not None:
        kind, peer_op = "deadlock", back
        verb = "receives from" if op.op == "recv" else "sends to"
        text = f"{mine}; rank {peer} {verb} rank {op.rank} too ({back.describe()}): a deadlock"
    elif busy is not None:
        kind, peer_op = "peer-busy", busy
        text = f"{mine}; rank {peer} is busy with another peer: it waits to {busy.describe()}"
    else:
        kind, peer_op = "peer-elsewhere", None
        missing = "send" if op.op == "recv" else "recv"
        instead = f": it is in {elsewhere}" if elsewhere else ""
        text = f"{mine}; rank {peer} never posted that {missing}{instead}"
        if sent is not None and received is not None:
            text += (
                f" (rank {sender} posted {sent} send(s) to rank {receiver}, "
                f"which posted {received} recv(s) from it)"
            )
    return P2PStuck(
        kind=kind,
        waiter=op.rank,
        peer=peer,
        op=op,
        peer_op=peer_op,
        peer_where=elsewhere,
        sent=sent,
        received=received,
        summary=text,
    )


def _in_transport(match: _Match) -> list[P2PStuck]:
    """Pairs whose send and recv are both posted and still moving: the transfer is stuck."""
    found: list[P2PStuck] = []
    for op in match.pending:
        if op.op != "send" or op.peer is None:
            continue
        other = match.answer(op)
        if other is None or (op.status not in _PROGRESS and other.status not in _PROGRESS):
            continue
        found.append(
            P2PStuck(
                kind="in-transport",
                waiter=op.rank,
                peer=op.peer,
                op=op,
                peer_op=other,
                summary=(
                    f"rank {op.rank} is still {op.status} ({op.describe()}) and rank {op.peer} "
                    f"{other.status} ({other.describe()}): both posted, the transfer "
                    "does not finish"
                ),
            )
        )
    return found


def _wrong_peer(stuck: list[P2PStuck]) -> list[tuple[int, P2PStuck, P2PStuck]]:
    """(culprit, its op, the op of the rank that waits on it from another side)."""
    found: list[tuple[int, P2PStuck, P2PStuck]] = []
    for mine in stuck:
        for other in stuck:
            if (
                other.peer == mine.waiter
                and other.waiter != mine.peer
                and other.op.op != mine.op.op
                and other.kind != "deadlock"
            ):
                found.append((mine.waiter, mine, other))
                break
    return found


def _sinks(stuck: list[P2PStuck]) -> list[int]:
    """Ranks where the chain of unanswered ops ends, the most waited-for first."""
    waits: dict[int, set[int]] = defaultdict(set)
    for item in stuck:
        waits[item.waiter].add(item.peer)
    ends = sorted({s.peer for s in stuck if s.kind == "peer-elsewhere"})
    reach: dict[int, int] = {}
    for end in ends:
        behind = {end}
        grew = True
        while grew:
            grew = False
            for waiter, peers in waits.items():
                if waiter not in behind and peers & behind:
                    behind.add(waiter)
                    grew = True
        reach[end] = len(behind) - 1
    best = max(reach.values(), default=0)
    return [e for e in ends if reach[e] == best]


def _offset(op: P2POp, world: int) -> int | None:
    """The hop of an op along the flow of data: +1 for a send to the next rank or a recv
    from the previous one (mod the world)."""
    if op.peer is None or world <= 0:
        return None
    hop = op.peer - op.rank if op.op == "send" else op.rank - op.peer
    return hop % world


def _odd_ones(
    wrong: list[tuple[int, P2PStuck, P2PStuck]], match: _Match, world: int
) -> list[tuple[int, P2PStuck, P2PStuck]]:
    """Of several wrong-peer candidates, keep those whose hop differs from the usual hop.

    In a ring or a pipeline every rank sends one hop on and receives from one hop back; a
    rank that receives from the previous stage while the odd one sends to it is not the
    one that named the wrong peer.
    """
    if len(wrong) < 2:
        return wrong
    hops = Counter(h for o in match.pending if (h := _offset(o, world)) is not None)
    if not hops:
        return wrong
    usual, count = hops.most_common(1)[0]
    if list(hops.values()).count(count) > 1:
        return wrong  # no majority: the evidence cannot tell them apart
    odd = [w for w in wrong if _offset(w[1].op, world) != usual]
    return odd or wrong


def _decide(
    stuck: list[P2PStuck],
    transport: list[P2PStuck],
    seen: set[int],
    match: _Match,
    world: int,
) -> tuple[list[int], str, str, list[P2PStuck]]:
    """Return (culprits, kind, summary, the stuck ops that show it)."""
    wrong = _odd_ones(_wrong_peer(stuck), match, world)
    if wrong:
        culprits = sorted({c for c, _, _ in wrong})
        culprit, mine, other = wrong[0]
        _, _, peer_side = mine.summary.partition("; ")
        summary = (
            f"rank {culprit} waits to {mine.op.describe()}{_at(mine.op)}, while rank "
            f"{other.waiter} waits to {other.op.describe()}{_at(other.op)}: rank {culprit} "
            f"named the wrong peer; {peer_side}"
        )
        shown = [s for _, a, b in wrong for s in (a, b)]
        return culprits, "collective-mismatch", summary, shown
    sinks = _sinks(stuck)
    if sinks:
        shown = [s for s in stuck if s.peer in sinks and s.kind == "peer-elsewhere"]
        chain = [s for s in stuck if s not in shown]
        summary = shown[0].summary
        if chain:
            summary += f"; {len({s.waiter for s in chain})} more rank(s) wait behind"
        return sinks, "missing-collective", summary, shown + chain
    cycle = [s for s in stuck if s.kind == "deadlock"]
    if cycle:
        fresh = [
            s
            for s in cycle
            if (s.sent, s.received) == (0, 0) or (s.sent is None and s.received == 0)
        ]
        named = fresh or cycle
        culprits = sorted({s.waiter for s in named})
        return culprits, "collective-mismatch", named[0].summary, cycle
    if transport:
        waiting = {s.waiter for s in transport} | {s.peer for s in transport}
        idle = len(seen - waiting)
        first = transport[0]
        summary = first.summary
        if idle:
            summary += f"; the other {idle} rank(s) have no point-to-point op pending"
        return sorted({first.waiter, first.peer}), "collective-timeout", summary, transport
    return [], "inconclusive", "", stuck


def build_p2p(index: EvidenceIndex) -> P2PView | None:
    """Return the point-to-point view of the job, or None when no source shows a P2P op."""
    procs = proc_stacks(index)
    dumps = last_proxy_dumps(index)
    recorded = [d.rank for d in index.all_of(FlightRecorderDump) if d.rank is not None]
    ops = [*stack_ops(procs), *proxy_ops(dumps), *flight_ops(index)]
    if not ops:
        return None
    match = _Match(ops, recorded)
    if not match.pending:
        return P2PView(sources=tuple(sorted({o.source for o in ops})))
    where = {**proxy_collectives(dumps), **_where_of(procs)}
    stuck = [_stuck(match, op, where) for op in match.unanswered()]
    transport = _in_transport(match)
    seen = {o.rank for o in ops} | set(dumps) | {p.rank for p in procs if p.rank is not None}
    world = index.world_size or (max(seen) + 1 if seen else 0)
    culprits, kind, summary, shown = _decide(stuck, transport, seen, match, world)
    order = {id(s): n for n, s in enumerate(shown)}
    stuck_all = sorted(
        {id(s): s for s in [*shown, *stuck]}.values(),
        key=lambda s: (order.get(id(s), len(order)), s.waiter, s.peer),
    )
    front = [s.op for s in stuck_all] + [s.peer_op for s in stuck_all if s.peer_op is not None]
    pending = list({_op_key(o): o for o in [*front, *match.pending]}.values())[:MAX_PENDING]
    return P2PView(
        pending=tuple(sorted(pending, key=_op_key)),
        stuck=tuple(stuck_all[:MAX_PENDING]),
        culprits=tuple(culprits),
        kind=kind,
        summary=summary,
        sources=tuple(sorted({o.source for o in ops})),
    )


def p2p_view(index: EvidenceIndex) -> P2PView | None:
    """Return :func:`build_p2p` of ``index``, built once and kept on the index."""
    if "p2p" not in index.derived:
        index.derived["p2p"] = build_p2p(index)
    found = index.derived["p2p"]
    return found if isinstance(found, P2PView) else None
