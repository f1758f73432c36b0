"""The rule that reads the wait-for graph: the culprit is where the waiting ends."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from logsleuth.analysis.index import EvidenceIndex
from logsleuth.analysis.rules.base import Rule, evidence_of
from logsleuth.analysis.waitfor import Resolution, WaitAnalysis, wait_for
from logsleuth.analysis.waitfor_sources import exit_lines
from logsleuth.model.diagnosis import Evidence, Finding
from logsleuth.model.ranks import name_ranks
from logsleuth.model.waitfor import WaitFor, WaitNode

_KIND_OF_STATE = {
    "elsewhere": "non-collective-stall",
    "progressing": "non-collective-stall",
    "init": "init-stall",
    "dead": "process-died",
    # CONTRACT: "some ranks never entered a collective ... (a rank that exited early)".
    "exited": "missing-collective",
    "silent": "missing-collective",
    "unknown": "missing-collective",
}
_CONFIDENCE = {
    "elsewhere": 0.85,
    "init": 0.8,
    # Below the rules that read the death itself (a traceback, torchrun's summary): when
    # they agree, theirs is the better account and this one corroborates it.
    "dead": 0.65,
    "exited": 0.65,
    "progressing": 0.55,
    "unknown": 0.6,
    "silent": 0.55,
}
_STACK_RULE_CATEGORIES = frozenset({"data-loading", "lock", "io", "sleep", "compute", "init"})
"""Stack categories that LS104 (stacks.non_collective) and LS105 (init.stall) report."""
_STACK_STATES = frozenset({"elsewhere", "init", "progressing"})
_NO_DATA = frozenset({"barrier", "monitored_barrier", "(nothing)"})
"""Calls that carry no data: a rank waiting in one (or issuing nothing) skipped ahead."""


def _names(nodes: Iterable[WaitNode]) -> str:
    nodes = list(nodes)
    ranks = [n.rank for n in nodes if n.rank is not None]
    if len(ranks) == len(nodes) and ranks:
        return name_ranks(ranks)
    return ", ".join(n.id for n in nodes)


def _where(node: WaitNode) -> str:
    host = " ".join(x for x in (node.host, f"pid {node.pid}" if node.pid is not None else "") if x)
    return f"{node.id} ({host})" if host and node.rank is not None else node.id


def _chain_text(graph: WaitFor, victim: str) -> str:
    steps = graph.chain(victim)
    if not steps:
        return ""
    return " -> ".join([victim, *(f"{e.waits_for} [{e.reason}]" for e in steps)])


class WaitForSink(Rule):
    """The wait-for graph ends at a process that is not waiting in communication.

    Symptom:
        Ranks wait for each other (in a collective, a barrier, the store at init), and
        following who waits for whom ends at a process that is somewhere else: stuck
        outside communication, dead, gone with exit code 0, or silent (known to exist but
        without a line of evidence). Ranks that wait for each other in a cycle issued their
        collectives in different orders: the rank whose order differs from the majority's
        broke it.

    Likely causes:
        A rank busy or stuck outside communication (evaluation, checkpointing, data
        loading on one rank), a rank that returned or exited early, a rank that skipped a
        collective or a barrier of its process group, collectives issued in another order,
        a rank whose set-up outlasted the process-group timeout.

    What to check:
        The culprit's own log and stack (``py-spy dump --pid PID``); the code around the
        call quoted for it; for a silent rank, collect its logs: it is the prime suspect
        only because it said nothing while the others waited for it.
    """

    code = "LS120"
    name = "waitfor.sink"
    kind = "missing-collective"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        analysis = wait_for(index)
        if analysis is None:
            return
        graph = analysis.graph
        if not graph.culprits:
            if graph.cycles:
                yield self._deadlock(graph)
            return
        if graph.resolution.startswith("point-to-point"):
            return  # LS125 (p2p.frontier) names the op, the peer and the channel
        culprits = [n for c in graph.culprits if (n := graph.node(c)) is not None]
        if not culprits:
            return
        if analysis.resolution is not None:
            if "flight" in analysis.resolution.how:
                yield self._cycle(analysis, culprits, analysis.resolution)
            # A cycle seen in stacks alone is LS107's (stacks.divergent_collective) to name.
            return
        ids = {n.id for n in culprits}
        sources = {e.source for e in analysis.graph.edges if e.waits_for in ids}
        told = {n.category for n in culprits} <= _STACK_RULE_CATEGORIES
        if sources == {"stacks"} and told and {n.state for n in culprits} <= _STACK_STATES:
            return  # LS104 / LS105 read the same stacks and say more about them
        yield self._sink(analysis, culprits, index)

    def _sink(
        self, analysis: WaitAnalysis, culprits: list[WaitNode], index: EvidenceIndex
    ) -> Finding:
        graph = analysis.graph
        ids = {n.id for n in culprits}
        into = [e for e in graph.edges if e.waits_for in ids]
        waiters = sorted({e.waiter for e in into}, key=_rank_order)
        waiter_nodes = [n for w in waiters if (n := graph.node(w)) is not None]
        state = culprits[0].state
        kind = _KIND_OF_STATE.get(state, "missing-collective")
        at_init = all(e.source == "store" for e in into) or all(
            n.state == "init" for n in waiter_nodes
        )
        if at_init and state in ("elsewhere", "silent", "unknown", "progressing"):
            kind = "init-stall"
        confidence = _CONFIDENCE.get(state, 0.6)
        if len(waiters) < 2:
            confidence *= 0.7  # one waiter against one culprit: either may have diverged
        how = culprits[0].where or state
        who = _names(culprits)
        it = "it" if len(culprits) == 1 else "them"
        arrived = "which never arrived" if len(culprits) == 1 else "not all of whom arrived"
        if state == "silent":
            title = f"{who} left no evidence while {_names(waiter_nodes)} waited for {it}"
            lead = (
                f"{who} said nothing: no log line, stack or dump. The ranks that spoke wait for "
                "it, so it is the prime suspect, on the strength of its silence alone."
            )
        elif state == "unknown":
            title = f"{_names(waiter_nodes)} waited for {who}, {arrived} ({how})"
            lead = (
                f"{who} left evidence, but none that it reached the point the others wait at "
                f"({how})."
            )
        elif state == "exited":
            # torchrun's summary shows the status; PyTorch's destructor warning only the exit.
            status = " with status 0" if how.startswith("exit code 0") else ""
            title = f"{who} exited{status} while {_names(waiter_nodes)} still waited for {it}"
            lead = (
                f"{who} ended cleanly ({how}) before the collective the others were in."
                if status
                else f"{who} {how}, before the collective the others were in."
            )
        elif state == "dead":
            title = f"{who} died ({how}); {_names(waiter_nodes)} waited for {it}"
            lead = f"{who} ended on its own account ({how})."
        else:
            title = f"{who} is in {how} while {_names(waiter_nodes)} wait for {it}"
            lead = f"{who} is not inside communication: its main thread is in {how}."
        chain = _chain_text(graph, waiters[0]) if waiters else ""
        detail = (
            f"{lead} Following who waits for whom ends at {who}: "
            f"{len(waiters)} process(es) wait for {it}"
            + (f" (wait chain: {chain})" if chain else "")
            + ". "
            + _victims_text(graph)
        )
        evidence = [e.evidence for e in into if e.evidence is not None]
        if state == "exited":
            # The culprit's own line that it left, after the waiters' lines.
            left = exit_lines(index)
            evidence += evidence_of([left[n.rank] for n in culprits if n.rank in left])[0]
        return self._finding(kind, title, detail, culprits, confidence, evidence, graph)

    def _cycle(
        self, analysis: WaitAnalysis, culprits: list[WaitNode], resolution: Resolution
    ) -> Finding:
        graph = analysis.graph
        odd_op = resolution.odd_call.split(" at ", 1)[0]
        ref_op = resolution.reference_call.split(" at ", 1)[0]
        skipped = (
            odd_op in _NO_DATA
            or odd_op == ref_op
            or resolution.odd_call == resolution.reference_next
        )
        kind = "missing-collective" if skipped else "collective-mismatch"
        refs = [n for r in resolution.reference if (n := graph.node(r)) is not None]
        who = _names(culprits)
        if skipped and odd_op != ref_op:
            title = (
                f"{who} skipped {resolution.reference_call} that {_names(refs)} issued; "
                f"it went on to {resolution.odd_call}"
            )
        elif skipped:
            title = f"{who} issued {resolution.odd_call} where {_names(refs)} issued {resolution.reference_call}"
        else:
            title = (
                f"{who} issued {resolution.odd_call} where {_names(refs)} issued "
                f"{resolution.reference_call} at the same position (order mismatch)"
            )
        cycle = next((c for c in graph.cycles if set(c) & {n.id for n in culprits}), ())
        detail = (
            f"The ranks wait for each other in a cycle ({', '.join(cycle)}): no rank is stuck "
            f"elsewhere, so the calls disagree. Decided by majority ({resolution.how}): "
            f"{_names(refs)} issued {resolution.reference_call}, {who} issued "
            f"{resolution.odd_call}. "
            + (
                "The sides are equally large, so which one diverged is uncertain. "
                if resolution.tie
                else ""
            )
            + _victims_text(graph)
        )
        confidence = 0.45 if resolution.tie else (0.85 if "flight" in resolution.how else 0.8)
        ids = {n.id for n in culprits}
        evidence = [e.evidence for e in graph.edges if e.waiter in ids and e.evidence is not None]
        evidence += [
            e.evidence for e in graph.edges if e.waits_for in ids and e.evidence is not None
        ]
        return self._finding(kind, title, detail, culprits, confidence, evidence, graph)

    def _deadlock(self, graph: WaitFor) -> Finding:
        """Ranks wait for each other and nothing tells which order is the wrong one."""
        cycle = max(graph.cycles, key=len)
        nodes = [n for i in cycle if (n := graph.node(i)) is not None]
        edges = [e for e in graph.edges if e.waiter in cycle and e.waits_for in cycle]
        found = self.finding(
            severity="critical",
            title=f"{_names(nodes)} wait for each other: a deadlock of collectives issued in "
            "different orders",
            detail=(
                "Each of them waits for another of them: "
                + "; ".join(f"{e.waiter} waits for {e.waits_for} ({e.reason})" for e in edges[:6])
                + ". No rank is stuck elsewhere and no majority tells which order is the "
                "intended one, so the culprit cannot be named."
            ),
            confidence=0.4,
            evidence=_unique([e.evidence for e in edges if e.evidence is not None]),
            next_steps=(
                "Make every rank issue its collectives on these communicators in the same order "
                "(one stream or an explicit order; no collectives from several threads).",
                "Dump the stacks of these ranks (py-spy dump --pid PID) to see both call sites.",
            ),
        )
        return replace(found, kind="collective-mismatch")

    def _finding(
        self,
        kind: str,
        title: str,
        detail: str,
        culprits: list[WaitNode],
        confidence: float,
        evidence: list[Evidence],
        graph: WaitFor,
    ) -> Finding:
        pids = [n.pid for n in culprits if n.pid is not None]
        where = ", ".join(_where(n) for n in culprits[:4])
        found = self.finding(
            severity="critical",
            title=title,
            detail=detail,
            ranks=[n.rank for n in culprits if n.rank is not None],
            hosts=[n.host for n in culprits if n.host],
            pids=pids,
            confidence=confidence,
            evidence=_unique(evidence),
            next_steps=(
                f"Look at {where}: its own log and stack "
                f"(py-spy dump --pid {pids[0] if pids else 'PID'} on its host).",
                "The others are victims: their timeouts and lost connections follow from it.",
            ),
        )
        return replace(found, kind=kind)


def _victims_text(graph: WaitFor) -> str:
    if not graph.victims:
        return ""
    nodes = [n for v, _ in graph.victims if (n := graph.node(v)) is not None]
    return (
        f"{_names(nodes)} are victims: each waits for another process "
        f"(for instance: {graph.victims[0][0]}, {graph.victims[0][1]})."
    )


def _unique(items: list[Evidence]) -> list[Evidence]:
    seen: set[tuple[str, int]] = set()
    out: list[Evidence] = []
    for item in items:
        if (item.source, item.line) not in seen:
            seen.add((item.source, item.line))
            out.append(item)
    return out


def _rank_order(node_id: str) -> tuple[int, int, str]:
    if node_id.startswith("rank ") and node_id[5:].isdigit():
        return (0, int(node_id[5:]), "")
    return (1, 0, node_id)
