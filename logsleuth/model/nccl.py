"""Events parsed from NCCL debug logs (``NCCL_DEBUG=INFO|WARN|TRACE``).

Field names follow NCCL's own words. Pointers and hashes stay as the lower-case hex
strings NCCL printed (``"0x55bef0201370"``); counts and ranks are ints. ``opCount`` is
hexadecimal in every NCCL version and is stored decoded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from logsleuth.model.base import Event, SourceRef


@dataclass(frozen=True, slots=True, kw_only=True)
class NcclUnrecognized(Event):
    """A line with a valid NCCL prefix whose message no grammar rule knows."""

    RECOGNIZED: ClassVar[bool] = False
    level: str
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class NcclVersion(Event):
    """``NCCL version 2.21.5+cuda12.4`` (bare, or inside an INFO line)."""

    version: str
    cuda: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class NcclVersionRange(Event):
    """The NCCL releases one stream (host, pid) may run, inferred from its line shapes.

    Spec section 5: a version line pins the release; otherwise each release-specific line
    shape narrows the range. ``low``/``high`` are ``"2.18.3"``-style strings, ``""`` where
    the range is open. ``evidence`` lists (feature, line number) pairs that narrowed it.
    ``ref`` and ``text`` are the first such line.
    """

    low: str
    high: str
    exact: bool = False
    evidence: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class NcclCommInit(Event):
    """An Init START or Init COMPLETE line of a communicator.

    ``comm 0x.. rank R nranks N cudaDev D [nvmlDev M] busId B [commId 0x..] - Init COMPLETE``.

    Split communicators print ``parent 0x.. color C key K`` instead of (or besides) commId.
    """

    phase: str  # "START" | "COMPLETE"
    comm: str
    rank: int
    nranks: int
    cuda_dev: int | None = None
    nvml_dev: int | None = None
    bus_id: str | None = None
    comm_id: str | None = None
    parent: str | None = None
    color: int | None = None
    key: int | None = None
    api: str | None = None
    """The creating API (``ncclCommInitRankConfig``, ``ncclCommSplit``; 2.21.5+)."""
    split_count: int | None = None
    """``splitCount`` (2.24.3-2.28.9) / ``childCount`` (2.29.2+) of a split child."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NcclCommEnd(Event):
    """``comm 0x.. rank R nranks N cudaDev D busId B - Abort|Destroy COMPLETE``: teardown."""

    phase: str  # "Abort" | "Destroy" | "Revoke"
    comm: str
    rank: int | None = None
    nranks: int | None = None
    bus_id: str | None = None
    stage: str = "COMPLETE"  # "START" (Abort/Revoke START, 2.28+) | "COMPLETE"
    cuda_dev: int | None = None
    result: int | None = None
    """``Revoke COMPLETE, result %d`` (2.28.7+)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NcclCommConfig(Event):
    """``comm 0x.. rank R nRanks N nNodes K localRanks L localRank l MNNVL m``."""

    comm: str
    rank: int
    nranks: int
    nnodes: int | None = None
    local_ranks: int | None = None
    local_rank: int | None = None
    mnnvl: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class NcclInterface(Event):
    """Bootstrap / socket interface choice: ``Bootstrap : Using eth0:10.0.0.1<0>``.

    ``role`` is ``"bootstrap"``, ``"socket"`` (NET/Socket) or ``"oob"``.
    """

    role: str
    interfaces: tuple[tuple[str, str], ...]  # (name, address) pairs


@dataclass(frozen=True, slots=True, kw_only=True)
class NcclNetwork(Event):
    """``Using network IB`` / ``Using network Socket`` / ``Using network IBext_v8``."""

    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class NcclNetDevices(Event):
    """The network devices NCCL found.

    ``NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE ...; OOB eth0:10.0.0.1<0>``;
    ``NET/IB : No device found.`` gives no devices.
    """

    transport: str  # "IB", "Socket", or a plugin name
    devices: tuple[str, ...]  # e.g. ("mlx5_0:1/IB",)
    oob: tuple[str, str] | None = None
    """The out-of-band interface after ``; OOB`` as (name, address)."""
    truncated: bool = False
    """NCCL cut the line at 1023 bytes (2.28.9 and older); the cut device is dropped."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NcclNetPlugin(Event):
    """A plugin line: ``NET/Plugin: Loaded net plugin FastSocket (v4)``, ``No plugin found``."""

    plugin: str | None  # None when no plugin was loaded
    message: str
    kind: str = "NET"
    """The plugin family before ``/Plugin``: ``NET``, ``PROFILER``, ``TUNER``, ..."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NcclCudaDriver(Event):
    """``cudaDriverVersion 12000``."""

    version: int


@dataclass(frozen=True, slots=True, kw_only=True)
class NcclEnv(Event):
    """``NCCL_IB_HCA set by environment to mlx5_0`` and similar ENV lines."""

    name: str
    value: str


@dataclass(frozen=True, slots=True, kw_only=True)
class NcclRing(Event):
    """The ring order of one channel.

    ``Channel 00/32 :    0   1   2`` (2.5+), ``Channel 00 :    0   1`` (2.4).
    """

    channel: int
    nchannels: int | None
    ranks: tuple[int, ...]
    truncated: bool = False
    """NCCL cut the dump (``...`` at 127 characters, 2.23.4+, or the line at 1023 bytes)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NcclTree(Event):
    """``Trees [0] -1/-1/-1->0->1 [1] ...``: per channel (down0, down1, down2, me, up)."""

    channels: tuple[tuple[int, int, int, int, int, int], ...]  # (channel, d0, d1, d2, me, up)
    truncated: bool = False
    """NCCL cut the line at 1023 bytes (2.28.9 and older); the cut channel is dropped."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NcclGraphTree(Event):
    """A GRAPH tree line ``Tree 0 : 0 -> 1 -> 2/-1/-1`` (2.8.3+): one channel's tree edges.

    ``up`` is the parent (-1 at the root), ``down`` the up to three children (-1 = none).
    """

    channel: int
    up: int
    me: int
    down: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class NcclChannelConnect(Event):
    """One per-channel transport connection.

    ``Channel 00/0 : 37[5] -> 36[4] via P2P/CUMEM``;
    2.4: ``Ring 00 : 1 -> 0 [receive] via NET/Socket/0``.
    ``transport`` is the full ``via`` text (``P2P/CUMEM``, ``NET/IB/0/GDRDMA``,
    ``SHM/direct/direct``). ``from_dev`` / ``to_dev`` are the ``[x]`` fields (busId hex
    2.5-2.18.1, nvmlDev 2.18.3+). CollNet lines have ``kind="collnet"`` and ``to_rank=-1``.
    """

    channel: int
    from_rank: int
    to_rank: int
    transport: str
    from_dev: str | None = None
    to_dev: str | None = None
    direction: str | None = None  # "send" | "receive" | None
    kind: str = "ring"  # "ring" | "tree" | "p2p" | "collnet" | "nvls"
    conn_index: int | None = None
    """The ``/c`` after the channel number (2.12.7+): a connection index, not a count."""


ConnectFields = tuple[int, "int | None", int, "str | None", int, "str | None", "str | None", str]
"""A connection line's values: (channel, conn_index, from_rank, from_dev, to_rank, to_dev,
direction, transport), the fields of :class:`NcclChannelConnect` in that order."""
ConnectRow = tuple[
    int, int, "int | None", int, "str | None", int, "str | None", "str | None", str, str
]
"""One line of a :class:`NcclConnectRun`: its line number, its :data:`ConnectFields`, its text."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NcclConnectRun(Event):
    """A run of consecutive channel-connection lines of one writer, read as one value.

    A process logs one connection line per channel, peer and direction: at 4,096 ranks,
    half a million lines. The reader's fast lane keeps a run of them (one prefix, no other
    line between) as rows of plain values, which cost a fraction of an event each to build
    and to send between processes; :meth:`connects` gives back the events, equal to those
    the line-by-line reading makes. ``ref`` and ``text`` are the run's first line.
    """

    rows: tuple[ConnectRow, ...]

    def connects(self) -> list[NcclChannelConnect]:
        """Return one :class:`NcclChannelConnect` per row, as reading the lines one by one does."""
        return [self.connect(i) for i in range(len(self.rows))]

    def connect(self, i: int) -> NcclChannelConnect:
        """Return the event of row ``i`` (negative counts from the end)."""
        line, channel, index, from_rank, from_dev, to_rank, to_dev, direction, via, text = (
            self.rows[i]
        )
        return NcclChannelConnect(
            ref=SourceRef(self.ref.source, line),
            text=text,
            origin=self.origin,
            channel=channel,
            conn_index=index,
            from_rank=from_rank,
            from_dev=from_dev,
            to_rank=to_rank,
            to_dev=to_dev,
            direction=direction,
            transport=via,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class NcclConnected(Event):
    """``Connected all rings`` / ``Connected all trees`` / ``Connected NVLS tree`` ..."""

    what: str
    pxn: int | None = None
    """``, use ring PXN %d GDR %d`` (2.24.3+)."""
    gdr: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class NcclCollective(Event):
    """A COLL enqueue line.

    ``AllReduce: opCount 28c sendbuff .. recvbuff .. count N datatype D op O root R
    comm 0x.. [nranks=N] stream 0x..``. Also Send/Recv lines (``red_op`` and ``root`` are
    None, ``peer`` set). ``op_count`` is decoded from hex. ``op`` is ``"unknown"`` for
    2.3.5, which printed no name.
    """

    op: str  # "AllReduce", "AllGather", "Broadcast", "ReduceScatter", "Reduce", "Send", "Recv", ...
    op_count: int
    comm: str
    count: int | None = None
    datatype: int | None = None
    red_op: int | None = None
    root: int | None = None
    peer: int | None = None
    nranks: int | None = None
    stream: str | None = None
    sendbuff: str | None = None
    recvbuff: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class NcclErrorTrace(Event):
    """A back-trace line of a failed call: ``init.cc:903 -> 5`` (optional `` [Proxy Thread]`` tag).

    ``code`` is the ncclResult_t: 1 unhandled CUDA, 2 system, 3 internal, 4 invalid
    argument, 5 invalid usage, 6 remote error, 7 in progress.
    """

    file: str
    line_no: int
    code: int
    thread: str | None = None
    func: str | None = None
    """The function name of the 2.30.7 INFO_LOC form ``file:line (func) -> code``."""
    error: str | None = None
    """``strerror`` text of ``file:line -> 2 (No space left on device)`` (2.18.3+)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NcclWarn(Event):
    """Any WARN line. ``family`` classifies the known failure WARNs.

    Families: ``socket`` (connect/accept/recv/send failures, ``Connection refused``,
    ``Broken pipe``), ``ib-completion`` (``Got completion ... status=12``), ``ib`` (other
    verbs errors), ``cuda`` (``Cuda failure``, ``CUDA error``), ``shm`` (``/dev/shm``),
    ``duplicate-gpu``, ``proxy``, ``net``, ``timeout``, ``abort`` (also the asynchronous
    and teardown errors of spec 2.11), ``version`` (``NCCL version mismatch with remote
    peer``, RAS), ``collective-mismatch`` (2.4.2-2.7.6's own detection), ``other``.
    ``fields`` holds what the family extracted, e.g.
    ``(("peer", "10.0.0.2<44206>"), ("status", "12"))``: duplicate-gpu ``rank``,
    ``other_rank``, ``bus_id``; ib-completion ``peer``, ``status``, ``opcode``, ``len``,
    ``vendor_err``, ``req_type``, ``local_gid``, ``remote_gid``, ``hca``; socket ``func``,
    ``op``, ``peer``, ``error``, ``attempts``; shm ``op``, ``path``, ``size``, ``error``,
    ``errno``; cuda ``code``, ``error``, ``size``; proxy ``op``, ``operation``, ``rank``,
    ``retcode``, ``op_id``; abort ``comm``, ``state``, ``op``; version ``peer``, ``local``,
    ``remote``; collective-mismatch ``rank``.
    """

    file: str | None
    line_no: int | None
    func: str | None
    message: str
    family: str
    fields: tuple[tuple[str, str], ...] = ()

    def field(self, name: str) -> str | None:
        """Return the extracted field ``name`` or None."""
        for key, value in self.fields:
            if key == name:
                return value
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class NcclInfoNote(Event):
    """A recognized INFO line that carries a fact diagnosis may use but that has no richer type.

    ``topic`` names the family (``"connect-retry"``, ``"service-thread-closed"``,
    ``"proxy-progress"``, ``"affinity"``, ``"channels-summary"``, ``"threshold"``, ...)
    and ``fields`` what was extracted.
    """

    topic: str
    fields: tuple[tuple[str, str], ...] = ()

    def field(self, name: str) -> str | None:
        """Return the extracted field ``name`` or None."""
        for key, value in self.fields:
            if key == name:
                return value
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class NcclCall(Event):
    """``NCCL CALL ncclAllReduce(...)`` API trace (TRACE level, CALL subsystem)."""

    func: str
    args: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class NcclProxyDump(Event):
    """A proxy-state dump (``NCCL_PROXY_DUMP_SIGNAL``, 2.14.3+; spec 3.2), printed bare.

    ``ops`` holds one (pool, index, op_count, kind, sub-ops) per op line; ``op_count`` is
    the decimal count the dump prints, ``kind`` ``Send``/``Recv``/``Coll``, and each sub-op
    is (peer, status, channel) with status ``I`` init, ``S`` sending, ``R`` receiving,
    ``F`` flushing, ``G`` waiting on the GPU, ``D`` done, None when not progressing.
    ``chained`` says per op whether it was chained to the op before (``| `-> ``).
    ``leaks`` lists the ``Elem p-i is not in any list:`` elements; ``complete`` is False
    when the dump ended before its ``[X]`` line.
    """

    ops: tuple[tuple[int, int, int, str, tuple[tuple[int, str | None, int], ...]], ...]
    chained: tuple[bool, ...] = ()
    leaks: tuple[str, ...] = ()
    complete: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class NcclRasReport(Event):
    """What an ``ncclras`` report (text or ``-f json``, 2.24.3+; spec 2.13) says is wrong.

    ``records`` holds (``#group-comm``, communicator hash, kinds) of each communicator
    with a problem (the hash is the ``commId`` of Init lines from 2.26.2). ``ranks``
    holds (rank, GPU, pid, node, what) for each rank the report names: ``what`` is
    ``missing`` (no data from it) or the error it reported. ``missing_ranks`` are the
    ranks of the compact 2.24.3-2.25.1 form, ``processes`` (pid, node, GPU) the job
    processes with no data or considered dead, ``notes`` the other detail lines.
    """

    version: str | None
    records: tuple[tuple[str, str, str], ...] = ()
    ranks: tuple[tuple[int, str, int, str, str], ...] = ()
    missing_ranks: tuple[int, ...] = ()
    processes: tuple[tuple[int, str, str], ...] = ()
    notes: tuple[str, ...] = ()
