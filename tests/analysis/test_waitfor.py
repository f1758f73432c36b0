"""The wait-for graph (analysis/waitfor.py) and LS120: the culprit is where waiting ends.

The real gloo bundles under fixtures/real/live/ (captured with ``logsleuth repro run NAME
--live``, see its README) are the must-fire cases: each names exactly its culprit and kind.
The small logs written here are the one-sided cases: a single reporting rank is the one
that waited, never the culprit.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from logsleuth.api import analyze
from logsleuth.model.diagnosis import Diagnosis

LIVE = Path(__file__).resolve().parents[2] / "fixtures" / "real" / "live"


def _diagnose(*paths: Path | str) -> Diagnosis:
    return analyze([str(p) for p in paths]).diagnosis


@pytest.mark.parametrize(
    ("bundle", "kind", "culprits"),
    [
        # rank 1 leaves out the final barrier and exits 0; ranks 0, 2, 3 lose their peer
        ("skip-last-collective", "process-died", (1,)),
        # DETAIL: every rank prints fingerprints; three agree on [1024], rank 1 has [2048]
        ("size-mismatch-detail", "collective-mismatch", (1,)),
        # rank 0 evaluates in its own code while 1-3 wait in the next all_reduce
        ("eval-stall", "non-collective-stall", (0,)),
        # rank 1's set-up outlasts the store-based barrier; 0, 2, 3 time out in it
        ("init-barrier-slow", "init-stall", (1,)),
        # rank 1 issues broadcast where the others all_reduce (stacks only)
        ("order-mismatch", "collective-mismatch", (1,)),
    ],
)
def test_live_bundle_names_exactly_the_culprit_and_kind(
    bundle: str, kind: str, culprits: tuple[int, ...]
) -> None:
    d = _diagnose(LIVE / bundle)
    assert (d.verdict.kind, d.verdict.culprit_ranks) == (kind, culprits), [
        f"{f.code} {f.kind} {f.ranks} {f.title}" for f in d.findings[:4]
    ]
    # No victim is blamed at the culprit's level.
    critical = [f for f in d.findings if f.severity == "critical"]
    assert all(set(f.ranks) <= set(culprits) for f in critical), [
        (f.code, f.ranks) for f in critical
    ]


def test_subgroup_barrier_skip_names_the_rank_that_skipped_not_its_partner() -> None:
    """Rank 1 skips the barrier of its pair (0, 1) and goes on to the world all_reduce.

    Rank 0 waits in the pair's barrier for rank 1 and everybody else waits in the
    all_reduce for rank 0: a cycle. The flight recorder's order breaks it: ranks 0, 2, 3
    issued the barrier where rank 1 issued the all_reduce, and the all_reduce is what the
    majority issued next, so rank 1 skipped the barrier.
    """
    d = _diagnose(LIVE / "subgroup-barrier-skip")
    assert d.verdict.culprit_ranks == (1,)
    (finding,) = [f for f in d.findings if f.code == "LS120"]
    assert (finding.kind, finding.ranks) == ("missing-collective", (1,))
    assert finding.title.startswith("rank 1 skipped barrier at main (subgroup_barrier_skip.py:29)")
    graph = d.waitfor
    assert graph is not None
    assert graph.cycles == (("rank 0", "rank 1"),)
    assert graph.culprits == ("rank 1",)
    assert dict(graph.victims)["rank 0"] == "barrier #4 of process group 1: rank 1 is at #3"
    # The partner, behind in the world group, is reported as what it is: waiting.
    behind = [f for f in d.findings if f.code == "LS106" and f.ranks == (0,)]
    assert [f.severity for f in behind] == ["warning"]


def test_subgroup_barrier_skip_verdict_kind() -> None:
    # LS204 no longer takes rank 1's own gloo timeout (exit code 1) for a death.
    assert _diagnose(LIVE / "subgroup-barrier-skip").verdict.kind == "missing-collective"


def test_victims_are_reported_with_the_edge_that_makes_them_victims() -> None:
    d = _diagnose(LIVE / "skip-last-collective")
    graph = d.waitfor
    assert graph is not None
    node = graph.node("rank 1")
    assert node is not None
    assert (node.state, node.pid) == ("exited", 7460)
    assert graph.culprits == ("rank 1",)
    assert [v for v, _ in graph.victims] == ["rank 0", "rank 2", "rank 3"]
    assert {e.waiter for e in graph.edges if e.waits_for == "rank 1"} == {
        "rank 0",
        "rank 2",
        "rank 3",
    }
    assert all(e.evidence is not None for e in graph.edges)


def test_the_store_barrier_names_the_rank_that_never_joined() -> None:
    d = _diagnose(LIVE / "init-barrier-slow")
    graph = d.waitfor
    assert graph is not None
    reasons = {e.waiter: e.reason for e in graph.edges if e.waits_for == "rank 1"}
    assert sorted(reasons) == ["rank 0", "rank 2", "rank 3"]
    assert reasons["rank 0"] == (
        "store-based barrier at init: 3 of 4 ranks joined; rank 1 is the one missing"
    )
    (finding,) = [f for f in d.findings if f.code == "LS120"]
    assert "wait chain: rank 0 -> rank 1" in finding.detail


def test_detail_fingerprints_name_the_odd_one_out() -> None:
    d = _diagnose(LIVE / "size-mismatch-detail")
    assert d.verdict.code == "LS102"
    assert d.verdict.summary == (
        "rank(s) 1 issued a different collective at sequence number 3 (the tensor shape "
        "([2048] versus [1024])) than rank(s) 0,2-3"
    )


def test_waitfor_is_in_the_json() -> None:
    from logsleuth.report.json import build_json

    data = build_json(_diagnose(LIVE / "eval-stall"))
    waitfor = data["waitfor"]
    assert isinstance(waitfor, dict)
    assert waitfor["culprits"] == ["rank 0"]
    assert waitfor["resolution"] == "sink: where waiting ends"
    assert [(e["waiter"], e["waits_for"], e["source"]) for e in waitfor["edges"]] == [
        ("rank 1", "rank 0", "flight-recorder"),
        ("rank 2", "rank 0", "flight-recorder"),
        ("rank 3", "rank 0", "flight-recorder"),
    ]


# ---- one side of the story -----------------------------------------------------------------

WATCHDOG = (
    "[rank3]:[E1121 16:20:50.421164592 ProcessGroupNCCL.cpp:629] [Rank 3] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=1234, OpType=ALLREDUCE, NumelIn=1048576, "
    "NumelOut=1048576, Timeout(ms)=600000) ran for 600081 milliseconds before timing out.\n"
)


def test_one_watchdog_line_blames_nobody_and_is_not_a_network_verdict(tmp_path: Path) -> None:
    log = tmp_path / "rank3.log"
    log.write_text(WATCHDOG)
    d = _diagnose(log)
    assert d.verdict.kind != "collective-timeout"
    assert 3 not in d.verdict.culprit_ranks
    assert not [f for f in d.findings if f.kind == "collective-timeout"]
    (finding,) = [f for f in d.findings if f.code == "LS103"]
    # Somebody did not complete the other side; one line cannot say who.
    assert (finding.kind, finding.ranks) == ("missing-collective", ())
    assert finding.title == (
        "rank 3 timed out waiting in ALLREDUCE SeqNum 1234; no other rank's side is in the evidence"
    )


def test_two_watchdog_lines_still_conclude_a_stall_inside_the_collective(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text(WATCHDOG + WATCHDOG.replace("rank3", "rank2").replace("Rank 3", "Rank 2"))
    d = _diagnose(log)
    assert (d.verdict.kind, d.verdict.code) == ("collective-timeout", "LS103")
    # Nobody waits for anybody that is not in the collective: no graph, no LS120.
    assert d.waitfor is None
    assert not [f for f in d.findings if f.code == "LS120"]


def test_a_process_group_local_rank_is_not_taken_for_a_global_one(tmp_path: Path) -> None:
    """``[PG ID 11 PG GUID 119 Rank 1]`` is rank 1 of group 119; the line is global rank 13's."""
    log = tmp_path / "rank13.log"
    log.write_text(
        WATCHDOG.replace("rank3", "rank13")
        + "[rank13]:[E1121 16:20:50.465150152 ProcessGroupNCCL.cpp:1664] [PG ID 11 PG GUID "
        "119 Rank 1] Exception (either an error or timeout) detected by watchdog at work: 1234, "
        "last enqueued NCCL work: 1234, last completed NCCL work: 1233.\n"
    )
    d = _diagnose(log)
    assert 1 not in d.verdict.culprit_ranks and 13 not in d.verdict.culprit_ranks
    (finding,) = [f for f in d.findings if f.code == "LS103"]
    assert finding.title.startswith("rank 13 timed out waiting in ALLREDUCE SeqNum 1234")


def test_one_store_timeout_names_the_silent_ranks_not_the_one_that_waited(tmp_path: Path) -> None:
    log = tmp_path / "rank2.log"
    log.write_text(
        "[rank2]: Traceback (most recent call last):\n"
        '[rank2]:   File "/job/train.py", line 12, in <module>\n'
        "[rank2]:     dist.init_process_group('gloo')\n"
        "[rank2]: torch.distributed.DistStoreError: Timed out initializing process group in "
        "store based barrier on rank 2, for key: store_based_barrier_key:1 (world_size=4, "
        "num_workers_joined=3, timeout=0:30:00 error=wait timeout after 1800000ms, keys: "
        "/default_pg/store_based_barrier_key:1:last_worker)\n"
    )
    d = _diagnose(log)
    assert 2 not in d.verdict.culprit_ranks
    assert d.verdict.kind == "init-stall"
    assert d.verdict.culprit_ranks == (0, 1, 3)
    graph = d.waitfor
    assert graph is not None
    assert [n.state for n in graph.nodes] == ["silent", "silent", "waiting", "silent"]
    (finding,) = [f for f in d.findings if f.code == "LS120"]
    assert finding.confidence < 0.5  # three suspects for one missing rank, on silence alone


def test_watchdog_sizes_at_one_seqnum_name_the_odd_one_out(tmp_path: Path) -> None:
    lines = [
        WATCHDOG.replace("rank3", f"rank{r}").replace("Rank 3", f"Rank {r}") for r in (0, 1, 3)
    ]
    lines.append(
        WATCHDOG.replace("rank3", "rank2")
        .replace("Rank 3", "Rank 2")
        .replace("NumelIn=1048576, NumelOut=1048576", "NumelIn=524288, NumelOut=524288")
    )
    log = tmp_path / "job.log"
    log.write_text("".join(lines))
    d = _diagnose(log)
    assert (d.verdict.kind, d.verdict.code, d.verdict.culprit_ranks) == (
        "collective-mismatch",
        "LS102",
        (2,),
    )
    assert d.verdict.summary == (
        "rank(s) 2 ran a different collective at SeqNum 1234 (NumelIn/NumelOut 524288/524288 "
        "versus 1048576/1048576) than rank(s) 0-1,3"
    )


def _coll(host: str, pid: int, comm: str, op_count: int, count: int) -> str:
    return (
        f"{host}:{pid}:{pid} [0] NCCL INFO AllReduce: opCount {op_count:x} sendbuff 0x7f00 "
        f"recvbuff 0x7f00 count {count} datatype 7 op 0 root 0 comm {comm} [nranks=2] "
        "stream 0x55\n"
    )


def _init(host: str, pid: int, comm: str, rank: int, comm_id: str) -> str:
    return (
        f"{host}:{pid}:{pid} [0] NCCL INFO ncclCommInitRank comm {comm} rank {rank} nranks 2 "
        f"cudaDev 0 nvmlDev 0 busId 1000 commId {comm_id} - Init COMPLETE\n"
    )


def test_two_ranks_waiting_for_each_other_are_a_deadlock_not_a_culprit(tmp_path: Path) -> None:
    """Two 2-rank communicators; rank 0 issued its 3rd AllReduce on comm A, rank 1 on comm B."""
    for rank, (host, pid) in enumerate((("node-a", 100), ("node-b", 200))):
        comm_a, comm_b = f"0xa{rank}", f"0xb{rank}"
        lines = [
            _init(host, pid, comm_a, rank, "0x1111"),
            _init(host, pid, comm_b, rank, "0x2222"),
        ]
        for op in range(2):
            lines += [_coll(host, pid, comm_a, op, 8), _coll(host, pid, comm_b, op, 8)]
        lines.append(_coll(host, pid, comm_a if rank == 0 else comm_b, 2, 8))
        (tmp_path / f"{host}.{pid}.log").write_text("".join(lines))
    d = _diagnose(tmp_path)
    graph = d.waitfor
    assert graph is not None
    assert graph.cycles == (("rank 0", "rank 1"),)
    assert graph.culprits == ()
    (finding,) = [f for f in d.findings if f.code == "LS120"]
    assert (finding.kind, finding.ranks, finding.confidence) == ("collective-mismatch", (), 0.4)
    assert finding.title.startswith("ranks 0-1 wait for each other")


def test_one_real_store_timeout_is_the_rank_that_waited() -> None:
    """The same job as init-barrier-slow, where torchrun ended the others after rank 2's timeout.

    Only rank 2 reports ("num_workers_joined=3" of 4), so the evidence cannot tell which of
    the three others is missing: they are named together, with low confidence, and rank 2
    (the one that waited) is not.
    """
    d = _diagnose(LIVE / "init-barrier-slow-one-reporter")
    assert (d.verdict.kind, d.verdict.culprit_ranks) == ("init-stall", (0, 1, 3))
    assert d.verdict.confidence < 0.5
    assert not [f for f in d.findings if f.severity == "critical" and 2 in f.ranks]


def test_a_silent_minority_is_suspected_a_silent_majority_is_not(tmp_path: Path) -> None:
    """The world size (4) comes from an NCCL init line; the watchdogs speak for the ranks."""
    three = "".join(
        WATCHDOG.replace("rank3", f"rank{r}").replace("Rank 3", f"Rank {r}") for r in (0, 2, 3)
    )
    init = (
        "a:1:1 [0] NCCL INFO ncclCommInitRank comm 0x1 rank 0 nranks 4 cudaDev 0 nvmlDev 0 "
        "busId 1000 commId 0x99 - Init COMPLETE\n"
    )
    (tmp_path / "job.log").write_text(three)
    (tmp_path / "nccl.log").write_text(init)
    d = _diagnose(tmp_path)
    assert (d.verdict.kind, d.verdict.culprit_ranks) == ("missing-collective", (1,))
    (tmp_path / "job.log").write_text(WATCHDOG)
    d = _diagnose(tmp_path)
    assert d.verdict.culprit_ranks == ()


def test_ranks_that_lost_their_peer_point_at_the_one_that_said_nothing(tmp_path: Path) -> None:
    """Ranks 1-3 fail with "Connection closed by peer"; rank 0, below them, left nothing."""
    lines = []
    for r in (1, 2, 3):
        lines += [
            f"[rank{r}]: Traceback (most recent call last):\n",
            f'[rank{r}]:   File "/job/train.py", line 40, in <module>\n',
            f"[rank{r}]:     dist.all_reduce(grad)\n",
            f"[rank{r}]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] "
            "Connection closed by peer [10.0.0.1]:3421\n",
        ]
    (tmp_path / "job.log").write_text("".join(lines))
    d = _diagnose(tmp_path)
    assert (d.verdict.kind, d.verdict.culprit_ranks) == ("missing-collective", (0,))
    assert d.verdict.summary == "rank 0 left no evidence while ranks 1-3 waited for it"
    assert d.verdict.confidence < 0.6  # on the strength of its silence alone
    graph = d.waitfor
    assert graph is not None
    assert dict(graph.victims)["rank 1"] == (
        "lost its connection to a peer; rank 0 left no evidence"
    )
