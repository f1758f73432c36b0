"""Configuration rules: NCCL_* environment that differs across hosts (LS403)."""

from __future__ import annotations

from pathlib import Path

from logsleuth.api import analyze
from logsleuth.model.diagnosis import Finding


def _job(tmp_path: Path, env_by_host: dict[str, dict[str, str]]) -> list[Finding]:
    """Write two ranks per host, each logging its ENV lines at init; analyse them."""
    paths = write_job(tmp_path, env_by_host)
    return [f for f in analyze(paths).diagnosis.findings if f.code == "LS403"]


def write_job(directory: Path, env_by_host: dict[str, dict[str, str]]) -> list[str]:
    """Write one log per host, two ranks each logging its ENV lines at init; return the paths."""
    paths = []
    for h, (host, env) in enumerate(sorted(env_by_host.items())):
        lines = []
        for local in range(2):
            rank, pid = 2 * h + local, 4000 + 2 * h + local
            p = f"{host}:{pid}:{pid + 7} [{local}] NCCL INFO "
            lines.append(f"{host}:{pid}:{pid} [{local}] NCCL INFO NCCL version 2.21.5+cuda12.4")
            lines += [f"{p}{name} set by environment to {value}" for name, value in env.items()]
            lines.append(
                f"{p}ncclCommInitRank comm 0x{pid:x}0 rank {rank} nranks {2 * len(env_by_host)} "
                f"cudaDev {local} nvmlDev {local} busId {'18000' if local == 0 else '2a000'} "
                "commId 0xbeef - Init COMPLETE"
            )
        path = directory / f"{host}.log"
        path.write_text("\n".join(lines) + "\n")
        paths.append(str(path))
    return paths


BASE = {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_HCA": "mlx5_0,mlx5_1"}


def test_a_host_with_ib_disabled_is_named(tmp_path: Path) -> None:
    hosts = {f"node-{c}": dict(BASE) for c in "abc"}
    hosts["node-b"]["NCCL_IB_DISABLE"] = "1"
    (found,) = _job(tmp_path, hosts)
    assert found.kind == "config-mismatch"
    assert found.hosts == ("node-b",)
    assert found.ranks == (2, 3)
    assert found.severity == "warning"
    assert found.title == (
        "NCCL_IB_DISABLE differs across the job: (not set) on node-a, node-c (4 processes); "
        "1 on node-b (2 processes)"
    )
    assert [(e.source, e.line) for e in found.evidence] == [("node-b.log", 4), ("node-b.log", 9)]
    assert found.evidence[0].text.endswith("NCCL_IB_DISABLE set by environment to 1")


def test_a_different_buffer_size_is_an_error(tmp_path: Path) -> None:
    hosts = {f"node-{c}": {**BASE, "NCCL_BUFFSIZE": "4194304"} for c in "abc"}
    hosts["node-c"]["NCCL_BUFFSIZE"] = "8388608"
    (found,) = _job(tmp_path, hosts)
    assert (found.hosts, found.severity) == (("node-c",), "error")


def test_a_tie_names_both_sides(tmp_path: Path) -> None:
    hosts = {"node-a": {"NCCL_SOCKET_IFNAME": "eth0"}, "node-b": {"NCCL_SOCKET_IFNAME": "ib0"}}
    (found,) = _job(tmp_path, hosts)
    assert found.hosts == ("node-a", "node-b")
    assert "both are named" in found.detail


def test_the_same_environment_everywhere_is_not_reported(tmp_path: Path) -> None:
    assert _job(tmp_path, {f"node-{c}": dict(BASE) for c in "abc"}) == []


def test_per_process_variables_and_hosts_without_env_lines_are_not_reported(
    tmp_path: Path,
) -> None:
    hosts = {f"node-{c}": {**BASE, "NCCL_DEBUG_FILE": f"/tmp/nccl.{c}.log"} for c in "ab"}
    hosts["node-c"] = {}
    assert _job(tmp_path, hosts) == []
