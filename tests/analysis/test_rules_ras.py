"""LS206: processes NCCL's RAS network got no data from (``ncclras`` reports, spec 2.13)."""

from __future__ import annotations

from pathlib import Path

from logsleuth.api import analyze
from logsleuth.model.diagnosis import Diagnosis
from tests.parse.test_nccl_families import RAS_TEXT

HEALTHY = RAS_TEXT.split("Errors\n")[0].replace("INCOMPLETE", "OK").rstrip() + "\n"


def _analyze(tmp_path: Path, files: dict[str, str]) -> Diagnosis:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return analyze([str(tmp_path / name) for name in sorted(files)]).diagnosis


def test_a_missing_process_is_named_from_the_report_alone(tmp_path: Path) -> None:
    diagnosis = _analyze(tmp_path, {"ncclras.txt": RAS_TEXT})
    (found,) = [f for f in diagnosis.findings if f.code == "LS206"]
    assert found.kind == "process-died"
    assert (found.ranks, found.hosts, found.pids) == ((21,), ("172.16.64.213",), (3487984,))
    assert found.title == (
        "NCCL RAS has no data from pid 3487984 on 172.16.64.213: the process is dead or unreachable"
    )
    assert diagnosis.verdict.kind == "process-died"
    assert [(e.source, e.line) for e in found.evidence] == [("ncclras.txt", 1)]


def test_the_node_address_resolves_to_the_host_of_the_nccl_logs(tmp_path: Path) -> None:
    p = "node-x:3487984:3487990 [5] NCCL INFO "
    log = (
        f"{p}Bootstrap: Using eth0:172.16.64.213<0>\n"
        f"{p}ncclCommInitRankConfig comm 0x5d1e0 rank 21 nranks 32 cudaDev 5 nvmlDev 5 "
        "busId 9a000 commId 0xcf264af53edbe986 - Init START\n"
    )
    diagnosis = _analyze(tmp_path, {"ncclras.txt": RAS_TEXT, "node-x.log": log})
    (found,) = [f for f in diagnosis.findings if f.code == "LS206"]
    assert (found.ranks, found.hosts, found.pids) == ((21,), ("node-x",), (3487984,))


def test_a_report_without_missing_processes_names_nobody(tmp_path: Path) -> None:
    diagnosis = _analyze(tmp_path, {"ncclras.txt": HEALTHY})
    assert [(i.kind, i.unrecognized) for i in diagnosis.inputs] == [("nccl-log", 0)]
    assert [f for f in diagnosis.findings if f.code == "LS206"] == []


def test_a_peer_ras_declared_dead_is_named_by_its_host(tmp_path: Path) -> None:
    """NCCL logs ``RAS declaring peer ADDR as DEAD`` at INFO: the process at that address is
    the one that died, named by the host whose bootstrap used the address."""
    (tmp_path / "node-a.log").write_text(
        "node-a:9001:9001 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.6<0>\n"
        "node-a:9001:9100 [0] NCCL INFO RAS declaring peer 10.0.0.7<28028> as DEAD; "
        "rasDeadPeersHash 0x8e3f\n"
    )
    (tmp_path / "node-b.log").write_text(
        "node-b:7001:7001 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.7<0>\n"
    )
    verdict = analyze([str(tmp_path)]).diagnosis.verdict
    assert (verdict.kind, verdict.culprit_hosts) == ("process-died", ("node-b",))
