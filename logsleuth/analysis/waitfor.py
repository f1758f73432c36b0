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

networkx stays inside this module: the result is a :class:`~logsleuth.model.waitfor.WaitFor`.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

import networkx as nx

from logsleuth.analysis.correlate import own_deaths
from logsleuth.analysis.flight import entries_by_group
from logsleuth.analysis.index import EvidenceIndex
from logsleuth.analysis.rules.base import message_text
from logsleuth.analysis.rules.stacks import STALLED, proc_stacks
from logsleuth.analysis.stack_classify import classify_dump
from logsleuth.analysis.stacks import ProcStack
from logsleuth.model.base import Event
from logsleuth.model.diagnosis import Evidence
from logsleuth.model.flight import FlightRecorderDump, FrEntry
from logsleuth.model.torch import (
    GlooError,
    MonitoredBarrierError,
    PythonTraceback,
    WatchdogError,
    WatchdogProgress,
    WatchdogTimeout,
)
from logsleuth.model.waitfor import WaitEdge, WaitFor, WaitNode

MAX_WORLD = 65536
"""Ranks known only from a world size are added as nodes up to this size."""
MAX_FANOUT = 64
MAX_EDGES = 8192
"""A waiting group whose edges to the absent would pass this many gets none from stacks."""
"""A waiting group gets an edge to each absent rank only when there are at most this many."""

PEER_GONE = re.compile(
    r"Connection closed by peer|Connection reset by peer|Broken pipe|remote process exited"
    r"|Socket closed|peer closed|Failed to recv, got 0 bytes",
    re.IGNORECASE,
)
"""A rank that says this lost a peer: it was waiting for it, not the cause."""
_WAITED = re.compile(
    r"Timed out waiting|timed out|Watchdog caught|wait timeout|Is there a distributed collective"
    r"|Received data size|op\.preamble\.length|Detected mismatch between collectives",
    re.IGNORECASE,
)
"""A rank that says this waited (and gave up) or detected a mismatch."""
_DETECTED = re.compile(
    r"Is there a distributed collective mismatch|Received data size doesn't match"
    r"|op\.preamble\.length|message truncated : receiving",
    re.IGNORECASE,
)
"""A transport's size check: the rank that printed it detected the mismatch and aborted."""
_STORE_BARRIER = re.compile(
    r"store based barrier on rank (\d+).*?world_size=(\d+), num_workers_joined=(\d+)",
    re.IGNORECASE | re.DOTALL,
)
_CATEGORY_WORDS = {
    "unknown": "its own code",
    "compute": "compute",
    "data-loading": "data loading",
    "io": "file or network I/O",
    "lock": "a lock",
    "sleep": "a sleep",
    "init": "process-group set-up",
}
_QUIET = ("unknown", "silent")
_TIMED_OUT = "its wait timed out or failed a check"
"""States that say nothing about where a process is."""
_BARRIER_OPS = frozenset({"barrier", "monitored_barrier"})
"""Collectives that carry no data: a rank waiting in one issued nothing in conflict."""


@dataclass(slots=True)
class _Node:
    rank: int | None
    host: str | None = None
    pid: int | None = None
    state: str = "unknown"
    where: str = ""
    evidence: bool = False
    site: tuple[str, str] | None = None
    """(collective, call site) of a rank waiting inside a collective, from its stack."""
    category: str = ""


@dataclass(slots=True)
class _Graph:
    nodes: dict[str, _Node] = field(default_factory=dict)
    edges: dict[tuple[str, str], WaitEdge] = field(default_factory=dict)

    def add_edge(
        self, waiter: str, waits_for: str, reason: str, source: str, event: Event | None
    ) -> None:
        if waiter == waits_for or waiter not in self.nodes or waits_for not in self.nodes:
            return
        if (waiter, waits_for) in self.edges:
            return
        quote = Evidence(event.ref.source, event.ref.line, event.text) if event else None
        self.edges[(waiter, waits_for)] = WaitEdge(
            waiter=waiter, waits_for=waits_for, reason=reason, source=source, evidence=quote
        )


def rank_id(rank: int) -> str:
    """Return the node id of global ``rank``."""
    return f"rank {rank}"


def _proc_id(host: str | None, pid: int | None) -> str:
    return " ".join(x for x in (host, f"pid {pid}" if pid is not None else None) if x)


def global_rank(event: Event, local: int | None, pg: str | None) -> int | None:
    """Return the global rank of a torch line, never a process-group-local one.

    ``[rank13]:`` (the launcher / c10 prefix) is global; ``[PG ID 11 PG GUID 119 Rank 1]``
    is the rank inside process group 119, which is global only for the default group.
    """
    if event.origin.rank is not None:
        return event.origin.rank
    if local is not None and (pg is None or pg in ("0", "default_pg") or pg.startswith("0(")):
        return local
    return None


def _spoke(index: EvidenceIndex) -> set[int]:
    """Global ranks that left any evidence of their own."""
    ranks = {p.rank for p in index.procs.values() if p.rank is not None and p.sources}
    for events in index.by_type.values():
        for event in events:
            if event.origin.rank is not None:
                ranks.add(event.origin.rank)
    ranks |= {d.rank for d in index.all_of(FlightRecorderDump) if d.rank is not None}
    return ranks


def _nodes(index: EvidenceIndex, graph: _Graph) -> None:
    for proc in index.procs.values():
        if proc.rank is None:
            if proc.families <= {"torch"}:
                continue  # the launcher agent's own lines: not a rank process
            node_id = _proc_id(proc.host, proc.pid)
            if node_id:
                graph.nodes.setdefault(node_id, _Node(None, proc.host, proc.pid, evidence=True))
            continue
        node = graph.nodes.setdefault(rank_id(proc.rank), _Node(proc.rank))
        node.host = node.host or proc.host
        node.pid = node.pid if node.pid is not None else proc.pid
    world = index.world_size
    if world and world <= MAX_WORLD:
        for rank in range(world):
            graph.nodes.setdefault(rank_id(rank), _Node(rank))
    spoke = _spoke(index)
    for rank in spoke:
        graph.nodes.setdefault(rank_id(rank), _Node(rank))
    for node in graph.nodes.values():
        if node.rank is not None:
            node.evidence = node.rank in spoke
            if not node.evidence:
                node.state, node.where = "silent", "left no evidence"


def _stack_states(procs: list[ProcStack], graph: _Graph) -> dict[str, ProcStack]:
    by_node: dict[str, ProcStack] = {}
    for ps in procs:
        node_id = rank_id(ps.rank) if ps.rank is not None else _proc_id(ps.host, ps.pid)
        if not node_id:
            continue  # a dump that names neither rank nor pid cannot be placed
        node = graph.nodes.get(node_id)
        if node is None:
            node = graph.nodes[node_id] = _Node(ps.rank, ps.host, ps.pid)
        node.evidence = True
        by_node[node_id] = ps
        if ps.dump.main_thread() is None:
            continue
        category, collective, site = classify_dump(ps.dump)
        node.category = category
        words = _CATEGORY_WORDS.get(category, category)
        label = (collective or words) + (f" at {site}" if site else "")
        if ps.moved:
            node.state, node.where = "progressing", label
        elif category == "collective":
            node.state, node.where = "waiting", label
            node.site = (collective or "?", site or "?")
        elif category == "init":
            node.state, node.where = "init", label
        elif category in STALLED or (category == "unknown" and site):
            node.state, node.where = "elsewhere", label
    return by_node


def _traceback_text(event: PythonTraceback) -> str:
    parts = [event.exc_type or "", event.exc_message or "", event.detail or "", *event.notes]
    parts += [f"{t or ''} {m or ''}" for t, m in event.causes]
    return " ".join(parts)


def _fates(index: EvidenceIndex, graph: _Graph) -> tuple[set[str], dict[str, Event]]:
    """Mark dead, exited and waiting-for-a-lost-peer ranks; return the latter and why."""
    lost: dict[str, Event] = {}
    waited: set[str] = set()
    timed_out: dict[str, Event] = {}
    for event in index.torch:
        text = ""
        rank = event.origin.rank
        if isinstance(event, PythonTraceback):
            text = _traceback_text(event)
        elif isinstance(event, GlooError | WatchdogError):
            text = event.message if isinstance(event, GlooError) else event.reason
        elif isinstance(event, WatchdogTimeout):
            text = "Watchdog caught"
            rank = global_rank(event, event.rank, event.pg)
        if rank is None or rank_id(rank) not in graph.nodes:
            continue
        node = graph.nodes[rank_id(rank)]
        if PEER_GONE.search(text):
            lost.setdefault(rank_id(rank), event)
            node.state, node.where = "waiting", "lost its connection to a peer"
        elif _WAITED.search(text):
            # Its own wait timed out, or it detected the others' mismatch: it ended because
            # it waited, which makes it a witness, not a culprit.
            waited.add(rank_id(rank))
            timed_out.setdefault(rank_id(rank), event)
            if node.state in _QUIET:
                node.state, node.where = "waiting", _TIMED_OUT
    # An abort whose message names no rank (``terminate called ... what(): [enforce fail]
    # ... Is there a distributed collective mismatch``) came from the rank that aborted.
    checked = any(
        event.origin.rank is None and _DETECTED.search(message_text(event))
        for event in (*index.torch, *index.warns)
    )
    for death in own_deaths(index):
        if death.rank is None:
            continue
        node_id = rank_id(death.rank)
        if checked and death.event.signal == "SIGABRT" and node_id in graph.nodes:
            waited.add(node_id)
            graph.nodes[node_id].where = "aborted when its size check failed"
            graph.nodes[node_id].state = "waiting"
            continue
        if node_id in graph.nodes and node_id not in lost and node_id not in waited:
            node = graph.nodes[node_id]
            # A stack that shows it alive and stuck says more than how it was ended later.
            if node.state in _QUIET:
                node.state, node.where = "dead", death.how
    failed = {f.rank for f in index.failures if f.rank is not None}
    for failure in index.failures:
        ended = graph.nodes.get(rank_id(failure.rank)) if failure.rank is not None else None
        if ended is not None and ended.state == "silent" and failure.signal == "SIGTERM":
            # Alive until torchrun ended the job: not silent, only unobserved.
            ended.state, ended.where = "unknown", "ended by torchrun (SIGTERM)"
    waiting_failed = {r for r in failed if rank_id(r) in lost or rank_id(r) in waited}
    if failed and waiting_failed:
        # torchrun lists only the workers that failed, and its global ranks are dense
        # (0..N-1): a rank it does not list ended with status 0 while ranks it lists were
        # still waiting (lost peers, timeouts).
        for rank in range(min(max(failed), MAX_WORLD)):
            graph.nodes.setdefault(
                rank_id(rank), _Node(rank, state="silent", where="left no evidence")
            )
        for node in graph.nodes.values():
            if node.rank is not None and node.rank not in failed and node.state in _QUIET:
                node.state, node.where = "exited", "exit code 0 (not in torchrun's failures)"
    return set(lost), {**timed_out, **lost}


def _flight_edges(index: EvidenceIndex, graph: _Graph) -> set[str]:
    """Edges from flight-recorder positions; return the nodes whose wait they explain."""
    dumps = index.all_of(FlightRecorderDump)
    dumped = {d.rank for d in dumps if d.rank is not None}
    explained: set[str] = set()
    if not dumps:
        return explained
    source_of = {d.rank: d.ref.source for d in dumps if d.rank is not None}
    for (pg, members), per_rank in entries_by_group(dumps).items():
        last = {r: max(seqs) for r, seqs in per_rank.items() if seqs}
        expected = set(members) or set(last)
        for rank, top in last.items():
            entry = per_rank[rank][top]
            if entry.state == "completed":
                continue
            behind = sorted(m for m in expected if m in dumped and last.get(m, 0) < top)
            absent = sorted(m for m in expected if m not in dumped)
            if not behind and not absent:
                continue
            quote = Evidence(source_of[rank], entry.index, f"rank {rank}: {entry.describe()}")
            for other in behind:
                _add_fr(graph, rank, other, entry, pg, quote, f"is at #{last.get(other, 0)}")
            if behind:
                explained.add(rank_id(rank))
            waiter = graph.nodes.get(rank_id(rank))
            for other in absent:
                node = graph.nodes.get(rank_id(other))
                if node is not None and node.state in ("silent", "exited", "dead", "unknown"):
                    _add_fr(graph, rank, other, entry, pg, quote, "left no flight record")
            if waiter is not None and (waiter.state == "unknown" or waiter.where == _TIMED_OUT):
                waiter.state, waiter.where = "waiting", f"{entry.op} #{top} of pg {pg or '0'}"
    return explained


def _add_fr(
    graph: _Graph, rank: int, other: int, entry: FrEntry, pg: str, quote: Evidence, why: str
) -> None:
    waiter, target = rank_id(rank), rank_id(other)
    if waiter not in graph.nodes or target not in graph.nodes or (waiter, target) in graph.edges:
        return
    graph.edges[(waiter, target)] = WaitEdge(
        waiter=waiter,
        waits_for=target,
        reason=(
            f"{entry.op} #{entry.collective_seq_id} of process group {pg or '0'}: "
            f"rank {other} {why}"
        ),
        source="flight-recorder",
        evidence=quote,
    )


def _nccl_edges(index: EvidenceIndex, graph: _Graph) -> None:
    for key in sorted(index.comms):
        state = index.comms[key]
        if state.static_op_count():
            continue
        last = {s: max(r.op_count for r in ops) for s, ops in state.ops.items() if ops}
        if len(last) < 2:
            continue
        top = max(last.values())
        ahead = [s for s, n in last.items() if n == top]
        behind = [s for s, n in last.items() if n < top]
        if not behind or len(behind) > len(ahead):
            continue
        for stream in ahead:
            waiter = index.rank_of(*stream)
            record = next(r for r in reversed(state.ops[stream]) if r.op_count == top)
            for other in behind:
                target = index.rank_of(*other)
                if waiter is None or target is None:
                    continue
                graph.add_edge(
                    rank_id(waiter),
                    rank_id(target),
                    f"{record.op} opCount {top:#x} on comm {key}: rank {target} stopped at "
                    f"{last[other]:#x}",
                    "nccl",
                    record.event,
                )


def _watchdog_edges(index: EvidenceIndex, graph: _Graph) -> None:
    timeouts = [e for e in index.torch if isinstance(e, WatchdogTimeout)]
    if not timeouts:
        return
    progress = [e for e in index.torch if isinstance(e, WatchdogProgress)]
    enqueued: dict[tuple[str | None, int], int] = {}
    for p in progress:
        rank = global_rank(p, p.rank, p.pg)
        if rank is not None and p.last_enqueued is not None:
            enqueued[(p.pg, rank)] = p.last_enqueued
    for event in timeouts:
        waiter = global_rank(event, event.rank, event.pg)
        if waiter is None or rank_id(waiter) not in graph.nodes:
            continue
        node = graph.nodes[rank_id(waiter)]
        if node.state in ("unknown", "silent"):
            node.state = "waiting"
            node.where = f"{event.op_type} SeqNum {event.seq} (watchdog timeout)"
        for (pg, rank), last in sorted(enqueued.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
            if pg == event.pg and last < event.seq:
                graph.add_edge(
                    rank_id(waiter),
                    rank_id(rank),
                    f"{event.op_type} SeqNum {event.seq}: rank {rank} last enqueued {last}",
                    "watchdog",
                    event,
                )
        silent = [n for n in graph.nodes.values() if n.state == "silent" and n.rank is not None]
        if len(silent) <= MAX_FANOUT:
            for other in silent:
                graph.add_edge(
                    rank_id(waiter),
                    rank_id(other.rank or 0),
                    f"{event.op_type} SeqNum {event.seq} timed out; rank {other.rank} left no "
                    "evidence",
                    "watchdog",
                    event,
                )


def _store_edges(index: EvidenceIndex, graph: _Graph) -> None:
    reports: list[tuple[int, int, int, Event]] = []
    for event in index.torch:
        if not isinstance(event, PythonTraceback):
            continue
        match = _STORE_BARRIER.search(_traceback_text(event))
        if match is None:
            continue
        rank = event.origin.rank if event.origin.rank is not None else int(match.group(1))
        reports.append((rank, int(match.group(2)), int(match.group(3)), event))
    if not reports:
        return
    reporters = {r for r, _, _, _ in reports}
    for rank, world, joined, event in reports:
        node = graph.nodes.get(rank_id(rank))
        if node is None:
            continue
        node.state, node.where = "waiting", "store-based barrier of init_process_group"
        missing = [r for r in range(min(world, MAX_WORLD)) if r not in reporters]
        if len(missing) > MAX_FANOUT:
            continue
        exact = len(missing) == world - joined
        for other in missing:
            graph.nodes.setdefault(rank_id(other), _Node(other, state="silent"))
            graph.add_edge(
                rank_id(rank),
                rank_id(other),
                f"store-based barrier at init: {joined} of {world} ranks joined; rank {other} "
                + ("is the one missing" if exact else "did not report the timeout"),
                "store",
                event,
            )


def _barrier_edges(index: EvidenceIndex, graph: _Graph) -> None:
    for event in index.all_of(MonitoredBarrierError):
        waiter = event.origin.rank if event.origin.rank is not None else event.rank
        if waiter is None:
            waiter = 0
        for other in event.missing_ranks:
            graph.nodes.setdefault(rank_id(other), _Node(other, state="silent"))
            graph.add_edge(
                rank_id(waiter),
                rank_id(other),
                f"monitored_barrier: rank {other} failed to pass it",
                "watchdog",
                event,
            )


def _lost_peer_edges(graph: _Graph, lost: dict[str, Event]) -> None:
    """A rank that lost a peer or timed out waited for the ranks that were gone by then."""
    gone = [n for n in graph.nodes.values() if n.state in ("exited", "dead") and n.rank is not None]
    if len(gone) > MAX_FANOUT:
        return
    for waiter, event in lost.items():
        how = (
            "lost its connection to a peer"
            if graph.nodes[waiter].where.startswith("lost")
            else "its wait timed out"
        )
        for other in gone:
            graph.add_edge(
                waiter,
                rank_id(other.rank or 0),
                f"{how}; rank {other.rank} had {other.where}",
                "launcher",
                event,
            )


def _stack_edges(graph: _Graph, stacks: dict[str, ProcStack], explained: set[str]) -> None:
    waiting = {i: n for i, n in graph.nodes.items() if n.site is not None}
    if not waiting:
        return
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    for node_id, node in waiting.items():
        groups[node.site or ("?", "?")].append(node_id)
    for site, members in groups.items():
        inside = set(members)
        absent = [i for i in graph.nodes if i not in inside]
        if len(absent) > MAX_FANOUT or len(absent) * len(members) > MAX_EDGES:
            continue
        for node_id in members:
            if node_id in explained:
                continue  # the flight recorder knows its group; the stack does not
            dump = stacks[node_id].dump
            for other in absent:
                them = graph.nodes[other]
                graph.add_edge(
                    node_id,
                    other,
                    f"in {site[0]} at {site[1]}; {other} is not ({them.where or them.state})",
                    "stacks",
                    dump,
                )


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
    graph: _Graph, cycle: set[str], order: dict[int, list[tuple[str, str]]]
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
    graph = _Graph()
    _nodes(index, graph)
    stacks = _stack_states(proc_stacks(index), graph)
    _, lost = _fates(index, graph)
    explained = _flight_edges(index, graph)
    _nccl_edges(index, graph)
    _watchdog_edges(index, graph)
    _store_edges(index, graph)
    _barrier_edges(index, graph)
    _lost_peer_edges(graph, lost)
    _stack_edges(graph, stacks, explained)
    if not graph.edges:
        return None
    g = nx.DiGraph()
    g.add_nodes_from(graph.nodes)
    g.add_edges_from(graph.edges)
    sinks = [
        n
        for n in g.nodes
        if g.in_degree(n) > 0 and g.out_degree(n) == 0 and graph.nodes[n].state in _CULPRIT_STATES
    ]
    culprits: list[str] = []
    resolution: Resolution | None = None
    how = ""
    if sinks:
        reach = {n: len(nx.ancestors(g, n)) for n in sinks}
        best = max(reach.values())
        culprits = sorted((n for n in sinks if reach[n] == best), key=_node_order)
        how = "sink: where waiting ends"
    cycles = [c for c in nx.strongly_connected_components(g) if len(c) > 1]
    if not culprits and cycles:
        order = _program_order(index.all_of(FlightRecorderDump))
        biggest = max(cycles, key=lambda c: (len(c), sorted(c)))
        resolution = _resolve_cycle(graph, set(biggest), order)
        if resolution is not None:
            culprits = list(resolution.odd)
            how = resolution.how
    victims: list[tuple[str, str]] = []
    for node_id in sorted(g.nodes, key=_node_order):
        if node_id in culprits or g.out_degree(node_id) == 0:
            continue
        out = [graph.edges[(node_id, t)] for t in g.successors(node_id)]
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
