"""The sources of the wait-for graph: its nodes, their states, and who waits for whom.

Each ``*_edges`` function reads one kind of evidence and adds the edges it proves (see
:mod:`logsleuth.analysis.waitfor` for the whole picture); ``mark_*`` set what a node is
doing. Only this module and :mod:`logsleuth.analysis.waitfor` know the mutable
:class:`Graph`; the model sees :class:`~logsleuth.model.waitfor.WaitFor`.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections import defaultdict
from dataclasses import dataclass, field

from logsleuth.analysis.correlate import own_deaths
from logsleuth.analysis.flight import entries_by_group
from logsleuth.analysis.health import PROGRAM_EXIT
from logsleuth.analysis.index import EvidenceIndex
from logsleuth.analysis.overview import last_ops
from logsleuth.analysis.rules.base import message_text
from logsleuth.analysis.rules.stacks import STALLED
from logsleuth.analysis.stacks import ProcStack
from logsleuth.model.base import Event
from logsleuth.model.diagnosis import Evidence
from logsleuth.model.flight import FlightRecorderDump, FrEntry
from logsleuth.model.messages import LogMessage
from logsleuth.model.p2p import P2PView
from logsleuth.model.torch import (
    ChildFailure,
    GlooError,
    LauncherEvent,
    MonitoredBarrierError,
    PythonTraceback,
    WatchdogError,
    WatchdogProgress,
    WatchdogTimeout,
)
from logsleuth.model.waitfor import WaitEdge

MAX_WORLD = 65536
"""Ranks known only from a world size are added as nodes up to this size."""
MAX_FANOUT = 64
MAX_EDGES = 8192
"""A waiting group whose edges to the absent would pass this many gets none from stacks."""
"""A waiting group gets an edge to each absent rank only when there are at most this many."""

PEER_GONE = re.compile(
    r"Connection closed by peer|Connection reset by peer|Broken pipe|remote process exited"
    r"|Socket closed|peer closed|Failed to recv, got 0 bytes"
    r"|Horovod has been shut down|one of the ranks finished execution",
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
class Node:
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
class Graph:
    nodes: dict[str, Node] = field(default_factory=dict)
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


def proc_id(host: str | None, pid: int | None) -> str:
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


def spoke(index: EvidenceIndex) -> set[int]:
    """Global ranks that left any evidence of their own."""
    ranks = {p.rank for p in index.procs.values() if p.rank is not None and p.sources}
    for events in index.by_type.values():
        for event in events:
            if event.origin.rank is not None:
                ranks.add(event.origin.rank)
    ranks |= {d.rank for d in index.all_of(FlightRecorderDump) if d.rank is not None}
    return ranks


def add_nodes(index: EvidenceIndex, graph: Graph) -> None:
    for proc in index.procs.values():
        if proc.rank is None:
            if proc.families <= {"torch"}:
                continue  # the launcher agent's own lines: not a rank process
            node_id = proc_id(proc.host, proc.pid)
            if node_id:
                graph.nodes.setdefault(node_id, Node(None, proc.host, proc.pid, evidence=True))
            continue
        node = graph.nodes.setdefault(rank_id(proc.rank), Node(proc.rank))
        node.host = node.host or proc.host
        node.pid = node.pid if node.pid is not None else proc.pid
    world = index.world_size
    if world and world <= MAX_WORLD:
        for rank in range(world):
            graph.nodes.setdefault(rank_id(rank), Node(rank))
    speakers = spoke(index)
    for rank in speakers:
        graph.nodes.setdefault(rank_id(rank), Node(rank))
    for node in graph.nodes.values():
        if node.rank is not None:
            node.evidence = node.rank in speakers
            if not node.evidence:
                node.state, node.where = "silent", "left no evidence"


def mark_stacks(procs: list[ProcStack], graph: Graph) -> dict[str, ProcStack]:
    by_node: dict[str, ProcStack] = {}
    for ps in procs:
        node_id = rank_id(ps.rank) if ps.rank is not None else proc_id(ps.host, ps.pid)
        if not node_id:
            continue  # a dump that names neither rank nor pid cannot be placed
        node = graph.nodes.get(node_id)
        if node is None:
            node = graph.nodes[node_id] = Node(ps.rank, ps.host, ps.pid)
        node.evidence = True
        by_node[node_id] = ps
        if ps.dump.main_thread() is None:
            continue
        category, collective, site = ps.state()
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


def traceback_text(event: PythonTraceback) -> str:
    parts = [event.exc_type or "", event.exc_message or "", event.detail or "", *event.notes]
    parts += [f"{t or ''} {m or ''}" for t, m in event.causes]
    return " ".join(parts)


def mark_fates(index: EvidenceIndex, graph: Graph) -> tuple[set[str], dict[str, Event]]:
    """Mark dead, exited and waiting-for-a-lost-peer ranks; return the latter and why."""
    lost: dict[str, Event] = {}
    waited: set[str] = set()
    timed_out: dict[str, Event] = {}
    for event in index.torch:
        text = ""
        rank = event.origin.rank
        if isinstance(event, PythonTraceback):
            text = traceback_text(event)
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
    deaths = own_deaths(index)
    for death in deaths:
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
    # A rank that left the program before the others' waits failed will not come; one that
    # left after them may have been ended by the same failure.
    failed_at = [t for e in (*timed_out.values(), *lost.values()) if (t := e.origin.time)]
    left = exit_lines(index)
    # A death no line places may be that leaving process's own (an exception unwinds through
    # the destructor): it says more of the rank's fate than the warning does.
    if left and (
        any(d.rank is None for d in deaths)
        or any(isinstance(e, PythonTraceback) and e.origin.rank is None for e in index.torch)
    ):
        left = {}
    for rank, line in sorted(left.items()):
        leaving = graph.nodes.get(rank_id(rank))
        at = line.origin.time
        if at is not None and failed_at and at > min(failed_at):
            continue
        if leaving is not None and leaving.state in _QUIET and rank_id(rank) not in waited:
            leaving.state, leaving.where = "exited", _LEFT
    for rank in _exited_cleanly(
        index, {r for r in failed if rank_id(r) in lost or rank_id(r) in waited}
    ):
        graph.nodes.setdefault(rank_id(rank), Node(rank, state="silent", where="left no evidence"))
        node = graph.nodes[rank_id(rank)]
        if node.state in _QUIET:
            node.state, node.where = "exited", "exit code 0 (not in torchrun's failures)"
    return set(lost), {**timed_out, **lost}


_LEFT = "left the program (its process group destructor's warning)"


def exit_lines(index: EvidenceIndex) -> dict[int, LogMessage]:
    """Ranks whose process group's destructor warned at program exit, and the first warning.

    PyTorch >= 2.4 prints ``process group has NOT been destroyed before we destruct
    ProcessGroupNCCL`` as the process ends; a rank that says it while others wait in a
    collective will not come to it.
    """
    cached = index.derived.get("exit_lines")
    if isinstance(cached, dict):
        return cached
    found: dict[int, LogMessage] = {}
    for message in index.all_of(LogMessage):
        rank = message.origin.rank
        if rank is not None and any(p.search(message.message) for p in PROGRAM_EXIT):
            found.setdefault(rank, message)
    index.derived["exit_lines"] = found
    return found


def _exited_cleanly(index: EvidenceIndex, waiting_failed: set[int]) -> list[int]:
    """Ranks that torchrun's summary shows ended with status 0 while its waiting ranks failed.

    A torchrun agent lists the workers that exited non-zero when it noticed a failure; one
    it does not list had ended with status 0 before, unless it still ran and was stopped
    (``Sending process P closing signal SIGTERM`` names its pid). Only the agent's own
    workers count: its global ranks are ``rank - local_rank`` onwards, below its highest
    listed rank; ranks on other nodes are another agent's.
    """
    stopped = {e.pid for e in index.all_of(LauncherEvent) if e.action == "closing-signal" and e.pid}
    alive = {p.rank for p in index.procs.values() if p.pid in stopped and p.rank is not None}
    agents: dict[str | None, list[ChildFailure]] = defaultdict(list)
    for failure in index.failures:
        if failure.rank is not None:
            agents[failure.host].append(failure)
    exited: list[int] = []
    for entries in agents.values():
        listed = {f.rank for f in entries if f.rank is not None}
        waiting = listed & waiting_failed
        if not waiting:
            continue
        bases = {
            f.rank - f.local_rank
            for f in entries
            if f.rank is not None and f.local_rank is not None
        }
        base = min(bases) if bases else 0
        unlisted = [r for r in range(max(0, base), min(max(listed), MAX_WORLD)) if r not in listed]
        exited += [r for r in unlisted if r not in alive]
    return sorted(set(exited))


def flight_edges(index: EvidenceIndex, graph: Graph) -> set[str]:
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
    graph: Graph, rank: int, other: int, entry: FrEntry, pg: str, quote: Evidence, why: str
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


def nccl_edges(index: EvidenceIndex, graph: Graph) -> None:
    tops = last_ops(index)
    for key in sorted(index.comms):
        state = index.comms[key]
        if state.static_op_count():
            continue
        last = {s: record.op_count for s, record in tops[key].items()}
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


def watchdog_edges(index: EvidenceIndex, graph: Graph) -> None:
    timeouts = [e for e in index.torch if isinstance(e, WatchdogTimeout)]
    if not timeouts:
        return
    progress = [e for e in index.torch if isinstance(e, WatchdogProgress)]
    enqueued: dict[tuple[str | None, int], int] = {}
    for p in progress:
        rank = global_rank(p, p.rank, p.pg)
        if rank is not None and p.last_enqueued is not None:
            enqueued[(p.pg, rank)] = p.last_enqueued
    # Per process group, (last enqueued, rank) in order: each timeout takes the ranks behind
    # it by bisection, not by a scan of every rank (4,096 timeouts x 4,096 ranks).
    behind: dict[str | None, list[tuple[int, int]]] = defaultdict(list)
    for (pg, rank), last in enqueued.items():
        behind[pg].append((last, rank))
    for entries in behind.values():
        entries.sort()
    # Nodes are only re-labelled below (silent -> waiting), never added.
    ranks = sum(1 for n in graph.nodes.values() if n.rank is not None)
    silent_nodes = {
        k: n for k, n in graph.nodes.items() if n.state == "silent" and n.rank is not None
    }
    for event in timeouts:
        waiter = global_rank(event, event.rank, event.pg)
        if waiter is None or rank_id(waiter) not in graph.nodes:
            continue
        node = graph.nodes[rank_id(waiter)]
        if node.state in ("unknown", "silent"):
            node.state = "waiting"
            node.where = f"{event.work} (watchdog timeout)"
            silent_nodes.pop(rank_id(waiter), None)
        entries = behind.get(event.pg, [])
        late = [] if event.seq is None else entries[: bisect_left(entries, (event.seq, -(1 << 62)))]
        for last, rank in sorted(late, key=lambda item: item[1]):
            graph.add_edge(
                rank_id(waiter),
                rank_id(rank),
                f"{event.work}: rank {rank} last enqueued {last}",
                "watchdog",
                event,
            )
        silent = list(silent_nodes.values())
        # Silence points at a rank only when the silent are a minority of the job: when most
        # ranks left nothing, the logs are what is missing, not the ranks.
        if len(silent) <= MAX_FANOUT and len(silent) * 2 < ranks:
            for other in silent:
                graph.add_edge(
                    rank_id(waiter),
                    rank_id(other.rank or 0),
                    f"{event.work} timed out; rank {other.rank} left no evidence",
                    "watchdog",
                    event,
                )


def store_edges(index: EvidenceIndex, graph: Graph) -> None:
    reports: list[tuple[int, int, int, Event]] = []
    for event in index.torch:
        if not isinstance(event, PythonTraceback):
            continue
        match = _STORE_BARRIER.search(traceback_text(event))
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
            graph.nodes.setdefault(rank_id(other), Node(other, state="silent"))
            graph.add_edge(
                rank_id(rank),
                rank_id(other),
                f"store-based barrier at init: {joined} of {world} ranks joined; rank {other} "
                + ("is the one missing" if exact else "did not report the timeout"),
                "store",
                event,
            )


def barrier_edges(index: EvidenceIndex, graph: Graph) -> None:
    for event in index.all_of(MonitoredBarrierError):
        waiter = event.origin.rank if event.origin.rank is not None else event.rank
        if waiter is None:
            waiter = 0
        for other in event.missing_ranks:
            graph.nodes.setdefault(rank_id(other), Node(other, state="silent"))
            graph.add_edge(
                rank_id(waiter),
                rank_id(other),
                f"monitored_barrier: rank {other} failed to pass it",
                "watchdog",
                event,
            )


def _silent_peers(graph: Graph, waiters: list[str]) -> list[Node]:
    """The ranks that left no evidence while others lost their peer: the ones that left.

    Global ranks are dense (0..N-1), so a rank below the highest one seen exists even when
    nothing of it is in the evidence. Silence names them only as a minority of the job.
    """
    ranks = [n.rank for n in graph.nodes.values() if n.rank is not None]
    if not waiters or not ranks or max(ranks) >= MAX_WORLD:
        return []
    for rank in range(max(ranks)):
        graph.nodes.setdefault(rank_id(rank), Node(rank, state="silent", where="left no evidence"))
    silent = [n for n in graph.nodes.values() if n.state == "silent" and n.rank is not None]
    total = sum(1 for n in graph.nodes.values() if n.rank is not None)
    return silent if len(silent) * 2 < total else []


def lost_peer_edges(graph: Graph, lost: dict[str, Event]) -> None:
    """A rank that lost a peer or timed out waited for the ranks that were gone by then."""
    gone = [n for n in graph.nodes.values() if n.state in ("exited", "dead") and n.rank is not None]
    if not gone:
        gone = _silent_peers(graph, [w for w in lost if graph.nodes[w].where.startswith("lost")])
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
                f"{how}; rank {other.rank} "
                + (other.where if other.state == "silent" else f"had {other.where}"),
                "launcher",
                event,
            )


def stack_edges(graph: Graph, stacks: dict[str, ProcStack], explained: set[str]) -> None:
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


def p2p_edges(view: P2PView, graph: Graph) -> set[str]:
    """Add an edge for each unanswered point-to-point op; return the waiters' node ids.

    A rank blocked in ``recv`` waits for exactly its peer: these edges replace what its
    stack alone would say (waiting for every rank not in the same call).
    """
    waiters: set[str] = set()
    for item in view.stuck:
        waiter, peer = rank_id(item.waiter), rank_id(item.peer)
        if waiter not in graph.nodes or peer not in graph.nodes:
            continue
        waiters.add(waiter)
        if (waiter, peer) in graph.edges and graph.edges[(waiter, peer)].source != "p2p":
            del graph.edges[(waiter, peer)]
        graph.edges.setdefault(
            (waiter, peer),
            WaitEdge(
                waiter=waiter,
                waits_for=peer,
                reason=item.summary,
                source="p2p",
                evidence=item.op.evidence,
            ),
        )
    return waiters


def drop_answered_stack_edges(graph: Graph) -> None:
    """Drop stack edges A -> B where B waits, by point-to-point ops, for A (directly or not).

    A rank in a barrier "waits" for a rank that is not in it, but when that rank is blocked
    in a ``recv`` from the first (or from a rank that waits for it), its absence is the
    first rank's doing: the edge would make a cycle of what is a chain.
    """
    p2p: dict[str, set[str]] = defaultdict(set)
    for (waiter, target), edge in graph.edges.items():
        if edge.source == "p2p":
            p2p[waiter].add(target)
    if not p2p:
        return

    def reaches(start: str, goal: str) -> bool:
        seen, todo = {start}, [start]
        while todo:
            here = todo.pop()
            for nxt in p2p.get(here, ()):
                if nxt == goal:
                    return True
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return False

    for key in [k for k, e in graph.edges.items() if e.source == "stacks"]:
        if reaches(key[1], key[0]):
            del graph.edges[key]
