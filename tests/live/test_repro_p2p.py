"""The point-to-point scenarios of issue 15, run for real under ``logsleuth live``.

``logsleuth live -- torchrun --nproc_per_node 4 SCRIPT`` on a gloo pipeline whose culprit
stage receives from the wrong peer, drops its last send, or sends a ring block one hop too
far: the verdict names exactly the culprit stage with its kind, no job process is left
behind, and ``analyze`` on the bundle gives the same diagnosis byte for byte.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from logsleuth.cli import main
from logsleuth.live.procs import is_alive
from logsleuth.repro import find_scenario
from tests.live.helpers import job_survivors

ROOT = Path(__file__).resolve().parents[2]
CASES = (
    ("pipeline-wrong-peer", "collective-mismatch"),
    ("pipeline-drop-send", "missing-collective"),
    ("ring-skip-hop", "collective-mismatch"),
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("torch") is None,
        reason="torch is not installed (pip install 'logsleuth[live]')",
    ),
]


@pytest.mark.parametrize(("name", "kind"), CASES, ids=[c[0] for c in CASES])
def test_live_names_exactly_the_culprit_stage(
    name: str, kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / name
    script = find_scenario(name).script
    env = {
        "PATH": "/usr/bin:/bin",
        "NO_COLOR": "1",
        "HOME": str(tmp_path),
        "LOGSLEUTH_BACKEND": "gloo",
        "LOGSLEUTH_REPRO_CULPRIT": "2",
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(
        [
            sys.executable, "-m", "logsleuth", "live", "--out", str(out), "--stall-timeout", "8",
            "--", sys.executable, "-m", "torch.distributed.run", "--standalone",
            "--nproc_per_node", "4", str(script),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
        check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-2000:]
    diagnosis = (out / "diagnosis.json").read_text()
    verdict = json.loads(diagnosis)["verdict"]
    assert (verdict["kind"], verdict["culprit_ranks"]) == (kind, [2]), verdict
    assert verdict["code"] == "LS125"
    # The stacks carry the peers: py-spy --locals.
    assert "        Arguments:" in (out / "stacks" / "rank2.2.txt").read_text()
    # No process of the job is left behind.
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest.get("survivors", []) == []
    assert not [p for p in (r["pid"] for r in manifest["ranks"].values()) if is_alive(p)]
    assert job_survivors(out) == []
    # The bundle re-analysed later gives the same diagnosis, byte for byte.
    capsys.readouterr()
    assert main(["analyze", str(out), "--json", "-"]) == 1
    assert capsys.readouterr().out == diagnosis
