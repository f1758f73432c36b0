"""Fold the event stream into what the rules ask about: processes, ranks, communicators.

Stream identity is (host, pid) (NCCL spec 4.3). A process's global rank comes, strongest
first, from: a launcher prefix on its lines, its rank in the largest communicator it
initialised, a bundle manifest, torchrun's failure summary (pid -> rank), and the file
name (``nccl_rank37.log``, ``rank3.0.txt``).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict, deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from logsleuth.model.base import Event, InputSummary, rank_in_file_name
from logsleuth.model.bundle import BundleManifest, RankEntry
from logsleuth.model.messages import LogMessage
from logsleuth.model.nccl import (
    NcclChannelConnect,
    NcclCollective,
    NcclCommConfig,
    NcclCommEnd,
    NcclCommInit,
    NcclConnected,
    NcclConnectRun,
    NcclCudaDriver,
    NcclErrorTrace,
    NcclInfoNote,
    NcclInterface,
    NcclNetDevices,
    NcclNetPlugin,
    NcclNetwork,
    NcclVersion,
    NcclVersionRange,
    NcclWarn,
)
from logsleuth.model.stacks import StackDump
from logsleuth.model.torch import ChildFailure, WatchdogError

_PLUGIN_PATH = re.compile(r"Plugin Path : \S*?([^/\s]+\.so(?:\.\d+)*)")
"""nccl-rdma-sharp-plugins / aws-ofi-nccl print where they were loaded from."""

KEEP_OPS = 64
"""COLL lines kept per process and communicator: enough to compare the last positions."""


E = TypeVar("E", bound=Event)


def _release(text: str, default: tuple[int, ...]) -> tuple[int, ...]:
    """Return ``"2.18.3"`` (or ``"2.18.3+cuda12.1"``) as (2, 18, 3); ``default`` if empty."""
    numbers = tuple(int(n) for n in re.findall(r"\d+", text.partition("+")[0])[:3])
    return numbers or default


Stream = tuple[str | None, int | None]
"""(host, pid) of a writer."""


@dataclass(slots=True)
class Proc:
    """What is known about one process, built up while events are folded in."""

    host: str | None
    pid: int | None
    rank: int | None = None
    rank_source: str | None = None
    local_rank: int | None = None
    devices: set[int] = field(default_factory=set)
    bus_ids: set[str] = field(default_factory=set)
    sources: set[str] = field(default_factory=set)
    nccl_version: str | None = None
    nccl_range: tuple[str, str] | None = None
    """The NCCL releases the process may run, inferred from its line shapes (spec 5):
    (lowest, highest), ``""`` where open. Use it where ``nccl_version`` is None."""
    cuda_driver: int | None = None
    net_plugin: str | None = None
    network: str | None = None
    first_line: Event | None = None
    last_event: Event | None = None
    families: set[str] = field(default_factory=set)
    """Which kinds of evidence the process wrote: ``nccl``, ``torch``, ``stacks``."""

    def runs_nccl(self, low: str, high: str) -> bool | None:
        """Say whether the process's NCCL release lies in [``low``, ``high``] (``""``: open).

        True or False when its version line or its line shapes (:attr:`nccl_range`) decide
        it, None when they do not: for the rules whose reading of a field changed between
        releases (the ``[x]`` field of transport lines, opCount; spec 4.8).
        """
        lo, hi = _release(low, (0,)), _release(high, (999,))
        if self.nccl_version:
            exact = _release(self.nccl_version, (0,))
            return lo <= exact <= hi
        if self.nccl_range is None:
            return None
        have_lo, have_hi = _release(self.nccl_range[0], (0,)), _release(self.nccl_range[1], (999,))
        if lo <= have_lo and have_hi <= hi:
            return True
        if have_hi < lo or hi < have_lo:
            return False
        return None


@dataclass(slots=True, unsafe_hash=True)
class OpRecord:
    """One logged collective of one process on one communicator (not changed once made).

    Not frozen: one is made per kept COLL line (400k at 4,096 ranks), and a frozen
    dataclass takes two and a half times as long to make.
    """

    op: str
    op_count: int
    count: int | None
    datatype: int | None
    root: int | None
    peer: int | None
    event: NcclCollective


@dataclass(slots=True)
class CommState:
    """One communicator: who initialised it, who completed, and each member's last ops."""

    key: str
    nranks: int | None = None
    started: dict[int, NcclCommInit] = field(default_factory=dict)  # rank -> START
    completed: dict[int, NcclCommInit] = field(default_factory=dict)  # rank -> COMPLETE
    ended: dict[Stream, NcclCommEnd] = field(default_factory=dict)
    members: dict[Stream, int | None] = field(default_factory=dict)  # stream -> rank in comm
    ops: dict[Stream, deque[OpRecord]] = field(default_factory=dict)
    op_totals: dict[Stream, int] = field(default_factory=dict)
    connect_vias: Counter[str] = field(default_factory=Counter)
    """How many connection lines the members logged per ``via`` text."""
    connect_channels: set[int] = field(default_factory=set)
    """The channels those lines name."""
    connected: set[Stream] = field(default_factory=set)

    def static_op_count(self) -> bool:
        """Say whether this communicator's opCount never moved, so it gives no positions.

        NCCL 2.8.x never increments opCount, and 2.27.3+ increments it only for launches
        with network operations, so on a single-node communicator it stays 0 for good
        (spec 2.10). Then every collective line says ``opCount 0`` and comparing ranks by
        opCount would compare unrelated collectives. Told from the lines themselves: every
        member's collectives (not send/recv, which share one group's count) are at 0 and
        some member logged at least three.
        """
        most = 0
        for ops in self.ops.values():
            colls = [r for r in ops if r.op not in ("Send", "Recv")]
            if any(r.op_count for r in colls):
                return False
            most = max(most, len(colls))
        return most >= 3


@dataclass(slots=True)
class EvidenceIndex:
    """All evidence, folded; rules read from here."""

    procs: dict[Stream, Proc] = field(default_factory=dict)
    comms: dict[str, CommState] = field(default_factory=dict)
    torch: list[Event] = field(default_factory=list)
    inputs: list[InputSummary] = field(default_factory=list)
    by_type: dict[type[Event], list[Event]] = field(default_factory=dict)
    truncated_sources: set[str] = field(default_factory=set)
    world_size: int | None = None
    layout: dict[tuple[str, int], int] = field(default_factory=dict)
    """(host, local rank) -> global rank, as a launcher printed its workers' placement."""
    nccl_layout: dict[tuple[str | None, int], int | None] = field(default_factory=dict)
    """(host, NCCL's local rank) -> global rank in the largest communicator, as each process's
    ``comm ... rank R nRanks N ... localRank L`` line says; None where two ranks claim one."""
    prefix_ranks: dict[int, set[str]] = field(default_factory=dict)
    """Ranks that only a line's prefix names (``[rank3]:`` with no host or pid), with the
    inputs that name them: they have evidence, though no process of theirs is known."""
    derived: dict[str, object] = field(default_factory=dict, repr=False, compare=False)
    """Facts derived from the whole index once and shared by the rules (the wait-for graph)."""
    _by_rank: dict[int, Proc] | None = field(default=None, repr=False, compare=False)
    _by_rank_size: int = field(default=0, repr=False, compare=False)
    _by_pid: dict[int, list[tuple[str | None, int]]] | None = field(
        default=None, repr=False, compare=False
    )
    _by_pid_size: int = field(default=0, repr=False, compare=False)

    @property
    def warns(self) -> list[NcclWarn]:
        """NCCL WARN lines, in input order."""
        return self.all_of(NcclWarn)

    @property
    def traces(self) -> list[NcclErrorTrace]:
        """NCCL error back-trace lines (``file.cc:N -> code``)."""
        return self.all_of(NcclErrorTrace)

    @property
    def notes(self) -> list[NcclInfoNote]:
        """Recognized INFO facts without a richer type."""
        return self.all_of(NcclInfoNote)

    @property
    def interfaces(self) -> list[NcclInterface]:
        """Bootstrap / socket interface choices."""
        return self.all_of(NcclInterface)

    @property
    def net_devices(self) -> list[NcclNetDevices]:
        """``NET/IB : Using ...`` device lists."""
        return self.all_of(NcclNetDevices)

    @property
    def dumps(self) -> list[StackDump]:
        """Stack dumps of processes."""
        return self.all_of(StackDump)

    @property
    def failures(self) -> list[ChildFailure]:
        """torchrun failure-summary entries."""
        return self.all_of(ChildFailure)

    @property
    def manifests(self) -> list[BundleManifest]:
        """Bundle manifests written by live mode."""
        return self.all_of(BundleManifest)

    def all_of(self, event_type: type[E]) -> list[E]:
        """Return every event of exactly ``event_type``, in input order."""
        return self.by_type.get(event_type, [])  # type: ignore[return-value]

    def proc(self, stream: Stream) -> Proc:
        """Return (creating) the process record of ``stream``."""
        found = self.procs.get(stream)
        if found is None:
            found = self.procs[stream] = Proc(host=stream[0], pid=stream[1])
        return found

    def named_ranks(self) -> set[int]:
        """The global ranks the evidence names: a line's prefix, or a process's identity."""
        found = self.derived.get("named_ranks")
        if not isinstance(found, set):
            named = {e.origin.rank for events in self.by_type.values() for e in events}
            named |= {p.rank for p in self.procs.values()}
            found = self.derived["named_ranks"] = {r for r in named if r is not None}
        return found

    def rank_of(self, host: str | None, pid: int | None) -> int | None:
        """Return the global rank of the process (host, pid), if known."""
        found = self.procs.get((host, pid))
        if found is not None and found.rank is not None:
            return found.rank
        if pid is None:
            return None
        # pid -> (host, rank) once, not a scan of every process per call (16k ranks).
        if self._by_pid is None or self._by_pid_size != len(self.procs):
            by_pid: dict[int, list[tuple[str | None, int]]] = defaultdict(list)
            for (h, q), p in self.procs.items():
                if q is not None and p.rank is not None:
                    by_pid[q].append((h, p.rank))
            self._by_pid, self._by_pid_size = dict(by_pid), len(self.procs)
        candidates = self._by_pid.get(pid, ())
        if host is not None:
            matches = {rank for h, rank in candidates if h is None or h == host}
        else:
            matches = {rank for _, rank in candidates}
        return matches.pop() if len(matches) == 1 else None

    def writer_rank(self, event: Event) -> int | None:
        """Return the global rank of the process that wrote ``event``, if known."""
        if event.origin.rank is not None:
            return event.origin.rank
        rank = getattr(event, "rank", None)
        if isinstance(rank, int):
            return rank
        return self.rank_of(event.origin.host, event.origin.pid)

    def rank_at(self, host: str | None, local_rank: int) -> int | None:
        """Return the global rank of local rank ``local_rank`` on ``host``, if known: from a
        launcher's placement of its workers, or a process of that host that logged both.

        With no host (a launcher's line that names only the local rank), the answer is the
        one rank at that local rank of any host: a one-node job's.
        """
        if host is None:
            placed_anywhere = {r for (_h, local), r in self.layout.items() if local == local_rank}
            if placed_anywhere:
                return placed_anywhere.pop() if len(placed_anywhere) == 1 else None
        else:
            placed = self.layout.get((host, local_rank))
            if placed is not None:
                return placed
        ranks = {
            p.rank
            for p in self.procs.values()
            if (host is None or p.host == host)
            and p.local_rank == local_rank
            and p.rank is not None
        }
        return ranks.pop() if len(ranks) == 1 else None

    def rank_at_nccl(self, host: str | None, local_rank: int) -> int | None:
        """Return the global rank of NCCL's local rank ``local_rank`` on ``host``, if known.

        NCCL numbers the ranks of one host in its top communicator (``localRank N`` in its
        proxy's messages); each process's ``comm ... rank R nRanks N ... localRank L`` line
        says which is which. Without such lines, a launcher's placement answers.
        """
        if (host, local_rank) in self.nccl_layout:
            return self.nccl_layout[(host, local_rank)]
        return self.rank_at(host, local_rank)

    def proc_of_rank(self, rank: int) -> Proc | None:
        """Return the best-known process record of global ``rank`` (NCCL streams first).

        Ranks are final once :func:`build_index` returned: the first call maps every rank
        once, instead of a scan of every process per call (rules ask per event).
        """
        if self._by_rank is None or self._by_rank_size != len(self.procs):
            by_rank: dict[int, Proc] = {}
            for proc in self.procs.values():
                if proc.rank is None:
                    continue
                best = by_rank.get(proc.rank)
                if best is None or (best.host is None and proc.host):
                    by_rank[proc.rank] = proc
            self._by_rank, self._by_rank_size = by_rank, len(self.procs)
        return self._by_rank.get(rank)

    def stream_label(self, stream: Stream) -> str:
        """Return a human label for a process: ``rank 3 (host pid 123)`` or ``host pid 123``."""
        proc = self.procs.get(stream)
        rank = proc.rank if proc else None
        where = " ".join(x for x in (stream[0], f"pid {stream[1]}" if stream[1] else None) if x)
        if rank is not None:
            return f"rank {rank} ({where})" if where else f"rank {rank}"
        return where or "an unknown process"


def comm_key(event: NcclCommInit) -> str:
    """Return the key that identifies the communicator an Init line belongs to."""
    if event.comm_id:
        return event.comm_id
    if event.parent is not None:
        return f"split:{event.parent}:{event.color}:{event.nranks}"
    return f"nranks={event.nranks}"


def communicator_keys(inits: Sequence[NcclCommInit]) -> list[str]:
    """Return the communicator key of each Init line (parallel to ``inits``).

    The key is :func:`comm_key`, except where split children of one parent print one
    commId (NCCL before 2.23 and the synthetic generator do): then each split color, or
    each size of a communicator whose processes all belong to another one (their parent),
    is a communicator of its own. The index, the topology and the report all key
    communicators by this one function, so their counts agree. Linear in ``inits``.
    """
    bases = [comm_key(init) for init in inits]
    colors: dict[str, set[int | None]] = defaultdict(set)
    sizes: dict[str, set[int]] = defaultdict(set)
    streams_of: dict[str, set[Stream]] = defaultdict(set)
    for init, base in zip(inits, bases, strict=True):
        if init.color is not None:
            colors[base].add(init.color)
        sizes[base].add(init.nranks)
        streams_of[base].add((init.origin.host, init.origin.pid))
    in_comms: dict[Stream, int] = defaultdict(int)
    for streams in streams_of.values():
        for stream in streams:
            in_comms[stream] += 1
    nested = {b: all(in_comms[s] > 1 for s in streams) for b, streams in streams_of.items()}
    keys: list[str] = []
    for init, base in zip(inits, bases, strict=True):
        if len(colors.get(base, ())) > 1:
            keys.append(f"{base} color {init.color} nranks {init.nranks}")
        elif len(sizes[base]) > 1 and nested[base]:
            keys.append(f"{base} nranks {init.nranks}")
        else:
            keys.append(base)
    return keys


_RANK_SOURCES = {
    "prefix": 5,
    "world-comm": 4,
    "manifest": 3,
    "summary": 2,
    "layout": 2,
    "file-name": 1,
    "host": 1,
    "last-error": 1,
}
"""How much each source of a process's global rank is trusted (higher wins)."""


def _set_rank(proc: Proc, rank: int, source: str, strength: int) -> None:
    current = _RANK_SOURCES.get(proc.rank_source or "", 0)
    if proc.rank is None or strength > current:
        proc.rank = rank
        proc.rank_source = source


def _top_configs(index: EvidenceIndex) -> list[NcclCommConfig]:
    """The ``comm ... rank R nRanks N ... localRank L`` lines of the largest communicator."""
    configs = index.all_of(NcclCommConfig)
    top = max((c.nranks or 0 for c in configs), default=0)
    return [c for c in configs if top and c.nranks == top]


def _quoted_last_error(index: EvidenceIndex) -> None:
    """Give a rank to the NCCL process whose WARN a rank's error quotes as its last error.

    ``[rank2]: ... DistBackendError ... Last error: Cuda failure 'out of memory'`` quotes the
    last WARN of that rank's own NCCL (``n1:902:902 [2] ... NCCL WARN Cuda failure 'out of
    memory'``): when exactly one process without a rank printed that WARN, it is rank 2.
    """
    quoted: dict[str, set[int]] = defaultdict(set)
    for error in index.all_of(WatchdogError):
        rank = error.rank if error.rank is not None else error.origin.rank
        if error.detail and rank is not None:
            quoted[error.detail.strip()].add(rank)
    if not quoted:
        return
    writers: dict[str, set[Stream]] = defaultdict(set)
    for warn in index.all_of(NcclWarn):
        text = warn.message.strip()
        if text in quoted:
            writers[text].add((warn.origin.host, warn.origin.pid))
    for text, ranks in quoted.items():
        streams = writers.get(text, set())
        if len(ranks) != 1 or len(streams) != 1:
            continue
        proc = index.procs.get(next(iter(streams)))
        if proc is not None and proc.rank is None:
            _set_rank(proc, next(iter(ranks)), "last-error", _RANK_SOURCES["last-error"])


def build_index(events: Sequence[Event], inputs: Iterable[InputSummary] = ()) -> EvidenceIndex:
    """Fold ``events`` (in input order, file by file) into an :class:`EvidenceIndex`."""
    index = EvidenceIndex()
    index.inputs = list(inputs)
    index.truncated_sources = {i.source for i in index.inputs if i.truncated}
    comm_of: dict[tuple[str | None, int | None, str], str] = {}
    inits: list[NcclCommInit] = []
    first_connect: dict[Stream, NcclChannelConnect | NcclConnectRun] = {}
    shared: set[Stream] = set()
    order = _RANK_SOURCES

    by_type = index.by_type
    family_of: dict[type, str] = {}
    # Pass 1: streams, communicators, identities.
    for event in events:
        cls = type(event)
        same = by_type.get(cls)
        if same is None:
            same = by_type[cls] = []
        same.append(event)
        origin = event.origin
        stream: Stream = (origin.host, origin.pid)
        if isinstance(event, NcclVersionRange):
            # A summary of the stream, not a line it wrote: one per stream and input.
            index.proc(stream).nccl_range = (event.low, event.high)
            continue
        if origin.pid is None and origin.host is None and origin.rank is not None:
            tagged = index.prefix_ranks.get(origin.rank)
            if tagged is None:
                tagged = index.prefix_ranks[origin.rank] = set()
            tagged.add(event.ref.source)
        if origin.pid is not None or origin.host is not None:
            proc = index.proc(stream)
            proc.sources.add(event.ref.source)
            # A run of connection lines stands here for now; its first or last line takes
            # its place after this pass (one event made per process, not per run).
            if proc.first_line is None:
                proc.first_line = event
            proc.last_event = event
            family = family_of.get(cls)
            if family is None:
                family = family_of[cls] = cls.__module__.rsplit(".", 1)[-1]
            proc.families.add(family)
            if origin.dev is not None:
                proc.devices.add(origin.dev)
            if origin.rank is not None:
                _set_rank(proc, origin.rank, "prefix", order["prefix"])
                if origin.pid is None and proc.rank != origin.rank:
                    shared.add(stream)
            if origin.local_rank is not None:
                proc.local_rank = origin.local_rank
        if cls is NcclCollective:
            continue  # most events at scale: nothing below is about them
        if isinstance(event, NcclCommInit):
            inits.append(event)
            if event.bus_id:
                index.proc(stream).bus_ids.add(event.bus_id)
            if event.cuda_dev is not None:
                index.proc(stream).devices.add(event.cuda_dev)
        elif isinstance(event, NcclVersion):
            if origin.host is not None or origin.pid is not None:
                index.proc(stream).nccl_version = event.version

        elif isinstance(event, NcclCudaDriver):
            index.proc(stream).cuda_driver = event.version
        elif isinstance(event, NcclNetPlugin):
            proc = index.proc(stream)
            # "Could not find libnccl-net.so. Using internal ..." says: no plugin on this node.
            if event.plugin or proc.net_plugin is None:
                proc.net_plugin = event.plugin or "none"
        elif isinstance(event, LogMessage) and event.family == "nccl":
            # A plugin's own INFO line names the library it was loaded from.
            if plugin := _PLUGIN_PATH.match(event.message):
                index.proc(stream).net_plugin = plugin.group(1)
        elif isinstance(event, NcclNetwork):
            index.proc(stream).network = event.name
        elif isinstance(event, NcclChannelConnect) or type(event) is NcclConnectRun:
            first_connect.setdefault(stream, event)
        elif type(event).__module__.endswith("model.torch") and not isinstance(event, ChildFailure):
            index.torch.append(event)

    # A host named without a pid (``worker-0: [rank1]:...``, pdsh) whose lines name several
    # ranks is several processes: no one of those ranks is its.
    for stream in shared:
        proc = index.procs[stream]
        if proc.rank_source == "prefix":
            proc.rank = proc.rank_source = None
    for proc in index.procs.values():
        if type(proc.first_line) is NcclConnectRun:
            proc.first_line = proc.first_line.connect(0)
        if type(proc.last_event) is NcclConnectRun:
            proc.last_event = proc.last_event.connect(-1)
    # Communicators, keyed as every view keys them (split children sharing a printed id apart).
    key_of_init: dict[int, str] = {}
    for init, key in zip(inits, communicator_keys(inits), strict=True):
        key_of_init[id(init)] = key
        origin = init.origin
        stream = (origin.host, origin.pid)
        comm_of[(origin.host, origin.pid, init.comm)] = key
        state = index.comms.get(key)
        if state is None:
            state = index.comms[key] = CommState(key=key)
        state.nranks = init.nranks
        state.members[stream] = init.rank
        (state.started if init.phase == "START" else state.completed)[init.rank] = init
    # The world communicator is the largest; a process's rank in it is its global rank.
    if index.comms:
        world = max(index.comms.values(), key=lambda c: (c.nranks or 0, len(c.members), c.key))
        index.world_size = world.nranks
        for stream, rank in world.members.items():
            if rank is not None:
                _set_rank(index.proc(stream), rank, "world-comm", order["world-comm"])
    # A process whose log stops before ``Init COMPLETE`` still said its place in the largest
    # communicator (2.20+: ``comm 0x.. rank 7 nRanks 8 nNodes 2 localRanks 4 localRank 3``).
    top = _top_configs(index)
    for config in top:
        if config.local_rank is not None and config.rank is not None:
            place = (config.origin.host, config.local_rank)
            # Two ranks at one place (hosts that print one name): none of them.
            claimed = index.nccl_layout.setdefault(place, config.rank)
            index.nccl_layout[place] = claimed if claimed == config.rank else None
    if top and (top[0].nranks or 0) >= (index.world_size or 0):
        for config in top:
            stream = (config.origin.host, config.origin.pid)
            # A line without its writer's prefix names no process of its own.
            if config.rank is not None and stream != (None, None):
                proc = index.proc(stream)
                if proc.rank is None:
                    _set_rank(proc, config.rank, "world-comm", order["world-comm"])
        index.world_size = index.world_size or top[0].nranks
    # pid -> processes once, not a scan of every process per manifest entry (4,096 ranks).
    by_pid: dict[int, list[tuple[str | None, Proc]]] = defaultdict(list)
    for (h, q), p in index.procs.items():
        if q is not None:
            by_pid[q].append((h, p))
    for manifest in index.manifests:
        for entry in manifest.ranks:
            if entry.pid is None:
                continue
            targets = [p for h, p in by_pid.get(entry.pid, ()) if h in (None, entry.host)]
            if not targets:
                targets = [index.proc((entry.host, entry.pid))]
                by_pid[entry.pid].append((entry.host, targets[0]))
            for proc in targets:
                _set_rank(proc, entry.rank, "manifest", order["manifest"])
                if proc.host is None:
                    proc.host = entry.host  # a stack dump names no host; the manifest does
                proc.local_rank = (
                    entry.local_rank if entry.local_rank is not None else proc.local_rank
                )
        if index.world_size is None and manifest.ranks:
            index.world_size = len(manifest.ranks)
    placed: set[int] = set()
    for entry in _placements(index.all_of(LogMessage)):
        placed.add(entry.rank)
        if entry.host is not None and entry.local_rank is not None:
            index.layout.setdefault((entry.host, entry.local_rank), entry.rank)
        for _, proc in by_pid.get(entry.pid, ()) if entry.pid is not None else ():
            _set_rank(proc, entry.rank, "layout", order["layout"])
            proc.host = proc.host or entry.host
            proc.local_rank = entry.local_rank if proc.local_rank is None else proc.local_rank
    if index.world_size is None and placed and placed == set(range(len(placed))):
        index.world_size = len(placed)  # a launcher placed every rank of the world
    for failure in index.failures:
        if failure.pid is None or failure.rank is None:
            continue
        targets = [p for _, p in by_pid.get(failure.pid, ())]
        if not targets:
            targets = [index.proc((None, failure.pid))]
        for proc in targets:
            _set_rank(proc, failure.rank, "summary", order["summary"])
    for proc in index.procs.values():
        if proc.rank is not None:
            continue
        for source in sorted(proc.sources):
            if (named := rank_in_file_name(source)) is not None:
                _set_rank(proc, named, "file-name", order["file-name"])
                break
    _quoted_last_error(index)
    # A host's lines without a pid (a pod's ``kubectl logs --prefix``, a pdsh host) are its one
    # process's when the host shows exactly one process, with a rank.
    pids_on: dict[str, list[Proc]] = defaultdict(list)
    for (h, q), p in index.procs.items():
        if h is not None and q is not None:
            pids_on[h].append(p)
    for (h, q), proc in index.procs.items():
        if h is None or q is not None or proc.rank is not None or (h, q) in shared:
            continue
        alone = pids_on.get(h, ())
        if len(alone) == 1 and alone[0].rank is not None:
            _set_rank(proc, alone[0].rank, "host", order["host"])
    # A process logs its own connections: it is the sending side of a "send" (or undirected
    # ring) line and the receiving side of a "receive" line. Weakest of all sources.
    for stream, seen in first_connect.items():
        connect = seen.connect(0) if isinstance(seen, NcclConnectRun) else seen
        owner = index.procs.get(stream)
        if owner is not None and owner.rank is None and stream != (None, None):
            own = connect.to_rank if connect.direction == "receive" else connect.from_rank
            _set_rank(owner, own, "connections", 0)
    # A bare version line (no prefix: printed to stdout by rank 0 before 2.22) belongs to the
    # only host of its file, else to the process whose NCCL line follows it.
    bare = [e for e in index.all_of(NcclVersion) if e.origin.host is None and e.origin.pid is None]
    if bare:
        # Source -> its processes, and its events in line order, once (not per version line).
        procs_of: dict[str, list[Proc]] = defaultdict(list)
        for proc in index.procs.values():
            if proc.host:
                for source in proc.sources:
                    procs_of[source].append(proc)
        wanted = {v.ref.source for v in bare}
        hosted: dict[str, list[Event]] = defaultdict(list)
        for e in events:
            if e.ref.source in wanted and e.origin.host:
                hosted[e.ref.source].append(e)
        for version in bare:
            in_file = procs_of.get(version.ref.source, [])
            if len({p.host for p in in_file}) == 1:
                for proc in in_file:
                    proc.nccl_version = proc.nccl_version or version.version
                continue
            following = [
                e for e in hosted.get(version.ref.source, ()) if e.ref.line > version.ref.line
            ]
            if following:
                first = min(following, key=lambda e: e.ref.line)
                proc = index.proc((first.origin.host, first.origin.pid))
                proc.nccl_version = proc.nccl_version or version.version
    # A version line printed once per host (rank 0 only, before 2.22) covers its host.
    by_host: dict[str | None, set[str]] = defaultdict(set)
    for proc in index.procs.values():
        if proc.nccl_version:
            by_host[proc.host].add(proc.nccl_version)
    for proc in index.procs.values():
        if proc.nccl_version is None and len(by_host.get(proc.host, ())) == 1:
            proc.nccl_version = next(iter(by_host[proc.host]))

    # Pass 2: collectives and connections per communicator. Channel lines belong to the
    # communicator whose init the process is in (the last Init START it logged).
    current: dict[Stream, str] = {}
    keys_of: dict[Stream, set[str]] = defaultdict(set)
    """stream -> its communicators (``comm_of`` by process), kept in step with ``comm_of``."""
    for (host, pid, _), k in comm_of.items():
        keys_of[(host, pid)].add(k)
    for event in events:
        if isinstance(event, NcclCommInit) and event.phase == "START":
            current[(event.origin.host, event.origin.pid)] = key_of_init[id(event)]
        elif isinstance(event, NcclCollective):
            origin = event.origin
            stream = (origin.host, origin.pid)
            found = comm_of.get((origin.host, origin.pid, event.comm))
            if found is None:
                # No Init line for this comm pointer (an excerpt): comms of one size are one,
                # and so are those of a size no line says (NCCL before 2.7 does not print
                # it; a line cut at a terminal's width loses it).
                found = f"nranks={event.nranks if event.nranks is not None else '?'}"
                comm_of[(origin.host, origin.pid, event.comm)] = found
                keys_of[stream].add(found)
            key = found
            # get, not setdefault: a default would be built for every line.
            state = index.comms.get(key)
            if state is None:
                state = index.comms[key] = CommState(key=key, nranks=event.nranks)
            state.members.setdefault(stream, None)
            queue = state.ops.get(stream)
            if queue is None:
                queue = state.ops[stream] = deque(maxlen=KEEP_OPS)
            queue.append(
                OpRecord(
                    op=event.op,
                    op_count=event.op_count,
                    count=event.count,
                    datatype=event.datatype,
                    root=event.root,
                    peer=event.peer,
                    event=event,
                )
            )
            state.op_totals[stream] = state.op_totals.get(stream, 0) + 1
        elif isinstance(event, NcclCommEnd):
            stream = (event.origin.host, event.origin.pid)
            ended = comm_of.get((event.origin.host, event.origin.pid, event.comm))
            if ended is not None:
                index.comms[ended].ended[stream] = event
        elif isinstance(event, NcclChannelConnect | NcclConnectRun | NcclConnected):
            stream = (event.origin.host, event.origin.pid)
            known = current.get(stream)
            if known is None:
                keys = keys_of.get(stream, set())
                known = next(iter(keys)) if len(keys) == 1 else None
            if known is not None:
                state = index.comms[known]
                if isinstance(event, NcclConnectRun):
                    state.connect_vias.update(row[8] for row in event.rows)
                    state.connect_channels.update(row[1] for row in event.rows)
                elif isinstance(event, NcclChannelConnect):
                    state.connect_vias[event.transport] += 1
                    state.connect_channels.add(event.channel)
                else:
                    state.connected.add(stream)
    return index


_HOST_RANKS = re.compile(r"""['"]([^'"]+)['"]: \[([\d, ]*)\]""")
"""One host's global ranks in a printed Python dict (``'worker-1': [4, 5, 6, 7]``)."""


def _placements(messages: Sequence[LogMessage]) -> Iterator[RankEntry]:
    """Read where a launcher placed its workers from the messages whose catalog fields say it.

    DeepSpeed's launcher prints ``global_rank_mapping`` (host -> global ranks, in local rank
    order); a message with ``rank`` and ``local_rank`` fields (Ray Train's worker table:
    ``(ip=10.0.1.7, pid=9921) world_rank=2, local_rank=0``) names one worker.
    """
    for message in messages:
        if not message.fields:
            continue
        values = dict(message.fields)
        mapping = values.get("global_rank_mapping")
        if mapping is not None:
            for host, listed in _HOST_RANKS.findall(mapping):
                for position, number in enumerate(re.findall(r"\d{1,7}", listed)):
                    yield RankEntry(rank=int(number), pid=None, host=host, local_rank=position)
            continue
        rank, local = values.get("rank", ""), values.get("local_rank", "")
        if rank.isdigit() and local.isdigit() and len(rank) <= 7 and len(local) <= 7:
            pid = values.get("pid", "")
            yield RankEntry(
                rank=int(rank),
                pid=int(pid) if pid.isdigit() and len(pid) <= 9 else None,
                host=values.get("host") or message.origin.host,
                local_rank=int(local),
            )
