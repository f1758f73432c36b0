"""Topology rebuilt from init lines of every NCCL era, and the rules that check it.

Lines follow the format strings of docs/nccl-log-format.md sections 2.2, 2.4-2.8; the
32-rank incident is fixtures/synthetic/topology-socket-fallback-32 (benchmarks/synth.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from logsleuth.analysis.index import EvidenceIndex, build_index
from logsleuth.analysis.rules.topology import RingsNotConnected
from logsleuth.analysis.topology import (
    CommTopology,
    build_topologies,
    build_topology_views,
    decode_device,
    decode_transport,
)
from logsleuth.api import analyze
from logsleuth.model.base import Event, InputSummary
from logsleuth.model.diagnosis import Finding
from logsleuth.model.topology import pretty_bus_id, transport_label
from logsleuth.parse.discover import discover
from logsleuth.parse.dispatch import read_input

ROOT = Path(__file__).resolve().parents[2]
SYNTHETIC = ROOT / "fixtures" / "synthetic"
CORPUS = ROOT / "fixtures" / "real" / "corpus"


def _index(tmp_path: Path, logs: dict[str, str]) -> EvidenceIndex:
    for name, text in logs.items():
        (tmp_path / name).write_text(text)
    sources, _ = discover([str(tmp_path / name) for name in sorted(logs)])
    events: list[Event] = []
    summaries: list[InputSummary] = []
    for source in sources:
        result = read_input(source)
        events.extend(result.events)
        summaries.append(result.summary)
    return build_index(events, summaries)


def _only(index: EvidenceIndex) -> CommTopology:
    (topo,) = build_topologies(index)
    return topo


def _findings(tmp_path: Path, logs: dict[str, str]) -> list[Finding]:
    for name, text in logs.items():
        (tmp_path / name).write_text(text)
    return list(analyze([str(tmp_path / name) for name in sorted(logs)]).diagnosis.findings)


def _codes(findings: list[Finding]) -> set[str]:
    return {f.code for f in findings}


# ---- decoding (spec 2.8)


@pytest.mark.parametrize(
    ("via", "family", "net", "device", "gdr", "proxy"),
    [
        ("P2P/CUMEM/read", "P2P", None, None, False, None),
        ("P2P/indirect/2[2]", "P2P", None, None, False, None),
        ("SHM/direct/direct", "SHM", None, None, False, None),
        ("direct shared memory", "SHM", None, None, False, None),
        ("NET/IB/0/GDRDMA", "NET/IB", "IB", 0, True, None),
        ("NET/IB/3(0)/GDRDMA", "NET/IB", "IB", 3, True, 0),
        ("NET/Socket/0", "NET/Socket", "Socket", 0, False, None),
        ("NET/AWS Libfabric/0/GDRDMA", "NET", "AWS Libfabric", 0, True, None),
        ("NET/IB/1/GDRDMA(PCI)/Shared", "NET/IB", "IB", 1, True, None),
        ("COLLNET/SHARP/0/GDRDMA", "COLLNET", "SHARP", None, True, None),
    ],
)
def test_transport_text_is_decoded(
    via: str, family: str, net: str | None, device: int | None, gdr: bool, proxy: int | None
) -> None:
    t = decode_transport(via)
    assert (t.family, t.net, t.device, t.gdr, t.proxy) == (family, net, device, gdr, proxy)


def test_device_field_is_decoded_per_era() -> None:
    assert decode_device("7000", "2.7.8") == ("busId", "7000")
    assert decode_device("1b000", "2.12.12") == ("busId", "1b000")
    assert decode_device("5", "2.18.3") == ("nvmlDev", "5")
    assert decode_device("3", "2.4.8") == ("nvmlDev", "3")
    # Without a version line the width tells: packed bus ids have at least four digits.
    assert decode_device("b000", None) == ("busId", "b000")
    assert decode_device("7", None) == ("nvmlDev", "7")
    assert decode_device(None, "2.21.5") is None


def test_bus_ids_and_transport_labels_read_like_the_tools_print_them() -> None:
    assert pretty_bus_id("18000") == "0000:18:00.0"
    assert pretty_bus_id("1000") == "0000:01:00.0"
    assert pretty_bus_id("1b000") == "0000:1b:00.0"
    assert transport_label("NET/IB/3(0)/GDRDMA") == "NET/IB/GDRDMA+PXN"
    assert transport_label("NET/Socket/0") == "NET/Socket"
    assert transport_label("P2P/CUMEM/read") == "P2P/CUMEM/read"


# ---- rings and trees, era by era


def test_nccl_2_4_ring_lines_and_dump(tmp_path: Path) -> None:
    p0, p1 = "node-a:100:110 [0] NCCL INFO ", "node-a:101:111 [1] NCCL INFO "
    log = "\n".join(
        [
            f"{p0}Bootstrap : Using [0]eth0:10.0.0.1<0>",
            f"{p0}Channel 00 :    0   1",
            f"{p0}Channel 01 :    0   1",
            f"{p0}Ring 00 : 0[0] -> 1[1] via P2P/IPC",
            f"{p0}Ring 01 : 0[0] -> 1[1] via P2P/IPC",
            f"{p0}Trees [0] 1/-1/-1->0->-1 [1] 1/-1/-1->0->-1",
            f"{p0}comm 0x7f01 rank 0 nranks 2 cudaDev 0 nvmlDev 0 - Init COMPLETE",
            f"{p1}Ring 00 : 1[1] -> 0[0] via P2P/IPC",
            f"{p1}Ring 01 : 1[1] -> 0[0] via P2P/IPC",
            f"{p1}Trees [0] -1/-1/-1->1->0 [1] -1/-1/-1->1->0",
            f"{p1}comm 0x7f02 rank 1 nranks 2 cudaDev 1 nvmlDev 1 - Init COMPLETE",
            "",
        ]
    )
    topo = _only(_index(tmp_path, {"nccl24.log": log}))
    assert topo.nranks == 2
    assert topo.channels() == 2
    assert topo.ring_order(0) == (0, 1)
    assert {c.phase for c in topo.conns} == {"unknown"}
    assert topo.trees[(0, 1)][1] == 0  # rank 1's parent on channel 0
    assert topo.ranks[1].nvml_dev == 1
    assert topo.ranks[0].address == "10.0.0.1"


def test_nccl_2_7_bus_id_fields_fill_what_init_lines_lack(tmp_path: Path) -> None:
    p0 = "node-a:200:210 [0] NCCL INFO "
    log = "\n".join(
        [
            f"{p0}NCCL version 2.7.8+cuda11.0",
            f"{p0}Channel 00/02 :    0   1   2",
            f"{p0}Channel 01/02 :    0   2   1",
            f"{p0}Channel 00 : 0[7000] -> 1[b000] via P2P/IPC/read",
            f"{p0}Channel 01 : 0[7000] -> 2[1b000] via P2P/IPC/read",
            f"{p0}comm 0x55a1 rank 0 nranks 3 cudaDev 0 busId 7000 - Init COMPLETE",
            "",
        ]
    )
    topo = _only(_index(tmp_path, {"rank0.log": log}))
    assert topo.ring_order(0) == (0, 1, 2)
    assert topo.ring_order(1) == (0, 2, 1)
    assert topo.ranks[0].bus_id == "7000"
    # Ranks 1 and 2 wrote no log here: their GPUs are known from rank 0's [busId] fields.
    assert topo.ranks[1].bus_id == "b000"
    assert topo.ranks[2].bus_id == "1b000"
    assert topo.channels() == 2


def _rank_2_21(host: str, pid: int, rank: int, nranks: int, body: list[str]) -> list[str]:
    p = f"{host}:{pid}:{pid + 90} [{rank % 2}] NCCL INFO "
    ident = (
        f"ncclCommInitRank comm 0x{pid:x}0 rank {rank} nranks {nranks} cudaDev {rank % 2} "
        f"nvmlDev {rank % 2} busId {'18000' if rank % 2 == 0 else '2a000'} commId 0xabc"
    )
    return [f"{p}{ident} - Init START", *(p + line for line in body), f"{p}{ident} - Init COMPLETE"]


def test_nccl_2_18_nvml_fields_phases_and_trees(tmp_path: Path) -> None:
    lines = _rank_2_21(
        "node-a",
        300,
        0,
        2,
        [
            "Channel 00/02 :    0   1",
            "Channel 01/02 :    0   1",
            "Trees [0] 1/-1/-1->0->-1 [1] 1/-1/-1->0->-1",
            "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM",
            "Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM",
            "Connected all rings",
            "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM",
            "Connected all trees",
            "2 coll channels, 2 collnet channels, 0 nvls channels, 2 p2p channels, 2 p2p channels per peer",
        ],
    )
    lines += _rank_2_21(
        "node-a",
        301,
        1,
        2,
        [
            "Trees [0] -1/-1/-1->1->0 [1] -1/-1/-1->1->0",
            "Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM",
            "Channel 01/0 : 1[1] -> 0[0] via P2P/CUMEM",
            "Connected all rings",
            "Connected all trees",
        ],
    )
    topo = _only(_index(tmp_path, {"n.log": "\n".join(lines) + "\n"}))
    assert [c.phase for c in topo.conns if c.src == 0] == ["ring", "ring", "tree"]
    assert topo.ranks[0].summary_channels == 2
    assert topo.ranks[1].nvml_dev == 1 and topo.ranks[1].bus_id == "2a000"
    assert topo.ranks[1].connected is not None
    assert topo.ring_order(1) == (0, 1)
    assert topo.graph.number_of_edges() == 5


def test_nccl_2_23_compact_dump_cut_at_127_characters_falls_back_to_rank_lines(
    tmp_path: Path,
) -> None:
    n = 48
    dump = "".join(f" {r:2d}" for r in range(36)) + " ..."
    lines: list[str] = []
    for rank in range(n):
        nxt = (rank + 1) % n
        via = "P2P/CUMEM" if nxt // 8 == rank // 8 else f"NET/IB/{rank % 8}/GDRDMA"
        side = "" if via.startswith("P2P") else " [send]"
        body = [f"Channel 00/01 :{dump}"] if rank == 0 else []
        body.append(f"Channel 00/0 : {rank}[{rank % 2}] -> {nxt}[{nxt % 2}]{side} via {via}")
        lines += _rank_2_21(f"node-{rank // 8}", 500 + rank, rank, n, body)
    index = _index(tmp_path, {"n.log": "\n".join(lines) + "\n"})
    topo = _only(index)
    assert topo.dumps[0].truncated
    assert len(topo.dumps[0].ranks) == 36
    assert topo.ring_order(0) == tuple(range(n))
    (view,) = build_topology_views(index)
    assert view.rings[0] == (0, tuple(range(n)))
    assert dict(view.transports) == {"P2P/CUMEM": 42, "NET/IB/GDRDMA": 6}
    assert len(view.hosts) == 6


def test_graph_ring_lines_give_prev_and_next(tmp_path: Path) -> None:
    lines = _rank_2_21("node-a", 700, 0, 3, ["Ring 00 : 2 -> 0 -> 1", "Ring 01 : 1 -> 0 -> 2"])
    topo = _only(_index(tmp_path, {"n.log": "\n".join(lines) + "\n"}))
    assert topo.graph_rings[(0, 0)][:2] == (2, 1)
    assert topo.ring_order(1) == (0, 2)


def test_graph_tree_lines_give_the_trees(tmp_path: Path) -> None:
    lines = _rank_2_21("node-a", 900, 0, 3, ["Tree 0 : -1 -> 0 -> 1/2/-1"])
    lines += _rank_2_21("node-a", 901, 1, 3, ["Tree 0 : 0 -> 1 -> -1/-1/-1"])
    lines += _rank_2_21("node-a", 902, 2, 3, ["Tree 0 : 1 -> 2 -> -1/-1/-1"])
    topo = _only(_index(tmp_path, {"n.log": "\n".join(lines) + "\n"}))
    assert topo.trees[(0, 0)][:2] == ((1, 2), -1)
    assert topo.trees[(0, 2)][:2] == ((), 1)
    findings = _findings(tmp_path, {"n.log": "\n".join(lines) + "\n"})
    (found,) = [f for f in findings if f.code == "LS607"]
    assert "rank 2's tree parent is 1 but rank 1 lists children []" in found.title


def test_the_device_field_follows_the_release_inferred_without_a_version_line(
    tmp_path: Path,
) -> None:
    # A cloud VM's GPUs sit at 0000:00:04.0 (packed bus id 20): too short for the length
    # heuristic, but the NET lines without a connection index date the stream to 2.7-2.11,
    # which print bus ids in the [x] field.
    p = "vm-a:300:310 [0] NCCL INFO "
    log = "\n".join(
        [
            f"{p}Channel 00 : 1[40] -> 0[20] [receive] via NET/IB/0",
            f"{p}Channel 00 : 0[20] -> 1[40] [send] via NET/IB/0",
            f"{p}comm 0x55a1 rank 0 nranks 2 cudaDev 0 busId 20 - Init COMPLETE",
            "",
        ]
    )
    topo = _only(_index(tmp_path, {"rank0.log": log}))
    assert (topo.ranks[1].bus_id, topo.ranks[1].nvml_dev) == ("40", None)


# ---- a two-host job to vary one thing at a time


def _two_hosts(
    *,
    net_a: str = "NET/IB/{n}/GDRDMA",
    net_b: str = "NET/IB/{n}/GDRDMA",
    recv_b: str | None = None,
    intra_b: str = "P2P/CUMEM",
    iface_b: str = "eth0",
    addr_b: str = "10.0.0.2",
    connected: tuple[int, ...] = (0, 1, 2, 3),
    nranks: dict[int, int] | None = None,
    prev_of_2: int = 1,
    channels_of: dict[int, int] | None = None,
) -> dict[str, str]:
    """Return one log per host for ranks 0-1 (node-a) and 2-3 (node-b), ring 0-1-2-3."""
    logs: dict[str, str] = {}
    for host, ranks, iface, addr in (
        ("node-a", (0, 1), "eth0", "10.0.0.1"),
        ("node-b", (2, 3), iface_b, addr_b),
    ):
        lines: list[str] = []
        for rank in ranks:
            pid = 1000 + rank
            p = f"{host}:{pid}:{pid + 50} [{rank % 2}] NCCL INFO "
            size = (nranks or {}).get(rank, 4)
            ident = (
                f"ncclCommInitRank comm 0x{pid:x}0 rank {rank} nranks {size} cudaDev {rank % 2} "
                f"nvmlDev {rank % 2} busId {'18000' if rank % 2 == 0 else '2a000'} commId 0xfeed"
            )
            lines += [f"{p}Bootstrap : Using {iface}:{addr}<0>", f"{p}{ident} - Init START"]
            if rank == 0:
                lines += ["Channel 00/02 :    0   1   2   3", "Channel 01/02 :    0   1   2   3"]
                lines[-2:] = [p + x for x in lines[-2:]]
            nxt, prv = (rank + 1) % 4, (rank - 1) % 4
            if rank == 2:
                prv = prev_of_2
            net = net_a if host == "node-a" else net_b
            for chan in range(2):
                n = rank % 2 + 2 * chan
                if nxt // 2 == rank // 2:
                    intra = "P2P/CUMEM" if host == "node-a" else intra_b
                    lines.append(
                        f"{p}Channel {chan:02d}/0 : {rank}[{rank % 2}] -> {nxt}[{nxt % 2}] via {intra}"
                    )
                else:
                    lines.append(
                        f"{p}Channel {chan:02d}/0 : {rank}[{rank % 2}] -> {nxt}[{nxt % 2}] [send] via {net.format(n=n)}"
                    )
                if prv // 2 != rank // 2:
                    recv = recv_b if (recv_b and host == "node-b") else net
                    lines.append(
                        f"{p}Channel {chan:02d}/0 : {prv}[{prv % 2}] -> {rank}[{rank % 2}] [receive] via {recv.format(n=n)}"
                    )
            if rank in connected:
                lines.append(f"{p}Connected all rings")
                chans = (channels_of or {}).get(rank, 2)
                lines.append(
                    f"{p}{chans} coll channels, {chans} collnet channels, 0 nvls channels, "
                    f"{chans} p2p channels, {chans} p2p channels per peer"
                )
                lines.append(f"{p}{ident} - Init COMPLETE")
        logs[f"{host}.log"] = "\n".join(lines) + "\n"
    return logs


TOPOLOGY_CODES = {f"LS60{i}" for i in range(1, 10)} | {"LS402"}


def test_a_healthy_two_host_job_has_no_topology_finding(tmp_path: Path) -> None:
    findings = _findings(tmp_path, _two_hosts())
    assert _codes(findings) & TOPOLOGY_CODES == set()
    (view,) = analyze(
        [str(tmp_path / "node-a.log"), str(tmp_path / "node-b.log")]
    ).diagnosis.topology
    assert [(h.name, h.address, h.network) for h in view.hosts] == [
        ("node-a", "10.0.0.1", "NET/IB"),
        ("node-b", "10.0.0.2", "NET/IB"),
    ]
    assert view.rings == ((0, (0, 1, 2, 3)), (1, (0, 1, 2, 3)))
    assert view.anomalies == ()


def test_a_host_on_sockets_is_named(tmp_path: Path) -> None:
    findings = _findings(tmp_path, _two_hosts(net_b="NET/Socket/0"))
    (found,) = [f for f in findings if f.code == "LS402"]
    assert found.hosts == ("node-b",)
    assert found.ranks == (2, 3)
    assert "node-b uses TCP sockets" in found.title


def test_a_host_on_sockets_whose_connections_ib_refuses_is_a_mismatch(tmp_path: Path) -> None:
    # NCCL's socket type 3 (the Socket transport) where IB's set-up (4) was expected: the
    # two transports cannot connect, and the host that differs is named.
    logs = _two_hosts(net_b="NET/Socket/0")
    logs["node-a.log"] += (
        "node-a:1000:1090 [0] misc/socket.cc:426 NCCL WARN socketFinalizeAccept: wrong type 3 != 4\n"
    )
    d = analyze([str(tmp_path / n) for n in _written(tmp_path, logs)]).diagnosis
    assert (d.verdict.kind, d.verdict.code, d.verdict.culprit_hosts) == (
        "transport-mismatch",
        "LS402",
        ("node-b",),
    )


def test_a_connection_whose_ends_chose_different_transports_is_a_mismatch(
    tmp_path: Path,
) -> None:
    # node-a sends over IB what node-b receives over sockets: the two cannot connect, and
    # set-up never completes (where it did, the lines disagree but the run got through).
    logs = {
        name: "".join(
            line for line in text.splitlines(keepends=True) if "Init COMPLETE" not in line
        )
        for name, text in _two_hosts(net_b="NET/Socket/0", recv_b="NET/Socket/0").items()
    }
    d = analyze([str(tmp_path / n) for n in _written(tmp_path, logs)]).diagnosis
    assert (d.verdict.kind, d.verdict.culprit_hosts) == ("transport-mismatch", ("node-b",))


def test_gdr_disabled_for_want_of_its_module_is_named_without_a_host_to_compare(
    tmp_path: Path,
) -> None:
    logs = _two_hosts(net_a="NET/IB/{n}", net_b="NET/IB/{n}")
    note = "NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)\n"
    logs["node-b.log"] = f"node-b:1002:1052 [0] {note}" + logs["node-b.log"]
    findings = [
        f
        for f in analyze([str(tmp_path / n) for n in _written(tmp_path, logs)]).diagnosis.findings
        if f.code == "LS601"
    ]
    assert [(f.kind, f.severity, f.hosts) for f in findings] == [
        ("transport-degraded", "warning", ("node-b",))
    ]


def _written(tmp_path: Path, logs: dict[str, str]) -> list[str]:
    for name, text in logs.items():
        (tmp_path / name).write_text(text)
    return sorted(logs)


def test_ib_without_gdr_is_named(tmp_path: Path) -> None:
    findings = _findings(tmp_path, _two_hosts(net_b="NET/IB/{n}"))
    (found,) = [f for f in findings if f.code == "LS601"]
    assert (found.kind, found.severity, found.hosts) == (
        "transport-degraded",
        "warning",
        ("node-b",),
    )


def test_shm_where_other_hosts_use_p2p_is_named(tmp_path: Path) -> None:
    findings = _findings(tmp_path, _two_hosts(intra_b="SHM/direct/direct"))
    (found,) = [f for f in findings if f.code == "LS602"]
    assert found.hosts == ("node-b",)
    assert found.ranks == (2, 3)


def test_p2p_disabled_by_the_environment_everywhere_is_named(tmp_path: Path) -> None:
    # No host to compare with: the setting itself says local GPUs go through host memory.
    p = "dgx:4400:4488 [0] NCCL INFO "
    log = (
        f"{p}NCCL_P2P_DISABLE set by environment to 1.\n"
        f"{p}Channel 00 : 0[0] -> 1[1] via SHM/direct/direct\n"
        f"{p}comm 0x55d1 rank 0 nranks 2 cudaDev 0 busId 1b000 - Init COMPLETE\n"
    )
    (tmp_path / "dgx.log").write_text(log)
    diagnosis = analyze([str(tmp_path / "dgx.log")]).diagnosis
    (found,) = [f for f in diagnosis.findings if f.code == "LS602"]
    assert (found.severity, found.hosts, found.pids) == ("warning", ("dgx",), (4400,))
    assert "NCCL_P2P_DISABLE=1 on dgx" in found.title
    # Nothing failed and nothing proves a good end: the slower path is the answer given.
    assert (diagnosis.verdict.kind, diagnosis.verdict.code) == ("transport-degraded", "LS602")
    # Set to 0, or P2P in use on another host (LS602's comparison), it says nothing of it.
    off = log.replace("to 1.", "to 0.")
    assert "LS602" not in _codes(_findings(tmp_path, {"dgx.log": off}))


def test_one_nic_where_peers_use_several_is_named(tmp_path: Path) -> None:
    findings = _findings(tmp_path, _two_hosts(net_b="NET/IB/0/GDRDMA"))
    (found,) = [f for f in findings if f.code == "LS604"]
    assert found.hosts == ("node-b",)
    assert "peers use up to 4" in found.title


def test_docker_bridge_for_bootstrap_is_named(tmp_path: Path) -> None:
    findings = _findings(tmp_path, _two_hosts(iface_b="docker0", addr_b="172.17.0.1"))
    (found,) = [f for f in findings if f.code == "LS605"]
    assert found.hosts == ("node-b",)
    assert "docker0:172.17.0.1" in found.title


def test_link_local_bootstrap_on_one_host_alone_is_fine(tmp_path: Path) -> None:
    p = "solo:10:11 [0] NCCL INFO "
    log = f"{p}Bootstrap : Using lo:127.0.0.1<0>\n{p}Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\n"
    assert "LS605" not in _codes(_findings(tmp_path, {"solo.log": log}))


def test_ends_of_a_connection_on_different_networks_mismatch(tmp_path: Path) -> None:
    findings = _findings(tmp_path, _two_hosts(recv_b="NET/AWS Libfabric/{n}/GDRDMA"))
    (found,) = [f for f in findings if f.code == "LS606"]
    assert (found.kind, found.severity) == ("transport-mismatch", "error")
    assert found.hosts == ("node-b",)
    assert found.ranks == (2,)


def test_a_successor_whose_predecessor_disagrees_is_a_ring_inconsistency(tmp_path: Path) -> None:
    findings = _findings(tmp_path, _two_hosts(prev_of_2=0))
    (found,) = [f for f in findings if f.code == "LS607"]
    assert "rank 1 sends to 2 but rank 2 receives from 0" in found.title
    assert found.ranks == (1, 2)


def test_a_tree_parent_that_does_not_know_its_child_is_inconsistent(tmp_path: Path) -> None:
    lines = _rank_2_21("node-a", 800, 0, 3, ["Trees [0] 2/-1/-1->0->-1"])
    lines += _rank_2_21("node-a", 801, 1, 3, ["Trees [0] -1/-1/-1->1->0"])
    lines += _rank_2_21("node-a", 802, 2, 3, ["Trees [0] -1/-1/-1->2->0"])
    findings = _findings(tmp_path, {"n.log": "\n".join(lines) + "\n"})
    (found,) = [f for f in findings if f.code == "LS607"]
    assert "rank 1's tree parent is 0 but rank 0 lists children [2]" in found.title
    assert found.ranks == (0, 1)


def test_ranks_that_never_connected_their_rings_are_named(tmp_path: Path) -> None:
    index = _index(tmp_path, _two_hosts(connected=(0, 1, 2)))
    (found,) = RingsNotConnected().check(index)
    assert (found.kind, found.ranks, found.hosts) == ("init-stall", (3,), ("node-b",))
    assert "never logged Connected all rings (3 peers did)" in found.title
    assert found.evidence[0].text.endswith("3[1] -> 0[0] [send] via NET/IB/3/GDRDMA")
    # In the whole diagnosis it corroborates the missing Init COMPLETE (LS105).
    d = analyze([str(tmp_path / "node-a.log"), str(tmp_path / "node-b.log")]).diagnosis
    (stall,) = [f for f in d.findings if f.kind == "init-stall"]
    assert stall.ranks == (3,)
    assert "never logged Connected all rings" in stall.detail


def test_a_rank_that_completed_init_connected_its_rings(tmp_path: Path) -> None:
    # An excerpt that left out rank 3's "Connected all rings" but kept its Init COMPLETE.
    logs = _two_hosts()
    logs["node-b.log"] = "".join(
        line
        for line in logs["node-b.log"].splitlines(keepends=True)
        if not (line.startswith("node-b:1003:") and "Connected all rings" in line)
    )
    assert list(RingsNotConnected().check(_index(tmp_path, logs))) == []


def test_nranks_disagreement_is_a_config_mismatch(tmp_path: Path) -> None:
    findings = _findings(tmp_path, _two_hosts(nranks={3: 8}))
    (found,) = [f for f in findings if f.code == "LS609"]
    assert (found.kind, found.severity) == ("config-mismatch", "error")
    assert found.hosts == ("node-b",)
    assert "nranks 4 and 8" in found.title


def test_fewer_channels_than_peers_is_named(tmp_path: Path) -> None:
    findings = _findings(tmp_path, _two_hosts(channels_of={3: 1}))
    (found,) = [f for f in findings if f.code == "LS603"]
    assert found.ranks == (3,)
    assert "(1 vs 2)" in found.title


# ---- acceptance: the 32-rank incident and the real corpus


def test_32_rank_socket_fallback_names_exactly_that_host() -> None:
    d = analyze([str(SYNTHETIC / "topology-socket-fallback-32")]).diagnosis
    degraded = [f for f in d.findings if f.kind in ("transport-degraded", "transport-mismatch")]
    assert [(f.code, f.hosts) for f in degraded] == [("LS402", ("gpu-node004",))]
    assert degraded[0].ranks == tuple(range(24, 32))
    assert d.verdict.kind == "transport-degraded"
    (view,) = d.topology
    assert [h.name for h in view.hosts if h.anomalous] == ["gpu-node004"]
    assert {h.name: h.network for h in view.hosts}["gpu-node004"] == "NET/Socket"
    assert view.channels == 32
    assert all(r.connected_rings for r in view.ranks)


@pytest.mark.parametrize(
    ("case", "kind"),
    [
        ("001-horovod-duplicate-gpu-all-on-busid-1000", "duplicate-gpu"),
        ("021-nccl-version-mismatch-across-nodes", "config-mismatch"),
        ("017-negative-4090-p2p-disabled-runs", "healthy"),
    ],
)
def test_corpus_verdicts_hold_with_the_topology_rules(case: str, kind: str) -> None:
    paths = [str(p) for p in sorted((CORPUS / case).iterdir()) if not p.name.startswith("truth.")]
    d = analyze(paths).diagnosis
    assert d.verdict.kind == kind
    if kind == "healthy":
        assert [f for f in d.findings if f.severity in ("error", "critical")] == []
        # P2P disabled on its only host: SHM everywhere is no degradation.
        (view,) = d.topology
        assert dict(view.transports) == {"SHM/direct/direct": 1}
        assert view.anomalies == ()
