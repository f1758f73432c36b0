"""Tie evidence of different sources together: addresses, deaths, process groups, clocks.

A hang leaves traces in several places that name the same thing differently: an IB
completion error names a peer by IP address, torchrun's summary names a rank and a pid,
the ProcessGroupNCCL watchdog counts collectives as ``SeqNum`` per process group while NCCL
counts them as ``opCount`` per communicator, and every host writes times on its own clock.
The functions here translate between them so that the rules can put a cause before its
symptoms. Each says what it assumes; none guesses where the evidence is silent.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from statistics import median

from logsleuth.analysis.index import CommState, EvidenceIndex
from logsleuth.model.base import Event
from logsleuth.model.nccl import NcclInterface, NcclWarn
from logsleuth.model.torch import (
    ChildFailure,
    PythonTraceback,
    WatchdogError,
    WatchdogProgress,
    WatchdogTimeout,
)

_IP = re.compile(r"(\d{1,3}(?:\.\d{1,3}){3})")
_NAMED_PEER = re.compile(r"(?<![\w.\-])([A-Za-z][\w\-]*(?:\.[A-Za-z][\w\-]*)*)<\d+>")
"""A peer named by its host name and port: ``gpu-node-12.cluster.local<38821>``."""
_SELF_INFLICTED = frozenset({"SIGKILL", "SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE"})
"""Signals that end a process from outside torchrun or by its own fault.

SIGTERM is what torchrun sends the survivors and SIGABRT what the watchdog raises after a
timeout; those are the aftermath of a failure elsewhere unless nothing else explains them.
"""
_YEAR = 366 * 86400.0


@dataclass(frozen=True, slots=True)
class Death:
    """A rank process that ended on its own account (not stopped because of another)."""

    rank: int | None
    host: str | None
    pid: int | None
    how: str
    """``exit code 1`` or ``signal SIGKILL``."""
    event: ChildFailure


@dataclass(frozen=True, slots=True)
class PgLink:
    """A torch process group matched to the NCCL communicator it drives.

    ``offset`` is ``SeqNum - opCount`` as observed (1 for torch's 1-based collective
    sequence numbers over NCCL's 0-based opCount); ``ranks`` are the global ranks whose
    watchdog and NCCL COLL lines agree on it.
    """

    pg: str | None
    comm: str
    offset: int
    ranks: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class FirstError:
    """The earliest failure evidence of one rank, with its time on a common clock."""

    rank: int
    host: str | None
    time: float
    """Seconds on the aligned clock (comparable between ranks of this list only)."""
    event: Event


def address_hosts(index: EvidenceIndex) -> dict[str, str]:
    """Return IP address -> host name, from the interfaces NCCL said it uses on each host.

    Bootstrap, NET/Socket and the IB out-of-band interface all name the host's own address,
    which is how its peers' error messages (``peer 10.0.0.2<43211>``) refer to it. Built
    once per index: the rules ask it for every peer message they read.
    """
    cached = index.derived.get("address_hosts")
    if isinstance(cached, dict):
        return cached
    found: dict[str, set[str]] = defaultdict(set)
    named: list[tuple[str, str]] = []
    for iface in index.all_of(NcclInterface):
        if iface.origin.host:
            named += [(address, iface.origin.host) for _name, address in iface.interfaces]
    for devices in index.net_devices:
        if devices.origin.host and devices.oob:
            named.append((devices.oob[1], devices.origin.host))
    for address, host in named:
        if match := _IP.search(address):  # ``10.0.0.1<0>``: the port is not part of it
            found[match.group(1)].add(host)
    # An address claimed by two hosts (a shared NAT address, 127.0.0.1) names neither.
    table = {addr: hosts.pop() for addr, hosts in found.items() if len(hosts) == 1}
    index.derived["address_hosts"] = table
    return table


def host_of_peer(index: EvidenceIndex, text: str | None) -> str | None:
    """Return the host whose address ``text`` names (``10.0.0.2<43211>``), if known."""
    match = (_IP.search(text) or _NAMED_PEER.search(text)) if text else None
    return host_of_address(index, match.group(1)) if match else None


def host_of_address(index: EvidenceIndex, address: str) -> str | None:
    """Return the host an address without its port names, if the evidence knows it.

    NCCL also prints a peer by its reverse-DNS name (``gpu-node-12.cluster.local<38821>``)
    where it asks for no numeric form: that is the host the evidence names by its full name
    or by its first label (NCCL's own hostnames stop at the first dot).
    """
    if _IP.fullmatch(address):
        return address_hosts(index).get(address)
    hosts = index.derived.get("host_names")
    if not isinstance(hosts, frozenset):
        hosts = index.derived["host_names"] = frozenset(h for h, _ in index.procs if h)
    return next((h for h in (address, address.split(".", 1)[0]) if h in hosts), None)


def watchdog_ranks(index: EvidenceIndex) -> set[int | None]:
    """The ranks whose watchdog reported a timed-out or failed collective (None: a report
    that names no rank). Such a rank's SIGABRT is its watchdog taking the process down."""
    return {
        e.origin.rank if e.origin.rank is not None else e.rank
        for e in index.torch
        if isinstance(e, WatchdogTimeout | WatchdogError)
    }


def own_deaths(index: EvidenceIndex) -> list[Death]:
    """Return the processes of torchrun's summary that died on their own account.

    A worker killed by torchrun (SIGTERM) or aborted by its own watchdog after reporting a
    timeout or NCCL error (SIGABRT) is aftermath; a non-zero exit code or a signal such as
    SIGKILL or SIGSEGV that nothing in the rank's own output explains is a death of its own.
    torchrun's "Root Cause" marker is not trusted: it is the first exit torchrun *observed*.
    """
    reported = watchdog_ranks(index)
    deaths: list[Death] = []
    seen: set[tuple[int | None, int | None]] = set()
    for failure in index.failures:
        if failure.exitcode in (None, 0) or (failure.rank, failure.pid) in seen:
            continue
        seen.add((failure.rank, failure.pid))
        if failure.signal == "SIGTERM":
            continue
        if failure.signal == "SIGABRT" and failure.rank in reported:
            continue
        if failure.signal and failure.signal not in _SELF_INFLICTED and failure.signal != "SIGABRT":
            continue
        how = f"signal {failure.signal}" if failure.signal else f"exit code {failure.exitcode}"
        deaths.append(Death(failure.rank, failure.host, failure.pid, how, failure))
    return deaths


def pg_links(index: EvidenceIndex) -> list[PgLink]:
    """Match the watchdog's process groups to NCCL communicators by their counters.

    For each process group named by a watchdog line, the rank's ``last enqueued`` work
    (torch SeqNum) is compared with the last opCount that the same rank logged on each
    communicator. torch numbers collectives from 1 and NCCL from 0, so a link holds where
    ``SeqNum - opCount`` is the same (normally 1) for every rank that has both; the offset
    is measured from the evidence, not assumed. Point-to-point operations are counted
    apart by torch (``p2p_seq_id``) but not by NCCL, so communicators with Send/Recv lines
    are not linked.
    """
    enqueued: dict[tuple[str | None, int], int] = {}
    for event in index.torch:
        if isinstance(event, WatchdogProgress) and event.last_enqueued is not None:
            rank = event.rank if event.rank is not None else event.origin.rank
            if rank is not None:
                enqueued[(event.pg, rank)] = event.last_enqueued
    if not enqueued:
        return []
    # rank -> its process groups' counters, so that each communicator visits its own ranks
    # (not every rank's counters once per communicator: 513 x 4,096 at 4,096 ranks).
    by_rank: dict[int, list[tuple[str | None, int]]] = defaultdict(list)
    for (pg, rank), seq in enqueued.items():
        by_rank[rank].append((pg, seq))
    links: list[PgLink] = []
    for key in sorted(index.comms):
        state = index.comms[key]
        if any(r.op in ("Send", "Recv") for ops in state.ops.values() for r in ops):
            continue
        last = _last_ops_by_rank(index, state)
        by_pg: dict[str | None, dict[int, int]] = defaultdict(dict)
        for rank, op_count in last.items():
            for pg, seq in by_rank.get(rank, ()):
                by_pg[pg][rank] = seq - op_count
        for pg, offsets in sorted(by_pg.items(), key=lambda kv: str(kv[0])):
            values = set(offsets.values())
            if len(values) == 1 and len(offsets) >= min(2, len(last)):
                links.append(PgLink(pg, key, values.pop(), tuple(sorted(offsets))))
    return links


def _last_ops_by_rank(index: EvidenceIndex, state: CommState) -> dict[int, int]:
    last: dict[int, int] = {}
    for stream, ops in state.ops.items():
        rank = index.rank_of(*stream)
        if ops and rank is not None:
            last[rank] = max(r.op_count for r in ops)
    return last


def clock_offsets(index: EvidenceIndex) -> dict[str, float]:
    """Estimate each host's clock offset from the watchdog timeouts of one collective.

    A rank's watchdog reports ``ran for X milliseconds`` when it gives up on collective S;
    its own clock at that moment minus X is when it enqueued S. Ranks released together by
    collective S-1 enqueue S within moments of each other, so per host the median of these
    enqueue times, minus the median over all hosts, is that host's clock offset. Hosts
    without such a timeout get none (0.0 is not assumed for them); with fewer than two
    hosts there is nothing to align.
    """
    starts: dict[tuple[str | None, int | None], dict[str, list[float]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for event in index.torch:
        if not isinstance(event, WatchdogTimeout) or event.ran_ms is None:
            continue
        host = host_of_event(index, event)
        if host is None or event.origin.time is None:
            continue
        starts[(event.pg, event.seq)][host].append(event.origin.time - event.ran_ms / 1000)
    if not starts:
        return {}
    # The collective most hosts timed out in carries the most information.
    per_host = max(starts.values(), key=lambda hosts: (len(hosts), sum(map(len, hosts.values()))))
    if len(per_host) < 2:
        return {}
    medians = {host: median(times) for host, times in per_host.items()}
    middle = median(medians.values())
    # + 0.0 turns a rounded -0.0 into 0.0.
    return {host: round(value - middle, 3) + 0.0 for host, value in sorted(medians.items())}


def host_of_event(index: EvidenceIndex, event: Event) -> str | None:
    """Return the host that wrote ``event``: its prefix's, else its rank's process's."""
    if event.origin.host:
        return event.origin.host
    rank = event.origin.rank
    if rank is None:
        rank = getattr(event, "rank", None)
    if rank is None:
        return None
    proc = index.proc_of_rank(rank)
    return proc.host if proc else None


def first_errors(index: EvidenceIndex) -> list[FirstError]:
    """Return each rank's first failure evidence, earliest first, on aligned clocks.

    Failure evidence is a Python traceback, an NCCL WARN, a watchdog timeout or error, or
    a failure-summary entry other than torchrun's own SIGTERM, when it carries a time. Host clocks are shifted by
    :func:`clock_offsets` where an offset could be estimated. When some times lack a year
    (glog prefixes print none), all are compared as seconds into their year.
    """
    offsets = clock_offsets(index)
    candidates: list[tuple[float, int, str | None, Event]] = []
    events: Iterable[Event] = (
        *(
            e
            for e in index.torch
            if isinstance(e, PythonTraceback | WatchdogTimeout | WatchdogError)
        ),
        *index.warns,
        *(f for f in index.failures if f.signal != "SIGTERM"),
    )
    for event in events:
        when = _time_of(event)
        rank = index.writer_rank(event)
        if when is None or rank is None:
            continue
        host = host_of_event(index, event)
        candidates.append((when - offsets.get(host or "", 0.0), rank, host, event))
    if any(t < _YEAR for t, *_ in candidates):
        candidates = [(_into_year(t), r, h, e) for t, r, h, e in candidates]
    first: dict[int, FirstError] = {}
    for when, rank, host, event in sorted(
        candidates, key=lambda c: (c[0], c[1], c[3].ref.source, c[3].ref.line)
    ):
        first.setdefault(rank, FirstError(rank, host, when, event))
    return sorted(first.values(), key=lambda f: (f.time, f.rank))


def _time_of(event: Event) -> float | None:
    if event.origin.time is not None:
        return event.origin.time
    if isinstance(event, ChildFailure) and event.time:
        try:
            stamp = datetime.strptime(event.time, "%Y-%m-%d_%H:%M:%S")
        except ValueError:
            return None
        return stamp.replace(tzinfo=timezone.utc).timestamp()
    return None


def _into_year(seconds: float) -> float:
    """Return seconds since the start of the (UTC) year of ``seconds``."""
    stamp = datetime.fromtimestamp(seconds, tz=timezone.utc)
    start = datetime(stamp.year, 1, 1, tzinfo=timezone.utc)
    return seconds - start.timestamp()


def peer_warns(index: EvidenceIndex, hosts: set[str]) -> list[NcclWarn]:
    """Return NCCL WARNs whose peer address belongs to one of ``hosts``."""
    table = address_hosts(index)
    found: list[NcclWarn] = []
    for warn in index.warns:
        peer = warn.field("peer") or warn.message
        match = _IP.search(peer)
        if match and table.get(match.group(1)) in hosts:
            found.append(warn)
    return found
