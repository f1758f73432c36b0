"""The rule that reads point-to-point ops: the last stuck send/recv and whose it is."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from logsleuth.analysis.index import EvidenceIndex
from logsleuth.analysis.p2p import p2p_view
from logsleuth.analysis.rules.base import Rule
from logsleuth.analysis.waitfor import wait_for
from logsleuth.model.diagnosis import Evidence, Finding
from logsleuth.model.p2p import P2PView
from logsleuth.model.ranks import format_ranks

_CONFIDENCE = {
    "collective-mismatch": 0.9,
    "missing-collective": 0.9,
    "collective-timeout": 0.75,
}
_NEXT_STEPS = {
    "collective-mismatch": (
        "Check the peer the culprit passes to send/recv (src/dst, the stage or ring "
        "neighbour it computes) against the peer the other side expects.",
        "In a pipeline schedule, check that each stage's recv_forward/send_backward pairs "
        "with its neighbour's send_forward/recv_backward at the same micro-batch.",
    ),
    "missing-collective": (
        "Look at the culprit's code path around the call its stack shows: a send or recv "
        "left out on one branch (the last micro-batch, a rank-dependent condition).",
        "The ranks that wait in recv/send behind it are victims: their timeouts follow.",
    ),
    "collective-timeout": (
        "Both sides posted the transfer: check the link between the two hosts (NCCL NET "
        "lines, IB counters, ibstat / ethtool) and whether either GPU is hung.",
        "Collect NCCL_DEBUG=INFO with NCCL_DEBUG_SUBSYS=INIT,NET,P2P from both ranks.",
    ),
}


def _hosts_pids(index: EvidenceIndex, ranks: Iterable[int]) -> tuple[list[str], list[int]]:
    hosts: list[str] = []
    pids: list[int] = []
    for rank in ranks:
        proc = index.proc_of_rank(rank)
        if proc is None:
            continue
        if proc.host:
            hosts.append(proc.host)
        if proc.pid is not None:
            pids.append(proc.pid)
    return hosts, pids


def _label(index: EvidenceIndex, rank: int) -> str:
    proc = index.proc_of_rank(rank)
    host = proc.host if proc is not None else None
    return f"rank {rank} ({host})" if host else f"rank {rank}"


def _chain(index: EvidenceIndex, culprits: tuple[int, ...]) -> str:
    """The wait chain from the farthest waiter to the culprit: ``rank 3 -> rank 2 -> rank 1``."""
    analysis = wait_for(index)
    if analysis is None:
        return ""
    graph = analysis.graph
    targets = {f"rank {c}" for c in culprits}
    longest: list[str] = []
    for node in graph.nodes:
        steps = graph.chain(node.id)
        if any(e.source != "p2p" for e in steps):
            continue
        if len(steps) + 1 > len(longest) and steps and steps[-1].waits_for in targets:
            longest = [node.id, *(e.waits_for for e in steps)]
    return " -> ".join(longest) if len(longest) > 2 else ""


class P2PFrontier(Rule):
    """A point-to-point send or receive waits for a peer that will never answer it.

    Symptom:
        Ranks are blocked in ``send``/``recv`` (``isend``/``irecv``, a pipeline schedule's
        P2P step, NCCL's proxy showing a Send or Recv that does not finish). Matching every
        rank's sends with its peers' receives, per peer pair and channel, leaves one op
        unanswered at the frontier: its peer receives from someone else, sends to someone
        else, never posted the op (it is in a barrier or a collective), or both sides posted
        and the transfer itself does not end.

    Likely causes:
        A pipeline stage that computes its previous or next stage wrongly (wrong peer: a
        deadlock of two recvs), a micro-batch loop that drops its last send, a ring step
        that skips a hop, rank-dependent control flow around a send, and for a transfer
        posted on both sides, a degraded or dead link between the two hosts.

    What to check:
        The culprit's call (its stack quotes the line and, with ``py-spy dump --locals``,
        the peer it passed), against what its neighbour expects; for a transfer stuck in
        flight, the network path between the two ranks. Live mode records the peers; for
        other jobs see docs/p2p.md (``NCCL_PROXY_DUMP_SIGNAL``, ``py-spy dump --locals``).
    """

    code = "LS125"
    name = "p2p.frontier"
    kind = "missing-collective"
    # Stacks in collectives only, and a healthy job.

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        view = p2p_view(index)
        if view is None or not view.culprits:
            return
        yield self._finding(index, view)

    def _finding(self, index: EvidenceIndex, view: P2PView) -> Finding:
        who = (
            f"rank {view.culprits[0]}"
            if len(view.culprits) == 1
            else f"ranks {format_ranks(view.culprits)}"
        )
        shown = [s for s in view.stuck if s.waiter in view.culprits or s.peer in view.culprits]
        first = shown[0] if shown else view.stuck[0]
        third = [
            s
            for s in shown
            if s.peer in view.culprits and s.waiter not in view.culprits and s.op.op != first.op.op
        ]
        if view.kind == "collective-mismatch" and third:
            title = (
                f"{who} waits to {first.op.describe()} while rank {third[0].waiter} waits to "
                f"{third[0].op.describe()}: {who} named the wrong peer"
            )
        elif view.kind == "collective-mismatch":
            title = f"{who} wait for each other in point-to-point ops: a deadlock"
        else:
            title = first.summary
        chain = _chain(index, view.culprits)
        detail = view.summary.rstrip(".") + "."
        if chain:
            detail += f" Wait chain: {chain}."
        others = [s.summary for s in view.stuck if s not in shown[:1]][:3]
        if others:
            detail += " Also: " + "; ".join(others) + "."
        if view.kind == "collective-timeout" and len(view.culprits) == 2:
            detail += " The link: " + " <-> ".join(_label(index, r) for r in view.culprits) + "."
        detail += f" Sources: {', '.join(view.sources)}."
        evidence: list[Evidence] = []
        for item in view.stuck:
            for op in (item.op, item.peer_op):
                if op is not None and op.evidence is not None and op.evidence not in evidence:
                    evidence.append(op.evidence)
        hosts, pids = _hosts_pids(index, view.culprits)
        found = self.finding(
            severity="critical",
            title=title,
            detail=detail,
            ranks=view.culprits,
            hosts=hosts,
            pids=pids,
            confidence=_CONFIDENCE.get(view.kind, 0.6),
            evidence=evidence,
            next_steps=_NEXT_STEPS.get(view.kind, ()),
        )
        return replace(found, kind=view.kind)
