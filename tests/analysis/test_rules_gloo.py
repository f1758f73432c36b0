"""LS109: gloo's size check read with the flight recorders of the ranks that did not abort.

Must-fire: bundles `logsleuth live` wrote for real 4-rank gloo jobs where one rank's tensor
is twice as large (`size-mismatch-dumps`, culprit 1, rank 0 aborts; `size-mismatch-all-dumps`,
the same with a dump from every other rank) or half as large (`size-mismatch-smaller`,
culprit 2, which aborts itself). Must-not-fire: the same failure
without dumps, with a single dump, and flight-recorder dumps without gloo's message.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from logsleuth.api import analyze

REAL = Path(__file__).resolve().parents[2] / "fixtures" / "real"
LIVE = REAL / "live"


def test_the_rank_with_the_larger_tensor_is_named() -> None:
    d = analyze([str(LIVE / "size-mismatch-dumps")]).diagnosis
    assert (d.verdict.kind, d.verdict.code) == ("collective-mismatch", "LS109")
    assert (d.verdict.culprit_ranks, d.verdict.culprit_pids) == ((1,), (5847,))
    assert d.verdict.summary == (
        "rank(s) 1 passed a tensor of another size to gloo:all_reduce #4 of process group 0"
    )
    finding = d.findings[0]
    assert finding.detail == (
        "At collective #4 of process group 0 the flight recorders give rank(s) 3: 1024 "
        "elements; rank(s) 1: 2048 elements. Rank 0 has no dump: it aborted on receiving 1024 "
        "bytes into the 512-byte buffer it had posted, so its tensor is smaller than the "
        "sender's, as on rank(s) 3. Counted that way, rank(s) 1 differ from rank(s) 0,3. "
        "1 rank(s) neither dumped nor aborted and are not counted."
    )
    assert [(e.source, e.line) for e in finding.evidence][-2:] == [
        ("fr/rank_1", 4),
        ("fr/rank_3", 4),
    ]
    assert finding.evidence[-2].text.startswith("rank 1: #3 pg 0 seq 4 gloo:all_reduce [2048]")


def test_with_every_other_rank_dumped_the_flight_recorders_agree() -> None:
    d = analyze([str(LIVE / "size-mismatch-all-dumps")]).diagnosis
    assert (d.verdict.code, d.verdict.culprit_ranks) == ("LS109", (1,))
    finding = d.findings[0]
    assert finding.detail.startswith(
        "At collective #4 of process group 0 the flight recorders give rank(s) 2-3: 1024 "
        "elements; rank(s) 1: 2048 elements. Rank 0 has no dump"
    )
    # LS106 reaches the same culprit from the dumps alone; the two are merged.
    assert "Also seen as: rank(s) 1 issued gloo:all_reduce where rank(s) 2-3" in finding.detail
    assert "neither dumped nor aborted" not in finding.detail


def test_the_aborted_rank_is_named_when_every_dump_agrees() -> None:
    d = analyze([str(LIVE / "size-mismatch-smaller")]).diagnosis
    assert (d.verdict.kind, d.verdict.code, d.verdict.culprit_ranks) == (
        "collective-mismatch",
        "LS109",
        (2,),
    )
    assert (
        "Rank 2 has no dump: it aborted on receiving 512 bytes into the 256-byte buffer it "
        "had posted, so its tensor is smaller than theirs." in d.findings[0].detail
    )


def test_without_dumps_the_size_check_names_nobody() -> None:
    d = analyze([str(LIVE / "size-mismatch")]).diagnosis
    assert "LS109" not in [f.code for f in d.findings]
    assert (d.verdict.code, d.verdict.culprit_ranks) == ("LS108", ())


def test_one_dump_is_no_majority(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(LIVE / "size-mismatch-dumps", bundle)
    (bundle / "fr" / "rank_3").unlink()
    d = analyze([str(bundle)]).diagnosis
    assert "LS109" not in [f.code for f in d.findings]
    assert d.verdict.culprit_ranks == ()


def test_dumps_without_the_gloo_message_are_left_to_ls106() -> None:
    d = analyze([str(REAL / "fr" / "type")]).diagnosis
    assert "LS109" not in [f.code for f in d.findings]
