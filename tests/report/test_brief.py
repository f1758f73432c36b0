"""The brief terminal report and the wait chain it shares with the full reports."""

from __future__ import annotations

from pathlib import Path

import pytest

from logsleuth.api import analyze
from logsleuth.cli import build_parser, main
from logsleuth.model.diagnosis import Evidence
from logsleuth.model.waitfor import WaitEdge, WaitFor, WaitNode
from logsleuth.report.brief import MAX_LINES, render_brief, verdict_line
from logsleuth.report.story import build_story
from logsleuth.report.text import render_text
from tests.conftest import Golden
from tests.report.diagnoses import healthy, large, missing_collective

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "fixtures" / "demo"
GLOO = ROOT / "fixtures" / "real" / "live" / "eval-stall"


def test_story_runs_from_a_waiting_rank_to_the_culprit() -> None:
    story = build_story(missing_collective())
    assert story is not None
    assert [(h.waiter.id, h.waits_for.id) for h in story.hops] == [("rank 0", "rank 5")]
    assert story.hops[0].alike == (1, 2, 3, 4, 6, 7)
    assert story.hops[0].evidence is not None
    assert story.hops[0].evidence.line == 88
    assert story.culprit is not None
    assert story.culprit.label() == "rank 5 (node-b pid 4105)"


def test_story_follows_edges_of_any_source_hop_by_hop() -> None:
    nodes = tuple(
        WaitNode(id=f"rank {r}", rank=r, host="h", pid=10 + r, state=s, where=w)
        for r, s, w in (
            (0, "waiting", "recv from 1"),
            (1, "waiting", "recv from 2"),
            (2, "elsewhere", "compute at step (train.py:9)"),
        )
    )
    edges = (
        WaitEdge(
            waiter="rank 1",
            waits_for="rank 2",
            reason="recv from 2 never completed",
            source="p2p",
            evidence=Evidence("fr/rank_1", 4, "rank 1: recv from 2"),
        ),
        WaitEdge(waiter="rank 0", waits_for="rank 1", reason="recv from 1", source="p2p"),
    )
    graph = WaitFor(nodes=nodes, edges=edges, culprits=("rank 2",), resolution="sink")
    story = build_story(missing_collective().__class__(**{**_fields(), "waitfor": graph}))
    assert story is not None
    assert [(h.waiter.id, h.waits_for.id, h.source) for h in story.hops] == [
        ("rank 0", "rank 1", "p2p"),
        ("rank 1", "rank 2", "p2p"),
    ]
    assert story.culprit is not None and story.culprit.id == "rank 2"


def _fields() -> dict[str, object]:
    d = missing_collective()
    return {name: getattr(d, name) for name in d.__dataclass_fields__}


def test_no_story_without_a_wait_for_graph() -> None:
    assert build_story(healthy()) is None
    brief = render_brief(healthy())
    assert "WAIT CHAIN" not in brief
    assert brief.splitlines()[-1] == verdict_line(healthy())


@pytest.mark.parametrize("make", [missing_collective, healthy, large], ids=lambda f: f.__name__)
def test_brief_fits_in_fifteen_lines_verdict_first_and_last(make: object) -> None:
    d = make()  # type: ignore[operator]
    lines = render_brief(d, width=80, full_report="report.html").splitlines()
    assert len(lines) <= MAX_LINES
    assert lines[0].startswith(f"VERDICT {d.verdict.kind}: ")
    assert lines[-1].startswith(f"VERDICT {d.verdict.kind}: ")
    assert all(len(line) <= 80 for line in lines if not line.startswith("full report: "))


def test_full_text_tells_the_wait_chain_after_the_verdict() -> None:
    text = render_text(missing_collective())
    chain = text.index("WAIT CHAIN (SYMPTOM TO CAUSE)")
    assert text.index("VERDICT") < chain < text.index("EVIDENCE")
    assert "-> waits for rank 5 (as do 6 other ranks: 1-4,6-7)" in text
    assert "rank 5 (node-b pid 4105) is stuck outside communication" in text


def test_golden_brief_demo(golden: Golden) -> None:
    d = analyze([str(DEMO)]).diagnosis
    golden.check("report/brief_demo.txt", render_brief(d, width=100, full_report="report.html"))


def test_golden_brief_real_gloo_bundle(golden: Golden) -> None:
    d = analyze([str(GLOO)]).diagnosis
    golden.check("report/brief_gloo_eval_stall.txt", render_brief(d, width=100))


def test_analyze_brief_on_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(DEMO), "--brief"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert len(out) <= MAX_LINES
    assert out[0].startswith("VERDICT non-collective-stall: rank 11")
    assert out[-1].startswith("VERDICT non-collective-stall: rank 11")
    assert any(line.startswith("WAIT CHAIN") for line in out)


def test_live_prints_the_brief_report_unless_asked_for_the_full_text() -> None:
    parser = build_parser()
    assert parser.parse_args(["live", "--", "python", "x.py"]).format == "brief"
    full = parser.parse_args(["live", "--format", "text", "--", "python", "x.py"])
    assert full.format == "text"
    assert parser.parse_args(["analyze", "x"]).format == "text"
    assert parser.parse_args(["analyze", "x", "--brief"]).format == "brief"


def test_rank_sets_read_like_stat() -> None:
    from logsleuth.report.common import rank_set

    most = [r for r in range(4096) if r not in (12, 1365, 2047)]
    assert rank_set(most, 4096) == ("4,093 of 4,096 ranks (all but 12,1365,2047)", "")
    scattered = [r for r in range(4096) if r % 512 != 7]
    short, full = rank_set(scattered, 4096)
    assert short == "4,088 of 4,096 ranks (all but 7,519,1031,1543,2055,2567,3079,3591)"
    assert full.startswith("0-6,8-518,520-1030,")
    assert rank_set(range(4096), 4096) == ("all 4,096 ranks", "")
    assert rank_set("0-3,5", 8) == ("ranks 0-3,5", "")
    assert rank_set("5", 8) == ("rank 5", "")
    short, full = rank_set(range(0, 4096, 2), 4096)
    assert short.startswith("2,048 ranks (0,2,4,") and short.endswith(",...)")
    assert len(full.split(",")) == 2048
    assert rank_set("node-a pid 7") == ("node-a pid 7", "")


def test_html_tells_the_story_between_the_banner_and_the_evidence() -> None:
    from logsleuth.report.html import render_html

    html = render_html(missing_collective())
    assert html.index('id="verdict"') < html.index('id="story"') < html.index('id="evidence"')
    story = html[html.index('id="story"') : html.index('id="evidence"')]
    assert '<a class="xref" href="#rank-0" data-filter="0">rank 0 (node-a pid 4100)</a>' in story
    assert '<a class="xref" href="#rank-5" data-filter="5">rank 5 (node-b pid 4105)</a>' in story
    assert "launcher.log:88" in story
    assert '<tr id="rank-5" data-rank="5" class="culprit">' in html
    assert '<a class="xref culprit-link" href="#rank-5" data-filter="5">5</a>' in html
