"""Synthetic proxy-dump incidents (benchmarks/synth_p2p.py): the NCCL P2P path without a GPU.

Each incident is analysed as a bundle; the verdict must name the stuck pair's culprit, the
channel and the kind, at 8 ranks and at 1,024.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks.synth_p2p import FAULTS, generate, main
from logsleuth.api import analyze

PROXY_OP = re.compile(r"^\[rank\d+\]:\[\d+-\d+\|\d+\| (Send|Recv|Coll) \d+[ISRFGD]/\d+\]$")


@pytest.mark.parametrize("ranks", [8, 1024])
@pytest.mark.parametrize("fault", FAULTS)
def test_synthetic_proxy_dumps_name_the_stuck_pair_and_channel(
    tmp_path: Path, fault: str, ranks: int
) -> None:
    truth = generate(tmp_path / "incident", ranks=ranks, fault=fault, seed=ranks + len(fault))
    d = analyze([str(tmp_path / "incident")]).diagnosis
    assert d.verdict.kind == truth["kind"]
    assert list(d.verdict.culprit_ranks) == truth["culprit_ranks"]
    waiter, peer = truth["pair"]
    assert d.p2p is not None and d.p2p.sources == ("nccl-proxy",)
    stuck = next(s for s in d.p2p.stuck if (s.waiter, s.peer) == (waiter, peer))
    assert stuck.op.channel == truth["channel"]
    text = d.findings[0].title + " " + d.findings[0].detail
    assert f"on channel {truth['channel']}" in text
    assert f"rank {waiter}" in text and f"rank {peer}" in text


def test_the_stuck_link_story_reads_as_one_sentence_plus_the_link(tmp_path: Path) -> None:
    truth = generate(tmp_path / "i", ranks=512, fault="stuck-link", culprit=300, channel=2)
    d = analyze([str(tmp_path / "i")]).diagnosis
    top = d.findings[0]
    assert top.title.startswith(
        "rank 300 is still sending (send to rank 301 on channel 2 at opCount "
    )
    assert "the other 510 rank(s) have no point-to-point op pending" in top.detail
    assert "The link: rank 300 (gpu-node038) <-> rank 301 (gpu-node038)." in top.detail
    assert truth["culprit_ranks"] == [300, 301] == list(d.verdict.culprit_ranks)


def test_generator_is_deterministic_and_format_faithful(tmp_path: Path) -> None:
    generate(tmp_path / "a", ranks=16, fault="wrong-peer", seed=5)
    generate(tmp_path / "b", ranks=16, fault="wrong-peer", seed=5)
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*.log"))
    assert len(files) == 17  # 16 NCCL debug files and the launcher log
    for name in files:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    lines = (tmp_path / "a" / "launcher.log").read_text(encoding="utf-8").splitlines()
    ops = [line for line in lines if "|" in line and "[X]" not in line and line[-1] == "]"]
    assert ops and all(PROXY_OP.match(line) for line in ops)


def test_generator_refuses_a_culprit_that_cannot_have_the_fault(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="culprit 7 is not a stage"):
        generate(tmp_path / "x", ranks=8, fault="dropped-send", culprit=7)
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path / "y"), "--ranks", "10", "--stages", "4"])
