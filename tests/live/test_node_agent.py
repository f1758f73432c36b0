"""Multi-node: node agents share a stall through the beacon; analyze merges their bundles."""

from __future__ import annotations

import json
import shutil
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

from logsleuth.cli import main
from logsleuth.live.session import LiveOptions, LiveResult, run_live
from logsleuth.parse.archive import write_archive
from tests.live.helpers import Recorder, job_survivors

ROOT = Path(__file__).resolve().parents[2]
TWO_NODES = ROOT / "fixtures" / "synthetic" / "missing-collective"
PY = sys.executable
QUIET = "import time\nprint('up', flush=True)\ntime.sleep(120)\n"


@pytest.mark.slow
def test_the_first_node_to_stall_makes_every_agent_capture(tmp_path: Path) -> None:
    beacon = tmp_path / "bundles" / ".logsleuth-stall-77"
    results: dict[str, LiveResult] = {}
    recorders = {"fast": Recorder(), "slow": Recorder()}

    def agent(name: str, timeout: float) -> None:
        options = LiveOptions(
            command=(PY, "-c", QUIET),
            out_dir=tmp_path / "bundles" / name,
            stall_timeout=timeout,
            snapshot_gap=0.5,
            grace=2.0,
            stall_beacon=beacon,
        )
        results[name] = run_live(options, recorders[name], None)

    started = time.monotonic()
    threads = [
        threading.Thread(target=agent, args=("fast", 2.0)),
        threading.Thread(target=agent, args=("slow", 120.0)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=90)
    assert time.monotonic() - started < 60
    assert results["fast"].outcome == results["slow"].outcome == "stalled"
    assert beacon.read_text() == f"{socket.gethostname()} at {results['fast'].stalled_at}\n"
    slow = json.loads((tmp_path / "bundles" / "slow" / "manifest.json").read_text())
    fast = json.loads((tmp_path / "bundles" / "fast" / "manifest.json").read_text())
    assert fast["live"]["node_agent"] is True and fast["live"]["stall_seen_by"] is None
    assert slow["live"]["stall_seen_by"] == beacon.read_text().strip()
    assert any(n.startswith("stall seen by ") for n in recorders["slow"].notes)
    assert (tmp_path / "bundles" / "slow" / "stacks").is_dir()
    for name in ("fast", "slow"):
        assert job_survivors(tmp_path / "bundles" / name) == []


def test_a_stale_beacon_of_an_earlier_job_is_ignored(tmp_path: Path) -> None:
    import os

    beacon = tmp_path / ".logsleuth-stall-job"
    beacon.write_text("old-host at yesterday\n")
    os.utime(beacon, (time.time() - 3600, time.time() - 3600))
    code = "print('done', flush=True)"
    options = LiveOptions(
        command=(PY, "-c", code), out_dir=tmp_path / "b", stall_timeout=30, stall_beacon=beacon
    )
    result = run_live(options, Recorder(), None)
    assert (result.outcome, result.returncode) == ("finished", 0)


def _split_by_host(tmp_path: Path) -> list[Path]:
    """Turn the 2-host bundle into one bundle per host, as two node agents write them."""
    manifest = json.loads((TWO_NODES / "manifest.json").read_text())
    nodes = []
    for host in ("gpu-node001", "gpu-node002"):
        node = tmp_path / host
        (node / "nccl").mkdir(parents=True)
        (node / "stacks").mkdir()
        ranks = {r: v for r, v in manifest["ranks"].items() if v["host"] == host}
        (node / "manifest.json").write_text(json.dumps({**manifest, "ranks": ranks}))
        for log in (TWO_NODES / "nccl").glob(f"{host}.*.log"):
            shutil.copy(log, node / "nccl" / log.name)
        for rank in ranks:
            shutil.copy(TWO_NODES / "stacks" / f"rank{rank}.0.txt", node / "stacks")
        nodes.append(node)
    shutil.copy(TWO_NODES / "launcher.log", nodes[0] / "launcher.log")
    return nodes


def _verdict(paths: list[Path], capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    main(["analyze", *map(str, paths), "--json", "-"])
    verdict = json.loads(capsys.readouterr().out)["verdict"]
    assert isinstance(verdict, dict)
    return verdict


def test_analyze_merges_one_bundle_per_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    whole = _verdict([TWO_NODES], capsys)
    assert whole["kind"] == "missing-collective"
    nodes = _split_by_host(tmp_path / "dirs")
    assert _verdict(nodes, capsys) == whole
    packed = []
    for node in nodes:
        packed.append(tmp_path / f"{node.name}.tar.gz")
        write_archive(node, packed[-1])
    assert _verdict(packed, capsys) == whole
    one_node = _verdict(nodes[1:], capsys)
    assert one_node != whole  # each node alone sees half the job
