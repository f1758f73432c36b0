"""What the platform around a job reports: Slurm, the kernel's GPU driver, the DataLoader.

A launcher's or scheduler's line about one of its processes names that process's host; the
message's own kind (host OOM, a GPU fault) outranks the watchdog timeouts of its victims.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from logsleuth.api import analyze

TIMEOUT = (
    "{label}[E ProcessGroupNCCL.cpp:616] [Rank {rank}] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=9912, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
    "Timeout(ms)=600000) ran for 600041 milliseconds before timing out.\n"
)


def _verdict(tmp_path: Path, text: str) -> tuple[str, tuple[str, ...]]:
    log = tmp_path / "job.log"
    log.write_text(text, encoding="utf-8")
    verdict = analyze([str(log)]).diagnosis.verdict
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
