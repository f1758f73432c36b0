"""LS208 ras.operation_mismatch: RAS lists the smaller group, which may be the waiting side."""

from __future__ import annotations

from pathlib import Path

from logsleuth.api import analyze

REPORT = """\
NCCL version 2.26.2 compiled with CUDA 12.6
CUDA runtime version 12060, driver version 12060

Job summary
===========

  Nodes  Processes         GPUs  Processes     GPUs
(total)   per node  per process    (total)  (total)
      4          8            1         32       32

Communicators... (0.00s)
=============

Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors
    #  in group  per comm  per node  per comm  in group
    0         1         4         8        32        32   RUNNING  MISMATCH

Errors
======

Warnings
========

#0-0 (fa93daea854b060b) MISMATCH
  Communicator ranks have different AllGather operation counts
  {big} ranks have launched up to operation {big_op}
  {small} ranks have launched up to operation {small_op}
  Rank 12 -- GPU 4 managed by process 323032 on node 10.137.190.124
  Rank 13 -- GPU 5 managed by process 323033 on node 10.137.190.124
"""


def _verdict(tmp_path: Path, **counts: int) -> tuple[str, tuple[int, ...], set[str]]:
    path = tmp_path / "ncclras.txt"
    path.write_text(REPORT.format(**counts), encoding="utf-8")
    d = analyze([str(path)]).diagnosis
    return d.verdict.kind, d.verdict.culprit_ranks, {f.code for f in d.findings}


def test_listed_ranks_ahead_are_waiters_not_culprits(tmp_path: Path) -> None:
    kind, ranks, codes = _verdict(tmp_path, big=30, big_op=640, small=2, small_op=641)
    assert (kind, ranks) == ("missing-collective", ())
    assert "LS208" in codes and "LS206" not in codes


def test_listed_ranks_behind_are_the_culprits(tmp_path: Path) -> None:
    kind, ranks, _ = _verdict(tmp_path, big=30, big_op=641, small=2, small_op=640)
    assert (kind, ranks) == ("missing-collective", (12, 13))


def test_a_report_pasted_from_its_errors_on_is_read_and_names_the_process(
    tmp_path: Path,
) -> None:
    """A ticket quotes the report's errors without its header: the block opens at the first
    line only ncclras writes (its communicator table or a record), and the rank behind is named
    with the process and node the report gives it."""
    errors = REPORT.format(big=31, big_op=6650, small=1, small_op=6649)
    excerpt = errors[errors.index("Communicators...") :].replace(
        "  Rank 13 -- GPU 5 managed by process 323033 on node 10.137.190.124\n", ""
    )
    for start in ("Communicators...", "#0-0 (fa93daea854b060b) MISMATCH"):
        path = tmp_path / "ticket.log"
        path.write_text(excerpt[excerpt.index(start) :], encoding="utf-8")
        v = analyze([str(path)]).diagnosis.verdict
        assert (v.kind, v.code, v.culprit_ranks) == ("missing-collective", "LS208", (12,)), start
        assert (v.culprit_pids, v.culprit_hosts) == ((323032,), ("10.137.190.124",)), start
