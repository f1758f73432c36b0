"""Rules about reaching peers: bootstrap connects, IB/RoCE completions, closed connections."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable

from logsleuth.analysis.correlate import host_of_address, host_of_peer, own_deaths
from logsleuth.analysis.index import EvidenceIndex, Stream
from logsleuth.analysis.rules.base import Rule, culprits, describe
from logsleuth.analysis.rules.streams import first_by_time, stream_of, traces_of
from logsleuth.analysis.rules.topology import LOCAL_ONLY_ADDRESS
from logsleuth.knowledge import lookup
from logsleuth.model.base import Event
from logsleuth.model.diagnosis import Finding
from logsleuth.model.nccl import NcclCommInit, NcclInterface, NcclWarn
from logsleuth.model.torch import WatchdogError

_ADDRESS = re.compile(
    r"(\d{1,3}(?:\.\d{1,3}){3}|\[?[0-9a-fA-F:]+:[0-9a-fA-F:%\w]*\]?"
    r"|(?<![\w.\-])[A-Za-z][\w\-]*(?:\.[A-Za-z][\w\-]*)*)<(\d+)>"
)
"""A peer's address as NCCL prints it: ``10.0.0.2<43211>``, ``[fe80::1%ib0]<5000>``, or a
reverse-DNS name where NCCL asks for no numeric form (``gpu-node-12.cluster.local<38821>``)."""
REMOTE_CLOSED = re.compile(
    r"remote process exited|Broken pipe|Connection reset by peer|Connection closed by remote"
    r"|peer closed|socketProgress(?!.*(?:timed out|No route to host|unreachable))"
    # A recv that failed because the network timed out or lost its route is a network error.
    r"|Call to recv from \S+ failed(?! : (?:Connection timed out|No route to host|Network is unreachable))",
    re.IGNORECASE,
)


_CONNECT_CALL = re.compile(
    r"[Cc]onnect to\b|[Cc]onnect\(|Start[Cc]onnect|Poll[Cc]onnect|Finalize[Cc]onnect"
    r"|[Cc]onnect(?:ion)? refused|[Cc]onnect failed|connect returned"
)
_DATA_PATH = re.compile(r"net_socket\.cc|net_ib\.cc|proxy\.cc|transport/net\.cc")


class BootstrapFailure(Rule):
    """Ranks cannot reach each other or the bootstrap root while creating a communicator.

    Symptom:
        ``NCCL WARN ... Connect to 10.0.0.1<1234> failed : Connection refused`` (or timed
        out, no route) with back-traces through ``bootstrap.cc`` and ``init.cc``; ``Call to
        connect returned Connection refused, retrying`` lines before it.

    Likely causes:
        The root's address is wrong or stale (a reused ``file://`` rendezvous file, wrong
        ``MASTER_ADDR``), a firewall between nodes, NCCL choosing an interface other ranks
        cannot reach (docker0, a second NIC), the root process already gone.

    What to check:
        That the address named is one of the job's hosts (``ip addr`` on each node); pin
        the interface with ``NCCL_SOCKET_IFNAME``; delete stale rendezvous files; test
        connectivity (``nc -zv ADDR PORT``) between the nodes.
    """

    code = "LS201"
    name = "bootstrap.connect"
    kind = "bootstrap-failure"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        completed = {
            (i.origin.host, i.origin.pid)
            for c in index.comms.values()
            for i in c.completed.values()
        }
        failing: dict[Stream, list[Event]] = defaultdict(list)
        targets: dict[Stream, set[str]] = defaultdict(set)
        for warn in index.warns:
            if warn.family != "socket":
                continue
            text = warn.message
            # A connect call that failed ("Connect to", socketPollConnect, "Connection
            # refused"), not a recv whose errno text reads "Connection timed out".
            stream = stream_of(warn)
            traces = traces_of(index, stream)
            if any(_DATA_PATH.search(t.file) for t in traces):
                continue  # the data path (NET/Socket transport, proxy): not the bootstrap
            if not _CONNECT_CALL.search(text) and not any("bootstrap" in t.file for t in traces):
                continue
            in_bootstrap = any("bootstrap" in t.file for t in traces) or stream not in completed
            if not in_bootstrap:
                continue
            failing[stream].append(warn)
            failing[stream].extend(t for t in traces if "bootstrap" in t.file or "init" in t.file)
            for m in _ADDRESS.finditer(text):
                targets[stream].add(f"{m.group(1)}:{m.group(2)}")
        retries: dict[Stream, list[Event]] = defaultdict(list)
        for note in (e for e in index.notes if e.topic == "connect-retry"):
            retries[stream_of(note)].append(note)
        for stream, notes in retries.items():
            if stream not in failing:
                failing[stream].extend(notes)
        if not failing:
            return
        streams = sorted(failing, key=str)
        ranks, hosts, pids = culprits(index, streams)
        addresses = sorted({a for s in streams for a in targets[s]})
        events = [e for s in streams for e in failing[s]]
        yield self.finding(
            severity="critical",
            title=(
                f"{describe(index, streams)} cannot reach "
                + (", ".join(addresses) if addresses else "its peers")
                + " during communicator bootstrap"
            ),
            detail=(
                f"Connecting to {', '.join(addresses) or 'the bootstrap root'} failed on "
                f"{describe(index, streams)} while creating the communicator (bootstrap); init "
                "never completes. Check that the address belongs to a live rank 0 of this job."
            ),
            events=events,
            ranks=ranks,
            hosts=hosts,
            pids=pids,
            confidence=0.85,
            next_steps=(
                f"Check that {addresses[0] if addresses else 'the address'} is one of this job's "
                "hosts (ip addr on each node); a stale file:// rendezvous file or a wrong "
                "MASTER_ADDR points ranks at a machine that is not in the job.",
                "Pin the interface with NCCL_SOCKET_IFNAME (e.g. =eth0 or =^lo,docker) and test "
                "connectivity with nc -zv ADDR PORT between the nodes; look for firewalls.",
                "Make sure rank 0 is still alive when the others connect (its log and exit code).",
            ),
        )


class IbCompletionError(Rule):
    """An InfiniBand/RoCE work completion failed; later errors on that connection are its cascade.

    Symptom:
        ``NET/IB : Got completion from peer X with status=12 ... vendor err 129`` (retry
        exceeded) or other non-zero status, usually followed by many ``status=5`` (work
        request flushed) completions and ``-> 6`` back-traces.

    Likely causes:
        status 12 (transport retry exceeded): the peer's port went down or is unreachable
        (cable, switch, link flap, RoCE misconfiguration such as a wrong GID index or
        missing PFC/ECN); status 5 is only the queue pair being flushed after the first error.

    What to check:
        ``ibstat``/``ibv_devinfo`` port state and counters on both hosts, switch logs, the
        GID index (``NCCL_IB_GID_INDEX``) and that RoCE traffic class/PFC is consistent;
        ``ibping``/``ib_write_bw`` between the two GIDs named.
    """

    code = "LS202"
    name = "network.ib_completion"
    kind = "network-error"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        warns = first_by_time(w for w in index.warns if w.family == "ib-completion")
        if not warns:
            return
        primary = next((w for w in warns if w.field("status") not in ("5", None)), warns[0])
        cascade = [w for w in warns if w is not primary]
        flushes = sum(1 for w in cascade if w.field("status") == "5")
        stream = stream_of(primary)
        ranks, hosts, pids = culprits(index, [stream])
        status = primary.field("status") or "?"
        peer = primary.field("peer")
        peer_host = host_of_peer(index, peer)
        dead = [d for d in own_deaths(index) if peer_host and d.host == peer_host]
        meaning = {
            "12": "transport retry counter exceeded: the peer stopped answering",
            "13": "RNR retry counter exceeded",
            "5": "work request flushed (the queue pair was already in error)",
            "4": "local protection error",
            "10": "remote access error",
        }.get(status, "a verbs completion error")
        if dead:
            # The peer's host lost a process first: the completion errors are what its
            # peers saw of that death (ProcessDied names it), not a fault of the fabric.
            who = ", ".join(f"rank {d.rank} ({d.how})" for d in dead)
            yield self.finding(
                severity="warning",
                title=f"IB/RoCE completion errors toward {peer_host} follow the death of {who}",
                detail=(
                    f"{len(warns)} completion error(s), the first status={status} on "
                    f"{describe(index, [stream])} talking to {peer}, name host {peer_host}, where "
                    f"{who} had died: the queue pairs to a dead process fail this way."
                ),
                events=[primary, *cascade],
                ranks=ranks,
                hosts=hosts,
                pids=pids,
                confidence=0.7,
                next_steps=(f"Find out why {who} on {peer_host} died (its log, dmesg).",),
            )
            return
        common = _common_peer(warns)
        if common is not None:
            # Several hosts lost their queue pairs to one peer: the fault is at that end
            # (its port, cable or host), not at each of theirs.
            toward, reporters = common
            where = peer_host or toward
            yield self.finding(
                severity="critical",
                title=f"IB/RoCE completion errors on {len(reporters)} hosts, all toward {where}",
                detail=(
                    f"{', '.join(reporters)} each failed completions (the first status={status}, "
                    f"{meaning}) on their connections to {peer}"
                    + (f", host {peer_host}" if peer_host else "")
                    + ". Errors from several hosts that meet at one peer point at that peer's "
                    "port, cable or host; its own log and dmesg say which."
                ),
                events=[primary, *cascade],
                ranks=[],
                hosts=[where],
                pids=[],
                confidence=0.7,
                next_steps=(
                    f"On {where}: ibstat / ibv_devinfo (port state), dmesg -T for link-down or "
                    "mlx5 health events around the time, and the switch port it is cabled to.",
                    f"Test the path to {where} from one reporter (ib_write_bw / ibping); drain "
                    f"{where} if its port flaps.",
                ),
            )
            return
        yield self.finding(
            severity="critical",
            title=f"IB/RoCE completion error status={status} on {describe(index, [stream])}"
            + (f" talking to {peer}" if peer else ""),
            detail=(
                f"The first failed completion was status={status} ({meaning})"
                + (
                    f", vendor err {primary.field('vendor_err')}"
                    if primary.field("vendor_err")
                    else ""
                )
                + (
                    f", local GID {primary.field('local_gid')} -> remote GID {primary.field('remote_gid')}"
                    if primary.field("local_gid")
                    else ""
                )
                + f". {len(cascade)} later completion error(s)"
                + (f", {flushes} of them status=5 flushes," if flushes else "")
                + " are the cascade of this one, not separate faults."
            ),
            events=[primary, *cascade],
            ranks=ranks,
            hosts=hosts,
            pids=pids,
            confidence=0.75,
            next_steps=(
                f"Check the port state and error counters on both ends (ibstat, ibv_devinfo -v, "
                f"perfquery) for the NIC used by {describe(index, [stream])} and for peer {peer or 'named'}.",
                "Test the path between the two GIDs (ib_write_bw / ibping); check switch logs for link flaps.",
                "For RoCE: verify NCCL_IB_GID_INDEX, the traffic class and PFC/ECN settings are the same everywhere.",
            ),
        )


def _common_peer(warns: list[NcclWarn]) -> tuple[str, list[str]] | None:
    """The one peer address (without its port) that the failed completions of two or more
    hosts all name, with those hosts; None otherwise. Flushes (status 5) follow a first error
    and are not counted."""
    failed = [w for w in warns if w.field("status") not in ("5", None)]
    hosts = sorted({h for h, _ in map(stream_of, failed) if h is not None})
    peers = {
        found.group(1) if (found := _ADDRESS.search(w.field("peer") or "")) else None
        for w in failed
    }
    if len(hosts) < 2 or len(peers) != 1:
        return None
    peer = peers.pop()
    return (peer, hosts) if peer is not None else None


class RemoteClosed(Rule):
    """A rank lost its connection to a peer: the peer process exited or the network dropped.

    Symptom:
        ``NCCL error: remote process exited or there was a network error`` from the
        ProcessGroupNCCL watchdog, ``Call to recv from ADDR failed : Broken pipe`` or
        ``Connection reset by peer``, then ``Abort COMPLETE`` and the process being taken down.

    Likely causes:
        The peer at the named address died first (exception, OOM kill, segfault, node
        failure) and this rank is collateral; less often a network failure between them.

    What to check:
        The logs and exit code of the rank(s) on the peer address first (``dmesg`` for the
        OOM killer, its traceback), then the network between the two hosts.
    """

    code = "LS203"
    name = "network.remote_closed"
    kind = "process-died"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        events: list[Event] = []
        peers: set[str] = set()
        reporters: set[Stream] = set()
        report_ranks: set[int] = set()
        peer_ranks: set[int] = set()
        for e in index.torch:
            if isinstance(e, WatchdogError):
                text = f"{e.reason} {e.detail or ''}"
                if REMOTE_CLOSED.search(text):
                    events.append(e)
                    if e.rank is not None:
                        report_ranks.add(e.rank)
                    peers.update(f"{m.group(1)}" for m in _ADDRESS.finditer(text))
                    peer_ranks.update(_peer_ranks(e.detail))
        for warn in index.warns:
            if warn.family in ("socket", "proxy") and REMOTE_CLOSED.search(warn.message):
                events.append(warn)
                reporters.add(stream_of(warn))
                peers.update(m.group(1) for m in _ADDRESS.finditer(warn.message))
        if not events:
            return
        ranks = culprits(index, sorted(reporters, key=str))[0]
        ranks = sorted(set(ranks) | report_ranks)
        peer_ranks -= set(ranks)
        peer_text = ", ".join(sorted(peers)) or (
            f"rank {', '.join(map(str, sorted(peer_ranks)))}" if peer_ranks else "a peer"
        )
        whose = peer_text if peer_ranks and not peers else f"the rank(s) running on {peer_text}"
        named = {p: host_of_address(index, p) for p in peers}
        peer_hosts = {h for h in named.values() if h is not None}
        dead = [d for d in own_deaths(index) if d.host in peer_hosts]
        if dead:
            # The process at the other end died on its own first (ProcessDied names it):
            # these are the survivors noticing, one of the cascade's symptoms.
            who = ", ".join(f"rank {d.rank} ({d.how})" for d in dead)
            yield self.finding(
                severity="warning",
                title=f"connections to {', '.join(sorted(peer_hosts))} closed after {who} died",
                detail=(
                    f"Rank(s) {', '.join(map(str, ranks)) or '?'} lost the connection to "
                    f"{peer_text} on {', '.join(sorted(peer_hosts))}, where {who} had died: the "
                    "broken connections are the consequence of that death."
                ),
                events=events,
                hosts=sorted(peer_hosts),
                confidence=0.7,
                next_steps=(f"Find out why {who} died (its own output, dmesg).",),
            )
            return
        yield self.finding(
            severity="error",
            title=f"connection to {peer_text} was closed: the peer process exited or the network dropped",
            detail=(
                f"Rank(s) {', '.join(map(str, ranks)) or '?'} lost the connection to {peer_text} "
                "(broken pipe / connection reset / remote error). The process at the other end "
                "most likely died first; the aborts and watchdog teardown that follow are "
                "consequences."
            ),
            events=events,
            # The peer the error's last words name (``Proxy Call to rank 3 failed``).
            ranks=sorted(peer_ranks),
            # The peer's host where the evidence knows it, else the address as printed.
            hosts=sorted({h or p for p, h in named.items()}),
            pids=[],
            confidence=0.5,
            next_steps=(
                f"Read the logs of {whose} first: a traceback, an OOM "
                "kill (dmesg | grep -i kill) or a segfault there is the real cause.",
                "If that process was healthy, check the network between the two hosts.",
            ),
        )


def _peer_ranks(detail: str | None) -> list[int]:
    """Return the peer rank an error's detail (NCCL's ``Last error:``) names as the side
    that failed, by the knowledge base's entry for it (``Proxy Call to rank 3 failed``)."""
    hit = lookup(detail) if detail else None
    if hit is None or hit.entry.culprit != "peer":
        return []
    named = hit.field("rank")
    return [int(named)] if named is not None and named.isdigit() else []


class SharedBootstrapAddress(Rule):
    """Processes on different hosts bootstrap with the same address: none is reachable there.

    Symptom:
        ``Bootstrap : Using eth0:172.17.0.2<0>`` on two or more hosts of one job (their
        processes print one communicator's ``commId``): each
        host's NCCL advertises the same address (Docker's default bridge gives the first
        container of every host 172.17.0.2; a pod network may do the like). Peers connect to
        that address and reach themselves or nothing: init hangs at ``Init START`` or fails
        with refused or timed-out connects.

    Likely causes:
        Containers on a private bridge network (no ``--network host``, no routable pod
        network), so the address NCCL picks exists on every host but reaches no other.

    What to check:
        Run the containers with ``--network host`` (or a routable overlay), and point
        ``NCCL_SOCKET_IFNAME`` (and ``GLOO_SOCKET_IFNAME``) at the interface of the cluster
        network; ``ip addr`` on each host shows which that is.
    """

    code = "LS209"
    name = "bootstrap.shared_address"
    kind = "bootstrap-failure"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        # Address -> host -> its first bootstrap line. Loopback and link-local addresses are
        # LS605's (bootstrap.virtual_interface).
        by_address: dict[str, dict[str, Event]] = defaultdict(dict)
        for iface in index.all_of(NcclInterface):
            host = iface.origin.host
            if iface.role != "bootstrap" or not host:
                continue
            for _name, address in iface.interfaces:
                ip = address.split("<", 1)[0]
                if ip and not LOCAL_ONLY_ADDRESS.match(ip):
                    by_address[ip].setdefault(host, iface)
        # Only hosts of one job count: two runs pasted together may each use 10.0.0.1. A
        # communicator id two hosts' processes both print says they are one job.
        comms: dict[str, set[str]] = defaultdict(set)
        for init in index.all_of(NcclCommInit):
            if init.origin.host and init.comm_id:
                comms[init.comm_id].add(init.origin.host)
        for ip, hosts in sorted(by_address.items()):
            if not any(len(set(hosts) & members) >= 2 for members in comms.values()):
                continue
            # Every host's setting is at fault alike: the hosts are named, not their ranks.
            names = sorted(hosts)
            yield self.finding(
                severity="error",
                title=(
                    f"{len(names)} hosts bootstrap NCCL with the same address {ip} "
                    f"({', '.join(names[:4])}{', ...' if len(names) > 4 else ''}): "
                    "none can reach the others there"
                ),
                detail=(
                    f"NCCL on {', '.join(names)} advertises {ip} as its bootstrap address. One "
                    "address on several machines is a private network each of them has (a "
                    "container's default bridge): a peer that connects to it reaches its own "
                    "host or nothing, so the ranks never finish bootstrap."
                ),
                events=[hosts[h] for h in names],
                hosts=names,
                confidence=0.7,
                next_steps=(
                    "Run the containers on the host's network (docker run --network host, "
                    "hostNetwork: true) or a routable overlay network.",
                    "Set NCCL_SOCKET_IFNAME (and GLOO_SOCKET_IFNAME) to the cluster network's "
                    "interface; ip addr on each host shows which that is.",
                ),
            )
