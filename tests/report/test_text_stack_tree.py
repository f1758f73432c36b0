"""The STAT stack tree in the terminal report: ranks per branch, folded library frames."""

from __future__ import annotations

from pathlib import Path

from logsleuth.api import analyze
from logsleuth.report.text import render_text

ROOT = Path(__file__).resolve().parents[2]
STACKS = ROOT / "fixtures" / "real" / "stacks"
GLOO = sorted(str(p) for p in STACKS.glob("gloo-hang_pyspy-0.4.3_rank_pid*.txt"))
SUMMARY = ROOT / "fixtures" / "real" / "torch" / "gloo-hang_torchrun_log_after_SIGKILL_rank3.log"


def section(text: str, heading: str) -> list[str]:
    """Return the lines of one report section, heading included, up to the next blank line."""
    lines = text.splitlines()
    start = lines.index(heading)
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start:end]


def test_gloo_hang_tree_branches_where_ranks_diverge() -> None:
    d = analyze([*GLOO, str(SUMMARY)]).diagnosis
    assert section(render_text(d, width=120), "STACK TREE (OUTERMOST FRAME FIRST)") == [
        "STACK TREE (OUTERMOST FRAME FIRST)",
        "  0-3  <module> (hang_dist.py:31)",
        "  0-1  ├─ main (hang_dist.py:28)",
        "       │  train_step (hang_dist.py:15)",
        "       │  _exception_logger.<locals>.wrapper (torch/distributed/c10d_logger.py:83)",
        "       │  all_reduce (torch/distributed/distributed_c10d.py:3252)  <- all_reduce",
        "  2    ├─ main (hang_dist.py:26)",
        "       │  _exception_logger.<locals>.wrapper (torch/distributed/c10d_logger.py:83)",
        "       │  barrier (torch/distributed/distributed_c10d.py:5356)  <- barrier (outlier)",
        "  3    └─ main (hang_dist.py:23)",
        "          _BaseDataLoaderIter.__next__ (torch/utils/data/dataloader.py:725)",
        "          ... 7 stdlib, torch frames ...",
        "          _PollLikeSelector.select (selectors.py:415)  <- data-loading (outlier)",
    ]


def test_one_class_prints_no_tree(tmp_path: Path) -> None:
    text = (STACKS / "gloo-hang_pyspy-0.4.3_rank_pid13273.txt").read_text()
    for rank in range(2):
        (tmp_path / f"rank{rank}.txt").write_text(text.replace("13273", str(500 + rank)))
    report = render_text(analyze([str(tmp_path)]).diagnosis)
    assert "STACK CLASSES (1)" in report  # both ranks in their DataLoader: one class
    assert "STACK TREE" not in report
