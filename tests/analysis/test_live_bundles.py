"""Bundles that `logsleuth live` wrote for real 4-rank gloo jobs: the verdict names the culprit.

These are the must-fire fixtures of the rules that read stacks and launcher failures
(LS105, LS107, LS108, LS204); tests/live re-runs the same jobs for real.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from logsleuth.api import analyze

LIVE = Path(__file__).resolve().parents[2] / "fixtures" / "real" / "live"


@pytest.mark.parametrize(
    ("bundle", "kind", "code", "culprits"),
    [
        ("skip-collective", "missing-collective", "LS107", (1,)),
        # broadcast where the others all_reduce, at the same point: an order mismatch (#14)
        ("order-mismatch", "collective-mismatch", "LS107", (1,)),
        ("early-exit", "process-died", "LS204", (1,)),
        ("init-never", "init-stall", "LS105", (3,)),
        ("size-mismatch", "collective-mismatch", "LS108", ()),
    ],
)
def test_bundle_verdict(bundle: str, kind: str, code: str, culprits: tuple[int, ...]) -> None:
    d = analyze([str(LIVE / bundle)]).diagnosis
    assert (d.verdict.kind, d.verdict.code, d.verdict.culprit_ranks) == (kind, code, culprits)


def test_skipped_collective_names_both_call_sites() -> None:
    d = analyze([str(LIVE / "skip-collective")]).diagnosis
    assert "all_reduce at train_step (logsleuth/repro/harness.py:95)" in d.verdict.summary
    assert "barrier at finish (logsleuth/repro/harness.py:105)" in d.verdict.summary
    # The culprit's host and pid come from the bundle manifest.
    assert d.verdict.culprit_pids and d.verdict.culprit_hosts


def test_size_check_blames_nobody_it_cannot_see() -> None:
    d = analyze([str(LIVE / "size-mismatch")]).diagnosis
    finding = d.findings[0]
    assert "1024 bytes where 512 were expected" in finding.title
    assert "rank(s) 0" in finding.detail  # the rank that detected it, which then aborted
    assert not [f for f in d.findings if f.kind == "process-died" and f.severity == "critical"]
