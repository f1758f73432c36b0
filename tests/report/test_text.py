"""The terminal report: verdict first, evidence with source:line, compact when healthy."""

from __future__ import annotations

import dataclasses

from logsleuth.model.diagnosis import Evidence
from logsleuth.report.text import render_text
from tests.conftest import Golden
from tests.report.diagnoses import healthy, missing_collective


def _lines(text: str) -> list[str]:
    return text.splitlines()


def test_verdict_is_the_first_line_with_culprit_and_confidence() -> None:
    lines = _lines(render_text(missing_collective()))
    assert lines[0] == (
        "VERDICT missing-collective: rank 5 (node-b pid 4105) never entered AllReduce #412 on comm"
    )
    assert lines[1] == "0x7f3a9c2b11d04e55; the other 7 ranks wait in it"
    assert (
        lines[2]
        == "  rank 5 | host node-b | pid 4105 | confidence 0.90 | rule LS101 collective.missing"
    )


def test_sections_come_in_reading_order() -> None:
    text = render_text(missing_collective())
    order = [
        "VERDICT",
        "EVIDENCE",
        "NEXT STEPS",
        "COMMUNICATOR PROGRESS",
        "FIRST ERRORS ACROSS RANKS",
        "OTHER FINDINGS (3)",
        "CULPRIT PROCESSES",
        "STACK CLASSES (2)",
        "COMMUNICATORS (2)",
        "CONFIGURATION DIFFERENCES",
        "JOB OVERVIEW",
        "INPUTS ",
        "DATA GAPS",
    ]
    positions = [
        text.index(f"\n{heading}") if i else text.index(heading) for i, heading in enumerate(order)
    ]
    assert positions == sorted(positions)


def test_evidence_lines_show_source_and_line() -> None:
    lines = _lines(render_text(missing_collective(), width=300))
    start = lines.index("EVIDENCE")
    assert lines[start + 1].startswith(
        "  nccl/node-b.log:1187  node-b:4105:4105 [1] NCCL INFO AllReduce"
    )
    assert lines[start + 2].startswith("  nccl/node-a.log:2374  node-a:4100:4100 [0] NCCL INFO")
    assert lines[start + 3].startswith("  launcher.log:88       [rank0]:[E321 02:07:08.408271257")
    assert lines[start + 4] == "  (showing 3 of 9 supporting lines)"


def test_other_findings_are_grouped_by_kind_without_the_verdict() -> None:
    lines = _lines(render_text(missing_collective(), width=120))
    start = lines.index("OTHER FINDINGS (3)")
    block = lines[start + 1 : start + 8]
    assert block == [
        "  collective-timeout (1)",
        "    ERROR  LS203  7 ranks hit the watchdog timeout in AllReduce SeqNum 413",
        "                  7 of 8 ranks (all but 5) on node-a, node-b; confidence 0.60",
        "  transport-degraded (2)",
        "    WARNING  LS302  node-b talks to node-a over NET/Socket instead of InfiniBand",
        "                    ranks 4-7 on node-b; confidence 0.70",
        "    INFO     LS305  P2P is disabled between GPUs on node-a; traffic goes through host "
        "memory",
    ]
    assert "LS101" not in "\n".join(lines[start:])


def test_stack_classes_show_ranks_category_and_call_site() -> None:
    lines = _lines(render_text(missing_collective(), width=160))
    start = lines.index("STACK CLASSES (2)")
    assert lines[start + 1].split() == [
        "Ranks",
        "Count",
        "Category",
        "Call",
        "site",
        "Innermost",
        "frame",
    ]
    rows = lines[start + 3 : start + 5]
    assert rows[0].split() == [
        "7",
        "of",
        "8",
        "ranks",
        "(all",
        "but",
        "5)",
        "7",
        "collective",
        "train_step",
        "(train.py:42)",
        "all_reduce",
        "(torch/distributed/distributed_c10d.py:2501)",
    ]
    assert rows[1].split()[:6] == ["rank", "5", "1", "data-loading", "train_loop", "(train.py:61)"]


def test_healthy_job_is_compact() -> None:
    text = render_text(healthy())
    assert _lines(text) == [
        "VERDICT healthy: no problem found in 2 inputs from 2 ranks; every communicator "
        "initialized",
        "  confidence 0.80",
        "",
        "JOB 2 ranks; 1 host (node-a); NCCL 2.21.5; torch 2.13.0",
        "1 communicator, 0 stack classes; ranks seen 0-1",
        "",
        "INPUTS 1 input, 50 lines: 48 recognized, 2 unrecognized, 0 blank",
    ]


def test_output_is_deterministic_plain_text_within_width() -> None:
    first = render_text(missing_collective(), width=80)
    assert first == render_text(missing_collective(), width=80)
    assert "\x1b" not in first
    assert max(len(line) for line in first.splitlines()) <= 80


def test_color_adds_ansi_styles() -> None:
    assert "\x1b[" in render_text(missing_collective(), color=True)


def test_log_text_cannot_drive_the_terminal_or_rich_markup() -> None:
    d = missing_collective()
    hostile = Evidence("nccl/node-b.log", 5, "\x1b]0;owned\x07 [bold red]not markup[/bold red]")
    primary = dataclasses.replace(d.findings[0], evidence=(hostile,))
    text = render_text(dataclasses.replace(d, findings=(primary,)), width=120, color=True)
    assert "\x1b]0;" not in text
    assert "\\x1b]0;owned\\x07 [bold red]not markup[/bold red]" in text


def test_golden_text(golden: Golden) -> None:
    golden.check("report/missing_collective.txt", render_text(missing_collective()))


def test_golden_text_healthy(golden: Golden) -> None:
    golden.check("report/healthy.txt", render_text(healthy()))


def test_overview_sections_mirror_the_html() -> None:
    lines = _lines(render_text(missing_collective(), width=120))
    assert lines[3] == (
        "  GPU cudaDev 1 0000:18:00.0 | last collective AllReduce #0x19b on comm "
        "0x7f3a9c2b11d04e55 | stack data loading"
    )
    assert "    ranks 5 (1)        AllReduce #411 (0x19b); 1 behind" in lines
    assert "  NCCL_P2P_DISABLE  1: ranks 0-3 on node-a" in lines
    assert "                    not logged: ranks 4-7" in lines
    job = lines.index("JOB OVERVIEW")
    assert lines[job + 1 : job + 4] == [
        "  world size           8 ranks",
        "  ranks with evidence  all 8 ranks",
        "  hosts                2 (node-a, node-b); 4 processes per host",
    ]
