"""Message families of the NCCL log, one test per family and the releases it spans.

Lines are built from the format strings of docs/nccl-log-format.md (section
numbers in each test), with its example host ``gpu-a01`` and pid 4721; where the spec
quotes an example line (``EG``) it is used verbatim.
"""

from __future__ import annotations

import json

import pytest

from logsleuth.model.base import Event
from logsleuth.model.nccl import NcclGraphTree, NcclInfoNote, NcclRasReport, NcclWarn
from logsleuth.parse.discover import InputSource
from logsleuth.parse.dispatch import InputResult, read_input
from logsleuth.parse.nccl import parse_nccl_line

INFO = "gpu-a01:4721:4790 [0] NCCL INFO "
WARN = "gpu-a01:4721:4790 [0] init.cc:1536 NCCL WARN "


def parse(text: str) -> Event:
    event = parse_nccl_line(text)
    assert event is not None and event.RECOGNIZED, text
    return event


def note(message: str, topic: str) -> NcclInfoNote:
    event = parse(INFO + message)
    assert isinstance(event, NcclInfoNote), message
    assert event.topic == topic, message
    return event


def warn(message: str, family: str) -> NcclWarn:
    event = parse(WARN + message)
    assert isinstance(event, NcclWarn), message
    assert event.family == family, message
    return event


# ---------------------------------------------------------------- GRAPH (spec 2.6, 2.7)


@pytest.mark.parametrize(
    ("message", "channel", "up", "me", "down"),
    [
        ("Tree 0 : 0 -> 1 -> 2/-1/-1", 0, 0, 1, (2, -1, -1)),  # 2.8.3+
        ("Tree 1 : -1 -> 0 -> 1/8/-1", 1, -1, 0, (1, 8, -1)),
        ("Tree 12 : 7 -> 15 -> -1/-1/-1", 12, 7, 15, (-1, -1, -1)),
    ],
)
def test_graph_tree_lines(
    message: str, channel: int, up: int, me: int, down: tuple[int, ...]
) -> None:
    event = parse(INFO + message)
    assert isinstance(event, NcclGraphTree)
    assert (event.channel, event.up, event.me, event.down) == (channel, up, me, down)


def test_graph_ring_lines_2_10_plus() -> None:
    event = note("Ring 03 : 7 -> 0 -> 1", "graph-ring")
    assert (event.field("channel"), event.field("prev"), event.field("next")) == ("3", "7", "1")


@pytest.mark.parametrize(
    ("message", "fields"),
    [
        ("=== System : maxWidth 24 maxSpeed 24 ===", {"maxWidth": "24"}),  # 2.5.6-2.5.7
        ("=== System : maxWidth 24.0 ===", {"maxWidth": "24.0"}),  # 2.6.4-2.7.8
        ("=== System : maxWidth 24.0 totalWidth 240.0 ===", {"totalWidth": "240.0"}),
        ("=== System : maxBw 48.0 totalBw 480.0 ===", {"maxBw": "48.0", "totalBw": "480.0"}),
    ],
)
def test_topology_system_header_of_every_era(message: str, fields: dict[str, str]) -> None:
    event = note(message, "topo-system")
    for key, value in fields.items():
        assert event.field(key) == value


@pytest.mark.parametrize(
    ("message", "topic", "key", "value"),
    [
        # 2.26+ example of spec 2.6, line by line
        ("CPU/0-0 (1/2/-1)", "topo-node", "node", "CPU/0-0"),
        ("+ PCI[48.0] - PCI/0-17000 (1000c03015d91d25)", "topo-link", "node", "PCI/0-17000"),
        ("              + PCI[48.0] - GPU/0-18000 (0)", "topo-link", "bw", "48.0"),
        ("                            + NVL[480.0] - NVS/0-0", "topo-link", "link", "NVL"),
        ("+ NET[50.0] - NET/0-0 (0/5c2b8a0003e2f1a0/1/50.000000)", "topo-link", "link", "NET"),
        ("==========================================", "topo-end", "", ""),
        (
            "GPU/0-18000 :GPU/0-18000 (0/5000.0/LOC) GPU/0-2a000 (1/480.0/NVL) CPU/0-0 (1/48.0/PHB)",
            "topo-paths",
            "node",
            "GPU/0-18000",
        ),
        # <= 2.20: hex ids without the system part
        ("GPU/1B000 (0)", "topo-node", "detail", "0"),
        ("GPU/2000 :GPU/2000 (0/5000.000000/LOC) GPU/3000 (2/12.000000/PHB)", "topo-paths", "", ""),
    ],
)
def test_topology_dump_lines(message: str, topic: str, key: str, value: str) -> None:
    event = note(message, topic)
    if key:
        assert event.field(key) == value


@pytest.mark.parametrize(
    "message",
    [
        "Pattern 4, crossNic 0, nChannels 16, bw 40.000000/40.000000, type NVL/PIX, sameChannels 1",
        "Pattern 3, crossNic 0, nChannels 2, speed 12.000000/12.000000, type PHB/PIX, sameChannels 1",
        "Pattern 1, crossNic 0, nChannels 1, speed 12/12, nvlink 0, type 3, sameChannels 1",
    ],
)
def test_graph_search_pattern_of_every_era(message: str) -> None:
    event = note(message, "graph-pattern")
    assert event.field("Pattern") == message.split(",")[0].split()[1]
    assert event.field("nChannels") is not None


@pytest.mark.parametrize(
    "message",
    [
        " 0 : GPU/0 GPU/1 GPU/2 GPU/3 GPU/4 GPU/5 GPU/6 GPU/7",  # <= 2.27.7
        " 0 : NET/0-0 GPU/0-18000 GPU/0-2a000 NET/0-0",  # 2.28.3+, multi-node
    ],
)
def test_graph_search_channel_lines(message: str) -> None:
    event = note(message, "graph-channel")
    assert event.field("channel") == "0"


def test_nvls_trees_and_collnet_graph() -> None:
    assert note("NVLS Trees : 0/1/-1->2->-1 1/2/-1->3->-1", "nvls-trees").field("trees")
    collnet = note("CollNet Channel 0 rank 3 up 1 down -1", "collnet-graph")  # 2.6.4-2.8.4
    assert (collnet.field("rank"), collnet.field("up")) == ("3", "1")


# ---------------------------------------------------------------- GDR (spec 2.5)


@pytest.mark.parametrize(
    ("message", "enabled", "plugin"),
    [
        ("NET/IB : GPU Direct RDMA Disabled for GPU 1[1] / HCA 0 (distance 4 >= 2)", 0, "IB"),
        ("NET/IB : GPU Direct RDMA Enabled for GPU 1[1] / HCA 0 (distance 1 < 2), read 0", 1, "IB"),
        ("NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)", 0, "IB"),
        ("NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'", 1, "IB"),  # 2.13.4+
        ("GPU Direct RDMA Disabled for GPU 18000 / HCA 0 (distance 7 > 4)", 0, None),
        (
            "GPU Direct RDMA Enabled for GPU 0 / HCA 1a000 (distance 4 <= 5), read 1 mode Default",
            1,
            None,
        ),
        (
            "GPU Direct RDMA Enabled for GPU/0-18000 (rank 0) - NET/0-0 (distance 4 <= 5,"
            " read 1, mode Default)",
            1,
            None,
        ),
    ],
)
def test_gdr_decisions_of_every_era(message: str, enabled: int, plugin: str | None) -> None:
    event = note(message, "gdr")
    assert event.field("enabled") == str(enabled)
    assert event.field("plugin") == plugin


# ---------------------------------------------------------------- TUNING (spec 2.9)


@pytest.mark.parametrize(
    ("message", "op", "nbytes"),
    [
        (
            "AllReduce: 4194304 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..31}",
            "AllReduce",
            "4194304",
        ),
        ("AllReduce: 4194304 Bytes -> Algo 1 proto 2 time 36.210000", "AllReduce", "4194304"),
        ("4194304 Bytes -> Algo 1 proto 2 time 36.210000", None, "4194304"),  # 2.20.3-2.22.3
        (
            "AllReduce [Symmetric]: 4194304 Bytes -> Kernel AllReduce_RSxLD_AGxST nchannels 24"
            " nthreads 512 nWorks 4",
            "AllReduce [Symmetric]",
            "4194304",
        ),
        (
            "AllGather [Copy Engine]: 1048576 Bytes -> cudaMemcpyAsync",
            "AllGather [Copy Engine]",
            "1048576",
        ),
    ],
)
def test_tuning_lines_of_every_era(message: str, op: str | None, nbytes: str) -> None:
    event = note(message, "tuning")
    assert (event.field("op"), event.field("bytes")) == (op, nbytes)


# ---------------------------------------------------------------- proxy (spec 2.10)


@pytest.mark.parametrize(
    "message",
    [
        "[Proxy Progress] Device 0 CPU core 12",  # 2.23.4+
        "[Proxy Service UDS] Device 0 CPU core 13",
        "[Proxy Progress] Created CUDA context on device 0",  # 2.18.1-2.22.3
        "Received and initiated operation=Connect res=0",
        "Connection to proxy localRank 0 -> connection 0x7f2a4c000ba0",  # 2.12.7-2.18.6
        "Connected to proxy localRank 0 -> connection 0x7f2a4c000ba0",  # 2.19.1-2.30.4
        "Connected to proxy tpRank 0 -> connection 0x7f2a4c000ba0",  # 2.30.7+
        "New proxy send connection 0 from local rank 0, transport 2",
        "sendConnect ncclProxyCallAsync opId=0x7f2a4c001230",
        "recvConnect ncclPollProxyResponse opId=0x7f2a4c001230",
        "MMAP allocated shareable host buffer /dev/shm/nccl-ab12cd size 9637888 ptr 0x7f0012340000",
        "proxy listening socket at 10.10.1.11<43005>",
    ],
)
def test_proxy_lines(message: str) -> None:
    assert note(message, "proxy").field("message") == message.strip()


@pytest.mark.parametrize(
    ("message", "side", "steps"),
    [
        ("sendProxy [12/4] request 0x7f39a4002a80 done, size 524288", "sendProxy", "12/4"),  # 2.6.4
        ("recvProxy [3/1] posted recv request 0x7f39a4002a80", "recvProxy", "3/1"),  # 2.8.3
        (
            "sendProxy [96/0/128] Isend posted, req 0x7f39a4002a80, buff 0x7f3970000000, size"
            " 524288, proto 2, myRank 0, channelId 3, mhandle 0x7f39a4001f10",
            "sendProxy",
            "96/0/128",
        ),  # 2.24.3+
    ],
)
def test_trace_network_progress(message: str, side: str, steps: str) -> None:
    text = f"gpu-a01:4721:4811 [0] 5120.331902 sendProxyProgress:1417 NCCL TRACE {message}"
    event = parse(text)
    assert isinstance(event, NcclInfoNote) and event.topic == "proxy-progress"
    assert (event.field("side"), event.field("steps")) == (side, steps)
    assert event.origin.tid == 4811


# ---------------------------------------------------------------- RAS (spec 2.13)


def test_ras_log_lines() -> None:
    dead = note(
        "RAS declaring peer 10.10.1.12<37719> as DEAD; rasDeadPeersHash 0x6a1f93c2d0e4b711", "ras"
    )
    assert (dead.field("event"), dead.field("peer")) == ("dead-peer", "10.10.1.12<37719>")
    slow = note(
        "RAS keep-alive timeout warning (5s) on socket connection with 10.10.1.12<37719>", "ras"
    )
    assert slow.field("event") == "timeout"
    assert note("RAS client listening socket at 127.0.0.1<28028>", "ras").field("event") is None
    assert note(
        "RAS collective 10.10.1.12<37719>:14 timeout warning (5s) -- 2 responses missing", "ras"
    )


def test_ras_version_mismatch_warn_of_both_eras() -> None:
    old = warn(
        "NCCL version mismatch with remote peer 10.10.1.12<37719> (local: 22403, remote 22301)",
        "version",
    )
    assert (old.field("local"), old.field("remote")) == ("22403", "22301")
    new = warn(
        "NCCL version mismatch with remote peer 10.10.1.12<37719> (local: 2.30.3, remote 2.29.7)",
        "version",
    )
    assert (new.field("local"), new.field("remote")) == ("2.30.3", "2.29.7")


# ---------------------------------------------------------------- async errors (spec 2.11)


@pytest.mark.parametrize(
    ("message", "op"),
    [
        ("ncclAsyncJobComplete: job 0x55d0c8a1b2f0 failed, job error 6", "ncclAsyncJobComplete"),
        ("hostStreamPlanCallback() failed : unhandled system error", "hostStreamPlanCallback"),
        ("Failure in host setup : unhandled cuda error", "Failure in host setup"),  # 2.9.6-2.12.12
        ("commReclaim: comm 0x55d0c8a1b2f0 (rank = 3) in abort, error 6", "commReclaim"),
        (
            "ncclProxyStop: comm 0x55d0c8a1b2f0 (rank = 3) destroys proxy resource error 6",
            "ncclProxyStop",
        ),
        ("commDestroySync: comm 0x55d0c8a1b2f0 rank 3 sync hostStream error 6", "commDestroySync"),
        (
            "communicator encountered a fatal error (detected in ncclIbAsyncThreadMain)",
            "communicator encountered a fatal error",
        ),
    ],
)
def test_async_error_warns(message: str, op: str) -> None:
    assert warn(message, "abort").field("op") == op


def test_async_error_and_abort_state_keep_the_comm() -> None:
    assert (
        warn("ncclCommSetAsyncError: error comm 0x55d0c8a1b2f0 sets state 6", "abort").field("comm")
        == "0x55d0c8a1b2f0"
    )
    assert warn("Comm 0x55d0c8a1b2f0 is in abort state", "abort").field("comm") == "0x55d0c8a1b2f0"


def test_the_2_4_collective_mismatch_warns() -> None:
    text = (
        "Mismatched collective detected, please check your collective calls at and around rank 3."
        " You can use NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=COLL to see the collective logs"
    )
    assert warn(text, "collective-mismatch").field("rank") == "3"
    hang = (
        "Your program may be hanging, this may be caused by a collective mismatch around rank 5."
        " Please check your collective calls at and around this rank."
    )
    assert warn(hang, "collective-mismatch").field("rank") == "5"


# ---------------------------------------------------------------- NVLS (spec 2.7, 2.8)


def test_nvls_lines() -> None:
    note(
        "NVLS comm 0x55d0c8a1b2f0 headRank 0 nHeads 8 nvlsRanks 8 buffSize 1048576"
        " nvlsPerRankSize 201326592 nvlsTotalSize 1610612736",
        "nvls",
    )
    note("NVLS Creating Multicast group nranks 8 size 1610612736 on rank 0", "nvls")
    support = note("NVLS multicast support is not available on dev 0", "nvls-support")
    assert support.field("available") == "0"
    note("Enabled NCCL Func/Proto/Algo Matrix: Broadcast: LL/LL128/Simple", "algo-matrix")


# ---------------------------------------------------------------- ncclras reports (spec 2.13)

RAS_TEXT = """\
NCCL version 2.30.7 compiled with CUDA 13.0
CUDA runtime version 13000, driver version 13010

Job summary
===========

  Nodes  Processes         GPUs  Processes     GPUs
(total)   per node  per process    (total)  (total)
      4          8            1         32       32

Communicators... (0.004s)
=============

Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors
    #  in group  per comm  per node  per comm  in group
    0         1         4       7-8        32        32   RUNNING  INCOMPLETE

Errors
======

INCOMPLETE
  Missing communicator data from 1 job process
  Process 3487984 on node 172.16.64.213 managing GPU 5

#0-0 (cf264af53edbe986) INCOMPLETE
  Missing communicator data from 1 rank
  Rank 21 -- GPU 5 managed by process 3487984 on node 172.16.64.213

Warnings
========

TIMEOUT
  Encountered 2 communication timeouts while gathering communicator data
"""


def _read(text: str, name: str = "ras.txt") -> InputResult:
    return read_input(InputSource(name=name, path=None, data=text.encode()))


def test_ncclras_text_report_2_30() -> None:
    # The spec 2.13 example, verbatim.
    result = _read(RAS_TEXT)
    assert result.summary.unrecognized == 0
    (report,) = result.events
    assert isinstance(report, NcclRasReport)
    assert report.version == "2.30.7"
    assert report.records == (("#0-0", "cf264af53edbe986", "INCOMPLETE"),)
    assert report.ranks == ((21, "5", 3487984, "172.16.64.213", "missing"),)
    assert report.processes == ((3487984, "172.16.64.213", "5"),)
    assert "Encountered 2 communication timeouts while gathering communicator data" in report.notes


def test_ncclras_text_report_2_24_compact_missing_ranks_and_errors() -> None:
    # 2.24.3-2.25.1 listed missing ranks compactly; reported errors name the rank.
    text = (
        "NCCL version 2.24.3 compiled with CUDA 12.6\n"
        "#0-1 (5a1e) ERROR,INCOMPLETE\n"
        "  The missing ranks: 21, 22\n"
        "  Rank 3 reported Remote process error -- GPU 3 managed by process 77 on node n1\n"
        "  26 ranks have launched up to operation 6650\n"
        "gpu-a01:4721:4790 [0] NCCL INFO Connected all rings\n"
    )
    result = _read(text)
    assert result.summary.unrecognized == 0
    report = result.events[0]
    assert isinstance(report, NcclRasReport)
    assert report.missing_ranks == (21, 22)
    assert report.ranks == ((3, "3", 77, "n1", "Remote process error"),)
    assert report.notes == ("26 ranks have launched up to operation 6650",)
    assert type(result.events[1]).__name__ == "NcclConnected"


def test_a_bare_version_line_is_not_a_ras_report() -> None:
    (event,) = [e for e in _read("NCCL version 2.21.5+cuda12.4\n").events]
    assert type(event).__name__ == "NcclVersion"


def test_ncclras_json_report() -> None:
    # docs/userguide .../ras.rst keys (spec 2.13): one communicator, one rank missing.
    data = {
        "nccl_version": "2.28.7",
        "cuda_runtime_version": 12080,
        "communicators_count": 1,
        "communicators": [
            {
                "hash": "cf264af53edbe986",
                "size": 32,
                "ranks_count": 31,
                "missing_ranks_count": 1,
                "ranks": [
                    {"rank": 0, "host": "10.0.0.1", "pid": 11, "cuda_dev": 0, "status": {}},
                    {
                        "rank": 1,
                        "host": "10.0.0.1",
                        "pid": 12,
                        "cuda_dev": 1,
                        "status": {"async_error": 6},
                    },
                ],
                "missing_ranks": [
                    {
                        "rank": 21,
                        "host": "172.16.64.213",
                        "pid": 3487984,
                        "cuda_dev": 5,
                        "status": {"unresponsive": True, "considered_dead": True},
                    },
                ],
            }
        ],
    }
    result = _read(json.dumps(data), "ras.json")
    assert result.summary.kind == "ras-report"
    (report,) = result.events
    assert isinstance(report, NcclRasReport) and report.version == "2.28.7"
    assert report.records == (("#0", "cf264af53edbe986", "ERROR,INCOMPLETE"),)
    assert report.ranks == (
        (21, "5", 3487984, "172.16.64.213", "dead"),
        (1, "1", 12, "10.0.0.1", "async error 6"),
    )
