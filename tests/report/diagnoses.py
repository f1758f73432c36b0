"""Hand-built diagnoses for the report tests: what analysis would hand the reporters."""

from __future__ import annotations

import dataclasses

from logsleuth.analysis.stacks import build_class_tree, find_outliers
from logsleuth.model.diagnosis import (
    CommProgress,
    CommunicatorView,
    ConfigEntry,
    ConfigValue,
    Diagnosis,
    Evidence,
    Finding,
    FirstError,
    InputView,
    JobView,
    ProgressGroup,
    RankView,
    StackClass,
    Verdict,
)
from logsleuth.model.ranks import format_ranks
from logsleuth.model.waitfor import WaitEdge, WaitFor, WaitNode

COMM = "0x7f3a9c2b11d04e55"
HOSTS = ("node-a", "node-b")
SCRIPT_ATTACK = "<script>window.__pwned = 1; alert(1)</script>"
IMG_ATTACK = '<img src=x onerror="window.__pwned = 2; alert(1)">'
CLOSE_ATTACK = "</script><!-- <script>window.__pwned = 3</script>"


def _with_stack_views(d: Diagnosis) -> Diagnosis:
    """Add the stack tree and suspects that analysis derives from the stack classes."""
    classes = d.stack_classes
    return dataclasses.replace(
        d,
        stack_tree=build_class_tree(classes) if classes else None,
        stack_suspects=find_outliers(classes),
    )


def _waitfor(world: int, culprit: int, host: str, pid: int) -> WaitFor:
    """Return the wait-for graph of a job whose ranks all wait for ``culprit`` in AllReduce."""
    nodes = tuple(
        WaitNode(
            id=f"rank {r}",
            rank=r,
            host=HOSTS[r // 4] if world == 8 else None,
            pid=4100 + r if world == 8 else None,
            state="elsewhere" if r == culprit else "waiting",
            where="data loading at train_loop (train.py:61)" if r == culprit else "all_reduce",
        )
        for r in range(world)
    )
    edges = tuple(
        WaitEdge(
            waiter=f"rank {r}",
            waits_for=f"rank {culprit}",
            reason=f"in AllReduce #412; rank {culprit} never entered it",
            source="nccl",
            evidence=Evidence(
                "launcher.log",
                88 + r,
                f"[rank{r}]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank {r}] "
                "Watchdog caught collective operation timeout",
            ),
        )
        for r in range(min(world, 64))
        if r != culprit
    )
    return WaitFor(
        nodes=nodes,
        edges=edges,
        culprits=(f"rank {culprit}",),
        victims=tuple((e.waiter, e.reason) for e in edges),
        resolution=f"sink: rank {culprit} on {host} (pid {pid}) waits for nobody",
    )


def _host(rank: int) -> str:
    return HOSTS[rank // 4]


def _pid(rank: int) -> int:
    return 4100 + rank


def missing_collective() -> Diagnosis:
    """Return an 8-rank job on 2 hosts where rank 5 never entered AllReduce #412."""
    return _with_stack_views(_missing_collective())


def _missing_collective() -> Diagnosis:
    waiting = (0, 1, 2, 3, 4, 6, 7)
    primary = Finding(
        code="LS101",
        name="collective.missing",
        kind="missing-collective",
        severity="critical",
        title="rank 5 never entered AllReduce #412 on comm 0x7f3a9c2b11d04e55",
        detail=(
            "7 of 8 ranks logged AllReduce opCount 0x19c on comm 0x7f3a9c2b11d04e55 and then "
            "timed out in it; rank 5 logged opCount 0x19b as its last collective and its stack "
            "shows it waiting on the DataLoader."
        ),
        ranks=(5,),
        hosts=("node-b",),
        pids=(4105,),
        communicator=COMM,
        confidence=0.9049,
        evidence=(
            Evidence(
                "nccl/node-b.log",
                1187,
                "node-b:4105:4105 [1] NCCL INFO AllReduce: opCount 19b sendbuff 0x7f2c1a000000 "
                "recvbuff 0x7f2c1a000000 count 2097152 datatype 7 op 0 root 0 comm 0x55d2c0 "
                "[nranks=8] stream 0x55d2e0",
                context=(
                    (
                        1184,
                        "node-b:4105:4105 [1] NCCL INFO AllReduce: opCount 19a sendbuff "
                        "0x7f2c1a000000 recvbuff 0x7f2c1a000000 count 2097152 datatype 7 op 0 "
                        "root 0 comm 0x55d2c0 [nranks=8] stream 0x55d2e0",
                    ),
                    (1189, "node-b:4105:4105 [1] NCCL INFO comm 0x55d2c0 rank 5 - Abort COMPLETE"),
                ),
            ),
            Evidence(
                "nccl/node-a.log",
                2374,
                "node-a:4100:4100 [0] NCCL INFO AllReduce: opCount 19c sendbuff 0x7f3a40000000 "
                "recvbuff 0x7f3a40000000 count 2097152 datatype 7 op 0 root 0 comm 0x55a1f0 "
                "[nranks=8] stream 0x55a210",
            ),
            Evidence(
                "launcher.log",
                88,
                "[rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog "
                "caught collective operation timeout: WorkNCCL(SeqNum=413, OpType=ALLREDUCE, "
                "NumelIn=2097152, NumelOut=2097152, Timeout(ms)=600000) ran for 600060 "
                "milliseconds before timing out.",
            ),
        ),
        evidence_total=9,
        next_steps=(
            "Look at rank 5 (node-b pid 4105): its stack waits in the DataLoader at "
            "train_loop (train.py:61), so it never reached the AllReduce in train_step.",
            "Check the data pipeline on node-b (worker processes, the dataset's storage) and "
            "whether rank 5 takes a different branch before train_step.",
        ),
    )
    timeout = Finding(
        code="LS203",
        name="collective.timeout",
        kind="collective-timeout",
        severity="error",
        title="7 ranks hit the watchdog timeout in AllReduce SeqNum 413",
        detail="A symptom of the missing collective: the waiting ranks time out after 600 s.",
        ranks=waiting,
        hosts=HOSTS,
        pids=tuple(_pid(r) for r in waiting),
        communicator=COMM,
        confidence=0.6,
        evidence=(
            Evidence(
                "launcher.log",
                88,
                "[rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog "
                "caught collective operation timeout: WorkNCCL(SeqNum=413, OpType=ALLREDUCE, "
                "NumelIn=2097152, NumelOut=2097152, Timeout(ms)=600000) ran for 600060 "
                "milliseconds before timing out.",
            ),
        ),
        evidence_total=7,
        next_steps=("Explained by LS101; fix that first.",),
    )
    socket = Finding(
        code="LS302",
        name="transport.socket_fallback",
        kind="transport-degraded",
        severity="warning",
        title="node-b talks to node-a over NET/Socket instead of InfiniBand",
        detail="NCCL found no usable IB device on node-b and fell back to TCP sockets.",
        ranks=(4, 5, 6, 7),
        hosts=("node-b",),
        confidence=0.7,
        evidence=(
            Evidence(
                "nccl/node-b.log",
                41,
                "node-b:4104:4104 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.12<0>",
            ),
        ),
        evidence_total=1,
        next_steps=("Check NCCL_IB_HCA and that the IB driver is loaded on node-b.",),
    )
    p2p = Finding(
        code="LS305",
        name="transport.p2p_disabled",
        kind="transport-degraded",
        severity="info",
        title="P2P is disabled between GPUs on node-a; traffic goes through host memory",
        detail="NCCL_P2P_DISABLE=1 is set in the environment of ranks 0-3.",
        ranks=(0, 1, 2, 3),
        hosts=("node-a",),
        confidence=0.5,
        evidence=(
            Evidence(
                "nccl/node-a.log",
                12,
                "node-a:4100:4100 [0] NCCL INFO NCCL_P2P_DISABLE set by environment to 1.",
            ),
        ),
        evidence_total=4,
    )
    collective_stack = StackClass(
        ranks="0-4,6-7",
        count=7,
        frames=(
            "all_reduce (torch/distributed/distributed_c10d.py:2501)",
            "wrapper (torch/distributed/c10d_logger.py:81)",
            "train_step (train.py:42)",
            "train_loop (train.py:64)",
            "main (train.py:88)",
            "<module> (train.py:97)",
        ),
        category="collective",
        call_site="train_step (train.py:42)",
        collective="all_reduce",
        pids=tuple(_pid(r) for r in waiting),
        hosts=HOSTS,
        libraries=("torch", "torch", None, None, None, None),
    )
    loader_stack = StackClass(
        ranks="5",
        count=1,
        frames=(
            "wait (threading.py:331)",
            "get (queue.py:180)",
            "_get_data (torch/utils/data/dataloader.py:1133)",
            "_next_data (torch/utils/data/dataloader.py:1294)",
            "__next__ (torch/utils/data/dataloader.py:631)",
            "train_loop (train.py:61)",
            "main (train.py:88)",
            "<module> (train.py:97)",
        ),
        category="data-loading",
        call_site="train_loop (train.py:61)",
        pids=(4105,),
        hosts=("node-b",),
        libraries=("stdlib", "stdlib", "torch", "torch", "torch", None, None, None),
    )
    world = CommunicatorView(
        id=COMM,
        nranks=8,
        ranks_seen="0-7",
        init_complete="0-7",
        hosts=HOSTS,
        last_op_counts=(("0-4,6-7", 412, "AllReduce"), ("5", 411, "AllReduce")),
        channels=4,
        transports=(("P2P/IPC", 24), ("NET/Socket", 16)),
    )
    pipe = CommunicatorView(
        id="0x1b2c3d4e5f607182",
        nranks=2,
        ranks_seen="0,4",
        init_complete="0",
        init_missing="4",
        hosts=HOSTS,
        channels=2,
        transports=(("NET/Socket", 2),),
    )
    ranks = tuple(
        RankView(
            rank=r,
            host=_host(r),
            pid=_pid(r),
            devices=(r % 4,),
            bus_ids=(f"0000:{0x17 + r % 4:02x}:00.0",),
            nccl_version="2.21.5",
            sources=(f"nccl/{_host(r)}.log", "launcher.log"),
            last_collective=f"AllReduce #{0x19B if r == 5 else 0x19C:#x} on comm {COMM}",
            state="data loading" if r == 5 else "all_reduce",
            first_error=None if r == 5 else "Watchdog caught collective operation timeout",
        )
        for r in range(8)
    )
    return Diagnosis(
        waitfor=_waitfor(8, 5, "node-b", 4105),
        verdict=Verdict(
            kind="missing-collective",
            summary=(
                "rank 5 (node-b pid 4105) never entered AllReduce #412 on comm "
                "0x7f3a9c2b11d04e55; the other 7 ranks wait in it"
            ),
            culprit_ranks=(5,),
            culprit_hosts=("node-b",),
            culprit_pids=(4105,),
            confidence=0.9049,
            code="LS101",
        ),
        findings=(primary, timeout, socket, p2p),
        job=JobView(
            world_size=8,
            hosts=HOSTS,
            nccl_versions=(("2.21.5", tuple(range(8)), HOSTS),),
            torch_version="2.13.0",
            launcher="torchrun",
            time_range=("2026-03-21 01:58:40", "2026-03-21 02:07:09"),
        ),
        communicators=(world, pipe),
        stack_classes=(collective_stack, loader_stack),
        ranks=ranks,
        inputs=(
            InputView(
                source="launcher.log",
                kind="torch-log",
                lines=120,
                recognized=97,
                unrecognized=15,
                blank=8,
            ),
            InputView(
                source="nccl/node-a.log",
                kind="nccl-log",
                lines=2400,
                recognized=2391,
                unrecognized=9,
                blank=0,
            ),
            InputView(
                source="nccl/node-b.log",
                kind="nccl-log",
                lines=1210,
                recognized=1205,
                unrecognized=5,
                blank=0,
            ),
            InputView(
                source="stacks/rank5.txt",
                kind="py-spy",
                lines=14,
                recognized=12,
                unrecognized=0,
                blank=2,
            ),
        ),
        gaps=(
            "no flight-recorder dumps: collective order comes from NCCL COLL lines only",
            "no stack dumps for node-a; its state comes from the launcher log",
        ),
        progress=(
            CommProgress(
                id=COMM,
                nranks=8,
                members=8,
                groups=(
                    ProgressGroup(
                        ranks="0-4,6-7", count=7, op_count=412, collective="AllReduce", behind=0
                    ),
                    ProgressGroup(
                        ranks="5", count=1, op_count=411, collective="AllReduce", behind=1
                    ),
                ),
                laggards="5",
            ),
            CommProgress(
                id="0x1b2c3d4e5f607182",
                nranks=2,
                members=2,
                groups=(
                    ProgressGroup(ranks="4-5", count=2, op_count=96, collective="Send", behind=0),
                ),
            ),
        ),
        timeline=(
            FirstError(
                kind="watchdog timeout",
                message=(
                    "[rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog "
                    "caught collective operation timeout: WorkNCCL(SeqNum=413, OpType=ALLREDUCE)"
                ),
                ranks="0-4,6-7",
                processes=7,
                hosts=HOSTS,
                time="02:07:08.408",
                last_time="02:07:08.913",
                evidence=Evidence(
                    "launcher.log",
                    88,
                    "[rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] "
                    "Watchdog caught collective operation timeout",
                ),
            ),
            FirstError(
                kind="process failed",
                message="exitcode -6, signal SIGABRT",
                ranks="5",
                processes=1,
                hosts=("node-b",),
                evidence=Evidence("launcher.log", 112, "[5]:"),
            ),
        ),
        config=(
            ConfigEntry(
                key="NCCL_P2P_DISABLE",
                values=(ConfigValue(value="1", ranks="0-3", processes=4, hosts=("node-a",)),),
                unset="4-7",
                differs=True,
            ),
            ConfigEntry(
                key="CUDA driver",
                values=(ConfigValue(value="12.4 (12040)", ranks="0-7", processes=8, hosts=HOSTS),),
            ),
        ),
    )


def healthy() -> Diagnosis:
    """Return a 2-rank job where nothing went wrong."""
    return Diagnosis(
        verdict=Verdict(
            kind="healthy",
            summary="no problem found in 2 inputs from 2 ranks; every communicator initialized",
            confidence=0.8,
        ),
        findings=(),
        job=JobView(
            world_size=2,
            hosts=("node-a",),
            nccl_versions=(("2.21.5", (0, 1), ("node-a",)),),
            torch_version="2.13.0",
        ),
        communicators=(CommunicatorView(id=COMM, nranks=2, ranks_seen="0-1", init_complete="0-1"),),
        stack_classes=(),
        ranks=(
            RankView(rank=0, host="node-a", pid=100, devices=(0,)),
            RankView(rank=1, host="node-a", pid=101, devices=(1,)),
        ),
        inputs=(
            InputView(
                source="nccl.log",
                kind="nccl-log",
                lines=50,
                recognized=48,
                unrecognized=2,
                blank=0,
            ),
        ),
    )


def hostile() -> Diagnosis:
    """Return :func:`missing_collective` with markup and script injections in every text."""
    d = missing_collective()
    primary = d.findings[0]
    attacked_evidence = (
        Evidence(
            "nccl/node-b.log",
            7,
            f"node-b:4105:4105 [1] NCCL WARN {SCRIPT_ATTACK}",
            context=((6, f"node-b:4105:4105 [1] NCCL INFO {IMG_ATTACK}"), (9, CLOSE_ATTACK)),
        ),
        Evidence("nccl/node-b.log", 8, f"node-b:4105:4105 [1] NCCL WARN {IMG_ATTACK}"),
        Evidence("nccl/node-b.log", 9, f"node-b:4105:4105 [1] NCCL WARN {CLOSE_ATTACK}"),
        *primary.evidence,
    )
    primary = dataclasses.replace(
        primary,
        title=f"rank 5 {IMG_ATTACK}",
        evidence=attacked_evidence,
        next_steps=(*primary.next_steps, f"Ignore {SCRIPT_ATTACK}"),
    )
    loader = d.stack_classes[1]
    loader = dataclasses.replace(
        loader, frames=(f"{SCRIPT_ATTACK} (evil.py:1)", f"{IMG_ATTACK} (evil.py:2)", *loader.frames)
    )
    verdict = dataclasses.replace(
        d.verdict, summary=f"{d.verdict.summary} {CLOSE_ATTACK} {IMG_ATTACK}"
    )
    ranks = tuple(
        dataclasses.replace(r, first_error=f"[rank5]: {SCRIPT_ATTACK}") if r.rank == 5 else r
        for r in d.ranks
    )
    return _with_stack_views(
        dataclasses.replace(
            d,
            verdict=verdict,
            findings=(primary, *d.findings[1:]),
            stack_classes=(d.stack_classes[0], loader),
            ranks=ranks,
            gaps=(*d.gaps, f"gap {CLOSE_ATTACK}"),
            progress=(dataclasses.replace(d.progress[0], id=f"0x1 {IMG_ATTACK}"), *d.progress[1:]),
            timeline=(
                dataclasses.replace(d.timeline[0], message=f"{SCRIPT_ATTACK} {IMG_ATTACK}"),
                *d.timeline[1:],
            ),
            config=(
                dataclasses.replace(
                    d.config[0],
                    key=f"NCCL_{IMG_ATTACK}",
                    values=(dataclasses.replace(d.config[0].values[0], value=SCRIPT_ATTACK),),
                ),
                *d.config[1:],
            ),
        )
    )


def large(world: int = 4096, per_host: int = 8, culprit: int = 1234) -> Diagnosis:
    """Return a ``world``-rank job in which ``culprit`` never entered the last AllReduce."""
    d = missing_collective()
    hosts = tuple(f"gpu-node{h:04d}" for h in range(world // per_host))
    others = tuple(r for r in range(world) if r != culprit)
    ranks = tuple(
        RankView(
            rank=r,
            host=hosts[r // per_host],
            pid=40000 + r,
            devices=(r % per_host,),
            nccl_version="2.21.5",
            last_collective=f"AllReduce opCount {0x26 if r == culprit else 0x27:#x} on {COMM}",
            state="barrier at evaluate (train.py:96)" if r == culprit else "all_reduce",
            first_error=None if r == culprit else "Watchdog caught collective operation timeout",
        )
        for r in range(world)
    )
    primary = dataclasses.replace(
        d.findings[0],
        title=f"rank {culprit} never entered AllReduce #39 on comm {COMM}",
        ranks=(culprit,),
        hosts=(hosts[culprit // per_host],),
        pids=(40000 + culprit,),
    )
    timeout = dataclasses.replace(d.findings[1], ranks=others)
    per_host_findings = tuple(
        dataclasses.replace(
            d.findings[3], title=f"P2P disabled on {host}", hosts=(host,), ranks=(), pids=()
        )
        for host in hosts[:40]
    )
    return _with_stack_views(
        dataclasses.replace(
            d,
            waitfor=_waitfor(world, culprit, hosts[culprit // per_host], 40000 + culprit),
            verdict=dataclasses.replace(
                d.verdict,
                summary=f"rank {culprit} never entered AllReduce #39; the other {world - 1} ranks wait",
                culprit_ranks=(culprit,),
                culprit_hosts=(hosts[culprit // per_host],),
                culprit_pids=(40000 + culprit,),
            ),
            findings=(primary, timeout, *per_host_findings),
            job=dataclasses.replace(
                d.job,
                world_size=world,
                hosts=hosts,
                nccl_versions=(("2.21.5", tuple(range(world)), hosts),),
            ),
            ranks=ranks,
            inputs=tuple(
                InputView(
                    source=f"nccl/{host}.{40000 + r}.log",
                    kind="nccl-log",
                    lines=300,
                    recognized=300,
                    unrecognized=0,
                    blank=0,
                )
                for r, host in ((r, hosts[r // per_host]) for r in range(world))
            ),
            progress=(
                CommProgress(
                    id=COMM,
                    nranks=world,
                    members=world,
                    groups=(
                        ProgressGroup(
                            ranks=format_ranks(others),
                            count=world - 1,
                            op_count=39,
                            collective="AllReduce",
                            behind=0,
                        ),
                        ProgressGroup(
                            ranks=str(culprit),
                            count=1,
                            op_count=38,
                            collective="AllReduce",
                            behind=1,
                        ),
                    ),
                    laggards=str(culprit),
                ),
            ),
            stack_classes=(
                dataclasses.replace(
                    d.stack_classes[0], ranks=format_ranks(others), count=world - 1
                ),
                dataclasses.replace(d.stack_classes[1], ranks=str(culprit), count=1),
            ),
        )
    )
