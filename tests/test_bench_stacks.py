"""benchmarks/bench_stacks.py: its bundle and its checks, at a size a unit test can afford."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.bench_stacks import main, write_bundle


def test_bundle_has_one_dump_per_rank_and_a_manifest(tmp_path: Path) -> None:
    write_bundle(tmp_path / "b", 16, 5, per_host=8)
    names = sorted(p.name for p in (tmp_path / "b" / "stacks").iterdir())
    assert names == sorted(f"rank{r}.1.txt" for r in range(16))
    culprit = (tmp_path / "b" / "stacks" / "rank5.1.txt").read_text()
    assert culprit.startswith("Process 20005: ")
    assert "_BaseDataLoaderIter.__next__" in culprit
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert manifest["ranks"]["9"] == {"pid": 20009, "host": "gpu-node002", "local_rank": 1}


def test_small_run_meets_the_targets(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--ranks", "16", "--culprit", "5"]) == 0
    out = capsys.readouterr().out
    assert "first line: VERDICT non-collective-stall: rank 5 is stuck in data loading" in out
    assert out.rstrip().endswith("targets met")
