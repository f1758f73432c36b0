"""One set of communicators in every view, at every scale.

Split children of one parent print one commId (NCCL before 2.23, and the synthetic
generator); they are communicators of their own. The text report's COMMUNICATORS and
TOPOLOGY sections, its summary count, the JSON ``communicators`` and the progress grid must
all name the same set, each split with its own size (no 8-rank split drawn with the
world's rank count).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchmarks.synth import generate
from logsleuth.cli import main


def _views(tmp_path: Path, ranks: int, hosts: int, capsys: pytest.CaptureFixture[str]) -> None:
    bundle = tmp_path / "job"
    generate(
        bundle,
        ranks=ranks,
        hosts=hosts,
        ops=20,
        fault="missing-collective",
        comms=2,
        launcher=True,
        stacks=True,
    )
    out = tmp_path / "d.json"
    code = main(["analyze", str(bundle), "--json", str(out)])
    text = capsys.readouterr().out
    assert code == 1
    data = json.loads(out.read_text())
    comms = data["communicators"]
    ids = [c["id"] for c in comms]
    per_host = ranks // hosts
    # The world and one split per host, all apart although the splits share one commId.
    assert len(ids) == len(set(ids)) == 1 + hosts
    assert sorted(c["nranks"] for c in comms) == [per_host] * hosts + [ranks]
    for comm in comms:
        assert comm["ranks_seen"] == f"0-{comm['nranks'] - 1}"
        assert comm["topology"]["nranks"] == comm["nranks"]
    assert {p["communicator"] for p in data["progress"]} == set(ids)
    assert all(p["members"] == p["nranks"] for p in data["progress"])
    sections = dict(re.findall(r"^(COMMUNICATORS|TOPOLOGY) \((\d+)\)$", text, re.MULTILINE))
    assert sections == {"COMMUNICATORS": str(len(ids)), "TOPOLOGY": str(len(ids))}
    assert re.search(rf"^  communicators +{len(ids)}$", text, re.MULTILINE)


def test_split_communicators_sharing_a_commid_agree_across_views_at_8_ranks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _views(tmp_path, 8, 2, capsys)


@pytest.mark.slow
def test_split_communicators_sharing_a_commid_agree_across_views_at_1024_ranks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _views(tmp_path, 1024, 128, capsys)
