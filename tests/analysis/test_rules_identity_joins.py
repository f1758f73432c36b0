"""Whose failure it is when the line that shows it does not say: joins between what one
line says and what others say of the same process, host or peer.

An excerpt pasted into a ticket holds the error without its writer's prefix, a pod's lines
without pids, a proxy's complaint about "localRank 3", or several hosts' errors that all
name one peer. The culprit is the process or host those joins point at.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from logsleuth.api import analyze
from logsleuth.model.diagnosis import Verdict
from tests.torchrun_text import failure_entry, failure_summary

WATCHDOG = (
    "[rank{rank}]:[E1123 09:40:00.000000 20{rank} torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:632] "
    "[PG ID 0 PG GUID 0(default_pg) Rank {rank}] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=88, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for "
    "1800092 milliseconds before timing out."
)
INIT = (
    "[rank{rank}]:[I1123 09:00:00.000000 20{rank} torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:913] "
    "[PG ID 0 PG GUID 0(default_pg) Rank {rank}] ProcessGroupNCCL initialization options: size: 4, "
    "global rank: {rank}, TIMEOUT(ms): 1800000, USE_HIGH_PRIORITY_STREAM: 0"
)


def verdict_of(tmp_path: Path, files: dict[str, str]) -> Verdict:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return analyze([str(tmp_path)]).diagnosis.verdict


def culprit(verdict: Verdict) -> tuple[str, tuple[int, ...], tuple[str, ...], tuple[int, ...]]:
    return verdict.kind, verdict.culprit_ranks, verdict.culprit_hosts, verdict.culprit_pids


def _pod(rank: int) -> str:
    return "train-master-0" if rank == 0 else f"train-worker-{rank - 1}"


def test_a_pods_lines_without_a_pid_are_its_one_ranks(tmp_path: Path) -> None:
    # kubectl logs --prefix: the pod's torch lines name rank 2; its traceback names nobody.
    lines = [f"[pod/{_pod(r)}/pytorch] " + INIT.format(rank=r) for r in range(4)]
    lines += [
        f"[pod/{_pod(2)}/pytorch] {line}"
        for line in (
            "Traceback (most recent call last):",
            '  File "/workspace/train.py", line 180, in main',
            "    batch = next(it)",
            "RuntimeError: DataLoader worker (pid 873) is killed by signal: Bus error. It is "
            "possible that dataloader's workers are out of shared memory. Please try to raise "
            "your shared memory limit.",
        )
    ]
    lines += [f"[pod/{_pod(r)}/pytorch] " + WATCHDOG.format(rank=r) for r in (0, 1, 3)]
    verdict = verdict_of(tmp_path, {"pods.log": "\n".join(lines) + "\n"})
    assert culprit(verdict) == ("resource-exhausted", (2,), ("train-worker-1",), ())


def test_a_host_with_several_processes_gives_none_of_them_its_bare_lines(tmp_path: Path) -> None:
    # The same pod runs two ranks (two pids): its traceback is neither's.
    lines = ["[pod/node-a/pytorch] " + INIT.format(rank=r) for r in (0, 1)]
    lines += [
        "[pod/node-a/pytorch] Traceback (most recent call last):",
        '[pod/node-a/pytorch]   File "/workspace/train.py", line 180, in main',
        "[pod/node-a/pytorch] RuntimeError: DataLoader worker (pid 873) is killed by signal: "
        "Bus error. It is possible that dataloader's workers are out of shared memory.",
    ]
    verdict = verdict_of(tmp_path, {"pods.log": "\n".join(lines) + "\n"})
    assert verdict.kind == "resource-exhausted"
    assert (verdict.culprit_ranks, verdict.culprit_hosts) == ((), ("node-a",))


ROOT = failure_entry(
    0,
    time="2026-11-23_10:00:00",
    host="node-7",
    rank=5,
    local_rank=1,
    exitcode=1,
    pid=9921,
    error_file="/tmp/torchelastic_x1y2/none_abc/attempt_0/1/error.json",
)
OTHER = failure_entry(
    1, time="2026-11-23_10:00:01", host="node-7", rank=6, local_rank=2, exitcode=1, pid=9922
)
ERROR_FILE = {
    "message": {
        "message": "RuntimeError: CUDA error: an illegal memory access was encountered\n",
        "extraInfo": {"py_callstack": "", "timestamp": "1763892000"},
    }
}


def test_an_error_no_line_ties_to_a_process_is_the_one_dead_ranks(tmp_path: Path) -> None:
    verdict = verdict_of(
        tmp_path,
        {
            "error.json": json.dumps(ERROR_FILE, indent=2) + "\n",
            "summary.txt": failure_summary(ROOT),
        },
    )
    assert culprit(verdict) == ("cuda-error", (5,), ("node-7",), (9921,))
    assert "is taken as its writer" in analyze([str(tmp_path)]).diagnosis.findings[0].detail


def test_with_two_dead_ranks_an_ownerless_error_names_no_one(tmp_path: Path) -> None:
    verdict = verdict_of(
        tmp_path,
        {
            "error.json": json.dumps(ERROR_FILE, indent=2) + "\n",
            "summary.txt": failure_summary(ROOT, OTHER),
        },
    )
    assert verdict.kind == "cuda-error"
    assert verdict.culprit_ranks == ()


def _ib_completion(host: str, pid: int, peer: str) -> str:
    return (
        f"{host}:{pid}:{pid + 100} [0] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion "
        f"from peer {peer}<34112> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid "
        "fe80::a288:c2ff:fe1b:2c10 remoteGid fe80::a288:c2ff:fe1b:3f70 hca mlx5_0"
    )


@pytest.mark.parametrize(
    ("second_peer", "blamed"),
    [
        ("10.1.0.13", ("network-error", (), ("10.1.0.13",), ())),
        ("10.1.0.14", ("network-error", (), ("node01",), (5500,))),
    ],
    ids=["one peer: the peer", "different peers: the first reporter"],
)
def test_completion_errors_of_several_hosts_blame_the_peer_they_share(
    tmp_path: Path,
    second_peer: str,
    blamed: tuple[str, tuple[int, ...], tuple[str, ...], tuple[int, ...]],
) -> None:
    warns = [
        _ib_completion("node01", 5500, "10.1.0.13"),
        _ib_completion("node02", 5508, second_peer),
    ]
    verdict = verdict_of(tmp_path, {"warns.txt": "\n".join(warns) + "\n"})
    assert culprit(verdict) == blamed


def test_the_host_whose_port_went_down_outranks_the_peers_that_saw_it(tmp_path: Path) -> None:
    warns = [
        _ib_completion("node01", 5500, "10.1.0.13"),
        _ib_completion("node02", 5508, "10.1.0.13"),
    ]
    dmesg = (
        "[Mon Nov 23 10:01:55 2026] mlx5_core 0000:3b:00.0: mlx5_port_module_event:1130:(pid 0): "
        "Port module event: module 0, Cable unplugged\n"
        "[Mon Nov 23 10:01:55 2026] mlx5_core 0000:3b:00.0 ibp59s0: Link down\n"
    )
    verdict = verdict_of(
        tmp_path, {"warns.txt": "\n".join(warns) + "\n", "node03-dmesg.txt": dmesg}
    )
    assert culprit(verdict) == ("network-error", (), ("node03",), ())


def test_a_proxy_complaint_about_a_local_rank_names_that_rank(tmp_path: Path) -> None:
    # NCCL 2.17+: the proxy service threads of ranks 4 and 5 lost localRank 3 of their host.
    lines = [
        f"hostA:{700 + lr}:{700 + lr} [{lr}] NCCL INFO comm 0x5634a0 rank {4 + lr} nRanks 8 "
        f"nNodes 2 localRanks 4 localRank {lr} MNNVL 0"
        for lr in range(4)
    ]
    lines += [
        f"hostA:{pid}:{pid + 112} [{dev}] proxy.cc:1512 NCCL WARN [Service thread] Could not "
        "receive type from localRank 3, res=3, closed=1"
        for dev, pid in ((0, 700), (1, 701))
    ]
    verdict = verdict_of(tmp_path, {"hostA.log": "\n".join(lines) + "\n"})
    assert culprit(verdict) == ("process-died", (7,), ("hostA",), (703,))


def test_a_ranks_last_error_quote_names_the_nccl_process_that_printed_it(
    tmp_path: Path,
) -> None:
    # NCCL's lines carry host and pid, torch's the rank: the quoted WARN joins them.
    lines = [f"n1:{900 + r}:{900 + r} [{r}] NCCL INFO cudaDriverVersion 12040" for r in range(4)]
    lines += [
        "n1:902:902 [2] include/alloc.h:124 NCCL WARN Cuda failure 'out of memory'",
        "n1:902:902 [2] NCCL INFO include/alloc.h:133 -> 1",
        "n1:902:902 [2] NCCL INFO init.cc:1730 -> 1",
        "[rank2]: torch.distributed.DistBackendError: NCCL error in: "
        "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled cuda error (run "
        "with NCCL_DEBUG=INFO for details), NCCL version 2.20.5",
        "[rank2]: ncclUnhandledCudaError: Call to CUDA function failed.",
        "[rank2]: Last error:",
        "[rank2]: Cuda failure 'out of memory'",
    ]
    verdict = verdict_of(tmp_path, {"out.log": "\n".join(lines) + "\n"})
    assert culprit(verdict) == ("cuda-error", (2,), ("n1",), (902,))


def test_a_compose_containers_crash_is_its_ranks(tmp_path: Path) -> None:
    text = (
        "trainer-1  | [rank1]:[W1123 10:00:00.000000 51 torch/csrc/distributed/c10d/"
        "ProcessGroupNCCL.cpp:4561] Warning: TORCH_NCCL_AVOID_RECORD_STREAMS=1 has no effect for "
        "point-to-point collectives. (function operator())\n"
        "trainer-1  | Fatal Python error: Segmentation fault\n"
        "trainer-1  |\n"
        "trainer-1  | Current thread 0x00007f2a1c9ff740 (most recent call first):\n"
        'trainer-1  |   File "/app/model/attention.py", line 311 in forward\n'
        "trainer-1 exited with code 139\n"
        "trainer-0  | [rank0]:[E1123 10:00:31.000000 50 torch/csrc/distributed/c10d/"
        "ProcessGroupNCCL.cpp:1742] [PG ID 0 PG GUID 0(default_pg) Rank 0] Process group "
        "watchdog thread terminated with exception: NCCL error: remote process exited or there "
        "was a network error, NCCL version 2.21.5\n"
    )
    verdict = verdict_of(tmp_path, {"compose.log": text})
    assert (verdict.kind, verdict.culprit_ranks, verdict.culprit_hosts) == (
        "process-died",
        (1,),
        ("trainer-1",),
    )


RAY_ACTOR_DIED = """\
ray.exceptions.RayTaskError(ActorDiedError): ray::_Inner.train() (pid=3012, ip=10.0.0.2, actor_id=aa11, repr=TorchTrainer)
ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.
\tclass_name: RayTrainWorker
\tactor_id: 9f3c2a
\tpid: 4471
\tnamespace: 1a2b
\tip: 10.0.0.7
The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection error code 2. End of file.
"""


def test_a_dead_actor_is_the_process_its_description_names(tmp_path: Path) -> None:
    # The driver's own task (pid 3012 on 10.0.0.2) reports the death of another process.
    verdict = verdict_of(tmp_path, {"driver.log": RAY_ACTOR_DIED})
    assert culprit(verdict) == ("process-died", (), ("10.0.0.7",), (4471,))


def test_a_traceback_placed_by_its_pod_is_the_death_the_others_wait_for(tmp_path: Path) -> None:
    pods = ["train-master-0", "train-worker-0", "train-worker-1", "train-worker-2"]
    lines = [f"{pod} pytorch {INIT.format(rank=r)}" for r, pod in enumerate(pods)]
    lines += [
        "train-worker-2 pytorch Traceback (most recent call last):",
        'train-worker-2 pytorch   File "/workspace/train.py", line 180, in main',
        "train-worker-2 pytorch     loss.backward()",
        "train-worker-2 pytorch torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
        "4.00 GiB. GPU 0 has a total capacity of 79.14 GiB of which 1.02 GiB is free.",
    ]
    lines += [f"{pods[r]} pytorch {WATCHDOG.format(rank=r)}" for r in (0, 1, 2)]
    verdict = verdict_of(tmp_path, {"stern.log": "\n".join(lines) + "\n"})
    # The OOM is why rank 3 never joined: the death leads, not "rank 3 never entered".
    assert verdict.kind == "process-died"
    assert (verdict.culprit_ranks, verdict.culprit_hosts) == ((3,), ("train-worker-2",))


IB_ABORT = (
    "[rank2]:[E1123 09:30:00.000000 202 torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1595] "
    "[PG ID 0 PG GUID 0(default_pg) Rank 2] Process group watchdog thread terminated with "
    "exception: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL "
    "version 2.21.5",
    # NCCL's own text for the code ends in a blank.
    "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or "
    "device error. ",
    "Last error:",
    "NET/IB : Got completion from peer 10.12.0.21<38841> with status=12 opcode=0 len=0 vendor "
    "err 129 (Send) localGid ::ffff:10.12.0.13 remoteGidsfe80::a288:c2ff:fe3d:1f40 hca mlx5_3",
)


NCCL_WARN = (
    "[rank2]: node3:202:305 [2] NCCL WARN NET/IB : Got completion from peer 10.12.0.21<38841> "
    "with status=12 opcode=0 len=0 vendor err 129 (Send) localGid ::ffff:10.12.0.13 hca mlx5_3"
)


@pytest.mark.parametrize("form", ["c10-record", "every-line-tagged", "nccl-warn"])
def test_a_rank_missing_from_the_collective_for_its_own_network_error_is_led_by_it(
    tmp_path: Path, form: str
) -> None:
    # Rank 2 hits an IB completion error (its watchdog's record, with or without the rank
    # tag on each line, or NCCL's own WARN, which blames the peer it names); ranks 0, 1 and
    # 3 then time out in the collective rank 2 never joined. The error is why rank 2 is
    # missing: it leads, and names rank 2, the rank the others wait for.
    if form == "nccl-warn":
        abort = [NCCL_WARN]
    else:
        tag = "[rank2]: " if form == "every-line-tagged" else ""
        abort = [IB_ABORT[0], *(tag + line for line in IB_ABORT[1:])]
    timeouts = [WATCHDOG.format(rank=r) for r in (0, 1, 3)]
    verdict = verdict_of(tmp_path, {"excerpt.log": "\n".join([*abort, *timeouts]) + "\n"})
    assert verdict.kind == "network-error"
    assert verdict.culprit_ranks == (2,)
    assert verdict.culprit_pids == (202,)
    assert "status=12" in verdict.summary


RANK_TAGS = [
    "2025-11-23 10:30:00,123 [RANK 2] ERROR train: ",
    "2025-11-23 10:30:00 (rank 2) ERROR ",
    "2025-11-23T10:30:00Z level=error rank=2 msg=",
    "2025-11-23 10:30:00.123 | ERROR    | rank 2 | ",
    "2025-11-23 10:30:00 global_rank: 2 - ERROR - ",
]


@pytest.mark.parametrize("tag", RANK_TAGS, ids=["RANK", "paren", "logfmt", "column", "global"])
@pytest.mark.parametrize("logged", ["message", "traceback"])
def test_a_log_formats_own_rank_tag_names_the_writer(tmp_path: Path, tag: str, logged: str) -> None:
    # A training script's logger writes its rank into its prefix in its own way; rank 2 then
    # logs the CUDA error (as the message, or as the exception under an ERROR record no
    # catalog knows) while ranks 0, 1 and 3 time out.
    error = "RuntimeError: CUDA error: an illegal memory access was encountered"
    if logged == "message":
        lines = [tag + error]
    else:
        lines = [
            tag + "step 1200 failed, exiting",
            "Traceback (most recent call last):",
            '  File "train.py", line 10, in <module>',
            "    loss.backward()",
            error,
        ]
    lines += [WATCHDOG.format(rank=r) for r in (0, 1, 3)]
    verdict = verdict_of(tmp_path, {"job.log": "\n".join(lines) + "\n"})
    assert (verdict.kind, verdict.culprit_ranks) == ("cuda-error", (2,))


def test_a_traceback_under_an_info_line_with_a_rank_tag_is_not_that_ranks(tmp_path: Path) -> None:
    # Lightning's "initializing ddp: GLOBAL_RANK: 2" is every process's INFO line: in a
    # combined log, the traceback that happens to follow it may be any process's.
    lines = [
        "initializing ddp: GLOBAL_RANK: 2, MEMBER: 3/4",
        "Traceback (most recent call last):",
        '  File "train.py", line 10, in <module>',
        "RuntimeError: CUDA error: an illegal memory access was encountered",
    ]
    lines += [WATCHDOG.format(rank=r) for r in (0, 1, 3)]
    verdict = verdict_of(tmp_path, {"job.log": "\n".join(lines) + "\n"})
    assert verdict.kind == "cuda-error"
    assert 2 not in verdict.culprit_ranks


@pytest.mark.parametrize("prose", ["local_rank=2 ", "2025-11-23 node rank 2 "])
def test_a_local_or_node_rank_is_not_the_writers_rank(tmp_path: Path, prose: str) -> None:
    lines = [prose + "RuntimeError: CUDA error: an illegal memory access was encountered"]
    lines += [WATCHDOG.format(rank=r) for r in (0, 1, 3)]
    verdict = verdict_of(tmp_path, {"job.log": "\n".join(lines) + "\n"})
    assert 2 not in verdict.culprit_ranks


OLD_TIMEOUT = (
    "[E ProcessGroupNCCL.cpp:587] [Rank {rank}] Watchdog caught collective operation timeout: "
    "WorkNCCL(OpType={op}, Timeout(ms)=1800000) ran for 1803772 milliseconds before timing out."
)


def test_torch_1_9_timeouts_without_seqnum_name_the_silent_rank(tmp_path: Path) -> None:
    # Ranks 1-3 time out (torch before 1.10 printed no SeqNum) and rank 0 says nothing: rank 0
    # never joined the collective, which the verdict names without a SeqNum it never saw.
    lines = [OLD_TIMEOUT.format(rank=r, op="ALLREDUCE") for r in (1, 2, 3)]
    verdict = verdict_of(tmp_path, {"job.log": "\n".join(lines) + "\n"})
    assert (verdict.kind, verdict.culprit_ranks) == ("missing-collective", (0,))
    assert "ALLREDUCE" in verdict.summary
    assert "SeqNum" not in verdict.summary


def test_timeouts_without_seqnum_in_different_collectives_are_no_mismatch_claim(
    tmp_path: Path,
) -> None:
    # Without a SeqNum there is no position at which to compare what the ranks ran.
    lines = [OLD_TIMEOUT.format(rank=r, op="ALLREDUCE") for r in (0, 1, 2)]
    lines.append(OLD_TIMEOUT.format(rank=3, op="BROADCAST"))
    verdict = verdict_of(tmp_path, {"job.log": "\n".join(lines) + "\n"})
    assert verdict.kind != "collective-mismatch"
    assert "None" not in verdict.summary


def _summary(exits: dict[int, int]) -> str:
    """torchrun's report of a 4-rank job on one host; the first entry is the root cause."""
    signals = {-6: "Signal 6 (SIGABRT)", -15: "Signal 15 (SIGTERM)"}
    entries = [
        failure_entry(
            i,
            time="2026-11-23_10:40:00",
            host="node-7",
            rank=rank,
            local_rank=rank,
            exitcode=code,
            pid=4101 + rank,
            traceback=f"{signals[code]} received by PID {4101 + rank}" if code in signals else "",
        )
        for i, (rank, code) in enumerate(exits.items())
    ]
    return failure_summary(entries[0], "\n".join(entries[1:]))


def test_a_rank_stopped_after_the_others_timeouts_aborted_them_is_the_silent_one(
    tmp_path: Path,
) -> None:
    # Ranks 0, 1, 3 time out and abort (SIGABRT); torchrun then stops rank 2 (SIGTERM). Rank
    # 2's watchdog ran as long as theirs without firing: it was never in the collective.
    lines = [f"[rank{r}]: step 300 loss 1.87" for r in range(4)]
    lines += [WATCHDOG.format(rank=r) for r in (0, 1, 3)]
    text = "\n".join(lines) + "\n" + _summary({0: -6, 1: -6, 2: -15, 3: -6})
    verdict = verdict_of(tmp_path, {"torchrun.log": text})
    assert (verdict.kind, verdict.culprit_ranks) == ("missing-collective", (2,))


def test_a_rank_stopped_after_a_sibling_crashed_is_not_blamed_for_its_silence(
    tmp_path: Path,
) -> None:
    # Rank 1 failed on its own (exit 1, no timeout): rank 2 was stopped because of it, so its
    # missing timeout says nothing about where it was.
    lines = [f"[rank{r}]: step 300 loss 1.87" for r in range(4)]
    lines += [WATCHDOG.format(rank=r) for r in (0, 3)]
    text = "\n".join(lines) + "\n" + _summary({1: 1, 0: -6, 2: -15, 3: -6})
    verdict = verdict_of(tmp_path, {"torchrun.log": text})
    assert 2 not in verdict.culprit_ranks
