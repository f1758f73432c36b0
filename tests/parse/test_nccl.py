"""NCCL log reader: real corpus lines per message family, spec-built lines for other eras."""

from __future__ import annotations

import calendar
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logsleuth.model.base import Event, Origin
from logsleuth.model.nccl import (
    NcclCall,
    NcclChannelConnect,
    NcclCollective,
    NcclCommConfig,
    NcclCommEnd,
    NcclCommInit,
    NcclConnected,
    NcclCudaDriver,
    NcclEnv,
    NcclErrorTrace,
    NcclInfoNote,
    NcclInterface,
    NcclNetDevices,
    NcclNetPlugin,
    NcclNetwork,
    NcclRing,
    NcclTree,
    NcclUnrecognized,
    NcclVersion,
    NcclVersionRange,
    NcclWarn,
)
from logsleuth.parse.base import Line, Sink
from logsleuth.parse.clean import strip_prefixes
from logsleuth.parse.nccl import NcclReader, parse_nccl_line
from logsleuth.parse.nccl_line import _parser
from logsleuth.parse.numbering import detect_numbering

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "real" / "nccl"


def real_line(name: str, contains: str) -> str:
    """Return the first line of fixture ``name`` that contains ``contains``."""
    for line in (FIXTURES / name).read_text(encoding="utf-8").splitlines():
        if contains in line:
            return line
    raise AssertionError(f"{name} has no line with {contains!r}")


def parse(text: str) -> Event:
    event = parse_nccl_line(text)
    assert event is not None, text
    return event


def read_fixture(name: str) -> tuple[list[Event], Sink, int]:
    """Feed a fixture through launcher-prefix stripping and the reader, as the dispatcher does."""
    lines = (FIXTURES / name).read_text(encoding="utf-8").splitlines()
    numbering = detect_numbering(lines)
    reader, sink, declined = NcclReader(name), Sink(), 0
    for number, raw in enumerate(lines, start=1):
        text, hint = strip_prefixes(raw, numbering)
        if not text.strip():
            continue
        if not reader.feed(Line(number, text, raw, hint), sink):
            declined += 1
    reader.close(sink)
    # Version ranges summarize streams (tested on their own); the tests here count lines.
    events = [e for e in sink.events if not isinstance(e, NcclVersionRange)]
    return events, sink, declined


# ---------------------------------------------------------------- version, driver, env


def test_version_bare_and_info_line() -> None:
    bare = parse(real_line("version_2_14_fastsocket_node1.log", "NCCL version"))
    assert isinstance(bare, NcclVersion)
    assert (bare.version, bare.cuda) == ("2.14.3", "11.7")
    assert bare.origin.host is None and bare.origin.pid is None

    info = parse(real_line("rtx4090_header_2_26.log", "NCCL INFO NCCL version"))
    assert isinstance(info, NcclVersion)
    assert (info.version, info.cuda) == ("2.26.5", "12.9")
    assert (info.origin.host, info.origin.pid, info.origin.tid) == (
        "i-56butc28zq2jtjaluzq7va7p6",
        9822,
        9822,
    )
    # Spec 1.4: VERSION in NCCL_DEBUG_TIMESTAMP_LEVELS puts the timestamp before the bare line.
    stamped = parse("[2025-03-14 09:26:53] NCCL version 2.26.2+cuda12.8")
    assert isinstance(stamped, NcclVersion)
    assert stamped.version == "2.26.2"
    assert stamped.origin.time == calendar.timegm((2025, 3, 14, 9, 26, 53, 0, 0, 0))


def test_cuda_driver_version() -> None:
    event = parse(real_line("rtx4090_header_2_26.log", "cudaDriverVersion"))
    assert isinstance(event, NcclCudaDriver)
    assert event.version == 12080


def test_env_lines_drop_the_integer_full_stop() -> None:
    event = parse(real_line("roce_p2p_cumem_channels.log", "NCCL_IB_GID_INDEX"))
    assert isinstance(event, NcclEnv)
    assert (event.name, event.value) == ("NCCL_IB_GID_INDEX", "3")
    assert event.origin.dev == 7
    # Spec 2.3 (graph/paths.cc): string values carry no final '.'.
    text = "gpu-a01:4721:4790 [0] NCCL INFO NCCL_P2P_LEVEL set by environment to LOC"
    env = parse(text)
    assert isinstance(env, NcclEnv)
    assert (env.name, env.value) == ("NCCL_P2P_LEVEL", "LOC")


# ---------------------------------------------------------------- communicator life cycle


def test_init_complete_2_18_plus_with_nvml_dev_and_comm_id() -> None:
    event = parse(real_line("roce_init_complete.log", "rank 36 nranks 64"))
    assert isinstance(event, NcclCommInit)
    assert event.phase == "COMPLETE"
    assert (event.comm, event.rank, event.nranks) == ("0x557fe785f7a0", 36, 64)
    assert (event.cuda_dev, event.nvml_dev, event.bus_id) == (4, 4, "9b000")
    assert event.comm_id == "0x5ae77eb5ea4ec1ee"
    assert event.parent is None and event.api is None


def test_init_start_2_19() -> None:
    event = parse(real_line("version_2_19_socket_node2.log", "Init START"))
    assert isinstance(event, NcclCommInit)
    assert (event.phase, event.rank, event.nranks, event.bus_id) == ("START", 0, 1, "30")
    assert event.comm_id == "0x795b968dc454cfee"


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        # 2.4.2-2.4.8: nvmlDev, no busId
        (
            "comm 0x7f0c5c001f40 rank 1 nranks 2 cudaDev 6 nvmlDev 6 - Init COMPLETE",
            {"rank": 1, "nvml_dev": 6, "bus_id": None, "comm_id": None},
        ),
        # 2.5.6-2.15.5: busId, no commId
        (
            "comm 0x55d0c8a1b2f0 rank 0 nranks 16 cudaDev 0 busId 7000 - Init COMPLETE",
            {"rank": 0, "nvml_dev": None, "bus_id": "7000", "comm_id": None},
        ),
        # 2.21.5+: the creating API first
        (
            "ncclCommInitRankConfig comm 0x55d0c8a1b2f0 rank 3 nranks 16 cudaDev 3 nvmlDev 3"
            " busId 4e000 commId 0x9f3c2b1a7e6d5c4b - Init COMPLETE",
            {"rank": 3, "api": "ncclCommInitRankConfig", "comm_id": "0x9f3c2b1a7e6d5c4b"},
        ),
        # 2.29.2+: "[Rank N]" inside the message
        (
            "[Rank 0] ncclCommInitRankConfig comm 0x55d0c8a1b2f0 rank 0 nranks 16 cudaDev 0"
            " nvmlDev 0 busId 18000 commId 0x9f3c2b1a7e6d5c4b - Init START",
            {"rank": 0, "phase": "START", "api": "ncclCommInitRankConfig"},
        ),
        # 2.24.3-2.28.9 split child: "key %d- Init START" with no blank
        (
            "ncclCommSplit comm 0x55d0ca113400 rank 0 nranks 8 cudaDev 0 nvmlDev 0 busId 18000"
            " parent 0x55d0c8a1b2f0 splitCount 1 color 0 key 0- Init START",
            {"parent": "0x55d0c8a1b2f0", "split_count": 1, "color": 0, "key": 0, "nranks": 8},
        ),
    ],
)
def test_init_lines_of_every_era(message: str, expected: dict[str, object]) -> None:
    event = parse(f"gpu-a01:4721:4790 [0] NCCL INFO {message}")
    assert isinstance(event, NcclCommInit)
    for key, value in expected.items():
        assert getattr(event, key) == value, key


def test_abort_complete_and_revoke() -> None:
    event = parse(real_line("socket_broken_pipe_abort_2_21.log", "Abort COMPLETE"))
    assert isinstance(event, NcclCommEnd)
    assert (event.phase, event.stage, event.comm) == ("Abort", "COMPLETE", "0x5649149de2c0")
    assert (event.rank, event.nranks, event.bus_id, event.cuda_dev) == (5, 8, "a7000", 1)
    # Spec 2.2 (2.28.7+): nRanks capitalised, result appended.
    text = (
        "gpu-a01:4721:4721 [0] NCCL INFO comm 0x55d0c8a1b2f0 rank 0 nRanks 16 cudaDev 0"
        " busId 18000 - Revoke COMPLETE, result 0"
    )
    revoke = parse(text)
    assert isinstance(revoke, NcclCommEnd)
    assert (revoke.phase, revoke.stage, revoke.nranks, revoke.result) == (
        "Revoke",
        "COMPLETE",
        16,
        0,
    )


def test_comm_config_line() -> None:
    # Spec 2.2 (2.20.3+).
    text = (
        "gpu-a01:4721:4790 [0] NCCL INFO comm 0x55d0c8a1b2f0 rank 0 nRanks 16 nNodes 2"
        " localRanks 8 localRank 0 MNNVL 0"
    )
    event = parse(text)
    assert isinstance(event, NcclCommConfig)
    assert (event.rank, event.nranks, event.nnodes, event.local_ranks) == (0, 16, 2, 8)
    assert (event.local_rank, event.mnnvl) == (0, 0)


# ---------------------------------------------------------------- bootstrap, network, plugins


@pytest.mark.parametrize(
    ("name", "contains", "expected"),
    [
        ("nccl_2_4_numbered_two_node.log", "Bootstrap : Using [0]", (("eth0", "10.38.10.4<0>"),)),
        ("version_2_19_socket_node2.log", "Bootstrap : Using", (("ens7", "10.128.0.31<0>"),)),
        ("rtx4090_header_2_26.log", "Bootstrap: Using", (("bond0", "10.0.11.5<0>"),)),
    ],
)
def test_bootstrap_interface_all_forms(name: str, contains: str, expected: object) -> None:
    text, _ = strip_prefixes(real_line(name, contains), "viewer")
    event = parse(text)
    assert isinstance(event, NcclInterface)
    assert (event.role, event.interfaces) == ("bootstrap", expected)


def test_socket_interfaces_and_network() -> None:
    sock = parse(real_line("version_2_19_socket_node2.log", "NET/Socket : Using"))
    assert isinstance(sock, NcclInterface)
    assert (sock.role, sock.interfaces) == ("socket", (("ens7", "10.128.0.31<0>"),))
    network = parse(real_line("roce_ib_devices_init.log", "Using network"))
    assert isinstance(network, NcclNetwork)
    assert network.name == "IBext_v8"
    # Spec 2.5: plugin network names may contain blanks.
    aws = parse("ip-10-1-2-3:35480:35480 [0] NCCL INFO Using network AWS Libfabric")
    assert isinstance(aws, NcclNetwork)
    assert aws.name == "AWS Libfabric"


def test_ib_devices_with_oob_and_none_found() -> None:
    event = parse(real_line("rtx4090_header_2_26.log", "NET/IB : Using"))
    assert isinstance(event, NcclNetDevices)
    assert (event.transport, event.devices) == ("IB", ("mlx5_bond_0:1/RoCE",))
    assert event.oob == ("bond0", "10.0.11.5<0>")
    eight = parse(real_line("roce_ib_devices_init.log", "NET/IB : Using"))
    assert isinstance(eight, NcclNetDevices)
    assert len(eight.devices) == 8 and eight.devices[7] == "mlx5_bond_8:1/RoCE"
    none = parse(real_line("version_2_19_socket_node2.log", "No device found"))
    assert isinstance(none, NcclNetDevices)
    assert (none.transport, none.devices, none.oob) == ("IB", (), None)


def test_net_plugin_lines() -> None:
    loaded = parse(real_line("version_2_14_fastsocket_node1.log", "Loaded net plugin"))
    assert isinstance(loaded, NcclNetPlugin)
    assert (loaded.plugin, loaded.kind) == ("FastSocket", "NET")
    assert loaded.message == "Loaded net plugin FastSocket (v4)"
    missing = parse(real_line("nccl_2_4_numbered_two_node.log", "No plugin found").split(" ", 1)[1])
    assert isinstance(missing, NcclNetPlugin)
    assert (missing.plugin, missing.message) == (None, "No plugin found (libnccl-net.so).")
    profiler = parse(real_line("rtx4090_header_2_26.log", "PROFILER/Plugin"))
    assert isinstance(profiler, NcclNetPlugin)
    assert (profiler.plugin, profiler.kind) == (None, "PROFILER")


# ---------------------------------------------------------------- rings, trees, channels


def test_ring_dumps_of_every_era() -> None:
    dump = parse(real_line("version_2_19_socket_node2.log", "Channel 01/32"))
    assert isinstance(dump, NcclRing)
    assert (dump.channel, dump.nchannels, dump.ranks, dump.truncated) == (1, 32, (0,), False)
    old, _ = strip_prefixes(real_line("nccl_2_4_numbered_two_node.log", "Channel 00 :"), "viewer")
    dump24 = parse(old)
    assert isinstance(dump24, NcclRing)
    assert (dump24.channel, dump24.nchannels, dump24.ranks) == (0, None, (0, 1))
    # Spec 2.7 (2.23.4+): compact widths, cut at 127 characters with "...".
    text = "gpu-a01:4721:4790 [0] NCCL INFO Channel 00/24 :  0  1  2  3 ..."
    cut = parse(text)
    assert isinstance(cut, NcclRing)
    assert (cut.ranks, cut.truncated) == ((0, 1, 2, 3), True)


def test_trees() -> None:
    # Spec 2.7.
    text = (
        "gpu-a01:4721:4790 [0] NCCL INFO Trees [0] 1/-1/-1->0->-1 [1] 1/-1/-1->0->-1"
        " [2] 1/-1/-1->0->8 [3] 1/-1/-1->0->8"
    )
    event = parse(text)
    assert isinstance(event, NcclTree)
    assert event.channels[0] == (0, 1, -1, -1, 0, -1)
    assert event.channels[3] == (3, 1, -1, -1, 0, 8)


def test_channel_connect_p2p_cumem_and_shm() -> None:
    event = parse(real_line("roce_p2p_cumem_channels.log", "Channel 00/0 : 37[5]"))
    assert isinstance(event, NcclChannelConnect)
    assert (event.channel, event.conn_index, event.from_rank, event.to_rank) == (0, 0, 37, 36)
    assert (event.from_dev, event.to_dev, event.transport) == ("5", "4", "P2P/CUMEM")
    assert event.direction is None
    shm = parse(real_line("rtx4090_shm_rings_2_26.log", "SHM/direct/direct"))
    assert isinstance(shm, NcclChannelConnect)
    assert (shm.channel, shm.conn_index, shm.transport) == (1, None, "SHM/direct/direct")


def test_channel_connect_2_4_ring_send_receive() -> None:
    events, _, _ = read_fixture("nccl_2_4_numbered_two_node.log")
    connects = [e for e in events if isinstance(e, NcclChannelConnect)]
    assert [(c.from_rank, c.to_rank, c.direction, c.transport) for c in connects] == [
        (1, 0, "receive", "NET/Socket/0"),
        (0, 1, "send", "NET/Socket/0"),
    ]
    assert connects[0].from_dev is None


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        # 2.7-2.12: hex busId in brackets, no connection index
        (
            "Channel 00 : 0[7000] -> 1[b000] via P2P/IPC/read",
            (0, None, "7000", "b000", None, "P2P/IPC/read"),
        ),
        # 2.12.7+ NET with PXN proxy rank
        (
            "Channel 02/0 : 1[1] -> 9[1] [send] via NET/IB/3(0)/GDRDMA",
            (2, 0, "1", "1", "send", "NET/IB/3(0)/GDRDMA"),
        ),
        # plugin network name with a blank
        (
            "Channel 00/0 : 15[7] -> 0[0] [receive] via NET/AWS Libfabric/0/GDRDMA",
            (0, 0, "7", "0", "receive", "NET/AWS Libfabric/0/GDRDMA"),
        ),
        (
            "Channel 00/1 : 0[0] -> 1[1] via P2P/direct pointer",
            (0, 1, "0", "1", None, "P2P/direct pointer"),
        ),
    ],
)
def test_channel_connect_spec_forms(message: str, expected: tuple[object, ...]) -> None:
    event = parse(f"gpu-a01:4721:4790 [0] NCCL INFO {message}")
    assert isinstance(event, NcclChannelConnect)
    got = (
        event.channel,
        event.conn_index,
        event.from_dev,
        event.to_dev,
        event.direction,
        event.transport,
    )
    assert got == expected


def test_collnet_connect() -> None:
    event = parse(
        "gpu-a01:4721:4790 [0] NCCL INFO CollNet 00/0 : 0 [send] via COLLNET/SHARP/0/GDRDMA"
    )
    assert isinstance(event, NcclChannelConnect)
    assert (event.kind, event.from_rank, event.to_rank, event.direction) == (
        "collnet",
        0,
        -1,
        "send",
    )
    assert event.transport == "COLLNET/SHARP/0/GDRDMA"


def test_connected_lines() -> None:
    rings = parse(real_line("rtx4090_shm_rings_2_26.log", "Connected all rings"))
    assert isinstance(rings, NcclConnected)
    assert (rings.what, rings.pxn, rings.gdr) == ("all rings", 0, 1)
    nvls = parse(real_line("roce_init_complete.log", "Connected NVLS tree"))
    assert isinstance(nvls, NcclConnected)
    assert (nvls.what, nvls.pxn) == ("NVLS tree", None)


# ---------------------------------------------------------------- collectives


def test_coll_lines_decode_hex_op_count() -> None:
    events, sink, declined = read_fixture("rccl_allgather_vs_allreduce_opcount.log")
    colls = [e for e in events if isinstance(e, NcclCollective)]
    assert [(c.op, c.op_count, c.origin.pid) for c in colls] == [
        ("AllReduce", 0x28C, 45006),
        ("AllReduce", 0x28D, 45006),
        ("AllGather", 0x28C, 45012),
        ("AllGather", 0x28D, 45012),
    ]
    first = colls[0]
    assert first.op_count == 652
    assert (first.count, first.datatype, first.red_op, first.root, first.nranks) == (
        9984512,
        7,
        0,
        0,
        4,
    )
    assert (first.comm, first.stream) == ("0x55bef0201370", "0x55bef0208bd0")
    assert first.sendbuff == first.recvbuff == "0x7f5dd32b2100"
    assert colls[2].stream == "0x559c248a3630"
    assert (len(sink.recognized), declined) == (4, 0)


def test_coll_send_recv_and_unnamed_2_3() -> None:
    # Spec 2.9: for Send/Recv the root column is the peer.
    text = (
        "gpu-a01:4721:4721 [0] NCCL INFO Send: opCount 1b sendbuff (nil) recvbuff 0x7f3a5c400000"
        " count 2097152 datatype 7 op 0 root 1 comm 0x55d0c8a1b2f0 [nranks=16]"
        " stream 0x55d0c9e04a10"
    )
    send = parse(text)
    assert isinstance(send, NcclCollective)
    assert (send.op, send.op_count, send.peer, send.root, send.red_op) == (
        "Send",
        27,
        1,
        None,
        None,
    )
    assert send.sendbuff == "(nil)"
    old = parse(
        "gpu-a01:4721:4721 [0] NCCL INFO opCount a sendbuff 0x7f3a5c000000 recvbuff 0x7f3a5c000000"
        " count 1024 size 4096 datatype 7 op 0 comm 0x55d0c8a1b2f0 [nranks=2] stream (nil)"
    )
    assert isinstance(old, NcclCollective)
    assert (old.op, old.op_count, old.count, old.stream) == ("unknown", 10, 1024, "(nil)")


# ---------------------------------------------------------------- back-traces and runtime notes


def test_error_traces() -> None:
    events, _, _ = read_fixture("duplicate_gpu_horovod_mpirun.log")
    traces = [e for e in events if isinstance(e, NcclErrorTrace)]
    assert (traces[0].file, traces[0].line_no, traces[0].code) == ("init.cc", 903, 5)
    assert traces[0].origin.rank == 3  # from the mpirun "[1,3]<stdout>:" prefix
    progress = parse(real_line("roce_status12_then_flush.log", "[Progress Thread]"))
    assert isinstance(progress, NcclErrorTrace)
    assert (progress.file, progress.line_no, progress.code, progress.thread) == (
        "proxy.cc",
        874,
        6,
        "Progress Thread",
    )
    # Spec 2.1: strerror suffix (2.18.3+) and INFO_LOC function (2.30.7).
    errno = parse(
        "gpu-a01:4721:4802 [0] NCCL INFO misc/shmutils.cc:88 -> 2 (No space left on device)"
    )
    assert isinstance(errno, NcclErrorTrace)
    assert (errno.code, errno.error) == (2, "No space left on device")
    loc = parse("gpu-a01:4721:4790 [0] NCCL INFO transport/net.cc:741 (sendProxyConnect) -> 6")
    assert isinstance(loc, NcclErrorTrace)
    assert (loc.file, loc.line_no, loc.func, loc.code) == (
        "transport/net.cc",
        741,
        "sendProxyConnect",
        6,
    )


def test_connect_retry_and_service_thread_notes() -> None:
    retry = parse(real_line("bootstrap_connect_refused.log", "retrying"))
    assert isinstance(retry, NcclInfoNote)
    assert (retry.topic, retry.field("call"), retry.field("error")) == (
        "connect-retry",
        "connect",
        "Connection refused",
    )
    # Spec 2.12.2 (2.27.3+).
    new = parse(
        "gpu-a01:4721:4790 [0] NCCL INFO socketStartConnect: connect to 10.10.1.12<51237>"
        " returned Connection refused, retrying (3/34) after sleep for 300 msec"
    )
    assert isinstance(new, NcclInfoNote)
    assert (new.field("peer"), new.field("attempt"), new.field("max")) == (
        "10.10.1.12<51237>",
        "3",
        "34",
    )
    closed = parse(
        real_line("socket_broken_pipe_abort_2_21.log", "Connection closed by localRank 1")
    )
    assert isinstance(closed, NcclInfoNote)
    assert (closed.topic, closed.field("local_rank")) == ("service-thread-closed", "1")


# ---------------------------------------------------------------- WARN families


def test_warn_duplicate_gpu() -> None:
    events, _, declined = read_fixture("duplicate_gpu_horovod_mpirun.log")
    warns = [e for e in events if isinstance(e, NcclWarn)]
    first = warns[0]
    assert (first.family, first.file, first.line_no, first.func) == (
        "duplicate-gpu",
        "init.cc",
        497,
        None,
    )
    assert first.fields == (("rank", "2"), ("other_rank", "0"), ("bus_id", "1000"))
    assert first.origin == Origin(host="smc-gpu-03", pid=29880, tid=30398, dev=0, rank=2)
    assert {w.field("rank") for w in warns} == {"0", "2", "4", "5"}
    assert declined == 1  # the excerpt's torn last line "sm"


def test_warn_shm_with_timestamp() -> None:
    text = real_line("dev_shm_exhausted_ci_pod.log", "failed to extend")
    event = parse(text)
    assert isinstance(event, NcclWarn)
    assert event.family == "shm"
    assert event.fields == (
        ("op", "extend"),
        ("path", "/dev/shm/nccl-WU88OE"),
        ("size", "9637892"),
        ("error", "No space left on device"),
        ("errno", "28"),
    )
    assert event.origin.time == calendar.timegm((2026, 4, 22, 21, 34, 20, 0, 0, 0))
    assert (event.origin.pid, event.origin.tid) == (202016, 202235)
    segment = parse(real_line("dev_shm_exhausted_ci_pod.log", "Error while creating"))
    assert isinstance(segment, NcclWarn)
    assert (segment.field("op"), segment.field("size"), segment.field("errno")) == (
        "creating",
        "9637888",
        "28",
    )


def test_warn_proxy_socket_recv() -> None:
    event = parse(real_line("dev_shm_exhausted_ci_pod.log", "Socket recv failed"))
    assert isinstance(event, NcclWarn)
    assert (event.family, event.file, event.line_no, event.field("op")) == (
        "proxy",
        "proxy.cc",
        1326,
        "recv",
    )
    assert event.origin.dev == 2


def test_warn_ib_completion_roce() -> None:
    event = parse(real_line("roce_status12_then_flush.log", "status=12"))
    assert isinstance(event, NcclWarn)
    assert (event.family, event.file, event.line_no) == ("ib-completion", "ib_plugin.c", 1615)
    assert event.fields == (
        ("peer", "172.36.143.59<44206>"),
        ("status", "12"),
        ("opcode", "129"),
        ("len", "65536"),
        ("vendor_err", "129"),
        ("req_type", "Recv"),
        ("local_gid", "::ffff:29.87.88.182"),
        ("remote_gid", "::ffff:29.87.4.221"),
    )
    flush = parse(real_line("roce_status12_then_flush.log", "status=5"))
    assert isinstance(flush, NcclWarn)
    assert (flush.field("status"), flush.field("vendor_err")) == ("5", "249")


def test_warn_ib_completion_other_eras() -> None:
    # Spec 2.12.3: 2.10 form (pytorch/pytorch#81628) and the 2.29+ named form.
    old = parse(
        "tf144:143468:143535 [1] transport/net_ib.cc:1024 NCCL WARN"
        " NET/IB : Got completion from peer"
        " 192.168.17.147<38560> with error 12, opcode 0, len 0, vendor err 129"
    )
    assert isinstance(old, NcclWarn)
    assert (old.family, old.field("status"), old.field("opcode"), old.field("vendor_err")) == (
        "ib-completion",
        "12",
        "0",
        "129",
    )
    new = parse(
        "gpu-a01:4721:4811 [0] transport/net_ib/p2p.cc:688 NCCL WARN"
        " NET/IB: Got completion from peer"
        " 10.10.1.12<58231> with status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_RDMA_WRITE(1)"
        " vendor_err=129  hca mlx5_0"
    )
    assert isinstance(new, NcclWarn)
    assert (new.field("status"), new.field("opcode"), new.field("hca")) == ("12", "1", "mlx5_0")


def test_warn_socket_connect_refused_2_4() -> None:
    event = parse(real_line("bootstrap_connect_refused.log", "NCCL WARN"))
    assert isinstance(event, NcclWarn)
    assert (event.family, event.file, event.line_no) == ("socket", "include/socket.h", 390)
    assert event.fields == (
        ("op", "connect"),
        ("peer", "10.38.10.112<21724>"),
        ("error", "Connection refused"),
    )


@pytest.mark.parametrize(
    ("message", "fields"),
    [
        # 2.16.2-2.23.4 (the "Last error" text of corpus 024, with its WARN prefix)
        (
            "socketProgressOpt: Call to recv from 10.119.24.53<49901> failed : Broken pipe",
            (
                ("func", "socketProgressOpt"),
                ("op", "recv"),
                ("peer", "10.119.24.53<49901>"),
                ("error", "Broken pipe"),
            ),
        ),
        (
            "socketProgress: Connection closed by remote peer gpu-a01.cluster.local<40537>",
            (
                ("func", "socketProgress"),
                ("op", "recv"),
                ("peer", "gpu-a01.cluster.local<40537>"),
                ("error", "Connection closed by remote peer"),
            ),
        ),
        (
            "Call to bind failed : Address already in use",
            (("op", "bind"), ("error", "Address already in use")),
        ),
    ],
)
def test_warn_socket_spec_forms(message: str, fields: tuple[tuple[str, str], ...]) -> None:
    event = parse(f"gpu-a01:4721:4790 [0] misc/socket.cc:484 NCCL WARN {message}")
    assert isinstance(event, NcclWarn)
    assert (event.family, event.fields) == ("socket", fields)


def test_warn_2_30_7_function_and_timestamp() -> None:
    # Spec 1.3 example (2.30.7 default: WARN gets timestamp + func).
    text = (
        "[2026-06-10 14:03:22] gpu-a01:4721:4790 [0] os/linux.cc:288 (socketConnectCheck) NCCL WARN"
        " ncclOsSocketStartConnect: connect to 10.10.1.12<51237> returned Connection refused,"
        " exceeded error retry count after 35 attempts"
    )
    event = parse(text)
    assert isinstance(event, NcclWarn)
    assert (event.file, event.line_no, event.func) == ("os/linux.cc", 288, "socketConnectCheck")
    assert event.origin.time == calendar.timegm((2026, 6, 10, 14, 3, 22, 0, 0, 0))
    assert event.fields == (
        ("func", "ncclOsSocketStartConnect"),
        ("op", "connect"),
        ("peer", "10.10.1.12<51237>"),
        ("error", "Connection refused"),
        ("attempts", "35"),
    )


def test_warn_cuda_and_unknown() -> None:
    cuda = parse(
        "gpu-a01:4721:4721 [0] enqueue.cc:1092 NCCL WARN"
        " Cuda failure 'an illegal memory access was encountered'"
    )
    assert isinstance(cuda, NcclWarn)
    assert (cuda.family, cuda.field("error")) == (
        "cuda",
        "an illegal memory access was encountered",
    )
    other = parse(
        "gpu-a01:4721:4790 [0] graph/xml.cc:100 NCCL WARN XML Import Channel : dev 1 not found."
    )
    assert isinstance(other, NcclWarn)
    assert (other.family, other.message) == ("other", "XML Import Channel : dev 1 not found.")


def test_multi_line_nvls_warn_collects_its_continuations() -> None:
    # Spec 1.5: three physical lines, the last two without prefix.
    lines = [
        "gpu-a01:4721:4790 [0] transport/nvls.cc:228 NCCL WARN Failed to bind NVLink SHARP (NVLS)"
        " Multicast memory of size 1048576 : CUDA error 801 'operation not supported'.",
        "This is usually caused by a system or configuration error in the Fabric Manager or"
        " NVSwitches.",
        "Do not force-enable NVLS (NCCL_NVLS_ENABLE=1) if you wish to avoid this error in the"
        " future.",
        "gpu-a01:4721:4790 [0] NCCL INFO transport/nvls.cc:230 -> 1",
    ]
    reader, sink = NcclReader("nvls.log"), Sink()
    busy = []
    for number, text in enumerate(lines, start=1):
        assert reader.feed(Line(number, text, text), sink)
        busy.append(reader.busy())
    reader.close(sink)
    assert busy == [True, True, False, False]
    warn, trace = sink.events
    assert isinstance(warn, NcclWarn) and isinstance(trace, NcclErrorTrace)
    assert (warn.family, warn.field("code"), warn.field("error")) == (
        "cuda",
        "801",
        "operation not supported",
    )
    assert warn.message.count("\n") == 2 and warn.message.endswith("in the future.")
    assert sink.recognized == {1, 2, 3, 4}


# ---------------------------------------------------------------- other levels, torn lines


def test_init_time_notes() -> None:
    # Spec 2.2 (2.16.2+).
    chunk = parse("gpu-node001:21461:21829 [0] NCCL INFO P2P Chunksize set to 131072")
    assert isinstance(chunk, NcclInfoNote)
    assert (chunk.topic, chunk.field("chunksize")) == ("p2p-chunksize", "131072")
    old, _ = strip_prefixes(real_line("nccl_2_4_numbered_two_node.log", "Trees disabled"), "viewer")
    threads = parse(old)
    assert isinstance(threads, NcclInfoNote)
    assert (threads.topic, threads.field("threads"), threads.field("trees")) == (
        "threads",
        "256",
        "disabled",
    )
    plugin = parse(real_line("version_2_19_socket_node2.log", "non-device net plugin"))
    assert isinstance(plugin, NcclInfoNote)
    assert (plugin.topic, plugin.field("version")) == ("net-plugin-version", "0")


def test_call_and_trace_lines() -> None:
    # Spec 1.3 examples.
    call = parse(
        "gpu-a01:4721:4721 NCCL CALL ncclAllReduce(7f3a5c000000,7f3a5c000000,1048576,7,0,0,"
        "0x55d0c8a1b2f0,0x55d0c9e04a10)"
    )
    assert isinstance(call, NcclCall)
    assert (call.func, call.args[2], len(call.args)) == ("ncclAllReduce", "1048576", 8)
    assert call.origin.dev is None
    trace = parse(
        "gpu-a01:4721:4811 [0] 2231.482115 sendProxyProgress:1417 NCCL TRACE sendProxy [12/4/16]"
        " Isend posted, req 0x7f39a4002a80"
    )
    assert isinstance(trace, NcclInfoNote) and trace.topic == "proxy-progress"
    assert (trace.origin.tid, trace.field("side"), trace.field("steps")) == (
        4811,
        "sendProxy",
        "12/4/16",
    )
    # Spec 1.1 (2.3-2.6): NCCL_DEBUG=ABORT printed this after the WARN and aborted.
    abort = parse("gpu-a01:4721:4790 [0] init.cc:497 NCCL ABORT")
    assert isinstance(abort, NcclWarn)
    assert (abort.family, abort.file, abort.line_no, abort.message) == ("abort", "init.cc", 497, "")


def test_unknown_info_keeps_the_writer() -> None:
    # Spec-built: a message no rule knows.
    event = parse("instance-8g-96c-1:525765:525972 [0] NCCL INFO Something new: 42")
    assert isinstance(event, NcclUnrecognized)
    assert not event.RECOGNIZED
    assert (event.level, event.message) == ("INFO", "Something new: 42")
    assert (event.origin.host, event.origin.pid, event.origin.tid) == (
        "instance-8g-96c-1",
        525765,
        525972,
    )
    # A message that starts like a known family but breaks off falls back to the envelope.
    cut = parse("hostname-test:981:1267 [1] NCCL INFO Channel 00/0 : 33[1] -> 34[2] [send] vi")
    assert isinstance(cut, NcclUnrecognized)
    assert cut.origin.pid == 981


@pytest.mark.parametrize(
    "text",
    [
        "hostname-test:985:1263 [5",
        "instance-8g-96c-1:52",
        "hostname-test:984:1357",
        "tj1-asr-train-v100-13:941227:",
        "i-56butc2",
        "socketProgressOpt: Call to recv from 10.119.24.53<49901> failed : Broken pipe",
        "ncclRemoteError: A call failed possibly due to a network error, NCCL version 2.21.5",
    ],
)
def test_torn_and_foreign_lines_are_declined(text: str) -> None:
    reader, sink = NcclReader("torn.log"), Sink()
    assert not reader.feed(Line(1, text, text), sink)
    assert sink.events == [] and sink.recognized == set()


def test_whole_fixtures_take_only_nccl_lines() -> None:
    events, sink, declined = read_fixture("version_2_14_fastsocket_node1.log")
    # 13 lines: the torchrun line and the torn last line are declined; the other 11,
    # the four NET/FastSocket notes included, are recognized.
    assert declined == 2
    assert len(events) == 11
    assert len(sink.recognized) == 11
    assert sink.unrecognized_events == 0


def test_grammar_is_built_once() -> None:
    assert _parser() is _parser()


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_any_text_never_raises(text: str) -> None:
    reader, sink = NcclReader("fuzz.log"), Sink()
    line = text.replace("\n", " ")
    reader.feed(Line(1, line, line), sink)
    reader.close(sink)


@settings(max_examples=300, deadline=None)
@given(
    st.text(
        alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\n"),
        max_size=120,
    )
)
def test_any_message_after_a_prefix_never_raises(message: str) -> None:
    for head in ("h:1:2 [0] NCCL INFO ", "h:1:2 [0] a.cc:3 NCCL WARN ", "h:1:2 NCCL CALL "):
        event = parse_nccl_line(head + message)
        assert event is not None
        assert (event.origin.host, event.origin.pid) == ("h", 1)


# ---- families added for coverage of the corpus (issue 3)


def test_nic_distance_line_of_2_4_gives_gpu_transport_and_distance() -> None:
    event = parse(real_line("plugin_notes_and_cut_lines.log", "NIC distance"))
    assert isinstance(event, NcclInfoNote)
    assert event.topic == "nic-distance"
    assert event.fields == (
        ("gpu", "6"),
        ("dev", "6"),
        ("transport", "Socket"),
        ("distance", "PHB"),
    )
    assert event.origin.host == "tj1-asr-train-v100-11"


@pytest.mark.parametrize(
    ("contains", "message"),
    [
        ("Flow placement", "Flow placement enabled."),
        ("Tx CPU", "Tx CPU start: -2"),
        ("queue skip", "queue skip: 0"),
    ],
)
def test_other_net_plugin_messages_name_the_plugin(contains: str, message: str) -> None:
    event = parse(real_line("plugin_notes_and_cut_lines.log", contains))
    assert isinstance(event, NcclInfoNote)
    assert event.topic == "net-plugin"
    assert event.fields == (("plugin", "FastSocket"), ("message", message))


def test_net_ib_and_net_socket_keep_their_own_rules() -> None:
    ib = parse("h:1:2 [0] NCCL INFO NET/IB : No device found.")
    assert isinstance(ib, NcclNetDevices) and ib.devices == ()
    sock = parse("h:1:2 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>")
    assert isinstance(sock, NcclInterface) and sock.interfaces == (("eth0", "10.0.0.1<0>"),)


@pytest.mark.parametrize(
    ("contains", "comm"),
    [("comm 0x5598", "0x5598"), ("nvmlDev", "0x561dde2fb110")],
)
def test_a_communicator_line_cut_short_is_a_truncated_note(contains: str, comm: str) -> None:
    event = parse(real_line("plugin_notes_and_cut_lines.log", contains))
    assert isinstance(event, NcclInfoNote)
    assert event.topic == "comm-truncated"
    assert event.field("comm") == comm


def test_complete_communicator_lines_are_not_taken_for_cut_ones() -> None:
    config = parse(
        "h:1:2 [0] NCCL INFO comm 0x5 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0"
    )
    assert isinstance(config, NcclCommConfig) and config.mnnvl == 0
    done = parse(
        "h:1:2 [0] NCCL INFO comm 0x5 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE"
    )
    assert isinstance(done, NcclCommInit) and done.phase == "COMPLETE"


def test_the_frequent_line_fast_path_agrees_with_the_grammar() -> None:
    # Every fixture line and the spec forms: where the fast path answers, the parser agrees.
    from logsleuth.parse.nccl_line import _parse_frequent

    lines = [
        line
        for path in sorted(FIXTURES.parent.rglob("*.log"))
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines()
    ]
    lines += [
        "gpu-a01:4721:4790 [0] NCCL INFO Ring 00 : 1 -> 0 [receive] via NET/Socket/0",
        "gpu-a01:4721:4790 [0] NCCL INFO Ring 00 : 1 -> 0 -> 2",
        "gpu-a01:4721:4790 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via",
        "gpu-a01:4721:4790 [0] INFO Channel 00 : 0[7000] -> 1[b000] via P2P/IPC/read",
        "gpu-a01:4721:4721 [0] NCCL INFO opCount 0 sendbuff 0x1 recvbuff 0x1 count 8 size 32"
        " datatype 7 op 0 comm 0x5 [nranks=2] stream 0x6",
        "gpu-a01:4721:4721 [0] NCCL INFO AllReduce: opCount 1a sendbuff 0x1 count x",
    ]
    answered = 0
    for text in lines:
        fast = _parse_frequent(strip_prefixes(text)[0])
        if fast is None:
            continue
        answered += 1
        stripped = strip_prefixes(text)[0]
        assert fast == _parser().parse(stripped, start="line"), text
    assert answered > 30
