"""Rules about the topology NCCL built: slower paths, mismatched choices, broken rings."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import replace

from logsleuth.analysis.index import EvidenceIndex
from logsleuth.analysis.rules.base import Rule
from logsleuth.analysis.topology import CommTopology, Conn, build_topologies
from logsleuth.model.base import Event
from logsleuth.model.diagnosis import Finding
from logsleuth.model.nccl import NcclEnv, NcclInterface, NcclNetDevices, NcclNetwork
from logsleuth.model.ranks import format_ranks

_VIRTUAL_IFACE = re.compile(
    r"^(?:lo|docker\d*|veth.*|virbr\d*|br-.*|cni\d*|flannel.*|cali.*|vxlan.*"
    r"|ip6tnl\d*|tunl\d*|tun\d*|tap\d*|sit\d*|gre\w*)$"
)
LOCAL_ONLY_ADDRESS = re.compile(r"^(?:127\.|169\.254\.|fe80:|::1$)", re.IGNORECASE)
"""Loopback and link-local addresses: no other host reaches them."""


def _culprits_on(index: EvidenceIndex, hosts: Sequence[str]) -> tuple[list[int], list[int]]:
    """Return (global ranks, pids) of the NCCL processes on ``hosts``."""
    wanted = set(hosts)
    procs = [p for p in index.procs.values() if p.host in wanted and "nccl" in p.families]
    return (
        sorted({p.rank for p in procs if p.rank is not None}),
        sorted({p.pid for p in procs if p.pid is not None}),
    )


def _net_conns(index: EvidenceIndex) -> list[Conn]:
    """Return the network connections of every communicator (once per index: 3 rules ask)."""
    cached = index.derived.get("net_conns")
    if not isinstance(cached, list):
        cached = index.derived["net_conns"] = [
            c
            for t in build_topologies(index)
            for c in t.conns
            if c.transport.family.startswith("NET")
        ]
    return cached


def _by_host(conns: Iterable[Conn]) -> dict[str, list[Conn]]:
    out: dict[str, list[Conn]] = defaultdict(list)
    for conn in conns:
        if conn.origin.host:
            out[conn.origin.host].append(conn)
    return out


def _env_on(index: EvidenceIndex, host: str, name: str) -> list[NcclEnv]:
    return [e for e in index.all_of(NcclEnv) if e.origin.host == host and e.name == name]


def _hostnames(topo: CommTopology, ranks: Iterable[int]) -> list[str]:
    infos = [topo.ranks.get(r) for r in ranks]
    return sorted({i.hostname for i in infos if i is not None and i.hostname})


def _pids(topo: CommTopology, ranks: Iterable[int]) -> list[int]:
    infos = [topo.ranks.get(r) for r in ranks]
    return sorted({i.pid for i in infos if i is not None and i.pid is not None})


def _clear(index: EvidenceIndex) -> list[CommTopology]:
    """Return the topologies whose rank numbers each name one process."""
    return [t for t in build_topologies(index) if not t.ambiguous]


def _global(topo: CommTopology, ranks: Iterable[int]) -> list[int]:
    return sorted(
        {
            g
            for r in ranks
            if (i := topo.ranks.get(r)) is not None and (g := i.global_rank) is not None
        }
    )


_NET_TYPES = re.compile(r"wrong type (?:3 != 4|4 != 3)\b")
"""NCCL's socket types 3 (the Socket network transport) and 4 (IB's connection set-up): an
accepting side that reads one where it expects the other met a peer on the other transport."""


def _crossed(index: EvidenceIndex) -> list[Event]:
    """The two ends of one network connection (channel, sender, receiver) logged with
    different transports (``[send] via NET/IB/7`` and ``[receive] via NET/Socket/0``) in a
    communicator no rank completed: the lines of the first such connection."""
    for topo in build_topologies(index):
        if any(e.phase == "COMPLETE" for i in topo.ranks.values() for e in i.inits):
            continue  # set-up got through: the lines disagree, the connections did not fail
        ends: dict[tuple[object, ...], list[Conn]] = defaultdict(list)
        for conn in topo.conns:
            if conn.transport.family.startswith("NET"):
                ends[(conn.channel, conn.src, conn.dst, conn.conn_index)].append(conn)
        for key in sorted(ends, key=str):
            found = ends[key]
            if len({c.transport.family for c in found}) > 1:
                return [c.event for c in found[:2]]
    return []


class SocketFallback(Rule):
    """Some hosts fell back to TCP sockets while the others use InfiniBand/RoCE.

    Symptom:
        ``Using network Socket`` (or ``NET/Socket`` channel lines) on some hosts and
        ``Using network IB`` on others; ``NET/IB : No device found.`` on the slow hosts.
        The whole job runs at the speed of the slowest link, or times out.

    Likely causes:
        Missing or broken IB drivers / ``libibverbs`` in that host's container, no RDMA
        devices mounted into the container, ``NCCL_IB_DISABLE=1`` set on some nodes, a
        down HCA.

    What to check:
        ``ibv_devinfo`` inside the container on the slow host, that ``/dev/infiniband`` is
        mounted, ``NCCL_IB_DISABLE``/``NCCL_IB_HCA`` per node, and the host's port state.
    """

    code = "LS402"
    name = "transport.socket_fallback"
    kind = "transport-degraded"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        nets: dict[str, set[str]] = defaultdict(set)
        for proc in index.procs.values():
            if proc.network and proc.host:
                kind = "Socket" if proc.network.lower().startswith("socket") else "IB"
                nets[kind].add(proc.host)
        # So do the device lines: NCCL initializes the Socket network (and logs its
        # "NET/Socket : Using [0]eth0:..." line) only where no IB device or plugin was usable.
        for iface in index.interfaces:
            if iface.role == "socket" and iface.origin.host:
                nets["Socket"].add(iface.origin.host)
        for found in index.net_devices:
            if found.transport == "IB" and found.devices and found.origin.host:
                nets["IB"].add(found.origin.host)
        # The connection lines say it too, where "Using network" was not logged.
        conns = _by_host(_net_conns(index))
        for host, mine in conns.items():
            families = {c.transport.family for c in mine}
            if families == {"NET/Socket"}:
                nets["Socket"].add(host)
            elif families - {"NET/Socket"}:
                nets["IB"].add(host)
        slow = sorted(nets.get("Socket", set()) - nets.get("IB", set()))
        if not slow or not nets.get("IB"):
            return
        events: list[Event] = [e for e in index.all_of(NcclNetwork) if e.origin.host in slow]
        events += [e for e in index.net_devices if e.origin.host in slow]
        events += [e for e in index.interfaces if e.origin.host in slow and e.role == "socket"]
        events += [c.event for h in slow for c in conns.get(h, [])[:2]]
        procs = [p for p in index.procs.values() if p.host in slow]
        refused: list[Event] = [w for w in index.warns if _NET_TYPES.search(w.message)]
        refused += _crossed(index)
        title = (
            f"{', '.join(slow)} use{'s' if len(slow) == 1 else ''} TCP sockets while the other "
            "hosts use InfiniBand"
        )
        finding = self.finding(
            severity="critical" if refused else "error",
            title=title + ("; their connections are refused" if refused else ""),
            detail=(
                f"NCCL chose the Socket network on {', '.join(slow)} and IB on "
                f"{len(nets['IB'])} other host(s). "
                + (
                    "NCCL's Socket and IB transports do not connect to each other: the two "
                    "ends of a connection chose different ones (or the IB side refused the "
                    "socket transport's connection: socketFinalizeAccept: wrong type), so the "
                    "communicator cannot form."
                    if refused
                    else "Every collective that crosses those hosts runs at TCP speed, which "
                    "looks like a hang at scale."
                )
            ),
            events=[*refused[:2], *events],
            ranks=sorted({p.rank for p in procs if p.rank is not None}),
            hosts=slow,
            pids=sorted({p.pid for p in procs if p.pid is not None}),
            confidence=0.85 if refused else 0.8,
            next_steps=(
                f"Run ibv_devinfo inside the job's container on {slow[0]}; check that /dev/infiniband is mounted.",
                "Compare NCCL_IB_DISABLE, NCCL_IB_HCA and NCCL_NET across nodes.",
            ),
        )
        yield replace(finding, kind="transport-mismatch") if refused else finding


class GdrMissing(Rule):
    """Some hosts use InfiniBand without GPU Direct RDMA while their peers use it.

    Symptom:
        Connection lines ``via NET/IB/0`` on some hosts where the others log
        ``via NET/IB/0/GDRDMA``; often ``GPU Direct RDMA Disabled for HCA 0 'mlx5_0'
        (no module)``. Data then bounces through host memory: lower bandwidth, more CPU.

    Likely causes:
        The ``nvidia-peermem`` (``nv_peer_mem``) kernel module not loaded on those hosts,
        ``NCCL_NET_GDR_LEVEL``/``NCCL_NET_GDR_READ`` set differently, a GPU and NIC on
        different PCIe root complexes, IOMMU/ACS settings.

    What to check:
        ``lsmod | grep peermem`` on the slow hosts, ``NCCL_NET_GDR_LEVEL`` per node,
        ``nvidia-smi topo -m`` for the GPU-NIC distance.
    """

    code = "LS601"
    name = "transport.gdr_missing"
    kind = "transport-degraded"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        by_host = _by_host(
            c for c in _net_conns(index) if c.transport.family not in ("NET/Socket",)
        )
        with_gdr = {h for h, cs in by_host.items() if any(c.transport.gdr for c in cs)}
        without = sorted(h for h, cs in by_host.items() if not any(c.transport.gdr for c in cs))
        if not with_gdr or not without:
            yield from self._no_module(index, with_gdr)
            return
        ranks, pids = _culprits_on(index, without)
        events = [c.event for h in without for c in by_host[h][:2]]
        yield self.finding(
            severity="warning",
            title=f"{', '.join(without)} use{'s' if len(without) == 1 else ''} the network without GPU Direct RDMA; {len(with_gdr)} other host(s) use it",
            detail=(
                f"Network connections from {', '.join(without)} carry no /GDRDMA flag while those of "
                f"{len(with_gdr)} other host(s) do: their traffic is staged through host memory."
            ),
            events=events,
            ranks=ranks,
            hosts=without,
            pids=pids,
            confidence=0.6,
            next_steps=(
                f"Run lsmod | grep -e peermem -e nv_peer_mem on {without[0]}.",
                "Compare NCCL_NET_GDR_LEVEL and NCCL_NET_GDR_READ across nodes.",
            ),
        )

    def _no_module(self, index: EvidenceIndex, with_gdr: set[str]) -> Iterable[Finding]:
        """NCCL says why it disabled GPU Direct RDMA: no GPU-peer memory module loaded."""
        notes = [
            n
            for n in index.notes
            if n.topic == "gdr"
            and dict(n.fields).get("enabled") == "0"
            and "no module" in dict(n.fields).get("for", "")
            and n.origin.host not in with_gdr
        ]
        if not notes:
            return
        hosts = sorted({n.origin.host for n in notes if n.origin.host})
        ranks, pids = _culprits_on(index, hosts)
        where = ", ".join(hosts) if hosts else "this host"
        yield self.finding(
            severity="warning",
            title=f"GPU Direct RDMA is disabled on {where}: no GPU-peer memory module is loaded",
            detail=(
                f"NCCL reports GPU Direct RDMA disabled for the HCAs of {where} (no module): the "
                "kernel module that lets the NIC read and write GPU memory (nvidia-peermem, "
                "formerly nv_peer_mem) is not loaded, so network traffic is staged through host "
                "memory: lower bandwidth and more CPU than the hardware allows."
            ),
            events=notes[:4],
            ranks=ranks,
            hosts=hosts,
            pids=pids,
            confidence=0.6,
            next_steps=(
                f"Run lsmod | grep -e peermem -e nv_peer_mem on {hosts[0] if hosts else 'the host'};"
                " load it with modprobe nvidia-peermem (it ships with the GPU driver).",
                "Inside containers the host's module is what counts: load it on the host.",
            ),
        )


class P2pDisabled(Rule):
    """GPUs of some hosts talk through shared memory where other hosts use P2P.

    Symptom:
        Intra-node connection lines ``via SHM/direct/direct`` on some hosts while the
        others log ``via P2P/CUMEM`` or ``via P2P/IPC``; often ``NCCL_P2P_DISABLE set by
        environment to 1`` on those hosts. Intra-node bandwidth drops several-fold.

    Likely causes:
        ``NCCL_P2P_DISABLE=1`` or ``NCCL_P2P_LEVEL`` set on some nodes, P2P not supported
        between those GPUs (PCIe ACS, virtualization, consumer GPUs), a different driver.

    What to check:
        ``NCCL_P2P_DISABLE``/``NCCL_P2P_LEVEL`` per node, ``nvidia-smi topo -m`` and
        ``nvidia-smi topo -p2p r`` on the slow host.
    """

    code = "LS602"
    name = "transport.p2p_disabled"
    kind = "transport-degraded"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        intra: dict[str, Counter[str]] = defaultdict(Counter)
        lines: dict[str, list[Conn]] = defaultdict(list)
        for topo in _clear(index):
            for conn in topo.conns:
                if conn.transport.family not in ("P2P", "SHM"):
                    continue  # only these two are counted below
                src, dst = topo.ranks.get(conn.src), topo.ranks.get(conn.dst)
                if src is None or dst is None or not src.host or src.host != dst.host:
                    continue
                if src.hostname:
                    intra[src.hostname][conn.transport.family] += 1
                    if conn.transport.family == "SHM":
                        lines[src.hostname].append(conn)  # quoted (event made) if cited
        p2p_hosts = {h for h, c in intra.items() if c["P2P"]}
        shm_only = sorted(h for h, c in intra.items() if c["SHM"] and not c["P2P"])
        if not p2p_hosts:
            yield from self._disabled_by_environment(index)
            return
        if not shm_only:
            return
        ranks, pids = _culprits_on(index, shm_only)
        env: list[Event] = [e for h in shm_only for e in _env_on(index, h, "NCCL_P2P_DISABLE")]
        events = env + [c.event for h in shm_only for c in lines[h][:2]]
        yield self.finding(
            severity="warning",
            title=f"{', '.join(shm_only)} connect{'s' if len(shm_only) == 1 else ''} local GPUs through shared memory; {len(p2p_hosts)} other host(s) use P2P",
            detail=(
                f"Every intra-node connection on {', '.join(shm_only)} goes via SHM while "
                f"{len(p2p_hosts)} other host(s) connect their GPUs directly (P2P)"
                + (" (NCCL_P2P_DISABLE is set there)." if env else ".")
            ),
            events=events,
            ranks=ranks,
            hosts=shm_only,
            pids=pids,
            confidence=0.6,
            next_steps=(
                "Compare NCCL_P2P_DISABLE and NCCL_P2P_LEVEL across nodes.",
                f"Run nvidia-smi topo -p2p r on {shm_only[0]}.",
            ),
        )

    def _disabled_by_environment(self, index: EvidenceIndex) -> Iterable[Finding]:
        """Every host without P2P that the environment told so (``NCCL_P2P_DISABLE=1``).

        No host to compare with: the setting itself says the GPUs of a node exchange data
        through host memory. It is often a deliberate workaround (GPUs whose P2P is broken),
        so it is a warning, and a run that shows it ended well stays healthy.
        """
        env = [
            e
            for e in index.all_of(NcclEnv)
            if e.name == "NCCL_P2P_DISABLE" and e.value.strip() == "1" and e.origin.host
        ]
        hosts = sorted({e.origin.host for e in env if e.origin.host})
        if not hosts:
            return
        ranks, pids = _culprits_on(index, hosts)
        yield self.finding(
            severity="warning",
            title=(
                f"NCCL_P2P_DISABLE=1 on {', '.join(hosts[:4])}"
                f"{f' and {len(hosts) - 4} more' if len(hosts) > 4 else ''}: GPUs of one node "
                "exchange data through host shared memory, not NVLink or PCIe P2P"
            ),
            detail=(
                "The environment disables NCCL's peer-to-peer transport, so intra-node traffic "
                "is copied through /dev/shm (SHM) at a fraction of NVLink's or PCIe P2P's "
                "bandwidth. It is often set on purpose, to work around GPUs whose P2P hangs "
                "or corrupts data; without such a reason it only slows the job."
            ),
            events=env[:4],
            ranks=ranks,
            hosts=hosts,
            pids=pids,
            confidence=0.45,
            next_steps=(
                "If P2P was disabled to work around a hang, check nvidia-smi topo -p2p r and "
                "the IOMMU/ACS settings (PCIe ACS must be off for P2P); on NVLink systems P2P "
                "should work.",
                "Otherwise unset NCCL_P2P_DISABLE (or set NCCL_P2P_LEVEL) and compare the "
                "intra-node connection lines (via P2P/...) and the bus bandwidth.",
            ),
        )


class FewerChannels(Rule):
    """Some ranks of a communicator built fewer channels than their peers.

    Symptom:
        One rank's ``N coll channels`` line (or its connection lines) counts fewer
        channels than the other ranks of the same communicator.

    Likely causes:
        ``NCCL_MIN_NCHANNELS``/``NCCL_MAX_NCHANNELS`` set on some nodes only, a different
        NCCL version or topology file (``NCCL_TOPO_FILE``) there, a GPU or NIC missing from
        that node's topology.

    What to check:
        The NCCL_* environment and NCCL version on the named hosts; ``nvidia-smi topo -m``.
    """

    code = "LS603"
    name = "transport.fewer_channels"
    kind = "transport-degraded"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        for topo in _clear(index):
            sent: dict[int, set[int]] = defaultdict(set)
            for conn in topo.conns:
                if conn.phase == "ring" and conn.reporter == conn.src:
                    sent[conn.src].add(conn.channel)
            counts: dict[int, int] = {}
            for rank, info in topo.ranks.items():
                if info.summary_channels:
                    counts[rank] = info.summary_channels
                elif info.connected is not None and sent.get(rank):
                    counts[rank] = len(sent[rank])
            if len(set(counts.values())) < 2:
                continue
            most = max(counts.values())
            low = sorted(r for r, n in counts.items() if n < most)
            yield self.finding(
                severity="warning",
                title=f"ranks {format_ranks(low)} of comm {topo.key} use fewer channels than their peers ({min(counts[r] for r in low)} vs {most})",
                detail=(
                    f"In communicator {topo.key}, ranks {format_ranks(low)} set up fewer channels "
                    f"than the {len(counts) - len(low)} other rank(s) that logged theirs ({most})."
                ),
                events=[i for r in low for i in topo.ranks[r].inits[:1]],
                ranks=_global(topo, low),
                hosts=_hostnames(topo, low),
                pids=_pids(topo, low),
                communicator=topo.key,
                confidence=0.5,
                next_steps=(
                    "Compare NCCL_MIN_NCHANNELS, NCCL_MAX_NCHANNELS, NCCL_TOPO_FILE and the NCCL "
                    "version on those hosts with the others.",
                ),
            )


class SingleHca(Rule):
    """A host sends all network traffic through one NIC while its peers spread over several.

    Symptom:
        Connection lines of one host all say ``via NET/IB/0`` while the other hosts use
        ``NET/IB/0`` ... ``NET/IB/7``; ``NET/IB : Using`` lists fewer devices there, or
        ``NCCL_IB_HCA set to mlx5_0``.

    Likely causes:
        ``NCCL_IB_HCA`` restricted on that host, HCAs down or missing from the container,
        a topology that maps every GPU to one NIC.

    What to check:
        ``NCCL_IB_HCA`` per node, ``ibv_devinfo`` / ``ibstat`` port states on that host.
    """

    code = "LS604"
    name = "transport.single_hca"
    kind = "transport-degraded"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        by_host = _by_host(c for c in _net_conns(index) if c.transport.family != "NET/Socket")
        used = {h: {c.transport.device for c in cs} for h, cs in by_host.items()}
        listed: dict[str, int] = {}
        for devices in index.all_of(NcclNetDevices):
            host = devices.origin.host
            if host and devices.transport == "IB":
                listed[host] = max(listed.get(host, 0), len(devices.devices))
        multi = {h for h, devs in used.items() if len(devs) > 1}
        single = sorted(h for h, devs in used.items() if len(devs) == 1)
        if not multi or not single:
            return
        ranks, pids = _culprits_on(index, single)
        env: list[Event] = [e for h in single for e in _env_on(index, h, "NCCL_IB_HCA")]
        events = env + [c.event for h in single for c in by_host[h][:2]]
        peers = max(len(used[h]) for h in multi)
        notes = [f"{h} lists {listed[h]} IB device(s)" for h in single if h in listed]
        yield self.finding(
            severity="warning",
            title=f"{', '.join(single)} send{'s' if len(single) == 1 else ''} all network traffic through one NIC; peers use up to {peers}",
            detail=(
                f"Every network connection of {', '.join(single)} uses one NET device while "
                f"{len(multi)} other host(s) spread theirs over up to {peers}."
                + (f" {'; '.join(notes)}." if notes else "")
                + (" NCCL_IB_HCA is set there." if env else "")
            ),
            events=events,
            ranks=ranks,
            hosts=single,
            pids=pids,
            confidence=0.5,
            next_steps=(
                "Compare NCCL_IB_HCA across nodes.",
                f"Run ibstat on {single[0]} and check every port is Active.",
            ),
        )


class VirtualInterface(Rule):
    """NCCL bootstrapped over a virtual, loopback or link-local interface in a multi-host job.

    Symptom:
        ``Bootstrap : Using docker0:172.17.0.1<0>`` (or ``lo``, ``veth...``, a ``169.254``
        or ``fe80::`` address) on some host of a job that spans several hosts. Peers on
        other hosts cannot reach that address: bootstrap hangs or ``Connection refused``.

    Likely causes:
        ``NCCL_SOCKET_IFNAME`` unset, so NCCL picked the first interface it liked; a
        container network that shows ``docker0`` or a CNI bridge first.

    What to check:
        ``ip addr`` on that host; set ``NCCL_SOCKET_IFNAME`` to the interface of the
        cluster network (``NCCL_SOCKET_IFNAME=eth0`` or ``=^docker,lo``).
    """

    code = "LS605"
    name = "bootstrap.virtual_interface"
    kind = "transport-degraded"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        hosts = {p.host for p in index.procs.values() if p.host and "nccl" in p.families}
        if len(hosts) < 2:
            return
        bad: dict[str, list[Event]] = defaultdict(list)
        names: dict[str, set[str]] = defaultdict(set)
        for iface in index.all_of(NcclInterface):
            for name, address in iface.interfaces:
                suspect = _VIRTUAL_IFACE.match(name) or LOCAL_ONLY_ADDRESS.match(address)
                if suspect and iface.origin.host:
                    bad[iface.origin.host].append(iface)
                    names[iface.origin.host].add(f"{name}:{address.split('<')[0]}")
        if not bad:
            return
        culprits = sorted(bad)
        ranks, pids = _culprits_on(index, culprits)
        used = "; ".join(f"{h}: {', '.join(sorted(names[h]))}" for h in culprits)
        yield self.finding(
            severity="warning",
            title=f"{', '.join(culprits)} bootstrap{'s' if len(culprits) == 1 else ''} over a virtual or local-only interface ({used})",
            detail=(
                f"The job spans {len(hosts)} hosts, but NCCL chose an interface other hosts "
                f"usually cannot reach ({used})."
            ),
            events=[e for h in culprits for e in bad[h]],
            ranks=ranks,
            hosts=culprits,
            pids=pids,
            confidence=0.55,
            next_steps=(
                f"Run ip addr on {culprits[0]} and set NCCL_SOCKET_IFNAME to the cluster "
                "network's interface (or exclude: NCCL_SOCKET_IFNAME=^docker,lo,veth).",
            ),
        )


class TransportMismatch(Rule):
    """The two ends of a connection, or the hosts of a communicator, chose different networks.

    Symptom:
        A ``[send]`` line ``via NET/IB/0`` whose ``[receive]`` end says ``via NET/AWS
        Libfabric/0``, or hosts of one communicator on different network plugins
        (``Using network IB`` here, ``Using network IBext_v8`` there). Such ranks cannot
        exchange data: connection setup fails or the first collective hangs.

    Likely causes:
        A net plugin (``libnccl-net.so``) present on some nodes only, ``NCCL_NET`` or
        ``NCCL_NET_PLUGIN`` set per node, different container images.

    What to check:
        ``NCCL_NET``, ``NCCL_NET_PLUGIN`` and ``LD_LIBRARY_PATH`` on every node; the
        ``NET/Plugin`` lines of each host.
    """

    code = "LS606"
    name = "transport.mismatch"
    kind = "transport-mismatch"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        for topo in _clear(index):
            net_conns = [c for c in topo.conns if c.transport.family.startswith("NET")]
            nets = Counter(c.transport.net for c in net_conns)
            if len(nets) < 2:
                continue  # one network on every line: no two ends can differ
            ends: dict[tuple[int, int, int, int | None, str], dict[str, Conn]] = defaultdict(dict)
            for conn in net_conns:
                if conn.direction:
                    key = (conn.channel, conn.src, conn.dst, conn.conn_index, conn.phase)
                    ends[key][conn.direction] = conn
            odd: list[Conn] = []
            for sides in ends.values():
                send, recv = sides.get("send"), sides.get("receive")
                if send is None or recv is None or send.transport.net == recv.transport.net:
                    continue
                if "Socket" in (send.transport.net, recv.transport.net):
                    continue  # one end fell back to sockets: LS402 names that host
                minority = min((send, recv), key=lambda c: nets[c.transport.net])
                odd.append(minority)
            if not odd:
                continue
            reporters = sorted({c.reporter for c in odd})
            used = ", ".join(f"{n} ({k})" for n, k in nets.most_common() if n)
            yield self.finding(
                severity="error",
                title=f"ranks {format_ranks(reporters)} of comm {topo.key} use a different network than the other end of their connections",
                detail=(
                    f"{len(odd)} connection(s) in communicator {topo.key} were set up with "
                    f"different networks on their two ends; networks seen: {used}."
                ),
                events=[c.event for c in odd],
                ranks=_global(topo, reporters),
                hosts=_hostnames(topo, reporters),
                pids=_pids(topo, reporters),
                communicator=topo.key,
                confidence=0.7,
                next_steps=(
                    "Compare NCCL_NET, NCCL_NET_PLUGIN and the NET/Plugin lines across nodes.",
                ),
            )


class RingInconsistent(Rule):
    """Ranks disagree about the ring or tree they are in.

    Symptom:
        Rank A logs a connection to B as its ring successor on a channel, but B logs a
        different predecessor (its ``[receive]`` line or GRAPH ``Ring`` line), or rank 0's
        ring dump says otherwise; or a ``Trees`` line names a parent that does not list the
        rank as its child. Init then hangs while connecting.

    Likely causes:
        Ranks that computed different topologies: different NCCL versions, ``NCCL_TOPO_FILE``
        / ``NCCL_GRAPH_FILE``, ``NCCL_ALGO``/``NCCL_MIN_NCHANNELS`` per node, or log lines of
        two communicators mixed up by a launcher.

    What to check:
        NCCL version and NCCL_* environment on every node; that the named ranks belong to the
        same job and communicator.
    """

    code = "LS607"
    name = "topology.ring_inconsistent"
    kind = "transport-mismatch"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        for topo in _clear(index):
            problems = ring_problems(topo) + tree_problems(topo)
            if not problems:
                continue
            ranks = sorted({r for _, rs, _ in problems for r in rs})
            texts = [t for t, _, _ in problems]
            yield self.finding(
                severity="error",
                title=f"ranks of comm {topo.key} disagree about their rings/trees: {texts[0]}"
                + (f" (and {len(texts) - 1} more)" if len(texts) > 1 else ""),
                detail="; ".join(texts[:6]) + ".",
                events=[e for _, _, es in problems for e in es],
                ranks=_global(topo, ranks),
                hosts=_hostnames(topo, ranks),
                pids=_pids(topo, ranks),
                communicator=topo.key,
                confidence=0.6,
                next_steps=(
                    "Compare the NCCL version and NCCL_* environment (NCCL_TOPO_FILE, "
                    "NCCL_GRAPH_FILE, NCCL_ALGO) of the named ranks.",
                ),
            )


Problem = tuple[str, tuple[int, ...], tuple[Event, ...]]
"""(sentence, ranks involved, lines that show it)."""


def _quoted(said: Event | Conn) -> Event:
    return said.event if isinstance(said, Conn) else said


def ring_problems(topo: CommTopology) -> list[Problem]:
    """Return ring successor/predecessor claims that contradict each other."""
    # A connection is quoted (its event made) only when it is part of a problem.
    nexts: dict[tuple[int, int], dict[int, Event | Conn]] = defaultdict(dict)
    prevs: dict[tuple[int, int], dict[int, Event | Conn]] = defaultdict(dict)
    unknown_targets: dict[tuple[int, int], set[int]] = defaultdict(set)
    # One pass picks the ring (and unmarked) lines out of all connections, in line order.
    ringish: list[Conn] = []
    for conn in topo.conns:
        phase = conn.phase
        if phase == "ring":
            ringish.append(conn)
        elif phase == "unknown":
            ringish.append(conn)
            if conn.reporter == conn.src:
                unknown_targets[(conn.channel, conn.src)].add(conn.dst)
    for conn in ringish:
        if conn.dst < 0:
            continue
        if conn.phase == "unknown" and len(unknown_targets[(conn.channel, conn.src)]) != 1:
            continue  # ring and tree lines are not told apart: only a single target is a ring
        if conn.reporter == conn.src:
            nexts[(conn.channel, conn.src)].setdefault(conn.dst, conn)
        else:
            prevs[(conn.channel, conn.dst)].setdefault(conn.src, conn)
    for (chan, me), (prev, nxt, note) in topo.graph_rings.items():
        nexts[(chan, me)].setdefault(nxt, note)
        prevs[(chan, me)].setdefault(prev, note)
    problems: list[Problem] = []
    # Find the contradictions first and sort only those: thousands of claims agree.
    contradicted = sorted(
        (chan, a, b)
        for (chan, a), targets in nexts.items()
        for b in targets
        if (claimed := prevs.get((chan, b))) and a not in claimed
    )
    for chan, a, b in contradicted:
        claimed = prevs[(chan, b)]
        wrong = min(claimed)
        problems.append(
            (
                f"channel {chan}: rank {a} sends to {b} but rank {b} receives from {wrong}",
                (a, b),
                (_quoted(nexts[(chan, a)][b]), _quoted(claimed[wrong])),
            )
        )
    for chan, dump in sorted(topo.dumps.items()):
        for a, b in zip(dump.ranks, dump.ranks[1:], strict=False):
            targets = nexts.get((chan, a), {})
            if targets and b not in targets and len(targets) == 1:
                other = next(iter(targets))
                problems.append(
                    (
                        f"channel {chan}: rank 0's ring dump puts {b} after {a} but rank {a} sends to {other}",
                        (a, b, other),
                        (dump, _quoted(targets[other])),
                    )
                )
    return problems


def tree_problems(topo: CommTopology) -> list[Problem]:
    """Return ``Trees`` parents that do not list the rank among their children."""
    trees = topo.trees
    # Find the contradictions first and sort only those: thousands of tree lines agree.
    disowned = sorted(
        (chan, me)
        for (chan, me), (_downs, up, _line) in trees.items()
        if up >= 0 and (parent := trees.get((chan, up))) is not None and me not in parent[0]
    )
    problems: list[Problem] = []
    for chan, me in disowned:
        _downs, up, line = trees[(chan, me)]
        children, _up, parent_line = trees[(chan, up)]
        problems.append(
            (
                f"channel {chan}: rank {me}'s tree parent is {up} but rank {up} lists children {list(children)}",
                (me, up),
                (line, parent_line),
            )
        )
    return problems


class RingsNotConnected(Rule):
    """Some ranks never logged ``Connected all rings`` while their peers did.

    Symptom:
        Every other rank of the communicator logs ``Connected all rings``; the named ranks
        log their channel connection lines (or only ``Init START``) and nothing after.
        Communicator init then never completes.

    Likely causes:
        A connection the rank cannot finish: an unreachable peer over the chosen network,
        a proxy thread stuck on ``/dev/shm`` or memory registration, a firewall between
        hosts, mismatched transports.

    What to check:
        The last connection line each named rank logged (its peer and transport), that
        peer's host, the host's network interfaces and ``NCCL_SOCKET_IFNAME``.
    """

    code = "LS608"
    name = "topology.rings_not_connected"
    kind = "init-stall"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        for topo in _clear(index):
            if not topo.connected_any:
                continue
            missing = sorted(
                r
                for r, i in topo.ranks.items()
                if i.inits
                and i.connected is None
                # Init COMPLETE comes after the rings connected: an excerpt left the line out.
                and not any(e.phase == "COMPLETE" for e in i.inits)
                and not ({e.ref.source for e in i.inits} & index.truncated_sources)
            )
            if not missing:
                continue
            done = sum(1 for i in topo.ranks.values() if i.connected is not None)
            # Each reporter's last connection line, in one pass (not a scan per rank).
            last_conn: dict[int, Conn] = {}
            for conn in topo.conns:
                last_conn[conn.reporter] = conn  # its event is made only for the quoted ones
            last: list[Event] = [
                quoted.event if (quoted := last_conn.get(rank)) else topo.ranks[rank].inits[-1]
                for rank in missing
            ]
            yield self.finding(
                severity="warning",
                title=f"ranks {format_ranks(missing)} of comm {topo.key} never logged Connected all rings ({done} peers did)",
                detail=(
                    f"{done} rank(s) of communicator {topo.key} finished connecting their rings; "
                    f"ranks {format_ranks(missing)} did not. Their last init line is quoted."
                ),
                events=last,
                ranks=_global(topo, missing),
                hosts=_hostnames(topo, missing),
                pids=_pids(topo, missing),
                communicator=topo.key,
                confidence=0.5,
                next_steps=(
                    "Look at the peer and transport of each quoted line: is that peer's host reachable?",
                    "Dump the stacks of those ranks (py-spy dump --native --pid PID).",
                ),
            )


class NranksMismatch(Rule):
    """Ranks of one communicator disagree about its size.

    Symptom:
        Init lines with the same ``commId`` but different ``nranks``, or ranks in ring dumps
        and connection lines that are not below ``nranks``. Init hangs or fails with
        ``Bootstrap Root : mismatch in rank count``.

    Likely causes:
        ``WORLD_SIZE``/``--nnodes``/``--nproc_per_node`` differing between nodes, a stale
        process of an earlier job joining with the same unique id, a launcher restart.

    What to check:
        The launcher arguments and ``WORLD_SIZE`` on every node; stray processes
        (``nvidia-smi``, ``ps``) from earlier runs.
    """

    code = "LS609"
    name = "topology.nranks_mismatch"
    kind = "config-mismatch"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        for topo in _clear(index):
            sizes = Counter(n for i in topo.ranks.values() for n in i.nranks)
            events: list[Event] = []
            odd: list[int] = []
            if len(sizes) > 1:
                usual = sizes.most_common(1)[0][0]
                for rank, info in sorted(topo.ranks.items()):
                    if info.nranks - {usual}:
                        odd.append(rank)
                        events += [i for i in info.inits if i.nranks != usual]
                text = f"Init lines of comm {topo.key} say nranks {' and '.join(str(n) for n in sorted(sizes))}"
            elif topo.nranks:
                beyond = sorted(
                    {r for c in topo.conns for r in (c.src, c.dst) if r >= topo.nranks}
                    | {r for d in topo.dumps.values() for r in d.ranks if r >= topo.nranks}
                )
                if not beyond:
                    continue
                odd = beyond
                events = [c.event for c in topo.conns if max(c.src, c.dst) >= topo.nranks]
                text = f"comm {topo.key} has nranks {topo.nranks} but lines name ranks {format_ranks(beyond)}"
            else:
                continue
            yield self.finding(
                severity="error",
                title=text,
                detail=f"{text}: the ranks were not started as one job of one size.",
                events=events,
                ranks=_global(topo, odd),
                hosts=_hostnames(topo, odd),
                pids=_pids(topo, odd),
                communicator=topo.key,
                confidence=0.7,
                next_steps=("Compare WORLD_SIZE, --nnodes and --nproc_per_node on every node.",),
            )


TOPOLOGY_RULES: tuple[type[Rule], ...] = (
    SocketFallback,
    GdrMissing,
    P2pDisabled,
    FewerChannels,
    SingleHca,
    VirtualInterface,
    TransportMismatch,
    RingInconsistent,
    RingsNotConnected,
    NranksMismatch,
)
"""The rules of this module, for the registry."""
