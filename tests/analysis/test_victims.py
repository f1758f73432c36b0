"""Victims are not culprits: what a waiting rank prints points away from it."""

from __future__ import annotations

from pathlib import Path

from logsleuth.api import analyze

WATCHDOG = (
    "[rank{r}]:[E1121 16:20:50.421164592 ProcessGroupNCCL.cpp:629] [Rank {r}] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=1234, OpType=ALLREDUCE, NumelIn=1048576, "
    "NumelOut=1048576, Timeout(ms)=600000) ran for 600081 milliseconds before timing out.\n"
)

HOROVOD_VICTIM = """\
[1,3]<stderr>:Traceback (most recent call last):
[1,3]<stderr>:  File "train.py", line 12, in <module>
[1,3]<stderr>:    hvd.allreduce(t)
[1,3]<stderr>:tensorflow.python.framework.errors_impl.UnknownError: Horovod has been shut down. This was caused by an exception on one of the ranks or an attempt to allreduce, allgather or broadcast a tensor after one of the ranks finished execution. If the shutdown was caused by an exception, you should see the exception in the log before the first shutdown message.
"""

CUT_TRACEBACK = """\
[rank2]:Traceback (most recent call last):
[rank2]:  File "train.py", line 40, in <module>
[rank2]:    main()
[rank2]:  File "train.py", line 31, in main
"""


def _verdict(tmp_path: Path, text: str) -> tuple[str, tuple[int, ...]]:
    log = tmp_path / "job.log"
    log.write_text(text, encoding="utf-8")
    v = analyze([str(log)]).diagnosis.verdict
    return v.kind, v.culprit_ranks


def test_when_every_rank_but_rank_0_times_out_rank_0_is_the_suspect(tmp_path: Path) -> None:
    text = "".join(WATCHDOG.format(r=r) for r in (1, 2, 3))
    kind, ranks = _verdict(tmp_path, text)
    assert (kind, ranks) == ("missing-collective", (0,))


def test_a_gap_in_the_middle_of_the_reporting_ranks_implies_nobody(tmp_path: Path) -> None:
    text = "".join(WATCHDOG.format(r=r) for r in (2, 3))
    kind, ranks = _verdict(tmp_path, text)
    assert 0 not in ranks and 1 not in ranks
    assert kind == "collective-timeout"


def test_two_waiters_of_eight_ranks_prove_no_stall_inside_the_collective(tmp_path: Path) -> None:
    # Ranks 3 and 7 wait; ranks 0-2 and 4-6 exist (ranks count from 0) and said nothing: the
    # reporters are victims, and whether the others were inside is unknown.
    text = "".join(WATCHDOG.format(r=r) for r in (3, 7))
    log = tmp_path / "job.log"
    log.write_text(text, encoding="utf-8")
    verdict = analyze([str(log)]).diagnosis.verdict
    assert (verdict.kind, verdict.culprit_ranks) == ("collective-timeout", ())
    assert verdict.summary.endswith("ranks 0-2,4-6 left no line about it")
    # Seven of eight reporting, their lines interleaved as the ranks printed them: their
    # agreement stands (a cut may have lost rank 5's line).
    everyone_but_5 = "".join(WATCHDOG.format(r=r) for r in (4, 0, 7, 2, 6, 1, 3))
    kind, ranks = _verdict(tmp_path, everyone_but_5)
    assert (kind, ranks) == ("collective-timeout", (0, 1, 2, 3, 4, 6, 7))


def test_a_rank_that_saw_horovod_shut_down_is_a_victim(tmp_path: Path) -> None:
    kind, ranks = _verdict(tmp_path, HOROVOD_VICTIM)
    assert 3 not in ranks
    assert kind in ("process-died", "missing-collective", "inconclusive")


def test_a_traceback_cut_before_its_exception_names_no_cause(tmp_path: Path) -> None:
    kind, ranks = _verdict(tmp_path, CUT_TRACEBACK)
    assert ranks == ()
    assert kind == "inconclusive"


RING_24 = """\
hostA:151779:151929 [1] NCCL INFO Ring 00 : 1[1] -> 2[2] via direct shared memory
hostA:151780:151928 [2] NCCL INFO Ring 00 : 2[2] -> 3[3] via direct shared memory
hostA:151778:151927 [0] NCCL INFO Ring 00 : 7 -> 0 [receive] via NET/IB/0
hostA:151780:151928 [2] include/shm.h:42 NCCL WARN Cuda failure 'invalid argument'
hostA:151780:151928 [2] NCCL INFO transport/shm.cu:187 -> 1
"""


def test_a_process_without_init_lines_is_known_by_its_own_connections(tmp_path: Path) -> None:
    log = tmp_path / "combined.log"
    log.write_text(RING_24, encoding="utf-8")
    d = analyze([str(log)]).diagnosis
    assert (d.verdict.kind, d.verdict.culprit_ranks, d.verdict.culprit_pids) == (
        "cuda-error",
        (2,),
        (151780,),
    )
    ranks = {r.pid: r.rank for r in d.ranks}
    assert ranks[151778] == 0  # the receiving side of "7 -> 0 [receive]"


def test_a_rank_whose_exception_names_other_ranks_only_reports_them(tmp_path: Path) -> None:
    # Rank 0 raises monitored_barrier's verdict about ranks 3 and 5: they are the culprits,
    # not rank 0, whose launcher prefix places the traceback.
    text = (
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "ddp_train.py", line 144, in <module>\n'
        "[rank0]:     dist.monitored_barrier(wait_all_ranks=True)\n"
        "[rank0]: RuntimeError: [Rank 0]: Ranks 3, 5 failed to pass monitoredBarrier in 30000 ms\n"
    )
    assert _verdict(tmp_path, text) == ("missing-collective", (3, 5))
    # DDP's model check names no culprit: either rank may hold the wrong model.
    text = (
        "[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "train.py", line 120, in <module>\n'
        "[rank1]:     model = DDP(model, device_ids=[args.local_rank])\n"
        "[rank1]: RuntimeError: DDP expects same model across all ranks, but Rank 1 has 212 "
        "params, while rank 0 has inconsistent 210 params.\n"
    )
    assert _verdict(tmp_path, text)[0] == "collective-mismatch"
