"""What the platform around a job reports: Slurm, the kernel's GPU driver, the DataLoader.

A launcher's or scheduler's line about one of its processes names that process's host; the
message's own kind (host OOM, a GPU fault) outranks the watchdog timeouts of its victims.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from logsleuth.api import analyze
from logsleuth.model.diagnosis import Diagnosis

TIMEOUT = (
    "{label}[E ProcessGroupNCCL.cpp:616] [Rank {rank}] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=9912, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
    "Timeout(ms)=600000) ran for 600041 milliseconds before timing out.\n"
)


def _diagnosis(tmp_path: Path, text: str) -> Diagnosis:
    log = tmp_path / "job.log"
    log.write_text(text, encoding="utf-8")
    return analyze([str(log)]).diagnosis


def _verdict(tmp_path: Path, text: str) -> tuple[str, tuple[str, ...]]:
    verdict = _diagnosis(tmp_path, text).verdict
    return verdict.kind, verdict.culprit_hosts


@pytest.mark.parametrize(
    "line",
    [
        "srun: error: gpu-a17: task 5: Out Of Memory",
        "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=884213.0. Some of your "
        "processes may have been killed by the cgroup out-of-memory handler.\n"
        "srun: error: gpu-a17: task 5: Out Of Memory",
    ],
)
def test_slurm_names_the_host_whose_task_ran_out_of_memory(tmp_path: Path, line: str) -> None:
    text = TIMEOUT.format(label="0: ", rank=0) + TIMEOUT.format(label="2: ", rank=2) + line + "\n"
    kind, hosts = _verdict(tmp_path, text)
    assert kind in ("resource-exhausted", "process-died")
    assert hosts == ("gpu-a17",)


def test_a_gpu_that_fell_off_the_bus_outranks_the_timeouts(tmp_path: Path) -> None:
    text = (
        "Mar 14 03:12:55 gpu-n12 kernel: NVRM: GPU at PCI:0000:b5:00: GPU-4f1e2a9b\n"
        "Mar 14 03:12:55 gpu-n12 kernel: NVRM: Xid (PCI:0000:b5:00): 79, pid=48812, "
        "name=python, GPU has fallen off the bus.\n" + TIMEOUT.format(label="[rank12]:", rank=12)
    )
    assert _verdict(tmp_path, text) == ("cuda-error", ("gpu-n12",))


def test_an_application_xid_is_a_cuda_error_too(tmp_path: Path) -> None:
    text = (
        "Jun  2 10:00:01 node-3 kernel: NVRM: Xid (PCI:0000:18:00): 31, pid=2211, "
        "name=python3, Ch 00000008, MMU Fault: ENGINE GRAPHICS faulted @ 0x7f5c_3a000000.\n"
    )
    assert _verdict(tmp_path, text) == ("cuda-error", ("node-3",))


def test_a_dataloader_worker_out_of_shared_memory_is_resource_exhaustion(tmp_path: Path) -> None:
    text = (
        "ERROR: Unexpected bus error encountered in worker. This might be caused by "
        "insufficient shared memory (shm).\n"
        "RuntimeError: DataLoader worker (pid 7781) is killed by signal: Bus error. It is "
        "possible that dataloader's workers are out of shared memory. Please try to raise "
        "your shared memory limit.\n"
    )
    assert _verdict(tmp_path, text)[0] == "resource-exhausted"


def test_deepspeeds_launcher_reports_a_worker_killed(tmp_path: Path) -> None:
    text = (
        "[2023-10-02 07:45:12,330] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 40211\n"
        "[2023-10-02 07:45:13,902] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python3', "
        "'-u', 'train.py', '--local_rank=3'] exits with return code = -9\n"
    )
    assert _verdict(tmp_path, text)[0] == "process-died"


DUMP_SIGNAL = (
    "[rank{rank}]:[E1009 12:12:19.520910 ProcessGroupNCCL.cpp:1743] [PG ID 0 PG GUID "
    "0(default_pg) Rank {rank}] Received a dump signal due to a collective timeout from  rank 1 "
    "and we will try our best to dump the debug info. Last enqueued NCCL work: {enqueued}, last "
    "completed NCCL work: {completed}.This is most likely caused by incorrect usages of "
    "collectives, e.g., wrong sizes used across ranks.\n"
)


def _dumps(tmp_path: Path, stood: dict[int, tuple[int, int]]) -> tuple[str, tuple[int, ...]]:
    log = tmp_path / "job.log"
    log.write_text(
        "".join(DUMP_SIGNAL.format(rank=r, enqueued=e, completed=c) for r, (e, c) in stood.items())
    )
    verdict = analyze([str(log)]).diagnosis.verdict
    return verdict.kind, verdict.culprit_ranks


def test_the_rank_that_never_enqueued_the_stuck_work_is_the_culprit(tmp_path: Path) -> None:
    # The timeout is rank 1's, outside the excerpt; ranks 0 and 3 enqueued work 4410 and are
    # stuck in it, rank 2 never enqueued it.
    stood = {0: (4410, 4409), 2: (4409, 4409), 3: (4410, 4409)}
    assert _dumps(tmp_path, stood) == ("missing-collective", (2,))


def test_ranks_that_completed_the_highest_work_are_not_stuck_in_it(tmp_path: Path) -> None:
    stood = {0: (4410, 4410), 2: (4409, 4409), 3: (4410, 4410)}
    assert _dumps(tmp_path, stood)[1] == ()


OWN_TIMEOUT = (
    "[rank{rank}]:[E1123 11:02:00.1 90{rank} ProcessGroupNCCL.cpp:1834] [PG ID 0 PG GUID "
    "0(default_pg) Rank {rank}] Timeout at NCCL work: 4101, last enqueued NCCL work: 4101, last "
    "completed NCCL work: 4100.\n"
)
INIT = (
    "node0:90{rank}:95{rank} [{rank}] NCCL INFO comm 0x55d0c{rank}a0 rank {rank} nranks 8 "
    "cudaDev {rank} busId {rank}1000 commId 0x9f3e2d1c0b4a5968 - Init COMPLETE\n"
)


@pytest.mark.parametrize("world_known", [True, False], ids=["eight inits", "no world"])
def test_the_rank_whose_watchdog_never_fired_in_the_stuck_work_is_the_culprit(
    tmp_path: Path, world_known: bool
) -> None:
    # torch 2.3-2.5 word each rank's own timeout as "Timeout at NCCL work: S, last enqueued
    # ...": seven of the eight ranks the inits name time out in 4101, rank 6 says nothing.
    # Without the inits, and with the ranks' lines interleaved, a rank missing from the
    # excerpt may be a cut: the ranks quoted are all inside the work, which stalled.
    inits = "".join(INIT.format(rank=r) for r in range(8)) if world_known else ""
    order = range(8) if world_known else (3, 0, 7, 1, 5, 2, 4)
    text = inits + "".join(OWN_TIMEOUT.format(rank=r) for r in order if r != 6)
    verdict = _diagnosis(tmp_path, text).verdict
    if world_known:
        assert (verdict.kind, verdict.culprit_ranks) == ("missing-collective", (6,))
        assert verdict.culprit_hosts == ("node0",)
    else:
        assert (verdict.kind, verdict.culprit_ranks) == (
            "collective-timeout",
            (0, 1, 2, 3, 4, 5, 7),
        )


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        (
            "$ kubectl describe pod trainer-worker-3\n    State:          Terminated\n"
            "      Reason:       OOMKilled\n      Exit Code:    137\n",
            "resource-exhausted",
        ),
        (
            "ray.exceptions.RayActorError: The actor died unexpectedly before finishing this "
            "task.\n\tclass_name: RayWorkerWrapper\n\tpid: 23310\n\tip: 10.0.12.7\n",
            "process-died",
        ),
        (
            "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on "
            "memory.\n",
            "resource-exhausted",
        ),
        (
            "ORTE has lost communication with a remote daemon.\n\n"
            "  HNP daemon   : [[41234,0],0] on node gpu-a01\n"
            "  Remote daemon: [[41234,0],3] on node gpu-a04\n",
            "process-died",
        ),
        (
            "torch.distributed.elastic.rendezvous.api.RendezvousClosedError\n"
            "The node 'worker-2_3312_0' has failed to send a keep-alive heartbeat to the "
            "rendezvous '5d1c' due to an error of type RendezvousConnectionError.\n",
            "bootstrap-failure",
        ),
        (
            "[rank1]: RuntimeError: Expected to have finished reduction in the prior iteration "
            "before starting a new one. This error indicates that your module has parameters "
            "that were not used in producing loss.\n",
            "process-died",
        ),
        (
            "[rank0]: torch.distributed.DistStoreError: Timed out after 1801 seconds waiting for "
            "clients. 7/8 clients joined.\n",
            "init-stall",
        ),
        (
            "worker-3: ssh: connect to host worker-3 port 22: Connection refused\n"
            "pdsh@worker-1: worker-3: ssh exited with exit code 255\n",
            "bootstrap-failure",
        ),
    ],
    ids=[
        "kubectl-oomkilled",
        "ray-actor-died",
        "ray-memory-monitor",
        "orte-daemon-lost",
        "rendezvous-lost",
        "ddp-unused-parameters",
        "store-clients-missing",
        "ssh-unreachable",
    ],
)
def test_what_the_orchestrator_says_of_a_dead_worker(tmp_path: Path, text: str, kind: str) -> None:
    assert _verdict(tmp_path, text)[0] == kind


_UCX_ABORT = """\
[1,5]<stderr>:[1700712004.118302] [dgx-07:118844:0]       ib_mlx5_log.c:177  UCX  ERROR   Transport retry count exceeded on mlx5_2:1/IB (synd 0x15 vend 0x81 hw_synd 0/0)
[1,5]<stderr>:[dgx-07:118844] *** Process received signal ***
[1,5]<stderr>:[dgx-07:118844] Signal: Aborted (6)
mpirun noticed that process rank 5 with PID 118844 on node dgx-07 exited on signal 6 (Aborted).
"""


def test_a_rank_that_aborts_after_its_own_network_error_died_of_that_error(
    tmp_path: Path,
) -> None:
    (tmp_path / "job.log").write_text(_UCX_ABORT, encoding="utf-8")
    diagnosis = analyze([str(tmp_path)]).diagnosis
    verdict = diagnosis.verdict
    # UCX's retry limit on rank 5 is why mpirun saw it abort: the error leads, the death
    # corroborates it; UCX's prefix names the host and pid (not its source file and line).
    assert verdict.kind == "network-error"
    assert (verdict.culprit_ranks, verdict.culprit_hosts, verdict.culprit_pids) == (
        (5,),
        ("dgx-07",),
        (118844,),
    )
    assert "exited on signal 6" in diagnosis.findings[0].detail
    assert diagnosis.inputs[0].unrecognized == 0


def test_open_mpis_handler_reports_a_crash_of_the_rank_itself(tmp_path: Path) -> None:
    text = (
        "[1,3]<stderr>:[gpu-b2:4411] *** Process received signal ***\n"
        "[1,3]<stderr>:[gpu-b2:4411] Signal: Segmentation fault (11)\n"
        "[1,3]<stderr>:[gpu-b2:4411] Signal code: Address not mapped (1)\n"
        "[1,3]<stderr>:[gpu-b2:4411] Failing at address: 0x10\n"
        "[1,3]<stderr>:[gpu-b2:4411] *** End of error message ***\n"
    )
    (tmp_path / "job.log").write_text(text, encoding="utf-8")
    diagnosis = analyze([str(tmp_path)]).diagnosis
    verdict = diagnosis.verdict
    assert (verdict.kind, verdict.culprit_ranks, verdict.culprit_hosts) == (
        "process-died",
        (3,),
        ("gpu-b2",),
    )
    assert diagnosis.inputs[0].unrecognized == 0


@pytest.mark.parametrize(
    "events",
    [
        "12m   Warning   NodeNotReady   pod/gpt-train-worker-5   Node is not ready\n",
        "12m   Normal   TaintManagerEviction   pod/gpt-train-worker-5   "
        "Marking for deletion Pod training/gpt-train-worker-5\n",
    ],
    ids=["node-not-ready", "taint-eviction"],
)
def test_a_pod_whose_node_was_lost_is_the_dead_worker(tmp_path: Path, events: str) -> None:
    text = TIMEOUT.format(label="[rank0]:", rank=0) + events
    assert _verdict(tmp_path, text) == ("process-died", ("gpt-train-worker-5",))


def test_the_ofi_plugins_failed_completion_is_a_network_error(tmp_path: Path) -> None:
    text = (
        "gpu-st-p5-12:41022:41633 [2] NCCL WARN NET/OFI Request 0x7f3a2c0b1e80 completed with "
        "error. RC: 21. Error: 4294967291 (Unknown error -5). Completed length: 0\n"
        "gpu-st-p5-12:41022:41633 [2] NCCL INFO transport/net.cc:1298 -> 6\n"
    )
    assert _verdict(tmp_path, text)[0] == "network-error"


def test_a_line_no_process_wrote_is_quoted_on_its_own(tmp_path: Path) -> None:
    (tmp_path / "job.log").write_text(
        "srun: error: gpu-a17: task 5: Out Of Memory\n", encoding="utf-8"
    )
    summary = analyze([str(tmp_path)]).diagnosis.verdict.summary
    assert summary == "srun: error: gpu-a17: task 5: Out Of Memory"


@pytest.mark.parametrize(
    "line",
    [
        "=>> PBS: job killed: walltime 21618 exceeded limit 21600",
        "TERM_RUNLIMIT: job killed after reaching LSF run time limit.",
        "slurmstepd: error: *** JOB 4412901 ON gpu-12 CANCELLED AT 2024-02-11T03:00:04 DUE TO "
        "TIME LIMIT ***",
    ],
)
def test_a_time_limit_kill_is_named_but_not_taken_for_a_cause(tmp_path: Path, line: str) -> None:
    # The scheduler ended the job: when it stopped making progress is still to be found.
    log = tmp_path / "job.out"
    log.write_text("steps: 9030 loss: 1.9876 iter time (s): 4.507\n" + line + "\n")
    d = analyze([str(log)]).diagnosis
    assert (d.verdict.kind, d.verdict.culprit_ranks) == ("inconclusive", ())
    assert "time limit" in d.findings[0].detail
    assert any("last progress line" in step for step in d.findings[0].next_steps)


KILLED_WORKER = (
    "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 2 "
    "(pid: 118205) of binary: /usr/bin/python3\n"
)


@pytest.mark.parametrize(
    "kill",
    [
        "TERM_MEMLIMIT: job killed after reaching LSF memory usage limit.",
        "=>> PBS: job killed: mem 270532kb exceeded limit 262144kb",
        "slurmstepd: error: Exceeded job memory limit",
    ],
)
def test_a_memory_limit_kill_names_the_worker_it_took(tmp_path: Path, kill: str) -> None:
    log = tmp_path / "job.out"
    closing = "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process {} closing signal SIGTERM\n"
    log.write_text(closing.format(118204) + KILLED_WORKER + kill + "\n")
    v = analyze([str(log)]).diagnosis.verdict
    assert (v.kind, v.culprit_pids) == ("resource-exhausted", (118205,))


def test_the_oom_killers_victim_is_the_rank_torchrun_reports_killed(tmp_path: Path) -> None:
    # dmesg names the pid it killed; torchrun's summary names that pid's rank.
    summary = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2024-11-24_02:20:02
  host      : node3
  rank      : 6 (local_rank: 2)
  exitcode  : -9 (pid: 118205)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 118205
============================================================
"""
    log = tmp_path / "node3.log"
    log.write_text(
        "[Sun Nov 24 02:20:01 2024] Out of memory: Killed process 118205 (python3) "
        "total-vm:182334220kB, anon-rss:160112340kB\n" + summary
    )
    v = analyze([str(log)]).diagnosis.verdict
    assert (v.kind, v.culprit_ranks, v.culprit_pids) == ("resource-exhausted", (6,), (118205,))


def test_a_kill_that_names_no_victim_names_none_of_several(tmp_path: Path) -> None:
    log = tmp_path / "job.out"
    second = KILLED_WORKER.replace("local_rank: 2 (pid: 118205)", "local_rank: 3 (pid: 118206)")
    log.write_text(
        KILLED_WORKER
        + second
        + "TERM_MEMLIMIT: job killed after reaching LSF memory usage limit.\n"
    )
    v = analyze([str(log)]).diagnosis.verdict
    assert v.kind == "resource-exhausted"
    assert v.culprit_pids == ()


SEFF = """Job ID: 7741203
Cluster: hpc
User/Group: alice/ml
State: {state} (exit code 0)
Nodes: 2
Cores per node: 64
CPU Utilized: 3-02:11:54
CPU Efficiency: 37.12% of 8-08:21:20 core-walltime
Job Wall-clock time: 01:34:10
Memory Utilized: 511.98 GB
Memory Efficiency: 99.99% of 512.00 GB (256.00 GB/node)
"""
SCONTROL = """JobId=991823 JobName=pretrain-70b
   UserId=bob(1001) GroupId=ml(1001) MCS_label=N/A
   JobState={state} Reason=TimeLimit Dependency=(null)
   RunTime=2-00:00:12 TimeLimit=2-00:00:00 TimeMin=N/A
   NodeList=gpu-[101-116]
"""
SACCT = """JobID           JobName  Partition    Account  AllocCPUS      State ExitCode
------------ ---------- ---------- ---------- ---------- ---------- --------
5512201        train.sh        gpu   research        768 {state:>10}      0:0
5512201.bat+      batch              research         96  CANCELLED     0:15
5512201.0        python              research        768  CANCELLED     0:15
"""


@pytest.mark.parametrize("report", [SEFF, SCONTROL, SACCT], ids=["seff", "scontrol", "sacct"])
@pytest.mark.parametrize(
    ("state", "kind"),
    [
        ("OUT_OF_MEMORY", "resource-exhausted"),
        ("TIMEOUT", "inconclusive"),
        ("NODE_FAIL", "process-died"),
        ("PREEMPTED", "process-died"),
    ],
)
def test_slurms_accounting_of_a_job_says_how_it_ended(
    tmp_path: Path, report: str, state: str, kind: str
) -> None:
    log = tmp_path / "job.txt"
    log.write_text(report.format(state=state))
    result = analyze([str(log)])
    (summary,) = result.diagnosis.inputs
    assert (summary.recognized, summary.unrecognized) == (report.count("\n"), 0)
    assert result.diagnosis.verdict.kind == kind


def test_a_one_node_deepspeed_launch_names_the_rank_of_the_killed_local_rank(
    tmp_path: Path,
) -> None:
    # The launcher's line names only the local rank; its global_rank_mapping has one host,
    # so local rank 3 is rank 3. With two hosts in the mapping it would name no rank.
    mapping = "{'localhost': [0, 1, 2, 3]}"
    text = (
        "[2024-03-05 10:11:12,345] [INFO] [launch.py:163:main] global_rank_mapping="
        f"defaultdict(<class 'list'>, {mapping})\n"
        "[2024-03-05 11:40:05,000] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python', "
        "'-u', 'train.py', '--local_rank=3'] exits with return code = -9\n"
    )
    verdict = _diagnosis(tmp_path, text).verdict
    assert (verdict.kind, verdict.culprit_ranks) == ("process-died", (3,))
    two_hosts = text.replace(mapping, "{'node-a': [0, 1, 2, 3], 'node-b': [4, 5, 6, 7]}")
    verdict = _diagnosis(tmp_path, two_hosts).verdict
    assert (verdict.kind, verdict.culprit_ranks) == ("process-died", ())
    # Under pdsh (DeepSpeed's multi-node launcher) the line carries its host's label: local
    # rank 3 of node-b is rank 7.
    labelled = two_hosts.replace("\n[2024-03-05 11:40", "\nnode-b: [2024-03-05 11:40")
    verdict = _diagnosis(tmp_path, labelled).verdict
    assert (verdict.kind, verdict.culprit_ranks, verdict.culprit_hosts) == (
        "process-died",
        (7,),
        ("node-b",),
    )


PODS = (
    "NAME                   READY   STATUS      RESTARTS      AGE\n"
    "llama-train-master-0   1/1     Running     0             5h12m\n"
    "llama-train-worker-0   1/1     Running     0             5h12m\n"
    "llama-train-worker-1   0/1     {status}   2 (3m ago)    5h12m\n"
)


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        ("OOMKilled", "resource-exhausted"),
        ("Error    ", "process-died"),
        ("CrashLoopBackOff", "process-died"),
    ],
)
def test_a_failed_pod_in_kubectls_pod_table_is_the_culprit_host(
    tmp_path: Path, status: str, kind: str
) -> None:
    # `kubectl get pods`: the row's pod stands for the host (as with `kubectl logs --prefix`),
    # and the master's ranks time out waiting for its ranks.
    diagnosis = _diagnosis(
        tmp_path, PODS.format(status=status) + TIMEOUT.format(label="[rank0]:", rank=0)
    )
    verdict = diagnosis.verdict
    assert (verdict.kind, verdict.culprit_hosts) == (kind, ("llama-train-worker-1",))
    # The explanation names the pod the row names, not the paste that printed it: the culprit
    # process (a crash) or the host whose memory ran out (a kill for memory).
    assert (
        "culprit: host llama-train-worker-1" in diagnosis.findings[0].detail
        or "on the host (llama-train-worker-1)" in diagnosis.findings[0].detail
    )


DESCRIBED = (
    "Name:             llama-train-worker-1\n"
    "{second}\n"
    "Node:             gpu-pool-a-77/10.2.0.17\n"
    "Status:           Failed\n"
    "Reason:           Evicted\n"
    "Events:\n"
    "  Type     Reason   Age  From     Message\n"
    "  ----     ------   ---- ----     -------\n"
    "  Warning  Evicted  3m   kubelet  The node was low on resource: memory. Threshold quantity: "
    "100Mi, available: 51200Ki. Container pytorch was using 61203456Ki, request is 0.\n"
)


@pytest.mark.parametrize(
    "second", ["Namespace:        ml", "Priority:         0"], ids=["describe", "no header"]
)
def test_kubectl_describes_pod_name_is_the_host_of_its_events(tmp_path: Path, second: str) -> None:
    # `kubectl describe pod` opens with the pod's Name and Namespace; its eviction event
    # below names no pod, the header does.
    verdict = _diagnosis(tmp_path, DESCRIBED.format(second=second)).verdict
    assert verdict.kind == "resource-exhausted"
    named = ("llama-train-worker-1",) if second.startswith("Namespace") else ()
    assert verdict.culprit_hosts == named


@pytest.mark.parametrize(
    "said",
    [
        "Unable to determine the device handle for GPU0000:B3:00.0: Unknown Error",
        "Unable to determine the device handle for GPU 0000:3B:00.0: GPU is lost.  Reboot the "
        "system to recover this GPU",
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure "
        "that the latest NVIDIA driver is installed and running.",
    ],
)
def test_nvidia_smi_losing_a_gpu_outranks_the_timeouts(tmp_path: Path, said: str) -> None:
    text = "$ nvidia-smi\n" + said + "\n" + TIMEOUT.format(label="[rank12]:", rank=12)
    diagnosis = _diagnosis(tmp_path, text)
    assert diagnosis.verdict.kind == "cuda-error"
    assert diagnosis.inputs[0].unrecognized == 0


def test_a_driver_library_mismatch_is_a_config_mismatch(tmp_path: Path) -> None:
    text = "Failed to initialize NVML: Driver/library version mismatch\n"
    assert _verdict(tmp_path, text)[0] == "config-mismatch"


def test_lightnings_observer_names_the_child_that_died_not_itself(tmp_path: Path) -> None:
    # Lightning logs it at INFO from the launching process (rank 0 here); the child it names
    # by pid is the culprit. Its [rank: 1] is the child's local rank.
    text = (
        "[rank: 0] Epoch 0:  12%| 120/1000 [02:01<14:50, 1.01s/it, train_loss=2.31]\n"
        "[rank: 1] Child process with PID 4567 terminated with code -9. Forcefully terminating "
        "all other processes to avoid zombies \N{ZOMBIE}\n"
    )
    verdict = _diagnosis(tmp_path, text).verdict
    assert (verdict.kind, verdict.culprit_pids) == ("process-died", (4567,))
    assert 0 not in verdict.culprit_ranks
    clean = text.replace("code -9", "code 0")
    assert _diagnosis(tmp_path, clean).verdict.kind != "process-died"


def test_mp_spawns_join_names_the_worker_it_lost_by_local_rank(tmp_path: Path) -> None:
    # torch.multiprocessing.spawn's parent raises for its worker 1 (its spawn index, the
    # local rank): the worker died of SIGKILL, not the parent that raised.
    text = (
        "Traceback (most recent call last):\n"
        '  File "/workspace/main.py", line 88, in <module>\n'
        "    mp.spawn(worker, args=(world_size,), nprocs=world_size, join=True)\n"
        "torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with signal "
        "SIGKILL\n"
    )
    lead = _diagnosis(tmp_path, text).findings[0]
    assert lead.kind == "process-died"
    assert "local rank 1" in lead.detail


def test_mp_spawns_reraised_error_is_the_childs(tmp_path: Path) -> None:
    # The parent re-raises its child's exception as ProcessRaisedException with the child's
    # traceback in its message: the verdict is the child's error, at the child's line.
    text = (
        "Traceback (most recent call last):\n"
        '  File "/workspace/main.py", line 88, in <module>\n'
        "    mp.spawn(worker, args=(world_size,), nprocs=world_size, join=True)\n"
        "torch.multiprocessing.spawn.ProcessRaisedException: \n\n"
        "-- Process 3 terminated with the following error:\n"
        "Traceback (most recent call last):\n"
        '  File "/workspace/main.py", line 40, in worker\n'
        "    dist.all_reduce(t)\n"
        "ValueError: Tensors must be contiguous\n"
    )
    lead = _diagnosis(tmp_path, text).findings[0]
    assert (lead.kind, lead.ranks) == ("process-died", ())
    assert "raised ValueError at worker (/workspace/main.py:40)" in lead.title
    assert "spawned process 3 (local rank 3)" in lead.title


@pytest.mark.parametrize("status", ["Pending  ", "ImagePullBackOff", "Init:0/1 "])
def test_a_pod_that_never_started_is_the_host_its_peers_rendezvous_waits_for(
    tmp_path: Path, status: str
) -> None:
    # The pods that started time out in rendezvous; the culprit is the one that never ran.
    text = PODS.format(status=status).replace("2 (3m ago)", "0         ") + (
        "[E1123 10:30:00.000000 1 torch/distributed/elastic/rendezvous/dynamic_rendezvous.py"
        ":1130] The node 'llama-train-master-0_1_0' has failed to join the rendezvous 'job-1' "
        "within the timeout.\ntorch.distributed.elastic.rendezvous.api.RendezvousTimeoutError\n"
    )
    assert _verdict(tmp_path, text) == ("bootstrap-failure", ("llama-train-worker-1",))


def test_a_running_pods_row_is_recognized_and_blames_nobody(tmp_path: Path) -> None:
    diagnosis = _diagnosis(tmp_path, PODS.format(status="Running  "))
    assert diagnosis.verdict.culprit_hosts == ()
    assert [(i.recognized, i.unrecognized) for i in diagnosis.inputs] == [(4, 0)]


def test_a_scheduling_failure_names_the_described_pod(tmp_path: Path) -> None:
    text = (
        "Name:             llama-train-worker-1\nNamespace:        ml\nStatus:           Pending\n"
        "Events:\n  Type     Reason            Age   From               Message\n"
        "  Warning  FailedScheduling  2m    default-scheduler  0/4 nodes are available: 4 "
        "Insufficient nvidia.com/gpu.\n"
    )
    assert _verdict(tmp_path, text) == ("bootstrap-failure", ("llama-train-worker-1",))


def test_rays_dead_worker_is_named_by_the_address_and_pid_its_message_gives(
    tmp_path: Path,
) -> None:
    text = (
        "(raylet, ip=10.0.0.7) A worker died or was killed while executing a task by an "
        "unexpected system error. To troubleshoot the problem, check the logs for the dead "
        "worker. RayTask ID: ffffffff Worker ID: 8e2b Node ID: 91af Worker IP address: 10.0.0.7 "
        "Worker port: 10012 Worker PID: 5121 Worker exit type: SYSTEM_ERROR Worker exit detail: "
        "Worker unexpectedly exits with a connection error code 2. End of file.\n"
    )
    verdict = _diagnosis(tmp_path, text).verdict
    assert (verdict.kind, verdict.culprit_hosts, verdict.culprit_pids) == (
        "process-died",
        ("10.0.0.7",),
        (5121,),
    )


LAUNCHER_RAISED = (
    "Traceback (most recent call last):\n"
    '  File "/usr/local/lib/python3.10/dist-packages/accelerate/commands/launch.py", line 763,'
    " in simple_launcher\n"
    "    raise subprocess.CalledProcessError(returncode=process.returncode, cmd=cmd)\n"
    "subprocess.CalledProcessError: Command '['/usr/bin/python', 'train.py']' returned "
    "non-zero exit status 1.\n"
)


def test_a_launcher_raising_for_its_failed_command_is_its_messenger(tmp_path: Path) -> None:
    # accelerate (or any wrapper) raises CalledProcessError for the command it ran: the
    # cause is in the command's own output, which this excerpt lacks.
    lead = _diagnosis(tmp_path, LAUNCHER_RAISED).findings[0]
    assert (lead.code, lead.kind, lead.ranks) == ("LS702", "process-died", ())
    assert "launcher.child-command-failed" in lead.detail
    # With the worker's own traceback beside it, the worker's error is the verdict.
    worker = (
        "[rank2]: Traceback (most recent call last):\n"
        '[rank2]:   File "/workspace/train.py", line 40, in <module>\n'
        "[rank2]:     batch = next(it)\n"
        "[rank2]: ValueError: empty shard\n"
    )
    verdict = _diagnosis(tmp_path, worker + LAUNCHER_RAISED).verdict
    assert (verdict.kind, verdict.culprit_ranks) == ("process-died", (2,))


IBSTAT = """\
CA 'mlx5_0'
\tCA type: MT4123
\tNumber of ports: 1
\tPort 1:
\t\tState: {state}
\t\tPhysical state: {phys}
\t\tRate: 200
\t\tLink layer: InfiniBand
"""


def test_an_ibstat_port_that_is_not_active_names_its_host(tmp_path: Path) -> None:
    log = tmp_path / "ibstat-gpu-node-12.txt"
    log.write_text(IBSTAT.format(state="Down", phys="Polling"), encoding="utf-8")
    diagnosis = analyze([str(log)]).diagnosis
    assert (diagnosis.verdict.kind, diagnosis.verdict.culprit_hosts) == (
        "network-error",
        ("gpu-node-12",),
    )
    # An active port is recognized and blames nobody.
    log.write_text(IBSTAT.format(state="Active", phys="LinkUp"), encoding="utf-8")
    healthy = analyze([str(log)]).diagnosis
    assert healthy.verdict.kind != "network-error"
    assert healthy.inputs[0].recognized == 3


NVIDIA_SMI = """\
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |
|-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|=========================================+========================+======================|
|   0  NVIDIA H100 80GB HBM3          On  |   00000000:18:00.0 Off |                    0 |
| N/A   35C    P0            118W /  700W |   70213MiB /  81559MiB |    100%      Default |
+-----------------------------------------+------------------------+----------------------+
"""
NVIDIA_SMI_ERR = """\
|   1  NVIDIA H100 80GB HBM3          On  |   00000000:2A:00.0 Off |                  ERR! |
| ERR!  ERR!  ERR!             ERR! / ERR! |   70213MiB /  81559MiB |    ERR!      Default |
"""


def test_nvidia_smis_table_is_recognized_and_its_err_cells_name_the_host(tmp_path: Path) -> None:
    log = tmp_path / "nvidia-smi-gpu-node-3.txt"
    log.write_text(NVIDIA_SMI, encoding="utf-8")
    fine = analyze([str(log)]).diagnosis
    # A table of working GPUs is no error (it was read as a rich traceback's frames).
    assert [(i.recognized, i.unrecognized) for i in fine.inputs] == [(9, 0)]
    assert fine.verdict.kind == "inconclusive" and fine.verdict.code != "LS001"
    log.write_text(NVIDIA_SMI + NVIDIA_SMI_ERR, encoding="utf-8")
    verdict = analyze([str(log)]).diagnosis.verdict
    assert (verdict.kind, verdict.culprit_hosts) == ("cuda-error", ("gpu-node-3",))


def test_a_launcher_whose_command_was_killed_names_the_signal(tmp_path: Path) -> None:
    text = LAUNCHER_RAISED.replace(
        "returned non-zero exit status 1.", "died with <Signals.SIGKILL: 9>."
    )
    lead = _diagnosis(tmp_path, text).findings[0]
    assert (lead.code, lead.kind) == ("LS702", "process-died")


def test_an_exception_that_reports_another_failure_is_never_no_failure(tmp_path: Path) -> None:
    # torchrun's ChildFailedError without its summary: a failure whose cause is elsewhere.
    text = (
        "Traceback (most recent call last):\n"
        '  File "/usr/bin/torchrun", line 8, in <module>\n'
        "    sys.exit(main())\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
    )
    verdict = _diagnosis(tmp_path, text).verdict
    assert (verdict.code, verdict.kind) == ("LS001", "inconclusive")
