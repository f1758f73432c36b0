"""The rank grid of a communicator's progress: one rectangle per run of ranks in one state."""

from __future__ import annotations

import dataclasses
import re

from logsleuth.model.diagnosis import CommProgress, ProgressGroup
from logsleuth.report.progress_svg import FILLS, render_progress_svg
from tests.report.diagnoses import IMG_ATTACK, large, missing_collective


def _rects(svg: str) -> list[str]:
    # The three legend squares have no title; grid runs do.
    return re.findall(r'<rect [^>]*fill="(#[0-9a-f]+)"><title>([^<]*)</title>', svg)


def test_laggard_is_its_own_red_cell() -> None:
    svg = render_progress_svg(missing_collective().progress[0])
    assert _rects(svg) == [
        (FILLS["ahead"], "ranks 0-4,6-7: last logged AllReduce #412 (0x19c)"),
        (FILLS["behind"], "ranks 5: last logged AllReduce #411 (0x19b), 1 behind"),
        (FILLS["ahead"], "ranks 0-4,6-7: last logged AllReduce #412 (0x19c)"),
    ]


def test_4096_ranks_draw_as_runs_per_row() -> None:
    svg = render_progress_svg(large().progress[0])
    rects = _rects(svg)
    # 64 rows of 64 ranks; rank 1234's row splits into three runs.
    assert len(rects) == 66
    assert [fill for fill, _ in rects].count(FILLS["behind"]) == 1
    assert len(svg.encode()) < 20_000


def test_members_without_a_rank_are_not_drawn_and_text_is_escaped() -> None:
    progress = CommProgress(
        id=f"0x1 {IMG_ATTACK}",
        nranks=2,
        members=3,
        groups=(
            ProgressGroup(ranks="0-1", count=2, op_count=7, collective="Broadcast", behind=0),
            ProgressGroup(ranks="node-x pid 12", count=1, op_count=None),
        ),
    )
    svg = render_progress_svg(progress)
    assert "<img" not in svg and "&lt;img src=x" in svg
    assert [title for _, title in _rects(svg)] == ["ranks 0-1: last logged Broadcast #7 (0x7)"]
    assert render_progress_svg(dataclasses.replace(progress, groups=progress.groups[1:])) == ""
