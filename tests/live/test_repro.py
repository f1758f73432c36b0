"""The built-in fault scenarios: listed, packaged, and launched the way torchrun users do."""

from __future__ import annotations

import subprocess
import sys
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
        "skip-collective   the culprit skips the last step's all_reduce and waits in the final barrier"
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
