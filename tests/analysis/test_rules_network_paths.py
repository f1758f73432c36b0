"""A socket failure on the data path is a network error; one in bootstrap is a bootstrap failure."""

from __future__ import annotations

from pathlib import Path

from logsleuth.api import analyze

DATA_PATH = """\
worker-23:83:2526 [0] misc/socket.cc:503 NCCL WARN Net : Call to recv from 100.96.188.199<41468> failed : Connection timed out
worker-23:83:2526 [0] NCCL INFO misc/socket.cc:520 -> 2
worker-23:83:2526 [0] transport/net_socket.cc:219 NCCL WARN NET/Socket : socket progress error
worker-23:83:2520 [0] NCCL INFO transport/net.cc:870 -> 2
worker-23:83:2520 [0] NCCL INFO proxy.cc:494 -> 2
"""

BOOTSTRAP = """\
node0:71:71 [0] misc/socket.cc:71 NCCL WARN socketProgress: Connection closed by remote peer 10.10.1.3<36138>
node0:71:71 [0] NCCL INFO misc/socket.cc:80 -> 6
node0:71:71 [0] NCCL INFO bootstrap.cc:701 -> 6
node0:71:71 [0] NCCL INFO init.cc:1402 -> 6
"""


def _codes(tmp_path: Path, text: str) -> tuple[str, set[str]]:
    log = tmp_path / "rank.log"
    log.write_text(text, encoding="utf-8")
    d = analyze([str(log)]).diagnosis
    return d.verdict.kind, {f.code for f in d.findings}


def test_a_recv_timeout_on_the_socket_transport_is_a_network_error(tmp_path: Path) -> None:
    kind, codes = _codes(tmp_path, DATA_PATH)
    assert kind == "network-error"
    assert "LS201" not in codes and "LS203" not in codes


def test_a_peer_closing_during_bootstrap_is_a_bootstrap_failure(tmp_path: Path) -> None:
    kind, codes = _codes(tmp_path, BOOTSTRAP)
    assert kind == "bootstrap-failure" and "LS201" in codes


CLOSED_BY_NAME = """\
gpu-node-03:1234:1290 [0] misc/socket.cc:538 NCCL WARN socketProgress: Connection closed by remote peer gpu-node-12.cluster.local<38821>
gpu-node-03:1234:1290 [0] NCCL INFO misc/socket.cc:560 -> 6
gpu-node-03:1234:1290 [0] NCCL INFO transport/net_socket.cc:474 -> 6
gpu-node-03:1234:1290 [0] NCCL INFO proxy.cc:878 -> 6 [Progress Thread]
"""


def test_a_peer_named_by_its_host_name_is_the_culprit_host(tmp_path: Path) -> None:
    # NCCL prints the peer's reverse-DNS name where it asks for no numeric address.
    log = tmp_path / "rank0.log"
    log.write_text(CLOSED_BY_NAME, encoding="utf-8")
    verdict = analyze([str(log)]).diagnosis.verdict
    assert (verdict.kind, verdict.culprit_hosts) == ("process-died", ("gpu-node-12.cluster.local",))
    # With that host's own NCCL lines in the evidence, its short name (NCCL's) is the one named.
    (tmp_path / "rank5.log").write_text(
        "gpu-node-12:5511:5511 [1] NCCL INFO Bootstrap : Using eth0:10.0.0.12<0>\n",
        encoding="utf-8",
    )
    verdict = analyze([str(tmp_path)]).diagnosis.verdict
    assert (verdict.kind, verdict.culprit_hosts) == ("process-died", ("gpu-node-12",))


def _bootstrap(host: str, pid: int, address: str, rank: int, job: str = "8a1f2e3d") -> str:
    return (
        f"{host}:{pid}:{pid} [0] NCCL INFO Bootstrap : Using eth0:{address}<0>\n"
        f"{host}:{pid}:{pid + 58} [0] NCCL INFO comm 0x55a1 rank {rank} nranks 2 cudaDev 0 "
        f"nvmlDev 0 busId 1000 commId 0x{job} - Init START\n"
    )


def test_two_hosts_that_bootstrap_with_one_address_cannot_reach_each_other(
    tmp_path: Path,
) -> None:
    # Docker's default bridge gives the first container of every host 172.17.0.2.
    text = _bootstrap("node-1", 3342, "172.17.0.2", 0) + _bootstrap("node-2", 4411, "172.17.0.2", 1)
    (tmp_path / "rank.log").write_text(text, encoding="utf-8")
    verdict = analyze([str(tmp_path / "rank.log")]).diagnosis.verdict
    assert (verdict.kind, verdict.code, verdict.culprit_hosts) == (
        "bootstrap-failure",
        "LS209",
        ("node-1", "node-2"),
    )


def test_one_address_on_one_host_or_two_addresses_are_no_fault(tmp_path: Path) -> None:
    # Two processes of one machine share its address; two machines have two.
    one_host = _bootstrap("node-1", 3342, "10.0.0.1", 0) + _bootstrap("node-1", 3343, "10.0.0.1", 1)
    two = _bootstrap("node-1", 3342, "10.0.0.1", 0) + _bootstrap("node-2", 4411, "10.0.0.2", 1)
    # Two runs pasted together (two communicators) may each have used one private address.
    runs = _bootstrap("node-1", 3342, "10.0.0.1", 0) + _bootstrap(
        "gpu-a01", 4711, "10.0.0.1", 0, "77"
    )
    for text in (one_host, two, runs):
        assert "LS209" not in _codes(tmp_path, text)[1]
