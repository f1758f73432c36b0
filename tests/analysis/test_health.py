"""``healthy`` only when the evidence proves it; otherwise LS002 says what is missing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from logsleuth.api import analyze
from logsleuth.cli import main

ROOT = Path(__file__).resolve().parents[2]
HEALTHY = ROOT / "fixtures" / "synthetic" / "healthy"
STACKS = ROOT / "fixtures" / "real" / "stacks"

INIT_ONLY = """\
gpu-a01:4711:4711 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>
gpu-a01:4711:4711 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
gpu-a01:4711:4799 [0] NCCL INFO ncclCommInitRank comm 0x55d0c0a0 rank 0 nranks 8 cudaDev 0 nvmlDev 0 busId 1b000 commId 0x9f3c2b1a7e6d5c4b - Init START
"""

NCCL_TESTS_OK = """\
# nThread 1 nGpus 2 minBytes 8 maxBytes 2048 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid   9822 on      node1 device  0 [0000:2c:00] NVIDIA GeForce RTX 4090
#  Rank  1 Group  0 Pid   9822 on      node1 device  1 [0000:3c:00] NVIDIA GeForce RTX 4090
node1:9822:9822 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>
           8             2     float     sum      -1     8.56    0.00    0.00      0     8.30    0.00    0.00      0
          16             4     float     sum      -1     8.57    0.00    0.00      0     8.96    0.00    0.00      0
"""


def test_a_log_cut_during_init_is_not_healthy(tmp_path: Path) -> None:
    log = tmp_path / "rank0.log"
    log.write_text(INIT_ONLY, encoding="utf-8")
    d = analyze([str(log)]).diagnosis
    assert d.verdict.kind == "inconclusive"
    assert d.verdict.code == "LS002"
    (finding,) = [f for f in d.findings if f.code == "LS002"]
    assert "nothing shows" in finding.title
    assert any("stack" in step for step in finding.next_steps)
    assert main(["analyze", str(log), "--quiet"]) == 1


def test_communicators_destroyed_everywhere_prove_a_normal_end() -> None:
    d = analyze([str(HEALTHY)]).diagnosis
    assert d.verdict.kind == "healthy"
    assert "ended normally" in d.verdict.summary
    assert not [f for f in d.findings if f.code == "LS002"]


def test_a_benchmark_that_printed_clean_rows_was_progressing(tmp_path: Path) -> None:
    log = tmp_path / "all_reduce_perf.log"
    log.write_text(NCCL_TESTS_OK, encoding="utf-8")
    assert analyze([str(log)]).diagnosis.verdict.kind == "healthy"


def test_a_second_process_without_proof_keeps_it_unproven(tmp_path: Path) -> None:
    (tmp_path / "ok.log").write_text(NCCL_TESTS_OK, encoding="utf-8")
    (tmp_path / "stuck.log").write_text(INIT_ONLY, encoding="utf-8")
    d = analyze([str(tmp_path)]).diagnosis
    assert d.verdict.kind == "inconclusive"
    (finding,) = [f for f in d.findings if f.code == "LS002"]
    assert "gpu-a01" in finding.title and "4711" in finding.title


def test_a_run_pasted_below_a_finished_one_keeps_it_unproven(tmp_path: Path) -> None:
    # One paste, two runs: the benchmark's rows cover the processes above them, not the
    # stuck one whose lines begin after them.
    (tmp_path / "paste.txt").write_text(NCCL_TESTS_OK + INIT_ONLY, encoding="utf-8")
    d = analyze([str(tmp_path)]).diagnosis
    assert d.verdict.kind == "inconclusive"
    (finding,) = [f for f in d.findings if f.code == "LS002"]
    assert "gpu-a01" in finding.title and "4711" in finding.title


def test_a_process_that_wrote_before_the_closing_rows_is_covered(tmp_path: Path) -> None:
    before = INIT_ONLY.replace("gpu-a01:4711", "node1:9823") + NCCL_TESTS_OK
    (tmp_path / "paste.txt").write_text(before, encoding="utf-8")
    assert analyze([str(tmp_path)]).diagnosis.verdict.kind == "healthy"


def test_a_proof_without_a_pid_covers_only_its_own_input(tmp_path: Path) -> None:
    # Redacted pids: a host's processes share one stream, so a finished run's proof in one
    # input says nothing of the stuck run in another.
    redacted = INIT_ONLY.replace("gpu-a01:4711:4711", "node1:XXXX:XXXX")
    redacted = redacted.replace("gpu-a01:4711:4799", "node1:XXXX:XXXX")
    (tmp_path / "ok.log").write_text(NCCL_TESTS_OK.replace("9822:9822", "XXXX:XXXX"))
    (tmp_path / "stuck.log").write_text(redacted, encoding="utf-8")
    assert analyze([str(tmp_path / "ok.log")]).diagnosis.verdict.kind == "healthy"
    d = analyze([str(tmp_path)]).diagnosis
    assert d.verdict.kind == "inconclusive"
    (finding,) = [f for f in d.findings if f.code == "LS002"]
    assert "node1" in finding.title


def test_rows_with_wrong_values_are_corrupted_results(tmp_path: Path) -> None:
    # nccl-tests' #wrong column above 0: the collective returned wrong data.
    log = tmp_path / "all_reduce_perf.log"
    log.write_text(NCCL_TESTS_OK.replace("0.00      0\n", "0.00      3\n"), encoding="utf-8")
    verdict = analyze([str(log)]).diagnosis.verdict
    assert (verdict.kind, verdict.code) == ("cuda-error", "LS701")


def test_a_benchmark_whose_check_failed_did_not_end_normally(tmp_path: Path) -> None:
    # The closing summary is printed after a failed check too: it proves no normal end.
    log = tmp_path / "all_reduce_perf.log"
    summary = "# Out of bounds values : {} \n# Avg bus bandwidth    : 107.3 \n#\n"
    log.write_text(NCCL_TESTS_OK + summary.format("0 OK"), encoding="utf-8")
    assert analyze([str(log)]).diagnosis.verdict.kind == "healthy"
    log.write_text(NCCL_TESTS_OK + summary.format("2054 FAILED"), encoding="utf-8")
    lead = analyze([str(log)]).diagnosis.findings[0]
    assert lead.kind == "cuda-error"
    assert [e.text.strip() for e in lead.evidence] == ["# Out of bounds values : 2054 FAILED"]


def test_a_lone_stack_dump_is_not_healthy() -> None:
    dumps = sorted(STACKS.rglob("*.txt"))
    assert dumps
    d = analyze([str(dumps[0])]).diagnosis
    assert d.verdict.kind != "healthy"


def _bundle(tmp_path: Path, status: int) -> Path:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "launcher.log").write_text("repro: rank 0: step 9 done\n", encoding="utf-8")
    manifest = {
        "schema": "logsleuth.bundle/1",
        "command": ["torchrun", "--nproc_per_node", "2", "train.py"],
        "ranks": {},
        "started": "2026-11-23T10:00:00Z",
        "stalled_at": None,
        "env": {},
        "outcome": "finished",
        "complete": True,
        "finished": "2026-11-23T10:01:00Z",
        "exit": {"status": status, "signal": None, "ended_by": "job"},
    }
    (bundle / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return bundle


def test_a_live_run_that_exited_0_by_itself_is_healthy(tmp_path: Path) -> None:
    assert analyze([str(_bundle(tmp_path, 0))]).diagnosis.verdict.kind == "healthy"


def test_a_live_run_that_exited_1_is_not(tmp_path: Path) -> None:
    assert analyze([str(_bundle(tmp_path, 1))]).diagnosis.verdict.kind != "healthy"


FAULTHANDLER_ALL_THREADS = """\
Thread 0x00007f8e2b7fe700 (most recent call first):
  File "/usr/lib/python3.10/threading.py", line 324 in wait
  File "/usr/local/lib/python3.10/dist-packages/tqdm/_monitor.py", line 60 in run
Current thread 0x00007f8f6c1a5740 (most recent call first):
  File "/usr/local/lib/python3.10/dist-packages/torch/distributed/distributed_c10d.py", line 2050 in barrier
  File "/workspace/train.py", line 301 in save_checkpoint
"""


def test_one_dump_of_all_threads_pasted_without_blank_lines_is_not_progress(
    tmp_path: Path,
) -> None:
    # The blank line between faulthandler's threads was lost in the paste: still one dump of
    # one process (its current thread in a barrier), not two processes, not two snapshots.
    log = tmp_path / "hang.txt"
    log.write_text(FAULTHANDLER_ALL_THREADS)
    diagnosis = analyze([str(log)]).diagnosis
    assert diagnosis.verdict.kind == "inconclusive"
    assert len(diagnosis.stack_classes) == 1


def test_dumps_of_different_processes_under_one_label_are_not_snapshots(tmp_path: Path) -> None:
    # Two py-spy dumps that a paste put under one "rank 0" heading, with different pids and
    # different stacks: not one process that moved.
    dump = (
        "Process {pid}: python train.py\nPython v3.10.12 (/usr/bin/python3.10)\n\n"
        'Thread {pid} (idle): "MainThread"\n    {frame}\n    main (train.py:140)\n\n'
    )
    log = tmp_path / "stacks.txt"
    log.write_text(
        "## rank 0\n"
        + dump.format(pid=4101, frame="all_reduce (torch/distributed/distributed_c10d.py:2498)")
        + dump.format(pid=4102, frame="get (multiprocessing/queues.py:113)")
    )
    assert analyze([str(log)]).diagnosis.verdict.kind != "healthy"


def test_a_dump_header_without_threads_is_no_snapshot_that_moved(tmp_path: Path) -> None:
    # A rank's dump pasted with its header below its threads (a viewer's newest-first order):
    # the header alone holds no stack, so the two pieces show no movement.
    log = tmp_path / "pyspy_rank0.txt"
    log.write_text(
        'Thread 46930 (idle): "MainThread"\n'
        "    wait (torch/utils/file_baton.py:42)\n"
        "    main (main.py:273)\n"
        "Python v3.11.2 (/usr/bin/python3.11)\n\n"
        "Process 46930: python -u main.py\n"
    )
    assert analyze([str(log)]).diagnosis.verdict.kind != "healthy"


def test_an_error_message_alone_is_a_failure_of_its_rank(tmp_path: Path) -> None:
    # A message behind an exception type is evidence of a failure even when no rule knows
    # it, never "no failure found": the exception its rank raised (its traceback cut).
    log = tmp_path / "err.log"
    log.write_text(
        "[rank1]: RuntimeError: Detected rank-local state diverged: CollectiveFingerPrint "
        "could not be built for the current call.\n"
    )
    verdict = analyze([str(log)]).diagnosis.verdict
    assert (verdict.kind, verdict.code, verdict.culprit_ranks) == ("process-died", "LS204", (1,))


def test_a_python_warning_is_no_failure(tmp_path: Path) -> None:
    log = tmp_path / "warn.log"
    log.write_text(
        "UserWarning: torch.distributed.reduce_op is deprecated, please use "
        "torch.distributed.ReduceOp instead\n"
    )
    assert analyze([str(log)]).diagnosis.verdict.code == "LS002"


def test_a_restored_nccl_warn_is_a_failure(tmp_path: Path) -> None:
    # The first line of an excerpt, cut before its NCCL prefix: the catalog restores the WARN
    # it ends; a WARN is no healthy or silent run.
    log = tmp_path / "warn.log"
    log.write_text("y_qp failed with error Invalid argument errno 22\n")
    assert analyze([str(log)]).diagnosis.verdict.code == "LS001"


@pytest.mark.parametrize(
    "closing",
    [
        "`Trainer.fit` stopped: `max_epochs=3` reached.",
        "Trainer.fit stopped: max_steps=1000 reached.",
        "Training completed. Do not forget to share your model on huggingface.co/models =)",
        "[after training is done] datetime: 2024-06-01 12:00:00",
    ],
)
def test_a_frameworks_closing_line_proves_the_end(tmp_path: Path, closing: str) -> None:
    """What Lightning, the Hugging Face Trainer and Megatron-LM print only when training
    reached its configured end."""
    log = tmp_path / "train.log"
    log.write_text(f"step 990 loss 2.1\n{closing}\n", encoding="utf-8")
    assert analyze([str(log)]).diagnosis.verdict.kind == "healthy"
    log.write_text("step 990 loss 2.1\n", encoding="utf-8")
    assert analyze([str(log)]).diagnosis.verdict.kind == "inconclusive"


def test_deepspeeds_launcher_proves_the_end_of_the_workers_it_names(tmp_path: Path) -> None:
    launcher = (
        "[2024-02-07 09:12:44,108] [INFO] [launch.py:351:main] Process 19234 exits successfully.\n"
    )
    log = tmp_path / "ds.log"
    log.write_text(launcher, encoding="utf-8")
    assert analyze([str(log)]).diagnosis.verdict.kind == "healthy"
    # A worker it does not name (pid 19235, stuck in init) is not covered by it.
    stuck = INIT_ONLY.replace("gpu-a01:4711:", "gpu-a01:19235:")
    log.write_text(launcher + stuck, encoding="utf-8")
    assert analyze([str(log)]).diagnosis.verdict.kind == "inconclusive"


def test_a_rank_that_ended_its_loop_left_the_waiting_ranks(tmp_path: Path) -> None:
    # Lightning's end line on rank 1 while rank 0 times out in the next collective: rank 1
    # is where the waiting ends.
    path = tmp_path / "ticket.log"
    path.write_text(
        "[rank: 1] `Trainer.fit` stopped: `max_steps=5000` reached.\n"
        "[rank0]:[E1128 07:40:00.1 ProcessGroupNCCL.cpp:1595] [PG 0 Rank 0] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=20011, OpType=ALLREDUCE, NumelIn=1, "
        "NumelOut=1, Timeout(ms)=1800000) ran for 1800044 milliseconds before timing out.\n"
    )
    verdict = analyze([str(path)]).diagnosis.verdict
    assert (verdict.kind, verdict.culprit_ranks) == ("missing-collective", (1,))
    assert "ended their training loop" in verdict.summary


def test_a_worker_its_launcher_saw_end_well_is_where_the_waiting_ends(tmp_path: Path) -> None:
    # DeepSpeed's launcher names the worker that ended by pid; the ranks behind time out,
    # and their own watchdog's abort (``= -6``) is the aftermath, not a second cause.
    path = tmp_path / "ticket.log"
    timeout = (
        "[rank{r}]:[E1128 02:30:00.2 ProcessGroupNCCL.cpp:1595] [PG 0 Rank {r}] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=9001, OpType=ALLREDUCE, NumelIn=1, "
        "NumelOut=1, Timeout(ms)=1800000) ran for 1800010 milliseconds before timing out.\n"
    )
    path.write_text(
        "[2026-11-28 02:00:00,111] [INFO] [launch.py:351:main] Process 4405 exits successfully.\n"
        + "".join(timeout.format(r=r) for r in range(3))
        + "[2026-11-28 02:30:01,001] [ERROR] [launch.py:325:sigkill_handler] ['/usr/bin/python', "
        "'-u', 'train.py', '--local_rank=0'] exits with return code = -6\n"
    )
    verdict = analyze([str(path)]).diagnosis.verdict
    assert (verdict.kind, verdict.culprit_ranks, verdict.culprit_pids) == (
        "missing-collective",
        (),
        (4405,),
    )
