"""Communicators whose opCount stays 0 (NCCL 2.8.x; 2.27.3+ without network operations)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks.synth import generate
from logsleuth.api import analyze
from logsleuth.model.diagnosis import Diagnosis

GAP = "every collective line says opCount 0"


def _incident(tmp_path: Path, fault: str, *, zero: bool) -> Diagnosis:
    generate(tmp_path, ranks=8, hosts=1, ops=30, fault=fault, culprit=5)
    if zero:
        for log in (tmp_path / "nccl").iterdir():
            log.write_text(re.sub(r"opCount [0-9a-f]+ ", "opCount 0 ", log.read_text()))
    return analyze([str(tmp_path)]).diagnosis


@pytest.mark.parametrize("fault", ["collective-mismatch", "missing-collective"])
def test_the_odd_last_collective_is_named_without_claiming_a_position(
    tmp_path: Path, fault: str
) -> None:
    static = _incident(tmp_path, fault, zero=True)
    assert [f.code for f in static.findings if f.code in ("LS101", "LS102")] == ["LS101"]
    (found,) = [f for f in static.findings if f.code == "LS101"]
    assert found.ranks == (5,)
    assert found.kind == "missing-collective"
    assert "opCount stays 0" in found.detail
    assert "never entered the AllReduce" in found.title
    assert static.verdict.kind == "missing-collective"
    (gap,) = [g for g in static.gaps if GAP in g]
    assert "stack dumps or flight-recorder dumps can" in gap


def test_moving_opcounts_keep_their_positions(tmp_path: Path) -> None:
    moving = _incident(tmp_path, "collective-mismatch", zero=False)
    (found,) = [f for f in moving.findings if f.code == "LS102"]
    assert found.ranks == (5,)
    assert "opCount stays 0" not in found.detail
    assert not [g for g in moving.gaps if GAP in g]
