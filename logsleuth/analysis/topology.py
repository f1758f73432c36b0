"""Rebuild every communicator's topology (ranks, hosts, rings, trees, transports) as a graph.

NCCL prints its whole topology at init (spec 2.4-2.8): each rank's identity (Init lines),
the ring order per channel (rank 0's ``Channel 00/32 :`` dump, GRAPH ``Ring 00 : p -> me -> n``
lines), each rank's tree per channel (``Trees [c] d0/d1/d2->me->up``) and one line per
channel, peer and direction saying which transport carries it. This module is the only
networkx user: each communicator becomes a ``MultiDiGraph`` of ranks whose edges are the
logged connections, and leaves as the plain values of :mod:`logsleuth.model.topology`.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    import networkx as nx

from logsleuth.analysis.index import EvidenceIndex, Proc, communicator_keys
from logsleuth.model.base import Event, Origin
from logsleuth.model.diagnosis import Finding
from logsleuth.model.nccl import (
    ConnectFields,
    NcclChannelConnect,
    NcclCommInit,
    NcclConnected,
    NcclConnectRun,
    NcclGraphTree,
    NcclInfoNote,
    NcclRing,
    NcclTree,
)
from logsleuth.model.topology import (
    TRANSPORT_ORDER,
    TopoAnomaly,
    TopoHost,
    TopoLink,
    TopologyView,
    TopoRank,
    transport_label,
)

AGGREGATE_ABOVE = 64
"""Communicators with more ranks than this are drawn host to host."""
LOOSE = "(no Init line)"
"""The key of connection lines whose communicator no Init line names."""

_NET = re.compile(
    r"^NET/(?P<net>.+?)/(?P<dev>\d+)(?:\((?P<proxy>\d+)\))?(?P<flags>(?:/GDRDMA|/GDCopy|\(PCI\)|/Shared)*)$"
)


@dataclass(frozen=True, slots=True)
class Transport:
    """A decoded ``via`` text (spec 2.8).

    Attributes:
        family: ``P2P``, ``SHM``, ``NET/IB``, ``NET/Socket``, ``NET`` (a plugin), ``COLLNET``.
        net: The network name of NET/COLLNET (``IB``, ``Socket``, ``AWS Libfabric``).
        device: The NET device index (``NET/IB/3`` -> 3).
        gdr: GPU Direct RDMA in use (``/GDRDMA``).
        proxy: The PXN proxy rank (``NET/IB/3(0)``).
        mode: The P2P or SHM mode (``CUMEM``, ``IPC``, ``direct pointer``, ``direct/direct``).
    """

    family: str
    net: str | None = None
    device: int | None = None
    gdr: bool = False
    proxy: int | None = None
    mode: str | None = None


@lru_cache(maxsize=4096)
def decode_transport(via: str) -> Transport:
    """Decode the transport text after ``via`` of a connection line (spec 2.8)."""
    text = via.strip()
    if text.startswith("P2P/"):
        return Transport("P2P", mode=text[4:])
    if text.startswith("SHM/") or text == "direct shared memory":
        return Transport("SHM", mode=text[4:] if text.startswith("SHM/") else "direct")
    if text.startswith("COLLNET/"):
        parts = text.split("/")
        return Transport("COLLNET", net=parts[1], gdr="/GDRDMA" in text)
    m = _NET.match(text)
    if m:
        net = m["net"]
        family = "NET/IB" if net == "IB" else "NET/Socket" if net == "Socket" else "NET"
        return Transport(
            family,
            net=net,
            device=int(m["dev"]),
            gdr="/GDRDMA" in m["flags"],
            proxy=int(m["proxy"]) if m["proxy"] else None,
        )
    return Transport("other", mode=text)


@lru_cache(maxsize=65536)
def decode_device(value: str | None, version: str | None = None) -> tuple[str, str] | None:
    """Say what the ``[x]`` device field of a connection line is: (``busId``|``nvmlDev``, value).

    2.3.5-2.4.8 print a device index, 2.5.6-2.18.1 the packed PCI bus id in hex, 2.18.3+
    the nvmlDev (spec 2.8). Without a version, a bus id is told by its length: packed bus ids
    have at least four hex digits (``1000`` = 0000:01:00.0), device indices fewer.
    """
    if not value:
        return None
    if version:
        nums = tuple(int(x) for x in re.findall(r"\d+", version)[:3])
        if nums[:2] >= (2, 5) and nums < (2, 18, 3):
            return ("busId", value.lower())
        return ("nvmlDev", value)
    if len(value) >= 4 or any(c in "abcdefABCDEF" for c in value):
        return ("busId", value.lower())
    return ("nvmlDev", value)


def _device_era(proc: Proc | None) -> str | None:
    """Return a release that reads the ``[x]`` field like ``proc``'s NCCL, or None if unknown.

    The version line decides; without one, the release range inferred from the stream's
    line shapes decides when it lies wholly inside one era of the field.
    """
    if proc is None:
        return None
    if proc.nccl_version:
        return proc.nccl_version
    if proc.runs_nccl("2.5.6", "2.18.1"):
        return "2.5.6"
    if proc.runs_nccl("2.18.3", "") or proc.runs_nccl("", "2.4.8"):
        return "2.18.3"
    return None


class Conn:
    """One logged connection line, decoded, with the init phase it was logged in.

    ``phase`` is ``ring`` (before the reporter's ``Connected all rings``), ``tree`` (before
    ``Connected all trees``), ``p2p`` (after both) or ``unknown`` (no such marker logged).
    The reporter is the sender, except for ``[receive]`` NET lines. A connection read in a
    run (:class:`NcclConnectRun`) makes its :attr:`event` only when a finding quotes it.
    """

    __slots__ = (
        "_event",
        "_row",
        "_run",
        "channel",
        "conn_index",
        "direction",
        "dst",
        "from_dev",
        "origin",
        "phase",
        "src",
        "to_dev",
        "transport",
        "via",
    )

    def __init__(
        self,
        row: ConnectFields,
        phase: str,
        origin: Origin,
        event: NcclChannelConnect | None = None,
        run: NcclConnectRun | None = None,
        row_index: int = 0,
    ) -> None:
        (
            self.channel,
            self.conn_index,
            self.src,
            self.from_dev,
            self.dst,
            self.to_dev,
            self.direction,
            self.via,
        ) = row
        self.transport = decode_transport(self.via)
        self.phase = phase
        self.origin = origin
        self._event = event
        self._run = run
        self._row = row_index

    @property
    def event(self) -> NcclChannelConnect:
        """The line as an event (made on first use for a connection read in a run)."""
        if self._event is None:
            assert self._run is not None
            self._event = self._run.connect(self._row)
        return self._event

    @property
    def reporter(self) -> int:
        """Return the rank that logged the line."""
        return self.dst if self.direction == "receive" else self.src


@dataclass(slots=True)
class RankInfo:
    """What a communicator's rank said about itself and where it ran."""

    rank: int
    hostname: str | None = None
    host: str | None = None
    """The host label (``name`` or ``name (address)`` when names collide)."""
    address: str | None = None
    pid: int | None = None
    global_rank: int | None = None
    cuda_dev: int | None = None
    nvml_dev: int | None = None
    bus_id: str | None = None
    nics: tuple[str, ...] = ()
    network: str | None = None
    nranks: set[int] = field(default_factory=set)
    inits: list[NcclCommInit] = field(default_factory=list)
    connected: NcclConnected | None = None
    summary_channels: int | None = None


@dataclass(slots=True)
class CommTopology:
    """One communicator rebuilt: its ranks, rings, trees and connections."""

    key: str
    nranks: int | None
    ranks: dict[int, RankInfo]
    conns: list[Conn]
    dumps: dict[int, NcclRing]
    """channel -> rank 0's ring dump."""
    graph_rings: dict[tuple[int, int], tuple[int, int, NcclInfoNote]]
    """(channel, rank) -> (prev, next, line) from GRAPH ``Ring`` lines."""
    trees: dict[tuple[int, int], tuple[tuple[int, ...], int, NcclTree | NcclGraphTree]]
    """(channel, rank) -> (down ranks, up rank, line), from ``Trees`` or GRAPH ``Tree`` lines."""
    connected_any: bool = False
    ambiguous: bool = False
    """Some rank number was claimed by several processes: communicators that the logs do not
    tell apart were merged, so rank-level checks would compare unrelated ranks."""
    _graph: nx.MultiDiGraph | None = None
    _by_channel: dict[int, list[Conn]] | None = None
    _ring: list[Conn] | None = None
    _labels: dict[int, str] | None = None
    _by_stream: dict[tuple[str | None, int | None], list[RankInfo]] | None = None

    @property
    def graph(self) -> nx.MultiDiGraph:
        """The communicator as a networkx graph: ranks, one edge per connection line.

        Built on first use: no view or rule needs it, and at 4,096 ranks its half a million
        edges cost more memory than the connections themselves.
        """
        if self._graph is None:
            self._graph = _build_graph(self)
        return self._graph

    def hosts(self) -> dict[str, list[int]]:
        """Return host label -> ranks on it."""
        out: dict[str, list[int]] = defaultdict(list)
        for rank in sorted(self.ranks):
            out[self.ranks[rank].host or "?"].append(rank)
        return dict(out)

    def host_of(self, rank: int) -> str:
        """Return the host label of ``rank`` (``?`` when unknown; asked once the build is done)."""
        labels = self._labels
        if labels is None:
            labels = self._labels = {r: info.host or "?" for r, info in self.ranks.items()}
        return labels.get(rank, "?")

    def ring_conns(self) -> list[Conn]:
        """Return the connections that make up the rings (ring or unknown phase)."""
        if self._ring is None:
            self._ring = [c for c in self.conns if c.phase in ("ring", "unknown")]
        return self._ring

    def ring_conns_of(self, channel: int) -> list[Conn]:
        """Return the ring connections of one channel."""
        if self._by_channel is None:
            grouped: dict[int, list[Conn]] = defaultdict(list)
            for conn in self.ring_conns():
                grouped[conn.channel].append(conn)
            self._by_channel = dict(grouped)
        return self._by_channel.get(channel, [])

    def channels(self) -> int | None:
        """Return the number of ring channels, from the best evidence available."""
        if self.dumps:
            declared = {d.nchannels for d in self.dumps.values() if d.nchannels}
            return max(declared) if declared else len(self.dumps)
        summary = [r.summary_channels for r in self.ranks.values() if r.summary_channels]
        if summary:
            return max(summary)
        chans = {c.channel for c in self.ring_conns()}
        return len(chans) or None

    def ring_order(self, channel: int) -> tuple[int, ...]:
        """Return the ring of ``channel`` in order from rank 0, as far as it is known.

        Rank 0's dump is used when complete; otherwise the next-hops each rank reported are
        followed from rank 0 (or the lowest rank) while each step has one way on.
        """
        dump = self.dumps.get(channel)
        if dump is not None and not dump.truncated and len(dump.ranks) == self.nranks:
            return dump.ranks
        # A successor map (not a networkx graph: at 4,096 ranks, 32 channels of 4,096
        # edges each cost more to build than the walk needs).
        ring: dict[int, set[int]] = defaultdict(set)
        nodes: set[int] = set()
        for (chan, rank), (_prev, nxt, _e) in self.graph_rings.items():
            if chan == channel:
                ring[rank].add(nxt)
                nodes.update((rank, nxt))
        for conn in self.ring_conns_of(channel):
            if conn.transport.family != "COLLNET":
                ring[conn.src].add(conn.dst)
                nodes.update((conn.src, conn.dst))
        if dump is not None:
            nodes.update(dump.ranks)
            for a, b in zip(dump.ranks, dump.ranks[1:], strict=False):
                ring[a].add(b)
        if not nodes:
            return ()
        start = 0 if 0 in nodes else min(nodes)
        order = [start]
        seen = {start}
        while True:
            succ = sorted(s for s in ring.get(order[-1], ()) if s not in seen)
            if len(succ) != 1:
                break
            order.append(succ[0])
            seen.add(succ[0])
        return tuple(order)


# ---- attribution of init-time lines to communicators


def _stream_key(event: Event) -> tuple[str, str | None, int | None]:
    return (event.ref.source, event.origin.host, event.origin.pid)


class _Attributor:
    """Find the communicator a per-process init line belongs to (spec 2.7 ordering).

    A line belongs to the communicator whose ``Init START`` the same process logged last
    before it in the same file; without a START (NCCL < 2.18.3), to the one whose
    ``Init COMPLETE`` follows it; else to the only communicator the process belongs to.
    """

    def __init__(self, index: EvidenceIndex) -> None:
        self.inits: list[tuple[NcclCommInit, str]] = []
        starts: dict[tuple[str, str | None, int | None], list[tuple[int, str]]] = defaultdict(list)
        completes: dict[tuple[str, str | None, int | None], list[tuple[int, str]]] = defaultdict(
            list
        )
        self.comms_of: dict[tuple[str | None, int | None], set[str]] = defaultdict(set)
        all_inits = index.all_of(NcclCommInit)
        # The index keys communicators by the same function: every view agrees on the set.
        for init, key in zip(all_inits, communicator_keys(all_inits), strict=True):
            self.inits.append((init, key))
            target = starts if init.phase == "START" else completes
            target[_stream_key(init)].append((init.ref.line, key))
            self.comms_of[(init.origin.host, init.origin.pid)].add(key)
        self.starts = {k: sorted(v) for k, v in starts.items()}
        self.completes = {k: sorted(v) for k, v in completes.items()}

    def comm_of(self, event: Event) -> str | None:
        keys = self.comms_of.get((event.origin.host, event.origin.pid), set())
        if len(keys) == 1:
            return next(iter(keys))  # the usual case: one communicator per process
        stream = _stream_key(event)
        line = event.ref.line
        before = self.starts.get(stream, [])
        i = bisect_left(before, (line, ""))
        if i > 0:
            return before[i - 1][1]
        after = self.completes.get(stream, [])
        j = bisect_left(after, (line, ""))
        if j < len(after):
            return after[j][1]
        return None


# ---- building


def _address(text: str) -> str:
    """Return an interface address without NCCL's ``<port>`` suffix."""
    return text.split("<", 1)[0]


def _host_addresses(index: EvidenceIndex) -> dict[tuple[str, str | None, int | None], str]:
    """Return (source, host, pid) -> the bootstrap (or OOB) address that process used."""
    found: dict[tuple[str, str | None, int | None], str] = {}
    for iface in index.interfaces:
        if iface.role in ("bootstrap", "oob") and iface.interfaces:
            found.setdefault(_stream_key(iface), _address(iface.interfaces[0][1]))
    for devices in index.net_devices:
        if devices.oob is not None:
            found.setdefault(_stream_key(devices), _address(devices.oob[1]))
    return found


def _label_hosts(ranks: Iterable[RankInfo]) -> None:
    """Label hosts by name, adding the address where one name stands for several machines."""
    infos = list(ranks)
    addresses: dict[str, set[str]] = defaultdict(set)
    for info in infos:
        if info.hostname and info.address:
            addresses[info.hostname].add(info.address)
    for info in infos:
        if info.hostname is None:
            continue
        known = addresses.get(info.hostname, set())
        if len(known) > 1:
            info.host = f"{info.hostname} ({info.address or '?'})"
        else:
            info.host = info.hostname
            if info.address is None and known:
                info.address = next(iter(known))


def _phase_markers(
    connected: Sequence[NcclConnected],
) -> dict[tuple[str, str | None, int | None, int | None], tuple[int | None, int | None]]:
    """Return reporter stream -> (line of ``Connected all rings``, of ``Connected all trees``)."""
    marks: dict[tuple[str, str | None, int | None, int | None], list[int | None]] = {}
    for event in connected:
        key = (*_stream_key(event), event.origin.dev)
        slot = marks.setdefault(key, [None, None])
        which = 0 if event.what == "all rings" else 1 if event.what == "all trees" else None
        if which is not None and slot[which] is None:
            slot[which] = event.ref.line
    return {k: (v[0], v[1]) for k, v in marks.items()}


def _phase(
    event: NcclChannelConnect | NcclConnectRun,
    marks: dict[tuple[str, str | None, int | None, int | None], tuple[int | None, int | None]],
) -> str:
    rings, trees = marks.get((*_stream_key(event), event.origin.dev), (None, None))
    line = event.ref.line
    if rings is None:
        return "unknown"
    if line < rings:
        return "ring"
    if trees is None or line < trees:
        return "tree"
    return "p2p"


def _rank_in(topo: CommTopology, event: Event) -> int | None:
    """Return the communicator rank of the process (and GPU) that logged ``event``."""
    host, pid, dev = event.origin.host, event.origin.pid, event.origin.dev
    if topo._by_stream is None:
        streams: dict[tuple[str | None, int | None], list[RankInfo]] = defaultdict(list)
        for info in topo.ranks.values():
            streams[(info.hostname, info.pid)].append(info)
        topo._by_stream = dict(streams)
    mine = topo._by_stream.get((host, pid), [])
    if len(mine) == 1:
        return mine[0].rank
    by_dev = [r for r in mine if r.cuda_dev is not None and r.cuda_dev == dev]
    return by_dev[0].rank if len(by_dev) == 1 else None


def _new_topology(key: str) -> CommTopology:
    return CommTopology(
        key=key, nranks=None, ranks={}, conns=[], dumps={}, graph_rings={}, trees={}
    )


def build_topologies(index: EvidenceIndex) -> tuple[CommTopology, ...]:
    """Rebuild every communicator that logged init or connection lines.

    Connection lines no Init line accounts for (an excerpt) form one more topology keyed
    :data:`LOOSE`. The result is kept with the index.
    """
    cached = index.derived.get("topologies")
    if cached is None:
        # Kept with the index (not in a module global that would keep it alive).
        cached = index.derived["topologies"] = _build(index)
    return cast(tuple[CommTopology, ...], cached)


def _build(index: EvidenceIndex) -> tuple[CommTopology, ...]:
    attributor = _Attributor(index)
    addresses = _host_addresses(index)
    nics: dict[tuple[str | None, int | None], tuple[str, ...]] = {}
    for devices in index.net_devices:
        nics.setdefault((devices.origin.host, devices.origin.pid), devices.devices)
    topos: dict[str, CommTopology] = {}
    for init, key in attributor.inits:
        topo = topos.get(key)
        if topo is None:
            topo = topos[key] = _new_topology(key)
        info = topo.ranks.get(init.rank)
        if info is None:
            info = topo.ranks[init.rank] = RankInfo(rank=init.rank)
        info.inits.append(init)
        info.nranks.add(init.nranks)
        info.hostname = info.hostname or init.origin.host
        info.pid = info.pid if info.pid is not None else init.origin.pid
        info.cuda_dev = info.cuda_dev if info.cuda_dev is not None else init.cuda_dev
        info.nvml_dev = info.nvml_dev if info.nvml_dev is not None else init.nvml_dev
        info.bus_id = info.bus_id or init.bus_id
        info.address = info.address or addresses.get(_stream_key(init))
        stream = (init.origin.host, init.origin.pid)
        info.nics = info.nics or nics.get(stream, ())
        proc = index.procs.get(stream)
        if proc is not None:
            info.network = info.network or proc.network
    world = _world_key(index)
    for topo in topos.values():
        topo.ambiguous = any(
            len({(i.origin.host, i.origin.pid) for i in r.inits}) > 1 for r in topo.ranks.values()
        )
        sizes = Counter(n for r in topo.ranks.values() for n in r.nranks)
        topo.nranks = sizes.most_common(1)[0][0] if sizes else None
        per_stream = Counter((r.hostname, r.pid) for r in topo.ranks.values())
        for info in topo.ranks.values():
            proc = index.procs.get((info.hostname, info.pid))
            if topo.key == world:
                info.global_rank = info.rank
            elif proc is not None and per_stream[(info.hostname, info.pid)] == 1:
                # A process driving several GPUs has one stream but several ranks: no way to
                # tell which of them is its global rank.
                info.global_rank = proc.rank

    connected = index.all_of(NcclConnected)
    marks = _phase_markers(connected)
    loose = _new_topology(LOOSE)

    def target(event: Event) -> CommTopology:
        key = attributor.comm_of(event)
        return topos[key] if key is not None and key in topos else loose

    for event in index.all_of(NcclChannelConnect):
        row = (
            event.channel,
            event.conn_index,
            event.from_rank,
            event.from_dev,
            event.to_rank,
            event.to_dev,
            event.direction,
            event.transport,
        )
        target(event).conns.append(Conn(row, _phase(event, marks), event.origin, event))
    # A run holds one writer's consecutive lines: no Init or Connected line of that writer
    # stands between them, so its communicator and its phase are those of its first line.
    for run in index.all_of(NcclConnectRun):
        conns = target(run).conns
        phase, origin = _phase(run, marks), run.origin
        conns.extend(
            Conn(row[1:9], phase, origin, run=run, row_index=i) for i, row in enumerate(run.rows)
        )
    for ring in index.all_of(NcclRing):
        target(ring).dumps.setdefault(ring.channel, ring)
    for tree in index.all_of(NcclTree):
        topo = target(tree)
        for channel, d0, d1, d2, me, up in tree.channels:
            downs = tuple(d for d in (d0, d1, d2) if d >= 0)
            topo.trees.setdefault((channel, me), (downs, up, tree))
    # GRAPH ``Tree`` lines (NCCL_DEBUG_SUBSYS=GRAPH) say the same per channel; the ``Trees``
    # line, when both are logged, was taken first.
    for gtree in index.all_of(NcclGraphTree):
        downs = tuple(d for d in gtree.down if d >= 0)
        target(gtree).trees.setdefault((gtree.channel, gtree.me), (downs, gtree.up, gtree))
    for note in index.notes:
        if note.topic == "graph-ring":
            chan, prev, me, nxt = (
                int(note.field(k) or -1) for k in ("channel", "prev", "me", "next")
            )
            target(note).graph_rings.setdefault((chan, me), (prev, nxt, note))
        elif note.topic == "channels-summary" and note.field("coll"):
            topo = target(note)
            rank = _rank_in(topo, note)
            if rank is not None:
                topo.ranks[rank].summary_channels = int(note.field("coll") or 0)
    for done in connected:
        if done.what != "all rings":
            continue
        topo = target(done)
        topo.connected_any = True
        rank = _rank_in(topo, done)
        if rank is not None and topo.ranks[rank].connected is None:
            topo.ranks[rank].connected = done

    result = [topos[k] for k in sorted(topos)]
    if loose.conns or loose.dumps or loose.trees:
        result.append(loose)
    for topo in result:
        _fill_from_lines(topo, index)
        _label_hosts(topo.ranks.values())
    return tuple(result)


def _world_key(index: EvidenceIndex) -> str | None:
    """Return the key of the world communicator (the largest), as the index chose it."""
    if not index.comms:
        return None
    largest = max(index.comms.values(), key=lambda s: (s.nranks or 0, len(s.members), s.key))
    return largest.key if largest.nranks == index.world_size else None


def _fully_known(info: RankInfo) -> bool:
    """Say whether a connection line can still teach anything about this rank."""
    return info.hostname is not None and info.bus_id is not None and info.nvml_dev is not None


def _fill_from_lines(topo: CommTopology, index: EvidenceIndex) -> None:
    """Add ranks only connection lines name, and device ids only the ``[x]`` fields give."""
    eras: dict[tuple[str | None, int | None], str | None] = {}
    # Ranks whose host and devices are known learn nothing from more lines (at scale, the
    # Init lines told nearly everything): one set lookup per line end.
    known = {rank for rank, info in topo.ranks.items() if _fully_known(info)}
    for conn in topo.conns:
        if conn.src in known and conn.dst in known:
            continue
        for rank, dev in ((conn.src, conn.from_dev), (conn.dst, conn.to_dev)):
            if rank < 0 or rank in known:
                continue
            info = topo.ranks.get(rank)
            if info is None:
                info = topo.ranks[rank] = RankInfo(rank=rank)
            elif _fully_known(info):
                known.add(rank)
                continue
            if rank == conn.reporter and info.hostname is None:
                info.hostname = conn.origin.host
                info.pid = conn.origin.pid
            elif info.hostname is None and conn.transport.family in ("P2P", "SHM"):
                # P2P and SHM only join GPUs of one machine: the peer is on the reporter's host.
                info.hostname = conn.origin.host
            stream = (conn.origin.host, conn.origin.pid)
            if stream not in eras:
                eras[stream] = _device_era(index.procs.get(stream))
            decoded = decode_device(dev, eras[stream])
            if decoded is None:
                continue
            what, value = decoded
            if what == "busId" and info.bus_id is None:
                info.bus_id = value
            elif what == "nvmlDev" and info.nvml_dev is None and value.isdigit():
                info.nvml_dev = int(value)


def _build_graph(topo: CommTopology) -> nx.MultiDiGraph:
    import networkx as nx  # loaded only when a graph is asked for

    graph = nx.MultiDiGraph(key=topo.key)
    for rank, info in sorted(topo.ranks.items()):
        graph.add_node(rank, host=info.host, pid=info.pid, bus_id=info.bus_id)
    for conn in topo.conns:
        if conn.dst < 0:
            continue
        graph.add_edge(
            conn.src,
            conn.dst,
            channel=conn.channel,
            family=conn.transport.family,
            phase=conn.phase,
            reporter=conn.reporter,
        )
    return graph


# ---- views


def _links(topo: CommTopology, aggregated: bool, bad: set[str]) -> tuple[TopoLink, ...]:
    """Collapse ring connections into links: per rank pair, or per host pair when large."""
    groups: dict[tuple[str, str, str], tuple[set[int], Counter[str]]] = {}
    for conn in topo.ring_conns():
        if conn.dst < 0:
            continue
        if aggregated:
            src, dst = topo.host_of(conn.src), topo.host_of(conn.dst)
        else:
            src, dst = str(conn.src), str(conn.dst)
        key = (src, dst, conn.transport.family)
        group = groups.get(key)
        if group is None:
            group = groups[key] = (set(), Counter())
        group[0].add(conn.channel)
        group[1][conn.via] += 1
    links = []
    for (src, dst, family), (chans, vias) in sorted(groups.items()):
        detail = sorted(vias.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
        if aggregated:
            anomalous = (src in bad or dst in bad) and family not in ("P2P", "SHM")
        else:
            anomalous = (
                topo.host_of(int(src)) in bad or topo.host_of(int(dst)) in bad
            ) and family not in ("P2P", "SHM")
        links.append(
            TopoLink(
                src=src,
                dst=dst,
                transport=family,
                detail=detail,
                channels=len(chans),
                anomalous=anomalous,
            )
        )
    return tuple(links)


def _anomalies(topo: CommTopology, findings: Sequence[Finding]) -> tuple[TopoAnomaly, ...]:
    """Return the findings that concern this communicator's ranks or hosts."""
    hostnames = {r.hostname for r in topo.ranks.values() if r.hostname}
    by_global = {r.global_rank: r.rank for r in topo.ranks.values() if r.global_rank is not None}
    out = []
    for f in findings:
        if f.communicator is not None and f.communicator != topo.key:
            continue
        hosts = tuple(sorted(h for h in f.hosts if h in hostnames))
        if f.communicator is None and not hosts:
            continue
        if not f.code.startswith(("LS6", "LS402", "LS301")):
            continue
        ranks = tuple(sorted({by_global[r] for r in f.ranks if r in by_global}))
        out.append(TopoAnomaly(code=f.code, kind=f.kind, text=f.title, hosts=hosts, ranks=ranks))
    return tuple(out)


def build_topology_views(
    index: EvidenceIndex, findings: Sequence[Finding] = ()
) -> tuple[TopologyView, ...]:
    """Return the view of every rebuilt communicator, anomalies taken from ``findings``."""
    views = []
    for topo in build_topologies(index):
        anomalies = _anomalies(topo, findings)
        bad_hostnames = {h for a in anomalies for h in a.hosts}
        bad_ranks = {r for a in anomalies for r in a.ranks}
        bad = {r.host or "?" for r in topo.ranks.values() if r.hostname in bad_hostnames}
        aggregated = len(topo.ranks) > AGGREGATE_ABOVE
        chans_of: dict[int, set[int]] = defaultdict(set)
        for conn in topo.ring_conns():
            chans_of[conn.reporter].add(conn.channel)
        ranks = tuple(
            TopoRank(
                rank=info.rank,
                host=info.host,
                pid=info.pid,
                global_rank=info.global_rank,
                cuda_dev=info.cuda_dev,
                nvml_dev=info.nvml_dev,
                bus_id=info.bus_id,
                nics=info.nics,
                network=info.network,
                channels=info.summary_channels or len(chans_of.get(info.rank, ())) or None,
                connected_rings=(
                    (info.connected is not None) if (info.inits and topo.connected_any) else None
                ),
                anomalous=info.rank in bad_ranks or (info.host or "?") in bad,
            )
            for info in sorted(topo.ranks.values(), key=lambda i: i.rank)
        )
        host_nets: dict[str, Counter[str]] = defaultdict(Counter)
        for conn in topo.conns:
            if conn.transport.family.startswith("NET"):
                host_nets[topo.host_of(conn.reporter)][conn.transport.family] += 1
        hosts = []
        for label, members in sorted(topo.hosts().items()):
            infos = [topo.ranks[r] for r in members]
            families = host_nets.get(label, Counter())
            hosts.append(
                TopoHost(
                    name=label,
                    address=next((i.address for i in infos if i.address), None),
                    ranks=tuple(members),
                    nics=next((i.nics for i in infos if i.nics), ()),
                    network=families.most_common(1)[0][0] if families else None,
                    anomalous=label in bad,
                )
            )
        transports: Counter[str] = Counter()
        for via, lines in Counter(c.via for c in topo.conns).items():
            transports[transport_label(via)] += lines
        rings = tuple(
            (c, order)
            for c in sorted({c.channel for c in topo.ring_conns()} | set(topo.dumps))
            if (order := topo.ring_order(c))
        )
        views.append(
            TopologyView(
                id=topo.key,
                nranks=topo.nranks,
                ranks=ranks,
                hosts=tuple(hosts),
                channels=topo.channels(),
                rings=rings,
                trees=len({c for c, _ in topo.trees}),
                transports=tuple(sorted(transports.items(), key=lambda kv: (-kv[1], kv[0]))),
                links=_links(topo, aggregated, bad),
                aggregated=aggregated,
                anomalies=anomalies,
            )
        )
    return tuple(views)


def family_rank(family: str) -> int:
    """Return the position of a transport family from fastest (0) to slowest."""
    return TRANSPORT_ORDER.index(family) if family in TRANSPORT_ORDER else len(TRANSPORT_ORDER)
