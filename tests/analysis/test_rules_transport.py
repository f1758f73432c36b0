"""LS610 transport.ib_expected: IB asked for, sockets used."""

from __future__ import annotations

from pathlib import Path

from logsleuth.api import analyze

LOG = """\
node1:4711:4711 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 0.
node1:4711:4711 [0] NCCL INFO NCCL_IB_HCA set to mlx5_0:1,mlx5_1:1
node1:4711:4711 [0] NCCL INFO NET/IB : No device found.
node1:4711:4711 [0] NCCL INFO NET/Socket : Using [0]eth0:10.47.14.218<0>
node1:4711:4711 [0] NCCL INFO Using network Socket
"""


def _ls610(tmp_path: Path, text: str) -> list[tuple[str, str, tuple[str, ...]]]:
    log = tmp_path / "rank0.log"
    log.write_text(text, encoding="utf-8")
    d = analyze([str(log)]).diagnosis
    return [(f.kind, f.severity, f.hosts) for f in d.findings if f.code == "LS610"]


def test_ib_configured_but_no_device_and_sockets_used(tmp_path: Path) -> None:
    assert _ls610(tmp_path, LOG) == [("transport-degraded", "warning", ("node1",))]


def test_sockets_on_a_machine_nobody_asked_ib_of_is_no_finding(tmp_path: Path) -> None:
    plain = "".join(
        line + "\n" for line in LOG.splitlines() if "NCCL_IB" not in line and "NET/IB" not in line
    )
    assert _ls610(tmp_path, plain) == []


PLUGIN = """\
HGX-11:18226:18274 [5] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.
HGX-04:589474:589541 [0] NCCL INFO Plugin Path : /opt/hpcx/nccl_rdma_sharp_plugin/lib/libnccl-net.so
"""


def test_a_node_without_the_net_plugin_the_others_load_is_named(tmp_path: Path) -> None:
    log = tmp_path / "quoted.log"
    log.write_text(PLUGIN, encoding="utf-8")
    d = analyze([str(log)]).diagnosis
    (finding,) = [f for f in d.findings if f.code == "LS401"]
    assert (finding.kind, finding.hosts) == ("config-mismatch", ("HGX-11",))
    assert d.verdict.kind == "config-mismatch"
