"""What the reports show of a communicator's topology: hosts, GPUs, rings and transports.

Analysis rebuilds each communicator as a graph and flattens it into these values; the text,
JSON and SVG reports read only these.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

TRANSPORT_ORDER = ("P2P", "SHM", "NET/IB", "NET/Socket", "NET", "COLLNET", "other")
"""Transport families from fastest to slowest (``NET`` = a plugin network)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TopoRank:
    """One rank of a communicator: where it runs and what it reported about itself."""

    rank: int
    """The rank inside the communicator."""
    host: str | None = None
    """The host label (the name, with the address when two hosts share a name)."""
    pid: int | None = None
    global_rank: int | None = None
    cuda_dev: int | None = None
    nvml_dev: int | None = None
    bus_id: str | None = None
    """The PCI bus id as NCCL packs it (``18000``); see :func:`pretty_bus_id`."""
    nics: tuple[str, ...] = ()
    network: str | None = None
    channels: int | None = None
    """Ring channels this rank logged connections for."""
    connected_rings: bool | None = None
    """``Connected all rings`` logged (None: that rank's log is not in the evidence)."""
    anomalous: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class TopoHost:
    """One machine of a communicator and the ranks on it."""

    name: str
    address: str | None = None
    ranks: tuple[int, ...] = ()
    nics: tuple[str, ...] = ()
    network: str | None = None
    """The network family its cross-host connections use (``NET/IB``, ``NET/Socket``)."""
    anomalous: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class TopoLink:
    """Ring connections between two ranks (or, aggregated, two hosts) of one transport."""

    src: str
    """A rank number, or a host name in a per-host view."""
    dst: str
    transport: str
    """Transport family (``P2P``, ``SHM``, ``NET/IB``, ...), see :data:`TRANSPORT_ORDER`."""
    detail: str
    """The most common full ``via`` text (``NET/IB/0/GDRDMA``)."""
    channels: int
    """How many channels use this link."""
    anomalous: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class TopoAnomaly:
    """Something wrong with the topology, as the finding that reported it words it."""

    code: str
    kind: str
    text: str
    hosts: tuple[str, ...] = ()
    ranks: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class TopologyView:
    """One communicator's topology as the reports draw and list it."""

    id: str
    nranks: int | None
    ranks: tuple[TopoRank, ...]
    hosts: tuple[TopoHost, ...]
    channels: int | None
    """Ring channels (from the ring dumps, the channel summary or the connection lines)."""
    rings: tuple[tuple[int, tuple[int, ...]], ...] = ()
    """(channel, ranks in ring order) for the rings that could be rebuilt, complete or not."""
    trees: int = 0
    """Channels with a tree (``Trees [c] ...``) logged by any rank."""
    transports: tuple[tuple[str, int], ...] = ()
    """(transport label, connection lines) over the communicator, most used first; labels
    are the ``via`` text without the NET device (see :func:`transport_label`)."""
    links: tuple[TopoLink, ...] = ()
    """Ring links between ranks; between hosts when ``aggregated``."""
    aggregated: bool = False
    """True when the rank graph was too large to draw and links join hosts."""
    anomalies: tuple[TopoAnomaly, ...] = ()


def pretty_bus_id(packed: str) -> str:
    """Return NCCL's packed bus id (``18000``) as a PCI address (``0000:18:00.0``).

    NCCL packs the hex digits of ``dddd:bb:dd.f`` into one integer, so the last digit is the
    function, the two before it the device, the two before those the bus.
    """
    digits = packed.lower().zfill(9)
    if len(digits) != 9 or any(c not in "0123456789abcdef" for c in digits):
        return packed
    return f"{digits[0:4]}:{digits[4:6]}:{digits[6:8]}.{digits[8]}"


_NET_DEVICE = re.compile(r"^(NET/.+?)/\d+(?:\((\d+)\))?")


def transport_label(via: str) -> str:
    """Return a connection's ``via`` text without its NET device: ``NET/IB/3(0)/GDRDMA`` ->
    ``NET/IB/GDRDMA+PXN``, so that transports can be counted across NICs."""
    m = _NET_DEVICE.match(via)
    if m is None:
        return via
    return m[1] + via[m.end() :] + ("+PXN" if m[2] else "")
