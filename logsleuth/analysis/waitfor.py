"""Build the wait-for graph of a job from every source of evidence, and find where it ends.

Nodes are the job's processes: every rank the evidence names, and the ranks known only to
exist (the world size of a communicator or a bundle manifest). An edge A -> B says A waits
for B, drawn from:

* flight-recorder dumps: per process group (name and members), a rank whose last
  collective is at sequence number N waits for the members whose last is below N;
* NCCL COLL lines: the members at a communicator's highest opCount wait for those behind;
* watchdog timeouts: the rank that timed out at SeqNum S waits for ranks of its process
  group whose ``last enqueued`` is below S, and for ranks that left no evidence at all;
* the store-based barrier of init (``num_workers_joined=J`` of ``world_size=W``) and
  ``monitored_barrier`` (the ranks it names);
* lost peers (``Connection closed by peer``): the rank waited for a peer that left;
* stacks: a rank inside a collective waits for the ranks that are not in it.

The culprit is where waiting ends: a sink that is not itself inside communication (stuck
elsewhere, dead, exited early, silent). Ranks that wait for each other form a cycle (a
deadlock or an order mismatch); the cycle is broken by majority: the order in which most
ranks issued their collectives (flight recorder), else the call most ranks wait in.

The graph is walked with plain dictionaries (one node per rank: thousands); networkx is
imported only to order the cycles of a graph that has some, and stays inside this module:
the result is a :class:`~logsleuth.model.waitfor.WaitFor`.
"""

from __future__ import annotations

from collections import Counter, defaultdict, deque
from collections.abc import Iterable
from dataclasses import dataclass

from logsleuth.analysis.index import EvidenceIndex
from logsleuth.analysis.p2p import p2p_view
from logsleuth.analysis.rules.stacks import proc_stacks
from logsleuth.analysis.waitfor_sources import (
    Graph,
    add_nodes,
    barrier_edges,
    drop_answered_stack_edges,
    flight_edges,
    global_rank,
    lost_peer_edges,
    mark_fates,
    mark_stacks,
    nccl_edges,
    p2p_edges,
    rank_id,
    stack_edges,
    store_edges,
    watchdog_edges,
)
from logsleuth.model.flight import FlightRecorderDump
from logsleuth.model.waitfor import WaitFor, WaitNode

__all__ = ["Resolution", "WaitAnalysis", "build_wait_for", "global_rank", "rank_id", "wait_for"]


def _program_order(dumps: Iterable[FlightRecorderDump]) -> dict[int, list[tuple[str, str]]]:
    """Each rank's collectives as (op, call site) in the order it issued them.

    Only dumps whose ring buffer still starts at the first record are used: sequences that
    lost their beginning cannot be aligned with the others'.
    """
    order: dict[int, list[tuple[str, str]]] = {}
    for dump in dumps:
        if dump.rank is None or not dump.entries or dump.entries[0].record_id != 0:
            continue
        calls: list[tuple[str, str]] = []
        for entry in sorted(dump.entries, key=lambda e: e.record_id):
            site = next(
                (f"{n} ({f.rsplit('/', 1)[-1]}:{ln})" for n, f, ln in entry.frames if _user(f)),
                "?",
            )
            calls.append((entry.op, site))
        order[dump.rank] = calls
    return order


def _user(file: str) -> bool:
    return "/torch/" not in file and "site-packages" not in file


@dataclass(frozen=True, slots=True)
class Resolution:
    """Who broke the cycle and how that was decided."""

    odd: tuple[str, ...]
    reference: tuple[str, ...]
    odd_call: str
    reference_call: str
    how: str
    tie: bool
    reference_next: str = ""
    """What the majority issued right after ``reference_call``, when known: equal to
    ``odd_call`` when the odd ranks skipped ``reference_call`` and went on."""


def _resolve_cycle(
    graph: Graph, cycle: set[str], order: dict[int, list[tuple[str, str]]]
) -> Resolution | None:
    """Break a cycle by majority: program order (flight recorder), else the stacks' calls."""
    ranks = {graph.nodes[i].rank for i in cycle}
    if order and ranks <= set(order):
        length = max(len(v) for v in order.values())
        for position in range(length):
            calls: dict[tuple[str, str], list[int]] = defaultdict(list)
            for rank, seq in order.items():
                calls[seq[position] if position < len(seq) else ("(nothing)", "")].append(rank)
            if len(calls) < 2:
                continue
            ranked = sorted(calls.items(), key=lambda kv: (-len(kv[1]), min(kv[1])))
            reference = ranked[0][1]
            odd = [r for _, rs in ranked[1:] for r in rs]
            tie = len(ranked[1][1]) == len(reference)
            bad, good = ranked[1][0], ranked[0][0]
            following = Counter(
                order[r][position + 1] for r in reference if position + 1 < len(order[r])
            )
            after = following.most_common(1)[0][0] if following else None
            return Resolution(
                reference_next=f"{after[0]} at {after[1]}" if after else "",
                odd=tuple(rank_id(r) for r in sorted(odd)),
                reference=tuple(rank_id(r) for r in sorted(reference)),
                odd_call=f"{bad[0]} at {bad[1]}" if bad[1] else bad[0],
                reference_call=f"{good[0]} at {good[1]}",
                how=f"flight-recorder order: collective {position + 1} of each rank",
                tie=tie,
            )
    counts: Counter[tuple[str, str]] = Counter()
    members: dict[tuple[str, str], list[str]] = defaultdict(list)
    for node_id, node in graph.nodes.items():
        if node.site is not None:
            counts[node.site] += 1
            members[node.site].append(node_id)
    if len(counts) < 2:
        return None
    ranked_sites = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    top, top_count = ranked_sites[0]
    odd_ids = sorted(i for i in cycle if graph.nodes[i].site not in (None, top))
    if not odd_ids:
        return None
    second = graph.nodes[odd_ids[0]].site or ("?", "?")
    return Resolution(
        odd=tuple(odd_ids),
        reference=tuple(sorted(members[top])),
        odd_call=f"{second[0]} at {second[1]}",
        reference_call=f"{top[0]} at {top[1]}",
        how="stacks: the call most ranks wait in",
        tie=counts[second] == top_count,
    )


@dataclass(frozen=True, slots=True)
class WaitAnalysis:
    """The graph as a model value, and what decided its culprits."""

    graph: WaitFor
    resolution: Resolution | None = None


_CULPRIT_STATES = ("elsewhere", "init", "dead", "exited", "silent", "unknown", "progressing")


def build_wait_for(index: EvidenceIndex) -> WaitAnalysis | None:
    """Return the wait-for graph of the job, or None when no process waits for another."""
    graph = Graph()
    add_nodes(index, graph)
    stacks = mark_stacks(proc_stacks(index), graph)
    _, lost = mark_fates(index, graph)
    explained = flight_edges(index, graph)
    nccl_edges(index, graph)
    watchdog_edges(index, graph)
    store_edges(index, graph)
    barrier_edges(index, graph)
    lost_peer_edges(graph, lost)
    view = p2p_view(index)
    if view is not None:
        explained |= p2p_edges(view, graph)
    stack_edges(graph, stacks, explained)
    drop_answered_stack_edges(graph)
    if not graph.edges:
        return None
    successors: dict[str, list[str]] = {n: [] for n in graph.nodes}
    predecessors: dict[str, list[str]] = {n: [] for n in graph.nodes}
    for waiter, waits_for in graph.edges:
        successors[waiter].append(waits_for)
        predecessors[waits_for].append(waiter)
    sinks = [
        n
        for n in graph.nodes
        if predecessors[n] and not successors[n] and graph.nodes[n].state in _CULPRIT_STATES
    ]
    culprits: list[str] = []
    resolution: Resolution | None = None
    how = ""
    if sinks:
        reach = {n: _ancestors(predecessors, n) for n in sinks}
        best = max(reach.values())
        culprits = sorted((n for n in sinks if reach[n] == best), key=_node_order)
        how = "sink: where waiting ends"
    cycles = _cycles(graph) if _has_cycle(successors, predecessors) else []
    frontier = [rank_id(r) for r in (view.culprits if view is not None else ())]
    if frontier and all(n in graph.nodes for n in frontier):
        # The point-to-point frontier names the rank that posted the wrong op or none at
        # all; a sink or a cycle of the coarser sources says less about the same stall.
        culprits = sorted(frontier, key=_node_order)
        how = f"point-to-point frontier: {view.kind if view is not None else ''}"
    if not culprits and cycles:
        order = _program_order(index.all_of(FlightRecorderDump))
        biggest = max(cycles, key=lambda c: (len(c), sorted(c)))
        resolution = _resolve_cycle(graph, set(biggest), order)
        if resolution is not None:
            culprits = list(resolution.odd)
            how = resolution.how
    victims: list[tuple[str, str]] = []
    for node_id in sorted(graph.nodes, key=_node_order):
        if node_id in culprits or not successors[node_id]:
            continue
        out = [graph.edges[(node_id, t)] for t in successors[node_id]]
        step = next((e for e in out if e.waits_for in culprits), out[0])
        victims.append((node_id, step.reason))
    nodes = tuple(
        WaitNode(
            id=node_id,
            rank=node.rank,
            host=node.host,
            pid=node.pid,
            state=node.state,
            where=node.where,
            category=node.category,
        )
        for node_id, node in sorted(graph.nodes.items(), key=lambda kv: _node_order(kv[0]))
    )
    edges = tuple(
        graph.edges[key]
        for key in sorted(graph.edges, key=lambda k: (_node_order(k[0]), _node_order(k[1])))
    )
    return WaitAnalysis(
        graph=WaitFor(
            nodes=nodes,
            edges=edges,
            culprits=tuple(culprits),
            victims=tuple(victims),
            cycles=tuple(tuple(sorted(c, key=_node_order)) for c in cycles),
            resolution=how,
        ),
        resolution=resolution,
    )


def _ancestors(predecessors: dict[str, list[str]], node: str) -> int:
    """Count the nodes that wait for ``node``, directly or through others."""
    seen = {node}
    queue = deque([node])
    while queue:
        for waiter in predecessors[queue.popleft()]:
            if waiter not in seen:
                seen.add(waiter)
                queue.append(waiter)
    return len(seen) - 1


def _has_cycle(successors: dict[str, list[str]], predecessors: dict[str, list[str]]) -> bool:
    """Say whether some nodes wait for each other (Kahn: not every node can be peeled off)."""
    waiting = {n: len(ws) for n, ws in successors.items()}
    free = [n for n, count in waiting.items() if not count]
    peeled = 0
    while free:
        node = free.pop()
        peeled += 1
        for waiter in predecessors[node]:
            waiting[waiter] -= 1
            if not waiting[waiter]:
                free.append(waiter)
    return peeled < len(waiting)


def _cycles(graph: Graph) -> list[set[str]]:
    """Return the groups of nodes that wait for each other, in networkx's order."""
    import networkx as nx

    g = nx.DiGraph()
    g.add_nodes_from(graph.nodes)
    g.add_edges_from(graph.edges)
    return [c for c in nx.strongly_connected_components(g) if len(c) > 1]


def wait_for(index: EvidenceIndex) -> WaitAnalysis | None:
    """Return :func:`build_wait_for` of ``index``, built once and kept on the index."""
    if "waitfor" not in index.derived:
        index.derived["waitfor"] = build_wait_for(index)
    found = index.derived["waitfor"]
    return found if isinstance(found, WaitAnalysis) else None


def _node_order(node_id: str) -> tuple[int, int, str]:
    if node_id.startswith("rank ") and node_id[5:].isdigit():
        return (0, int(node_id[5:]), "")
    return (1, 0, node_id)
