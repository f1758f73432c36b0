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
