"""The built-in fault scenarios: listed, packaged, and launched the way torchrun users do."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from logsleuth.errors import UsageError
from logsleuth.repro import SCENARIOS, build_command, build_env, find_scenario

ROOT = Path(__file__).resolve().parents[2]
NAMES = [
    "healthy",
    "skip-collective",
    "order-mismatch",
    "size-mismatch",
    "exception",
    "early-exit",
    "dataloader-stall",
    "init-never",
    "skip-last-collective",
    "subgroup-barrier-skip",
    "size-mismatch-detail",
    "eval-stall",
    "init-barrier-slow",
    "pipeline-wrong-peer",
    "pipeline-drop-send",
    "ring-skip-hop",
]


def test_repro_list_prints_every_scenario_with_its_description() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "logsleuth", "repro", "list"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[0] for line in lines] == NAMES
    assert lines[1] == (
        "skip-collective        the culprit skips the last step's all_reduce and waits in the final barrier"
    )


def test_every_scenario_ships_its_script_inside_the_package() -> None:
    for scenario in SCENARIOS:
        assert scenario.script.is_file(), scenario.script
        assert scenario.script.parent == ROOT / "logsleuth" / "repro" / "scenarios"
        assert 'if __name__ == "__main__":' in scenario.script.read_text()


def test_a_scenario_runs_under_torch_distributed_run() -> None:
    scenario = find_scenario("dataloader-stall")
    assert build_command(scenario, 4, python="/usr/bin/python3") == [
        "/usr/bin/python3",
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=4",
        str(ROOT / "logsleuth" / "repro" / "scenarios" / "dataloader_stall.py"),
    ]
    assert build_env("gloo", 2, 30) == {
        "LOGSLEUTH_BACKEND": "gloo",
        "LOGSLEUTH_REPRO_CULPRIT": "2",
        "LOGSLEUTH_REPRO_TIMEOUT": "30",
    }
    assert build_env(None, None, None) == {}


def test_an_unknown_scenario_is_a_usage_error() -> None:
    with pytest.raises(UsageError) as caught:
        find_scenario("deadlock")
    assert str(caught.value) == f"unknown repro scenario 'deadlock' (known: {', '.join(NAMES)})"
    done = subprocess.run(
        [sys.executable, "-m", "logsleuth", "repro", "run", "deadlock"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("logsleuth: error: unknown repro scenario 'deadlock'")


# ---- the scenarios of issue 14, run for real ---------------------------------------------------


@dataclass(frozen=True)
class OneSided:
    name: str
    culprit: int
    kinds: tuple[str, ...]
    stall_timeout: int = 8
    pg_timeout: int | None = None
    """A process-group timeout short enough that the ranks give up (and dump their flight
    recorders) before live mode sees a stall."""


ONE_SIDED = (
    OneSided("skip-last-collective", 1, ("process-died",)),
    OneSided("size-mismatch-detail", 1, ("collective-mismatch",)),
    OneSided("eval-stall", 0, ("non-collective-stall",)),
    # init-barrier-slow is left to its fixture (tests/analysis/test_waitfor.py): torchrun ends
    # the job at the first store timeout, so how many ranks get to report varies per run.
    # LS204 still calls rank 1's own gloo timeout a death: either kind names rank 1.
    OneSided(
        "subgroup-barrier-skip",
        1,
        ("missing-collective", "process-died"),
        stall_timeout=60,
        pg_timeout=15,
    ),
)


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("torch") is None,
    reason="torch is not installed (pip install 'logsleuth[live]')",
)
@pytest.mark.parametrize("case", ONE_SIDED, ids=[c.name for c in ONE_SIDED])
def test_one_sided_scenario_names_its_culprit(case: OneSided, tmp_path: Path) -> None:
    out = tmp_path / case.name
    env = {"PATH": "/usr/bin:/bin", "NO_COLOR": "1", "HOME": str(tmp_path)}
    if case.pg_timeout is not None:
        env["LOGSLEUTH_REPRO_TIMEOUT"] = str(case.pg_timeout)
    done = subprocess.run(
        [
            sys.executable, "-m", "logsleuth", "repro", "run", case.name, "--live",
            "--nproc", "4", "--backend", "gloo", "--culprit", str(case.culprit),
            "--out", str(out), "--stall-timeout", str(case.stall_timeout),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
        check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-2000:]
    verdict = json.loads((out / "diagnosis.json").read_text())["verdict"]
    assert verdict["kind"] in case.kinds, verdict
    assert verdict["culprit_ranks"] == [case.culprit], verdict
