"""Verdicts on one-sided excerpts as tickets paste them: one tool's report, one launcher's
summary, one rank's traceback. Each names the culprit the excerpt itself names.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from logsleuth.api import analyze
from logsleuth.model.diagnosis import Finding, Verdict
from tests.torchrun_text import NO_OTHER_FAILURES, failure_entry, failure_summary


def _verdict(tmp_path: Path, text: str) -> Verdict:
    return _lead(tmp_path, text)[0]


def _named(tmp_path: Path, text: str) -> tuple[str, tuple[str, ...], tuple[int, ...]]:
    """The verdict's kind and the hosts and pids it names."""
    verdict = _verdict(tmp_path, text)
    return verdict.kind, verdict.culprit_hosts, verdict.culprit_pids


def _lead(tmp_path: Path, text: str) -> tuple[Verdict, Finding]:
    """The verdict and the finding it comes from (with the other files in ``tmp_path``)."""
    (tmp_path / "ticket.log").write_text(text, encoding="utf-8")
    diagnosis = analyze([str(tmp_path)]).diagnosis
    lead = diagnosis.findings[0]
    assert lead.code == diagnosis.verdict.code
    return diagnosis.verdict, lead


FR_TRACE = """\
$ python -m torch.distributed.flight_recorder.fr_trace -j /tmp/fr_dumps/
Not all ranks joining collective, sequence number: 14
group info: 0:default_pg
collective: nccl:all_reduce
missing ranks: {missing}
input sizes: [[4096, 4096]]
output sizes: [[4096, 4096]]
expected ranks: 8
collective state: scheduled
"""


@pytest.mark.parametrize(("missing", "ranks"), [("{3}", (3,)), ("{2, 7}", (2, 7))])
def test_the_flight_recorder_report_names_the_missing_ranks(
    tmp_path: Path, missing: str, ranks: tuple[int, ...]
) -> None:
    # fr_trace reports its findings at INFO: an analyzer's level says nothing about the job.
    verdict = _verdict(tmp_path, FR_TRACE.format(missing=missing))
    assert (verdict.kind, verdict.culprit_ranks) == ("missing-collective", ranks)


def test_mpirun_names_the_node_of_the_rank_it_saw_killed(tmp_path: Path) -> None:
    text = (
        "[1,0]<stdout>:Epoch 3 step 1200 loss 2.113\n"
        "mpirun noticed that process rank 3 with PID 0 on node gpu-2 exited on signal 9 "
        "(Killed).\n"
    )
    verdict = _verdict(tmp_path, text)
    assert (verdict.kind, verdict.culprit_ranks, verdict.culprit_hosts) == (
        "process-died",
        (3,),
        ("gpu-2",),
    )


SUMMARY = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
======================================================
train.py FAILED
------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2024-08-14_22:01:09
  host      : node-a3
  rank      : 6 (local_rank: 6)
  exitcode  : {code} (pid: 812)
  error_file: <N/A>
  traceback : Signal {number} ({name}) received by PID 812
======================================================
"""


@pytest.mark.parametrize(("number", "name"), [(11, "SIGSEGV"), (7, "SIGBUS")])
def test_a_rank_that_crashed_on_a_signal_of_its_own_is_the_cause(
    tmp_path: Path, number: int, name: str
) -> None:
    verdict, lead = _lead(tmp_path, SUMMARY.format(code=-number, number=number, name=name))
    assert (verdict.kind, verdict.code, verdict.culprit_ranks) == ("process-died", "LS204", (6,))
    assert (verdict.culprit_hosts, verdict.culprit_pids) == (("node-a3",), (812,))
    assert verdict.confidence >= 0.7
    # The evidence quoted is the line that says how it ended, not the entry's '[0]:' head.
    assert f"Signal {number} ({name})" in lead.evidence[0].text
    assert "PYTHONFAULTHANDLER" in lead.next_steps[0]


def test_a_kill_from_outside_stays_a_weak_verdict(tmp_path: Path) -> None:
    verdict = _verdict(tmp_path, SUMMARY.format(code=-9, number=9, name="SIGKILL"))
    assert (verdict.kind, verdict.culprit_ranks) == ("process-died", (6,))
    assert verdict.confidence < 0.5


def test_a_rendezvous_timeout_raised_without_a_message_is_a_bootstrap_failure(
    tmp_path: Path,
) -> None:
    text = """\
[I1201 10:00:00.001000 2211 torch/distributed/elastic/agent/server/api.py:662] [default] Rendezvous'ing worker group
Traceback (most recent call last):
  File "/usr/local/lib/python3.11/site-packages/torch/distributed/elastic/rendezvous/dynamic_rendezvous.py", line 654, in run
    raise RendezvousTimeoutError
torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError
"""
    verdict, lead = _lead(tmp_path, text)
    assert verdict.kind == "bootstrap-failure"
    assert "(elastic.rendezvous-timeout;" in lead.detail


@pytest.mark.parametrize(
    ("line", "entry"),
    [
        (
            "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:799] connect "
            "[127.0.1.1]:19325: Connection refused",
            "gloo.loopback-peer",
        ),
        (
            "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:799] connect "
            "[10.0.0.3]:19325: Connection refused",
            "gloo.connect",
        ),
    ],
    ids=["loopback", "routable"],
)
def test_a_gloo_connect_failure_at_init_is_a_bootstrap_failure(
    tmp_path: Path, line: str, entry: str
) -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "ddp.py", line 30, in <module>\n'
        '    dist.init_process_group("gloo", rank=rank, world_size=2)\n'
        f"{line}\n"
    )
    verdict, lead = _lead(tmp_path, text)
    assert verdict.kind == "bootstrap-failure"
    assert f"({entry};" in lead.detail


def test_a_traceback_no_prefix_places_is_still_the_failure_shown(tmp_path: Path) -> None:
    # One process's traceback pasted without a launcher's [rankN]: tag: the exception is the
    # failure the excerpt shows, even though no rank can be named.
    text = """\
[2025-01-10 10:00:00] Scheduler hit an exception: Traceback (most recent call last):
  File "/srv/app/scheduler.py", line 1745, in run_scheduler_process
    scheduler.event_loop()
  File "/srv/app/model_runner.py", line 700, in forward
    return self.forward_decode(batch)
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB.
"""
    verdict, lead = _lead(tmp_path, text)
    assert (verdict.kind, verdict.code, verdict.culprit_ranks) == ("process-died", "LS204", ())
    assert "torch.OutOfMemoryError" in verdict.summary
    assert lead.evidence[0].line == 1


def test_a_traceback_of_a_lost_peer_is_no_failure_of_its_own(tmp_path: Path) -> None:
    text = """\
Traceback (most recent call last):
  File "train.py", line 80, in <module>
    dist.all_reduce(t)
RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.0.2]:51234
"""
    verdict = _verdict(tmp_path, text)
    assert verdict.code != "LS204"


def _summary(rank: int, local: int, others: str = NO_OTHER_FAILURES) -> str:
    """torchrun's report with rank ``rank`` (local rank ``local``) as its root cause."""
    return failure_summary(_entry(0, rank, local), others)


_TIMEOUT = (
    "[rank{rank}]:[E1124 04:10:55.771102 ProcessGroupNCCL.cpp:616] [Rank {rank}] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=40022, OpType=ALLREDUCE, NumelIn=65536, "
    "NumelOut=65536, Timeout(ms)=1800000) ran for 1800044 milliseconds before timing out.\n"
)


def test_ranks_another_torchrun_agent_ran_are_not_read_as_exited(tmp_path: Path) -> None:
    # One node's torchrun (rank 11 is its local rank 3) knows nothing of ranks 0-7: only
    # its own workers 8-10, which it does not list, may have ended before.
    text = _TIMEOUT.format(rank=11) + _summary(11, 3)
    verdict = _verdict(tmp_path, text)
    assert (verdict.kind, verdict.culprit_ranks) == ("missing-collective", (8, 9, 10))


def test_a_worker_torchrun_sent_a_closing_signal_was_still_running(tmp_path: Path) -> None:
    text = (
        _TIMEOUT.format(rank=11)
        + "W1124 04:11:20.118000 139948 torch/distributed/elastic/multiprocessing/api.py:858] "
        "Sending process 8810 closing signal SIGTERM\n" + _summary(11, 3)
    )
    (tmp_path / "manifest.json").write_text(
        json.dumps(
            {
                "schema": "logsleuth.bundle/1",
                "ranks": {str(r): {"pid": 8800 + r, "host": "node-2"} for r in range(8, 12)},
            }
        )
    )
    verdict = _verdict(tmp_path, text)
    assert verdict.culprit_ranks == (8, 9)


def _entry(index: int, rank: int, local: int | None = None) -> str:
    """A worker of node-2 (ranks 8-11) that torchrun ended with SIGABRT."""
    pid = 8812 if index == 0 else 8800 + rank
    return failure_entry(
        index,
        time="2024-11-24_04:11:20",
        host="node-2",
        rank=rank,
        local_rank=rank - 8 if local is None else local,
        exitcode=-6,
        pid=pid,
        traceback=f"Signal 6 (SIGABRT) received by PID {pid}",
    )


def test_the_one_worker_torchrun_does_not_list_among_waiting_ones_exited_early(
    tmp_path: Path,
) -> None:
    # The agent of ranks 8-11 lists 9, 10 and 11, which timed out waiting; rank 8 alone is
    # not listed: it had ended with status 0 before.
    text = "".join(_TIMEOUT.format(rank=r) for r in (9, 10, 11)) + _summary(
        11, 3, "\n".join(_entry(i, r) for i, r in ((1, 9), (2, 10)))
    )
    verdict = _verdict(tmp_path, text)
    assert (verdict.kind, verdict.culprit_ranks) == ("missing-collective", (8,))


def test_ranks_in_point_to_point_calls_are_no_divergence(tmp_path: Path) -> None:
    # Pipeline stages: one rank sends, the next receives; the rank they wait for is in I/O.
    frames = {
        0: "send (torch/distributed/distributed_c10d.py:1877)",
        1: "recv (torch/distributed/distributed_c10d.py:1931)",
        2: "write (torch/serialization.py:851)\n    save (torch/serialization.py:628)\n"
        "    save_checkpoint (megatron/training/checkpointing.py:401)",
        3: "recv (torch/distributed/distributed_c10d.py:1931)",
    }
    for rank, inner in frames.items():
        (tmp_path / f"rank{rank}.txt").write_text(
            f"Process {7100 + rank}: python pretrain_gpt.py\nPython v3.10.12 (/usr/bin/python3)\n\n"
            f'Thread {7100 + rank} (idle): "MainThread"\n    {inner}\n'
            "    train_step (megatron/training/training.py:610)\n"
            "    <module> (pretrain_gpt.py:243)\n"
        )
    verdict = analyze([str(tmp_path)]).diagnosis.verdict
    assert (verdict.kind, verdict.culprit_ranks) == ("non-collective-stall", (2,))


def test_srun_labels_are_read_among_slurms_own_lines(tmp_path: Path) -> None:
    text = (
        "9: Traceback (most recent call last):\n"
        '9:   File "/home/u/proj/train.py", line 61, in main\n'
        "9:     cfg = load_config(args.config)\n"
        "9: KeyError: 'optimizer'\n"
        "srun: error: gpu-12: task 9: Exited with exit code 1\n"
        "slurmstepd: error: *** STEP 88123.0 ON gpu-10 CANCELLED AT 2024-07-01T11:02:13 ***\n"
        "srun: error: gpu-10: tasks 0-7: Terminated\n"
    )
    verdict = _verdict(tmp_path, text)
    assert (verdict.kind, verdict.culprit_ranks) == ("process-died", (9,))


@pytest.mark.parametrize(
    "prefix",
    [
        "[2024-11-24 02:11:01,500] torch.distributed.elastic.multiprocessing.api: [ERROR] ",
        "E1124 02:11:01.500000 4100 torch/distributed/elastic/multiprocessing/api.py:869] ",
        "ERROR:torch.distributed.elastic.multiprocessing.api:",
    ],
)
def test_the_agents_failed_line_alone_is_a_death(tmp_path: Path, prefix: str) -> None:
    # torchrun's agent logs each failed worker before its summary; an excerpt may hold only
    # that line, in the logging format of torch 2.1-2.3, 2.4+ or the stdlib default.
    text = f"{prefix}failed (exitcode: -9) local_rank: 3 (pid: 4242) of binary: /usr/bin/python3\n"
    assert _verdict(tmp_path, text).kind == "process-died"


def test_a_rank_whose_faulthandler_caught_a_segfault_is_the_culprit(tmp_path: Path) -> None:
    text = (
        "[rank48]:[E1124 02:11:09.118000412 ProcessGroupGloo.cpp:144] Gloo connectFullMesh "
        "failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed "
        "by peer [10.42.3.7]:22811\n"
        "[rank27]: Fatal Python error: Segmentation fault\n"
        "[rank27]: Thread 0x00007f3a2effd640 (most recent call first):\n"
        '[rank27]:   File "/app/data.py", line 88 in collate\n'
    )
    verdict = _verdict(tmp_path, text)
    assert (verdict.kind, verdict.culprit_ranks) == ("process-died", (27,))


def test_an_aborted_rank_is_not_named_by_its_faulthandler_alone(tmp_path: Path) -> None:
    # SIGABRT is how the NCCL watchdog takes a rank down after a timeout: no crash of its own.
    text = (
        "[rank5]: Fatal Python error: Aborted\n"
        "[rank5]: Thread 0x00007f3a2effd640 (most recent call first):\n"
        '[rank5]:   File "/app/train.py", line 88 in step\n'
    )
    assert 5 not in _verdict(tmp_path, text).culprit_ranks


def test_a_host_that_initialized_the_socket_network_fell_back_from_ib(tmp_path: Path) -> None:
    # SkyPilot's prefix names the node's rank and its task's shell, not the writer.
    text = (
        "(head, rank=0, pid=2211) gpu-h:2290:2301 [7] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB "
        "[1]mlx5_1:1/IB ; OOB eth0:10.0.0.4<0>\n"
        "(worker1, rank=1, pid=2311, ip=10.0.0.5) gpu-w1:2390:2401 [7] NCCL INFO NET/IB : No "
        "device found.\n"
        "(worker1, rank=1, pid=2311, ip=10.0.0.5) gpu-w1:2390:2401 [7] NCCL INFO NET/Socket : "
        "Using [0]eth0:10.0.0.5<0>\n"
    )
    verdict = _verdict(tmp_path, text)
    assert (verdict.kind, verdict.culprit_hosts, verdict.culprit_pids) == (
        "transport-degraded",
        ("gpu-w1",),
        (2390,),
    )


def test_a_rank_tag_behind_a_collectors_labels_names_the_rank(tmp_path: Path) -> None:
    # Grafana/Loki's download: "<time> {labels} <line>".
    lines = [
        f'2024-11-24T02:11:09.1{rank}Z {{container="pytorch", pod="train-worker-{rank // 2}"}} '
        f"[rank{rank}]:[E1124 02:11:09.118000412 ProcessGroupNCCL.cpp:1576] [PG ID 0 PG GUID "
        f"0(default_pg) Rank {rank}] Exception (either an error or timeout) detected by watchdog "
        f"at work: {work}, last enqueued NCCL work: {work}, last completed NCCL work: {work - 1}.\n"
        for rank, work in ((0, 220), (1, 220), (3, 220), (2, 219))
    ]
    verdict = _verdict(tmp_path, "".join(lines))
    assert (verdict.kind, verdict.culprit_ranks) == ("missing-collective", (2,))


def test_sglangs_traceback_under_its_first_line_prefix_names_the_tp_rank(tmp_path: Path) -> None:
    # sglang prefixes only the first line of a multi-line record.
    text = (
        "[2025-02-24 14:09:30 TP0] Load weight end. type=DeepseekV3ForCausalLM\n"
        "[2025-02-24 14:09:34 TP5] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1787, in run\n'
        "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)\n"
        "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    )
    verdict = _verdict(tmp_path, text)
    assert (verdict.kind, verdict.culprit_ranks) == ("cuda-error", (5,))


def test_a_vllm_workers_out_of_memory_names_it_and_says_what_to_lower(tmp_path: Path) -> None:
    prefix = "(VllmWorker rank=1 pid=2302) ERROR 11-24 02:11:09 [multiproc_executor.py:470] "
    text = "".join(
        prefix + line + "\n"
        for line in (
            "Traceback (most recent call last):",
            '  File "/vllm/v1/worker/gpu_model_runner.py", line 1511, in _dummy_sampler_run',
            "    sampler_output = self.sampler(logits=logits)",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. GPU 1 has a "
            "total capacity of 79.19 GiB of which 1.02 GiB is free.",
        )
    )
    verdict, lead = _lead(tmp_path, text)
    assert (verdict.kind, verdict.culprit_ranks, verdict.culprit_pids) == (
        "process-died",
        (1,),
        (2302,),
    )
    assert any("expandable_segments" in step for step in lead.next_steps)


def test_a_broken_pipe_to_the_store_names_the_stores_host(tmp_path: Path) -> None:
    text = (
        "[rank13]:[W1124 02:11:09.118344412 socket.cpp:464] [c10d] sendBytes failed on "
        "SocketImpl(fd=41, addr=[gpu-node-1]:51812, remote=[gpu-node-0]:29500): Broken pipe\n"
        "[rank13]: torch.distributed.DistStoreError: Failed to recv, got 0 bytes. Connection "
        "was likely closed. Did the remote server shutdown or crash?\n"
    )
    verdict = _verdict(tmp_path, text)
    assert (verdict.kind, verdict.culprit_hosts) == ("process-died", ("gpu-node-0",))


def test_the_oom_killers_victim_is_named_by_pid(tmp_path: Path) -> None:
    text = (
        "[Sun Nov 24 02:11:08 2024] Out of memory: Killed process 5512 (python3) "
        "total-vm:182334220kB, anon-rss:160112340kB, file-rss:0kB, shmem-rss:0kB\n"
    )
    verdict = _verdict(tmp_path, text)
    assert (verdict.kind, verdict.culprit_pids) == ("resource-exhausted", (5512,))


def test_the_cgroup_oom_killers_victim_in_an_event_table_is_named(tmp_path: Path) -> None:
    text = (
        "LAST SEEN   TYPE      REASON       OBJECT                  MESSAGE\n"
        "2m          Warning   OOMKilling   node/gpu-node-7         Memory cgroup out of memory: "
        "Killed process 44121 (python3) total-vm:182334220kB, anon-rss:160112340kB\n"
    )
    verdict = _verdict(tmp_path, text)
    assert (verdict.kind, verdict.culprit_pids) == ("resource-exhausted", (44121,))


def test_sacct_saying_out_of_memory_is_the_cause(tmp_path: Path) -> None:
    text = (
        "JobID           JobName  Partition    Account  AllocCPUS      State ExitCode NodeList\n"
        "88123.0          python                mlteam        256 OUT_OF_ME+    0:125 gpu-[10-13]\n"
    )
    assert _verdict(tmp_path, text).kind == "resource-exhausted"


def test_the_traceback_a_logger_record_carries_is_the_records_ranks(tmp_path: Path) -> None:
    # logger.exception / loguru's @logger.catch: the record's line names the rank, the
    # traceback under it names nobody.
    text = (
        "2024-06-11 09:12:44.517 | INFO     | loop:run:211 - [rank 0] step 1200 loss 2.31\n"
        "2024-06-11 09:12:44.902 | ERROR    | loop:run:240 - [rank 3] An error has been caught "
        "in function 'run', process 'MainProcess' (21877), thread 'MainThread' (1402361):\n"
        "Traceback (most recent call last):\n"
        '  File "/workspace/train.py", line 51, in <module>\n'
        "    main()\n"
        "FileNotFoundError: shard s3cache/train-00412.tar missing\n"
    )
    verdict = _verdict(tmp_path, text)
    assert (verdict.kind, verdict.culprit_ranks) == ("process-died", (3,))


def test_logurus_annotated_traceback_is_one_traceback(tmp_path: Path) -> None:
    # diagnose=True: blank lines between frames, variable annotations, ">" at the frame
    # that caught the exception.
    text = (
        "2024-06-11 09:12:44.902 | ERROR    | loop:run:240 - [rank 2] An error has been caught "
        "in function 'run', process 'MainProcess' (21876), thread 'MainThread' (1402361):\n"
        "Traceback (most recent call last):\n"
        "\n"
        '  File "/workspace/train.py", line 51, in <module>\n'
        "    main()\n"
        "    \u2514 <function main at 0x7f8a2c1d3e20>\n"
        "\n"
        '> File "/workspace/trainer/loop.py", line 233, in run\n'
        "    loss = model(batch)\n"
        "           \u2502     \u2514 {'input_ids': tensor([[  101,  2023, ...\n"
        "           \u2514 DistributedDataParallel(\n"
        "\n"
        "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    )
    verdict = _verdict(tmp_path, text)
    assert (verdict.kind, verdict.culprit_ranks) == ("cuda-error", (2,))


def test_a_per_process_files_name_gives_its_traceback_a_rank(tmp_path: Path) -> None:
    # Azure ML writes each process's output to user_logs/std_log_process_NN.txt.
    logs = tmp_path / "user_logs"
    logs.mkdir()
    for rank in (0, 1, 3):
        (logs / f"std_log_process_0{rank}.txt").write_text(
            f"[E ProcessGroupNCCL.cpp:475] [Rank {rank}] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=40211, OpType=ALLREDUCE, NumelIn=16, NumelOut=16, "
            "Timeout(ms)=1800000) ran for 1800321 milliseconds before timing out.\n"
        )
    (logs / "std_log_process_02.txt").write_text(
        "Traceback (most recent call last):\n"
        '  File "train.py", line 266, in main\n'
        "    loss = model(**batch).loss\n"
        "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    )
    verdict = analyze([str(tmp_path)]).diagnosis.verdict
    assert (verdict.kind, verdict.culprit_ranks) == ("cuda-error", (2,))


_BARE_TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "train.py", line 266, in main\n'
    "RuntimeError: CUDA error: an illegal memory access was encountered\n"
)
"""A traceback no prefix places."""


def test_a_file_named_for_a_rank_that_holds_other_ranks_lines_names_nobody(
    tmp_path: Path,
) -> None:
    (tmp_path / "rank0.log").write_text(_TIMEOUT.format(rank=1) + _BARE_TRACEBACK)
    verdict = analyze([str(tmp_path)]).diagnosis.verdict
    assert verdict.kind == "cuda-error"
    assert 0 not in verdict.culprit_ranks


@pytest.mark.parametrize(
    "status",
    [
        "    lastState:\n      terminated:\n        exitCode: 137\n        reason: OOMKilled\n",
        '{"lastState": {"terminated": {\n  "exitCode": 137,\n  "reason": "OOMKilled",\n'
        '  "startedAt": "2024-04-17T05:58:10Z"\n}}}\n',
        'time="2024-09-02T10:14:33Z" level=warning msg="Pod llama-ft-worker-2 container pytorch '
        'terminated: reason=OOMKilled exitCode=137" job=training/llama-ft\n',
    ],
    ids=["yaml", "json", "operator-logfmt"],
)
def test_a_pods_status_saying_oomkilled_is_the_cause(tmp_path: Path, status: str) -> None:
    assert _verdict(tmp_path, status).kind == "resource-exhausted"


def test_a_rank_still_in_work_the_others_completed_is_where_waiting_ends(
    tmp_path: Path,
) -> None:
    # Ranks 0, 1 and 3 completed BROADCAST 5511 and wait in 5512; only rank 2's watchdog
    # quotes a timeout, of 5511: rank 2 never reached 5512.
    head = "[rank{r}]:[E1201 04:10:31.22 ProcessGroupNCCL.cpp:1616] [PG ID 0 PG GUID 0(default_pg) Rank {r}] "
    progress = (
        "Exception (either an error or timeout) detected by watchdog at work: {e}, last "
        "enqueued NCCL work: {e}, last completed NCCL work: {c}.\n"
    )
    text = "".join((head + progress).format(r=r, e=5512, c=5511) for r in (1, 3, 0))
    text += (head + progress).format(r=2, e=5511, c=5510)
    text += (
        "[rank2]:[E1201 04:10:31.225 ProcessGroupNCCL.cpp:630] [Rank 2] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=5511, OpType=BROADCAST, NumelIn=4096, "
        "NumelOut=4096, Timeout(ms)=600000) ran for 600088 milliseconds before timing out.\n"
    )
    verdict = _verdict(tmp_path, text)
    assert (verdict.kind, verdict.culprit_ranks) == ("missing-collective", (2,))


def test_a_bare_traceback_after_a_launcher_tagged_line_is_not_that_ranks(
    tmp_path: Path,
) -> None:
    # torch's excepthook tags every line rank 1 writes: a bare traceback is someone else's.
    verdict = _verdict(tmp_path, _TIMEOUT.format(rank=1) + _BARE_TRACEBACK)
    assert verdict.kind == "cuda-error"
    assert 1 not in verdict.culprit_ranks


RICH = """\
\u256d\u2500\u2500\u2500\u2500 Traceback (most recent call last) \u2500\u2500\u2500\u2500\u256e
\u2502 /workspace/train.py:88 in <module>                                \u2502
\u2502                                                                   \u2502
\u2502   87 \u2502   dm = TokenDataModule(cfg)                                \u2502
\u2502 \u2771 88 \u2502   trainer.fit(model, dm)                                   \u2502
\u2502                                                                   \u2502
\u2502 /usr/local/lib/python3.11/site-packages/torch/utils/checkpoint.py:251 in \u2502
\u2502 forward                                                           \u2502
\u2502                                                                   \u2502
\u2502 \u2771 251 \u2502   \u2502   \u2502   outputs = run_function(*args)                 \u2502
\u2570\u2500\u2500\u2500\u2500\u2500\u2500\u2500\u2500\u2500\u2500\u2500\u2500\u2500\u2500\u2500\u2500\u2500\u2500\u2500\u256f
OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.
"""


def test_richs_boxed_traceback_reads_as_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "ticket.log").write_text(RICH, encoding="utf-8")
    result = analyze([str(tmp_path)])
    verdict = result.diagnosis.verdict
    assert verdict.kind == "process-died"
    assert "at forward (/usr/local/lib/python3.11/site-packages/torch/utils/checkpoint.py:251)" in (
        verdict.summary
    )
    assert result.diagnosis.inputs[0].unrecognized == 0


_UNDESTROYED = (
    "[rank{rank}]:[W1104 11:20:05.201 ProcessGroupNCCL.cpp:1250] Warning: WARNING: process "
    "group has NOT been destroyed before we destruct ProcessGroupNCCL.\n"
)
"""A line that shows the rank is in the evidence, and says nothing of its fate."""


def test_an_unplaced_death_is_the_one_rank_not_waiting(tmp_path: Path) -> None:
    # Ranks 0, 2 and 3 time out; rank 1 is in the evidence and does not: the traceback
    # no prefix places is rank 1's.
    timeouts = "".join(_TIMEOUT.format(rank=r) for r in (0, 2, 3))
    (tmp_path / "ticket.log").write_text(_UNDESTROYED.format(rank=1) + RICH + timeouts)
    verdict = analyze([str(tmp_path)]).diagnosis.verdict
    assert (verdict.kind, verdict.culprit_ranks) == ("process-died", (1,))


def test_an_unplaced_death_with_two_ranks_not_waiting_names_neither(tmp_path: Path) -> None:
    lines = "".join(_UNDESTROYED.format(rank=r) for r in (1, 4)) + RICH
    lines += "".join(_TIMEOUT.format(rank=r) for r in (0, 2))
    (tmp_path / "ticket.log").write_text(lines)
    verdict = analyze([str(tmp_path)]).diagnosis.verdict
    assert verdict.kind == "process-died"
    assert verdict.culprit_ranks == ()


_DEEPSPEED = """\
worker-1: [2024-05-02 10:02:14,610] [INFO] [launch.py:162:main] global_rank_mapping=defaultdict(<class 'list'>, {'worker-0': [0, 1, 2, 3], 'worker-1': [4, 5, 6, 7]})
worker-0: [2024-05-02 10:20:44,001] [INFO] [logging.py:96:log_dist] [Rank 0] step=200, skipped=0, lr=[2.9e-05], mom=[(0.9, 0.95)]
worker-1: [2024-05-02 10:27:10,775] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 33471
worker-1: [2024-05-02 10:27:10,778] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python3', '-u', 'train.py', '--local_rank=2', '--deepspeed', 'ds_config.json'] exits with return code = -9
worker-0: [rank1]:[E502 10:57:11.404418 33402 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4822, OpType=ALLREDUCE, NumelIn=262144, NumelOut=262144, Timeout(ms)=1800000) ran for 1800096 milliseconds before timing out.
worker-0: [rank3]:[E502 10:57:11.404911 33404 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4822, OpType=ALLREDUCE, NumelIn=262144, NumelOut=262144, Timeout(ms)=1800000) ran for 1800097 milliseconds before timing out.
"""
"""DeepSpeed's multi-node launcher (pdsh prefixes each line with its host): a worker of
worker-1 is SIGKILLed, the ranks of worker-0 time out half an hour later."""


def test_deepspeeds_launcher_names_the_worker_it_saw_die(tmp_path: Path) -> None:
    verdict = _verdict(tmp_path, _DEEPSPEED)
    assert verdict.kind == "process-died"
    # Local rank 2 of worker-1, placed as global rank 6 by the launcher's mapping.
    assert (verdict.culprit_ranks, verdict.culprit_hosts) == ((6,), ("worker-1",))


def test_without_the_mapping_the_dead_worker_is_named_by_its_host(tmp_path: Path) -> None:
    killing = _DEEPSPEED.splitlines(keepends=True)[2]
    verdict = _verdict(tmp_path, killing + _DEEPSPEED.split("\n", 1)[1])
    assert verdict.kind == "process-died"
    assert (verdict.culprit_ranks, verdict.culprit_hosts) == ((), ("worker-1",))


def test_a_host_label_over_several_ranks_lines_is_not_one_rank(tmp_path: Path) -> None:
    # pdsh names the host, not the process: worker-0's lines are ranks 0, 1 and 3.
    (tmp_path / "ticket.log").write_text(_DEEPSPEED, encoding="utf-8")
    diagnosis = analyze([str(tmp_path)]).diagnosis
    (row,) = [f for f in diagnosis.timeline if f.kind == "watchdog timeout"]
    assert (row.ranks, row.hosts) == ("1,3", ("worker-0",))


_RAY_OOM = """\
(TorchTrainer pid=31552) Started distributed worker processes:
(TorchTrainer pid=31552) - (node_id=8c4f, ip=10.0.1.5, pid=31660) world_rank=0, local_rank=0, node_rank=0
(TorchTrainer pid=31552) - (node_id=8c4f, ip=10.0.1.5, pid=31661) world_rank=1, local_rank=1, node_rank=0
(TorchTrainer pid=31552) - (node_id=1a2b, ip=10.0.1.7, pid=9921) world_rank=2, local_rank=0, node_rank=1
(TorchTrainer pid=31552) - (node_id=1a2b, ip=10.0.1.7, pid=9922) world_rank=3, local_rank=1, node_rank=1
(raylet, ip=10.0.1.7) [2024-11-23 16:04:51,332 E 9801 9801] (raylet) node_manager.cc:3065: 1 Workers (tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: 1a2b3c4d5e6f, IP: 10.0.1.7) over the last time period.
(RayTrainWorker pid=31660) [rank0]:[E1123 16:34:52.118222 31702 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7712, OpType=ALLREDUCE, NumelIn=65536, NumelOut=65536, Timeout(ms)=1800000) ran for 1800071 milliseconds before timing out.
"""


def test_rays_memory_monitor_names_the_node_it_killed_workers_on(tmp_path: Path) -> None:
    verdict = _verdict(tmp_path, _RAY_OOM)
    assert (verdict.kind, verdict.culprit_hosts) == ("resource-exhausted", ("10.0.1.7",))


def test_ray_trains_worker_table_places_each_rank(tmp_path: Path) -> None:
    (tmp_path / "ticket.log").write_text(_RAY_OOM, encoding="utf-8")
    diagnosis = analyze([str(tmp_path)]).diagnosis
    assert diagnosis.job.world_size == 4
    (row,) = [f for f in diagnosis.timeline if f.kind == "watchdog timeout"]
    assert (row.ranks, row.hosts) == ("0", ("10.0.1.5",))


def test_an_nccl_error_flattened_onto_one_line_keeps_its_last_error(tmp_path: Path) -> None:
    # The continuation lines of torch's NCCL error (its result, `Last error:`) joined to
    # the first by a paste or a collector: NCCL's own message is still the cause.
    text = (
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
        "ProcessGroupNCCL.cpp:1970, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL "
        "version 2.19.3 ncclInvalidUsage: This usually reflects invalid usage of NCCL library. "
        "Last error: Duplicate GPU detected : rank 3 and rank 11 both on CUDA device 1a000\n"
    )
    verdict = _verdict(tmp_path, text)
    assert (verdict.kind, verdict.culprit_ranks) == ("duplicate-gpu", (3, 11))


def test_a_record_cut_at_a_width_keeps_the_last_error_of_its_continuation(
    tmp_path: Path,
) -> None:
    # Each line cut at 120 columns: the watchdog's record lost its words, the NCCL message
    # on its `Last error:` continuation did not; the next c10 record (a month printed
    # without its zero, `E207`) is no piece of the one before.
    lines = [
        "[rank5]:[E207 19:37:09.983540349 ProcessGroupNCCL.cpp:681] [Rank 5] Some NCCL "
        "operations have failed or timed out. Due to the asynchronous nature of CUDA kernels",
        "[rank5]:[E207 19:37:09.983555114 ProcessGroupNCCL.cpp:695] [Rank 5] To avoid data "
        "inconsistency, we are taking the entire process down.",
        "[rank5]:[E207 19:37:09.983600771 ProcessGroupNCCL.cpp:1895] [PG ID 0 PG GUID "
        "0(default_pg) Rank 5] Process group watchdog thread terminated with exception: NCCL "
        "error: remote process exited or there was a network error, NCCL version 2.21.5",
        "ncclRemoteError: A call failed possibly due to a network error or a remote process "
        "exiting prematurely.",
        "Last error:",
        "socketProgressOpt: Call to recv from 10.119.24.53<49901> failed : Broken pipe",
    ]
    verdict = _verdict(tmp_path, "".join(line[:120] + "\n" for line in lines))
    assert (verdict.kind, verdict.culprit_hosts) == ("process-died", ("10.119.24.53",))


def test_a_slurm_step_cancelled_by_a_node_failure_is_a_death_of_an_unnamed_node(
    tmp_path: Path,
) -> None:
    # The node slurmstepd names runs the step and survived: it is not the lost node.
    text = (
        "slurmstepd: error: *** STEP 771231.0 ON gpu-node-44 CANCELLED AT 2024-05-03T10:01:44 "
        "DUE TO NODE FAILURE ***\n"
    )
    verdict = _verdict(tmp_path, text)
    assert (verdict.kind, verdict.culprit_hosts) == ("process-died", ())


def test_coll_lines_cut_before_their_size_are_still_compared(tmp_path: Path) -> None:
    # COLL lines cut before `[nranks=2]`, no init lines: the communicators of an unknown
    # size are compared as those of one size are.
    def calls(name: str, comms: list[str], counts: list[int]) -> str:
        rows = [
            f"AllReduce: opCount 0 sendbuff 0x7f27f7250200 recvbuff 0x7f27f7250000 count {n} "
            f"datatype 7 op 0 root 0 comm {comm}"
            for comm, n in zip(comms, counts, strict=True)
        ]
        return f"{name}:\n" + "\n".join(rows) + "\n"

    text = calls("Rank A", ["0x7f27b400be70", "0x7f27ac009280"], [3, 2]) + calls(
        "Rank B", ["0x7f5ed4009280", "0x7f5ed00092b0"], [2, 3]
    )
    assert _verdict(tmp_path, text).kind == "collective-mismatch"


def test_a_failure_summary_flattened_onto_one_line_names_its_worker(tmp_path: Path) -> None:
    # torchrun's summary pasted without its line breaks (a chat, an issue title).
    text = (
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: train.py FAILED "
        "Failures: <NO_OTHER_FAILURES> Root Cause (first observed failure): [0]: time : "
        "2024-03-01_10:00:00 host : node-3 rank : 5 (local_rank: 1) exitcode : -11 (pid: 5512) "
        "error_file: <N/A> traceback : Signal 11 (SIGSEGV) received by PID 5512\n"
    )
    verdict = _verdict(tmp_path, text)
    assert (verdict.kind, verdict.culprit_ranks, verdict.culprit_hosts, verdict.culprit_pids) == (
        "process-died",
        (5,),
        ("node-3",),
        (5512,),
    )


def test_cudas_own_error_string_quoted_by_any_framework_is_a_cuda_error(tmp_path: Path) -> None:
    text = "RuntimeError: Triton Error [CUDA]: an illegal memory access was encountered\n"
    assert _verdict(tmp_path, text).kind == "cuda-error"


def test_vllms_broadcast_wait_is_a_stall_whose_cause_is_elsewhere(tmp_path: Path) -> None:
    text = (
        "(VllmWorker rank=2 pid=1441) WARNING 03-12 10:11:12 [shm_broadcast.py:396] No available "
        "shared memory broadcast block found in 60 second. This typically happens when some "
        "processes are hanging or doing some time-consuming work (e.g. compilation).\n"
    )
    verdict, lead = _lead(tmp_path, text)
    assert (verdict.kind, verdict.culprit_ranks) == ("inconclusive", ())
    assert "hanging" in lead.detail


def test_rccls_hip_failures_and_iommu_warning_name_their_host(tmp_path: Path) -> None:
    # RCCL (ROCm) prints HIP where NCCL prints CUDA, and warns at init about the IOMMU.
    hip = "mi250-node3:51234:51300 [2] transport/p2p.cc:262 NCCL WARN HIP failure 'invalid device ordinal'\n"
    verdict = _verdict(tmp_path, hip)
    assert (verdict.kind, verdict.culprit_hosts) == ("cuda-error", ("mi250-node3",))
    iommu = (
        'mi250-node3:51234:51234 [0] init.cc:190 NCCL WARN Missing "iommu=pt" from kernel '
        "command line which can lead to system instablity or hang!\n"
    )
    verdict = _verdict(tmp_path, iommu)
    assert (verdict.kind, verdict.culprit_hosts) == ("transport-degraded", ("mi250-node3",))


def test_a_container_the_nvidia_toolkit_could_not_start_names_the_mismatch(
    tmp_path: Path,
) -> None:
    text = (
        "Error: failed to create containerd task: failed to create shim task: OCI runtime create "
        "failed: runc create failed: unable to start container process: error during container "
        "init: error running hook #0: error running hook: exit status 1, stdout: , stderr: "
        "Auto-detected mode as 'legacy' nvidia-container-cli: initialization error: nvml error: "
        "driver/library version mismatch: unknown\n"
    )
    assert _verdict(tmp_path, text).kind == "config-mismatch"


@pytest.mark.parametrize(
    ("text", "pid"),
    [
        ("Killed\n", None),
        ("/bin/bash: line 1: 12345 Killed                  python train.py\n", 12345),
        ("Bus error (core dumped)\n", None),
        ("ERROR: Unexpected segmentation fault encountered in worker.\n", None),
    ],
)
def test_what_a_shell_says_of_a_killed_or_crashed_child_is_a_death(
    tmp_path: Path, text: str, pid: int | None
) -> None:
    verdict = _verdict(tmp_path, text)
    assert verdict.kind == "process-died"
    assert verdict.culprit_pids == ((pid,) if pid is not None else ())


def test_a_process_the_kernel_saw_blocked_in_io_is_the_stall(tmp_path: Path) -> None:
    # A host's kernel log (its name names the host): a rank stuck in D state on NFS.
    (tmp_path / "gpu-node-7-dmesg.txt").write_text(
        "[Tue Mar  5 03:12:02 2024] nfs: server nfs01 not responding, still trying\n"
        "[Tue Mar  5 03:14:22 2024] INFO: task python:12345 blocked for more than 120 seconds.\n"
    )
    verdict = analyze([str(tmp_path)]).diagnosis.verdict
    assert (verdict.kind, verdict.culprit_hosts, verdict.culprit_pids) == (
        "non-collective-stall",
        ("gpu-node-7",),
        (12345,),
    )


def test_a_gloo_read_error_names_the_peer_it_lost(tmp_path: Path) -> None:
    text = (
        "RuntimeError: [/opt/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] Read error "
        "[10.0.0.5]:38476: Connection reset by peer\n"
    )
    verdict = _verdict(tmp_path, text)
    assert (verdict.kind, verdict.culprit_hosts) == ("process-died", ("10.0.0.5",))


def test_a_crash_ucx_caught_names_the_process_of_its_tag(tmp_path: Path) -> None:
    # UCX's error handler (Open MPI, Horovod, UCC) tags its report with host, pid and thread.
    text = (
        "[node-4:54321:0:54321] Caught signal 11 (Segmentation fault: address not mapped to "
        "object at address 0x8)\n"
        "==== backtrace (tid:  54321) ====\n"
        " 0  /usr/lib/libucs.so.0(ucs_handle_error+0x2dc) [0x7f1c2a0b1f8c]\n"
        " 1  /usr/lib/libucs.so.0(+0x2a2c1) [0x7f1c2a0b22c1]\n"
        "=================================\n"
    )
    assert _named(tmp_path, text) == ("process-died", ("node-4",), (54321,))
    (source,) = analyze([str(tmp_path)]).diagnosis.inputs
    assert source.unrecognized == 0


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        # XLA wraps NCCL's result in its own words; the result says what failed.
        (
            "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: external/xla/xla/service/gpu/"
            "nccl_utils.cc:297: NCCL operation ncclCommInitRank(&comm, nranks, id, rank) failed: "
            "unhandled cuda error (run with NCCL_DEBUG=INFO for details)\n",
            "cuda-error",
        ),
        (
            "E0101 00:00:00.000000  1234 pjrt_stream_executor_client.cc:2985] Execution of "
            "replica 0 failed: INTERNAL: NCCL operation ncclAllReduce(send_buffer, recv_buffer, "
            "element_count, dtype, reduce_op, comm, gpu_stream) failed: remote process exited or "
            "there was a network error\n",
            "process-died",
        ),
        # A process that sees no GPU at all.
        ("RuntimeError: No CUDA GPUs are available\n", "cuda-error"),
        # CUDA's own error names, as XLA's stream executor quotes them.
        (
            "2024-04-12 10:11:12.123456: E external/xla/xla/stream_executor/cuda/"
            "cuda_driver.cc:1153] failed to alloc 81604378624 bytes on host: "
            "CUDA_ERROR_OUT_OF_MEMORY: out of memory\n",
            "cuda-error",
        ),
        # XLA's allocator out of GPU memory is the rank's death, as torch's is.
        (
            "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while "
            "trying to allocate 12884901888 bytes.\n",
            "process-died",
        ),
        # NCCL's result string alone, the framework's words before it cut off.
        ("orch/lib/c10d/ProcessGroupNCCL.cpp:272, unhanled system error\n", "bootstrap-failure"),
        # DDP's reducer raising on this rank (reentrant checkpointing, shared parameters).
        (
            "RuntimeError: Expected to mark a variable ready only once. This error is caused by "
            "one of the following reasons: 1) Use of a module parameter outside the `forward` "
            "function.\n",
            "process-died",
        ),
        # A full disk (or /dev/shm) and the file descriptor limit are the host's resources.
        ("OSError: [Errno 28] No space left on device\n", "resource-exhausted"),
        (
            "RuntimeError: unable to write to file </torch_1234_567890_0>: No space left on "
            "device (28)\n",
            "resource-exhausted",
        ),
        ("OSError: [Errno 24] Too many open files\n", "resource-exhausted"),
        # A process started without the launcher that sets the rendezvous' variables.
        (
            "ValueError: Error initializing torch.distributed using env:// rendezvous: "
            "environment variable MASTER_ADDR expected, but not set\n",
            "bootstrap-failure",
        ),
        # mp.spawn's parent joining a worker that failed.
        ("Exception: process 3 terminated with exit code 1\n", "process-died"),
        # A host's driver older than the CUDA runtime the program was built with.
        (
            "[rank4]: RuntimeError: CUDA driver version is insufficient for CUDA runtime version\n",
            "config-mismatch",
        ),
        # torchrun stopped from outside (a scheduler's time limit, preemption, a cancel).
        (
            "[2024-03-03 19:22:41,011] torch.distributed.elastic.agent.server.api: [WARNING] "
            "Received Signals.SIGTERM death signal, shutting down workers\n",
            "process-died",
        ),
        (
            "torch.distributed.elastic.multiprocessing.api.SignalException: Process 5510 got "
            "signal: 15\n",
            "process-died",
        ),
        # PyTorch 1.x's NCCL check: "NCCL Error <code>: <result string>".
        ("RuntimeError: NCCL Error 2: unhandled system error\n", "bootstrap-failure"),
        # XLA's older rendezvous warning (nccl_utils.cc): a local device never arrived.
        (
            "2024-05-23 16:12:41.223145: E external/xla/xla/service/gpu/nccl_utils.cc:297] This "
            "thread has been waiting for 10000ms for and may be stuck: participant "
            "AllReduceParticipantData{rank=6, element_count=1048576, type=F32} waiting for all "
            "participants to arrive at rendezvous RendezvousKey{run_id=RunId: 1234, op_id=42}\n",
            "collective-timeout",
        ),
    ],
)
def test_a_message_of_a_framework_or_the_os_says_its_kind(
    tmp_path: Path, text: str, kind: str
) -> None:
    assert _verdict(tmp_path, text).kind == kind


def test_rays_memory_monitor_names_the_node_and_the_worker_it_killed(tmp_path: Path) -> None:
    text = (
        "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\n"
        "Memory on the node (IP: 10.0.1.17, ID: 6f1a) where the task (actor ID: 1f2e, "
        "name=RayTrainWorker.__init__, pid=22071, memory used=61.3GB) was running was 118.8GB / "
        "125.6GB (0.945894), which exceeds the memory usage threshold of 0.95.\n"
    )
    assert _named(tmp_path, text) == ("resource-exhausted", ("10.0.1.17",), (22071,))


def test_a_rank_that_left_the_program_while_another_waits_is_where_waiting_ends(
    tmp_path: Path,
) -> None:
    # PyTorch >= 2.4 warns in the process group's destructor as a process leaves; rank 0
    # left before rank 3's barrier timed out, so rank 3 waited for it.
    left = (
        "[rank0]:[W1105 08:14:55.271901 ProcessGroupNCCL.cpp:1493] Warning: WARNING: process "
        "group has NOT been destroyed before we destruct ProcessGroupNCCL. On normal program "
        "exit, the application should call destroy_process_group to ensure that any pending "
        "NCCL operations have finished in this process. (function operator())\n"
    )
    timeout = (
        "[rank3]:[E1105 08:24:55.318112 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=12, OpType=BARRIER, NumelIn=1, "
        "NumelOut=1, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.\n"
    )
    verdict, lead = _lead(tmp_path, left + timeout)
    assert (verdict.kind, verdict.culprit_ranks) == ("missing-collective", (0,))
    assert {e.line for e in lead.evidence} == {1, 2}
    # Leaving after the timeout was reported may be that failure's own end: no culprit.
    later = left.replace("08:14:55", "08:34:55")
    verdict = _verdict(tmp_path, later + timeout)
    assert verdict.culprit_ranks == ()


def test_the_old_nccl_error_format_reads_as_nccls_result(tmp_path: Path) -> None:
    lead = _lead(tmp_path, "RuntimeError: NCCL Error 6: invalid usage\n")[1]
    assert "invalid usage or argument" in lead.detail


def test_one_ranks_own_timeout_at_nccl_work_is_a_timeout_not_silence(tmp_path: Path) -> None:
    # torch >= 2.3 says "Timeout at NCCL work: S" when its watchdog fires; quoted inside a
    # sentence of the ticket, it is still that rank's timeout (no rank named as culprit).
    text = (
        "No error for 30 minutes, then rank 118 prints: [rank118]:[E ProcessGroupNCCL.cpp:1484] "
        "[PG 0 Rank 118] Timeout at NCCL work: 48211, last enqueued NCCL work: 48211, last "
        "completed NCCL work: 48210.\n"
    )
    verdict = _verdict(tmp_path, text)
    assert (verdict.kind, verdict.culprit_ranks) == ("missing-collective", ())
    assert "rank 118 timed out" in verdict.summary


@pytest.mark.parametrize("code", [31, 79, 95])
def test_an_xid_names_the_process_on_the_gpu(tmp_path: Path, code: int) -> None:
    text = (
        f"Nov 12 03:14:22 gpu-node-21 kernel: NVRM: Xid (PCI:0000:18:00): {code}, pid=221345, "
        "name=python3, Uncontained: FBHUB.\n"
    )
    assert _named(tmp_path, text) == ("cuda-error", ("gpu-node-21",), (221345,))


@pytest.mark.parametrize(
    ("status", "kind"), [("Evicted", "resource-exhausted"), ("Error", "process-died")]
)
def test_the_pod_table_names_the_pod_that_ended(tmp_path: Path, status: str, kind: str) -> None:
    # kubectl get pods: the pod that is not Running stands for the host of its ranks.
    text = (
        "NAME                 READY   STATUS    RESTARTS   AGE\n"
        "llama-worker-0       1/1     Running   0          3h12m\n"
        f"llama-worker-1       0/1     {status:<9} 0          3h12m\n"
        "llama-worker-2       1/1     Running   0          3h12m\n"
    )
    assert _named(tmp_path, text) == (kind, ("llama-worker-1",), ())


@pytest.mark.parametrize(
    ("text", "ranks", "raised"),
    [
        (
            "[rank2]: FileNotFoundError: [Errno 2] No such file or directory: "
            "'/data/shard_0031.bin'\n",
            (2,),
            "FileNotFoundError",
        ),
        ("[rank0]: KeyError: 'model.layers.0.self_attn.q_proj.weight'\n", (0,), "KeyError"),
        ("ModuleNotFoundError: No module named 'flash_attn'\n", (), "ModuleNotFoundError"),
    ],
)
def test_an_exception_line_whose_traceback_was_cut_is_the_death_it_ended(
    tmp_path: Path, text: str, ranks: tuple[int, ...], raised: str
) -> None:
    # A ticket quotes the last line of a traceback: the exception its process raised.
    verdict = _verdict(tmp_path, text)
    assert (verdict.kind, verdict.culprit_ranks) == ("process-died", ranks)
    assert raised in verdict.summary


def test_an_exception_line_that_goes_on_below_or_reports_a_peer_is_no_death(
    tmp_path: Path,
) -> None:
    # "Graph execution error:" says its message follows; a victim's exception is the
    # aftermath of another failure.
    cut = "[1,1]<stderr>:tensorflow.python.framework.errors_impl.UnknownError: Graph execution error:\n"
    assert _verdict(tmp_path, cut).culprit_ranks == ()
    victim = "[rank3]: torch.distributed.elastic.multiprocessing.errors.ChildFailedError\n"
    assert _verdict(tmp_path, victim).culprit_ranks == ()


def test_lightning_workers_sent_sigterm_died_with_no_culprit(tmp_path: Path) -> None:
    # Lightning's signal connector logs the signal each worker got: stopped from outside.
    text = "".join(f"[rank: {r}] Received SIGTERM: 15\n" for r in (2, 3, 1, 0))
    text += "Bypassing SIGTERM: 15\n"
    verdict = _verdict(tmp_path, text)
    assert (verdict.kind, verdict.culprit_ranks) == ("process-died", ())
    assert "Received SIGTERM" in verdict.summary


def test_the_nccl_errors_last_words_name_the_peer_that_failed(tmp_path: Path) -> None:
    # "remote process exited" with NCCL's last error naming the peer's proxy: that peer.
    text = (
        "[rank1]: torch.distributed.DistBackendError: NCCL error in: "
        "../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, remote process exited or there was "
        "a network error, NCCL version 2.20.5\n"
        "[rank1]: ncclRemoteError: A call failed possibly due to a network error or a remote "
        "process exiting prematurely.\n"
        "[rank1]: Last error:\n"
        "[rank1]: Proxy Call to rank 3 failed (Connect)\n"
    )
    verdict = _verdict(tmp_path, text)
    assert (verdict.kind, verdict.culprit_ranks) == ("process-died", (3,))
    assert "rank 3" in verdict.summary


_WORK = (
    "[rank{r}]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank {r}] Timeout at NCCL work: 3021, "
    "last enqueued NCCL work: 3021, last completed NCCL work: 3020.\n"
)


def test_a_rank_missing_from_a_listing_in_rank_order_is_the_silent_one(tmp_path: Path) -> None:
    # Ranks 0-4 and 6-7 listed in order: a cut would lose the head or the tail, not rank 5.
    text = "".join(_WORK.format(r=r) for r in (0, 1, 2, 3, 4, 6, 7))
    verdict = _verdict(tmp_path, text)
    assert (verdict.kind, verdict.culprit_ranks) == ("missing-collective", (5,))


def test_a_rank_missing_from_interleaved_lines_may_have_been_cut(tmp_path: Path) -> None:
    # The same ranks in the order their output interleaved: any of them may be cut off.
    text = "".join(_WORK.format(r=r) for r in (0, 4, 2, 7, 1, 6, 3))
    verdict = _verdict(tmp_path, text)
    assert (verdict.kind, verdict.culprit_ranks) != ("missing-collective", (5,))
    assert 5 not in verdict.culprit_ranks


def test_srun_names_the_rank_of_the_task_that_failed_first(tmp_path: Path) -> None:
    # A task's number is its rank (SLURM_PROCID); the tasks srun killed after it are victims.
    text = (
        "srun: error: node12: task 7: Exited with exit code 1\n"
        "srun: error: node12: tasks 4-6: Killed\n"
        "srun: error: node11: tasks 0-3: Killed\n"
    )
    verdict = _verdict(tmp_path, text)
    assert (verdict.kind, verdict.culprit_ranks, verdict.culprit_hosts) == (
        "process-died",
        (7,),
        ("node12",),
    )


def test_a_store_barrier_that_lists_its_missing_ranks_names_them(tmp_path: Path) -> None:
    text = (
        "[rank0]: torch.distributed.DistStoreError: Timed out waiting on barrier on rank 0, for "
        "key prefix: torchelastic/agent/terminal_state (world_size=4, missing_ranks=[1, 3], "
        "timeout=0:05:00)\n"
    )
    verdict = _verdict(tmp_path, text)
    assert (verdict.kind, verdict.culprit_ranks) == ("missing-collective", (1, 3))


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("[rank1]: TimeoutError: timed out waiting for all 4 members to join\n", "init-stall"),
        ("[rank3]: RuntimeError: Wait timeout\n", "init-stall"),
        ("[rank2]: LookupError: Timeout while waiting for keys in EtcdStore\n", "init-stall"),
        (
            "[rank2]: TimeoutError: Timed out waiting for etcd server to be ready!\n",
            "bootstrap-failure",
        ),
    ],
)
def test_store_and_rendezvous_timeouts_say_which_phase_stalled(
    tmp_path: Path, text: str, kind: str
) -> None:
    # A rank that waited for the store or the rendezvous names no culprit of its own.
    verdict = _verdict(tmp_path, text)
    assert (verdict.kind, verdict.culprit_ranks) == (kind, ())


@pytest.mark.parametrize(
    ("text", "raised"),
    [
        (
            "[rank1]: ValueError: ProcessGroupNCCL is only supported with GPUs, no GPUs found!\n",
            "ValueError",
        ),
        ("[rank1]: RuntimeError: Cannot use ReduceOp.AVG with Gloo\n", "RuntimeError"),
    ],
)
def test_a_known_message_a_rank_raised_is_the_exception_it_died_of(
    tmp_path: Path, text: str, raised: str
) -> None:
    # PyTorch's own message (a catalog row), raised and read by no knowledge entry: the
    # rank's process ended with it, as it does with any exception's last line.
    verdict = _verdict(tmp_path, text)
    assert (verdict.kind, verdict.culprit_ranks) == ("process-died", (1,))
    assert raised in verdict.summary


@pytest.mark.parametrize(
    "text",
    [
        "[rank2]: RuntimeError: Default timeout callback fired, calling os.abort()\n",
        "[rank2]: SocketError: The server socket on [::]:29500 is not listening for connections.\n",
    ],
)
def test_a_raised_message_that_reports_a_wait_or_a_gone_server_is_no_death(
    tmp_path: Path, text: str
) -> None:
    # A timer that fired or a server that is gone: the rank waited, it did not fail itself.
    verdict = _verdict(tmp_path, text)
    assert (verdict.kind, verdict.culprit_ranks) != ("process-died", (2,))


def test_the_desync_report_names_every_lagging_rank(tmp_path: Path) -> None:
    """TORCH_NCCL_DESYNC_DEBUG lists the ranks as a Python list: each of them is a culprit."""
    text = (
        "[rank0]:[E1128 10:22:01.223456 140 ProcessGroupNCCL.cpp:577] [Rank 0]  - [0] Timeout "
        "at collective: ALLREDUCE, #41\n"
        " - To our best knowledge, ranks [3, 7] are the lagging ranks that caused this timeout. "
        "They never joined any collectives\n"
    )
    verdict = _verdict(tmp_path, text)
    assert (verdict.kind, verdict.culprit_ranks) == ("missing-collective", (3, 7))
    joined = "   - [2, 5] joined but didn't finish collective #40 (count from 1)\n"
    assert _verdict(tmp_path, joined).culprit_ranks == (2, 5)


@pytest.mark.parametrize("prefix", ["", "error msg: "])
def test_the_flight_recorder_analysis_names_the_rank_whose_collective_differs(
    tmp_path: Path, prefix: str
) -> None:
    """fr_trace prints ``Culprit rank R; Error type: <MatchState>, <detail>`` under its
    ``error msg:`` label, and alone in its list of mismatches."""
    text = (
        "Collective sequence number: 77 has errors\n"
        "group info: 0:default_pg\n"
        "collective: nccl:all_reduce\n"
        f"{prefix}Culprit rank 2; Error type: COLLECTIVE_TYPE_MISMATCH, Expected collective "
        "type: 'nccl:all_reduce' does not match found collective type: 'nccl:_allgather_base'\n"
    )
    verdict = _verdict(tmp_path, text)
    assert (verdict.kind, verdict.culprit_ranks) == ("collective-mismatch", (2,))
    # A differing state is a rank not there yet, not another collective: no culprit from it.
    state = text.replace("COLLECTIVE_TYPE_MISMATCH", "COLLECTIVE_STATE_MISMATCH")
    assert _verdict(tmp_path, state).culprit_ranks == ()


def test_a_store_socket_reset_raised_as_its_type_is_the_store_going_away(tmp_path: Path) -> None:
    """``DistNetworkError`` is the c10d store client's socket error: a reset on it is the
    store's host process (rank 0 or the agent) gone, read from the type and the message."""
    text = (
        "[rank3]: torch.distributed.DistNetworkError: Connection reset by peer\n"
        "[rank5]: torch.distributed.DistNetworkError: Connection reset by peer\n"
    )
    verdict, lead = _lead(tmp_path, text)
    assert (verdict.kind, verdict.culprit_ranks) == ("process-died", ())
    assert "store" in lead.detail.lower()


def test_a_jax_task_ended_for_another_tasks_death_is_a_victim(tmp_path: Path) -> None:
    text = (
        "F1128 10:10:10.000000  4411 coordination_service_agent.cc:332] Terminating process "
        "because the coordinator detected missing heartbeats. This most likely indicates that "
        "another task died. See the coordinator's log for details.\n"
    )
    verdict = _verdict(tmp_path, text)
    assert (verdict.kind, verdict.culprit_ranks) == ("process-died", ())


def test_a_worker_its_watchdog_aborted_is_the_waits_aftermath(tmp_path: Path) -> None:
    """``terminate called ... Watchdog caught collective operation timeout`` and then the
    agent's ``failed (exitcode: -6) local_rank: 0``: the abort follows the wait; the verdict
    is the wait, not a death of pid 5500."""
    text = (
        "terminate called after throwing an instance of 'c10::DistBackendError'\n"
        "  what():  [PG ID 0 PG GUID 0(default_pg) Rank 0] Process group watchdog thread "
        "terminated with exception: [Rank 0] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=5521, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran "
        "for 600043 milliseconds before timing out.\n"
        "E0808 08:18:08.000000 1400 torch/distributed/elastic/multiprocessing/api.py:826] failed "
        "(exitcode: -6) local_rank: 0 (pid: 5500) of binary: /usr/bin/python\n"
    )
    verdict = _verdict(tmp_path, text)
    assert verdict.kind in ("missing-collective", "collective-timeout")
    assert verdict.culprit_pids == ()
    # A worker killed by a signal of its own (SIGKILL: the OOM killer) stays the culprit.
    killed = text.replace("exitcode: -6", "exitcode: -9")
    assert _named(tmp_path, killed) == ("process-died", (), (5500,))


def test_the_monitor_ending_a_process_after_a_timeouts_dump_is_no_stuck_watchdog(
    tmp_path: Path,
) -> None:
    """The heartbeat monitor's ``Terminating the process after attempting to dump debug info,
    due to {reason}``: a collective timeout's aftermath, or (``watchdog hang``) a stuck
    watchdog."""
    line = (
        "[rank3]:[F1128 10:08:00.000000 1234 ProcessGroupNCCL.cpp:1306] [PG ID 0 PG GUID "
        "0(default_pg) Rank 3] Terminating the process after attempting to dump debug info, due "
        "to {reason}.\n"
    )
    (tmp_path / "ticket.log").write_text(line.format(reason="collective timeout or exception"))
    timeout = analyze([str(tmp_path)]).diagnosis
    assert timeout.verdict.kind != "watchdog-stuck"
    hang = _verdict(tmp_path, line.format(reason="ProcessGroupNCCL watchdog hang"))
    assert (hang.kind, hang.culprit_ranks) == ("watchdog-stuck", (3,))


def test_a_rank_that_raised_is_placed_where_torchruns_summary_puts_it(tmp_path: Path) -> None:
    # The traceback names the rank only; the summary's entry for that rank gives host and pid.
    path = tmp_path / "console.log"
    path.write_text(
        "[default3]:[rank11]: Traceback (most recent call last):\n"
        '[default3]:[rank11]:   File "/workspace/train.py", line 371, in main\n'
        "[default3]:[rank11]:     loss.backward()\n"
        "[default3]:[rank11]: torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate "
        "3.91 GiB.\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
        "============================================================\n"
        "train.py FAILED\n"
        "------------------------------------------------------------\n"
        "Failures:\n"
        "  <NO_OTHER_FAILURES>\n"
        "------------------------------------------------------------\n"
        "Root Cause (first observed failure):\n"
        "[0]:\n"
        "  time      : 2024-06-11_14:22:50\n"
        "  host      : trn-a100-02\n"
        "  rank      : 11 (local_rank: 3)\n"
        "  exitcode  : 1 (pid: 88214)\n"
        "  error_file: <N/A>\n"
        "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n"
        "============================================================\n"
    )
    verdict = analyze([str(path)]).diagnosis.verdict
    assert (verdict.culprit_ranks, verdict.culprit_hosts, verdict.culprit_pids) == (
        (11,),
        ("trn-a100-02",),
        (88214,),
    )


def test_a_dump_signal_relayed_from_the_rank_that_timed_out_is_a_failure(tmp_path: Path) -> None:
    # Only the lines of a rank that received the signal: rank 0 timed out, rank 3 waits in
    # its last enqueued work; who never entered it is not in these lines.
    path = tmp_path / "rank3.log"
    path.write_text(
        "[rank3]:[E1128 10:00:00.000100 1234 ProcessGroupNCCL.cpp:1580] [PG ID 0 PG GUID "
        "0(default_pg) Rank 3] Received a dump signal due to a collective timeout from  rank 0 "
        "and we will try our best to dump the debug info. Last enqueued NCCL work: 8812, last "
        "completed NCCL work: 8811.\n"
    )
    verdict = analyze([str(path)]).diagnosis.verdict
    assert (verdict.kind, verdict.code, verdict.culprit_ranks) == (
        "missing-collective",
        "LS103",
        (),
    )
    assert "timed out on rank 0" in verdict.summary
