"""LS207: a job that ``logsleuth live`` ran ended by itself with a failure status or signal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from logsleuth.api import analyze
from logsleuth.model.diagnosis import Diagnosis


def _bundle(tmp_path: Path, exit_info: dict[str, object] | None, outcome: str) -> Diagnosis:
    write_bundle(tmp_path, exit_info, outcome)
    return analyze([str(tmp_path)]).diagnosis


def write_bundle(directory: Path, exit_info: dict[str, object] | None, outcome: str) -> None:
    """Write a live-mode bundle of a 4-rank job: its manifest (with ``exit_info``) and log."""
    manifest: dict[str, object] = {
        "schema": "logsleuth.bundle/1",
        "command": ["torchrun", "--nproc_per_node", "4", "train.py"],
        "ranks": {str(r): {"pid": 100 + r, "host": "node1", "local_rank": r} for r in range(4)},
        "started": "2026-01-01T00:00:00.000+00:00",
        "stalled_at": None,
        "env": {},
        "outcome": outcome,
        "complete": True,
    }
    if exit_info is not None:
        manifest["exit"] = exit_info
    (directory / "manifest.json").write_text(json.dumps(manifest, indent=2))
    (directory / "launcher.log").write_text("[rank0]: step 1\n")


@pytest.mark.parametrize(
    ("exit_info", "title"),
    [
        ({"status": 1, "signal": None, "ended_by": "job"}, "the job exited with status 1"),
        ({"status": None, "signal": "SIGSEGV", "ended_by": "job"}, "the job was killed by SIGSEGV"),
    ],
)
def test_a_failed_job_is_not_healthy(
    tmp_path: Path, exit_info: dict[str, object], title: str
) -> None:
    diagnosis = _bundle(tmp_path, exit_info, "finished")
    (found,) = [f for f in diagnosis.findings if f.code == "LS207"]
    assert (found.kind, found.severity, found.title) == ("process-died", "error", title)
    assert diagnosis.verdict.kind == "process-died"
    assert [e.source for e in found.evidence] == ["manifest.json"]


@pytest.mark.parametrize(
    ("exit_info", "outcome"),
    [
        ({"status": 0, "signal": None, "ended_by": "job"}, "finished"),
        # logsleuth ended a stalled job: the SIGTERM is its own, not the job's failure.
        ({"status": None, "signal": "SIGTERM", "ended_by": "logsleuth"}, "stalled"),
        (None, "finished"),  # a bundle from before exits were recorded
    ],
)
def test_a_clean_or_ended_job_raises_no_exit_finding(
    tmp_path: Path, exit_info: dict[str, object] | None, outcome: str
) -> None:
    diagnosis = _bundle(tmp_path, exit_info, outcome)
    assert [f for f in diagnosis.findings if f.code == "LS207"] == []
