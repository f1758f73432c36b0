"""Whole incidents through the whole pipeline: the demo, the synthetic cases, the gloo hang.

Each is a must-fire fixture for the rule that names its culprit and a must-not-fire fixture
for the others (a healthy run has no error finding at all).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from logsleuth.api import analyze

ROOT = Path(__file__).resolve().parents[2]
SYNTHETIC = ROOT / "fixtures" / "synthetic"
STACKS = ROOT / "fixtures" / "real" / "stacks"
TORCH = ROOT / "fixtures" / "real" / "torch"


def test_demo_names_the_rank_stuck_in_its_dataloader() -> None:
    d = analyze([str(ROOT / "fixtures" / "demo")]).diagnosis
    assert d.verdict.kind == "non-collective-stall"
    assert d.verdict.culprit_ranks == (11,)
    assert d.verdict.culprit_hosts == ("gpu-node002",)
    assert d.verdict.culprit_pids == (82945,)
    assert "train (train.py:173)" in d.verdict.summary
    # The NCCL view of the same fault is kept as a finding, not lost: rank 11 stopped at 0x12a.
    missing = [f for f in d.findings if f.kind == "missing-collective"]
    assert missing and missing[0].ranks == (11,)
    assert "0x12b" in missing[0].title
    # torchrun's "Root Cause" names a rank its watchdog took down: aftermath, never an error.
    assert not [
        f for f in d.findings if f.kind == "process-died" and f.severity in ("error", "critical")
    ]


@pytest.mark.parametrize("case", sorted(p.name for p in SYNTHETIC.iterdir() if p.is_dir()))
def test_synthetic_case_matches_its_truth(case: str) -> None:
    truth = json.loads((SYNTHETIC / case / "truth.json").read_text())
    d = analyze([str(SYNTHETIC / case)]).diagnosis
    if truth["kind"] == "healthy":
        assert d.verdict.kind == "healthy"
        assert [f for f in d.findings if f.severity in ("error", "critical")] == []
        return
    matching = [f for f in d.findings if f.kind == truth["kind"]]
    assert matching, [f.title for f in d.findings]
    finding = matching[0]
    assert list(finding.ranks) == truth["culprit_ranks"]
    assert list(finding.hosts) == truth["culprit_hosts"]
    if truth["kind"] != "transport-degraded":
        assert d.verdict.kind == truth["kind"]
        assert list(d.verdict.culprit_ranks) == truth["culprit_ranks"]
        assert list(d.verdict.culprit_pids) == truth["culprit_pids"]


def test_gloo_hang_names_the_dataloader_rank() -> None:
    """The real 4-rank gloo hang: three ranks in collectives, rank 3 (pid 13273) in its DataLoader.

    Rank identity for the dumps comes from torchrun's failure summary (pid -> rank), whose
    own "Root Cause" is the SIGKILL that ended the hang, not its cause.
    """
    dumps = sorted(str(p) for p in STACKS.glob("gloo-hang_pyspy-0.4.3_rank_pid*.txt"))
    assert len(dumps) == 4
    d = analyze([*dumps, str(TORCH / "gloo-hang_torchrun_log_after_SIGKILL_rank3.log")]).diagnosis
    assert d.verdict.kind == "non-collective-stall"
    assert d.verdict.culprit_ranks == (3,)
    assert d.verdict.culprit_pids == (13273,)
    assert "main (hang_dist.py:23)" in d.verdict.summary
    assert len(d.stack_classes) <= 3


def test_gloo_hang_without_the_launcher_log_still_names_the_process() -> None:
    dumps = sorted(str(p) for p in STACKS.glob("gloo-hang_pyspy-0.4.3_rank_pid*.txt"))
    d = analyze(dumps).diagnosis
    assert d.verdict.kind == "non-collective-stall"
    assert d.verdict.culprit_ranks == ()
    assert d.verdict.culprit_pids == (13273,)


def test_split_communicators_sharing_a_comm_id_are_not_duplicate_gpus(tmp_path: Path) -> None:
    """ncclCommSplit children print their parent's commId; their ranks reuse numbers and GPUs."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.synth import generate

    truth = generate(
        tmp_path, ranks=16, hosts=2, ops=30, fault="missing-collective", culprit=5, comms=3, seed=3
    )
    d = analyze([str(tmp_path)]).diagnosis
    assert not [f for f in d.findings if f.kind == "duplicate-gpu"]
    assert d.verdict.kind == "missing-collective"
    assert list(d.verdict.culprit_ranks) == truth["culprit_ranks"] == [5]
