"""LS704 (a topology/graph file forced on NCCL) and LS705 (two machines with one host name)."""

from __future__ import annotations

from pathlib import Path

from logsleuth.api import analyze

HEALTHY = Path(__file__).resolve().parents[2] / "fixtures" / "synthetic" / "healthy" / "nccl"


def copy_healthy(tmp_path: Path, rename: dict[str, str] | None = None, extra: str = "") -> Path:
    """Copy the healthy synthetic job's NCCL logs, names changed or one line added after line 3."""
    for source in sorted(HEALTHY.iterdir()):
        text = source.read_text()
        name = source.name
        for old, new in (rename or {}).items():
            text, name = text.replace(old, new), name.replace(old, new)
        if extra and source.name == "gpu-node001.56683.log":
            lines = text.splitlines(keepends=True)
            text = "".join([*lines[:3], extra + "\n", *lines[3:]])
        (tmp_path / name).write_text(text)
    return tmp_path


def test_two_machines_with_one_host_name(tmp_path: Path) -> None:
    diagnosis = analyze([str(copy_healthy(tmp_path, {"gpu-node002": "gpu-node001"}))]).diagnosis
    found = [f for f in diagnosis.findings if f.code == "LS705"]
    assert [(f.kind, f.severity, f.hosts) for f in found] == [
        ("config-mismatch", "error", ("gpu-node001",))
    ]
    assert found[0].title == "2 machines call themselves gpu-node001 (10.42.0.11, 10.42.0.12)"


def test_distinct_host_names_are_no_collision(tmp_path: Path) -> None:
    diagnosis = analyze([str(copy_healthy(tmp_path))]).diagnosis
    assert diagnosis.verdict.kind == "healthy"
    assert diagnosis.findings == ()


def test_a_forced_topology_file_is_reported(tmp_path: Path) -> None:
    line = "gpu-node001:56683:56683 [0] NCCL INFO NCCL_TOPO_FILE set by environment to /opt/microsoft/ndv4-topo.xml"
    diagnosis = analyze([str(copy_healthy(tmp_path, extra=line))]).diagnosis
    assert diagnosis.verdict.kind == "healthy"
    assert [(f.code, f.severity, f.hosts) for f in diagnosis.findings] == [
        ("LS704", "warning", ("gpu-node001",))
    ]
    assert diagnosis.findings[0].title.startswith(
        "NCCL_TOPO_FILE is set to /opt/microsoft/ndv4-topo.xml on gpu-node001"
    )
