"""Real NCCL 2.28.9 jobs on one H100 (fixtures/real/gpu): every line read, the right verdicts.

Four ranks share the GPU, each posing as its own host (NCCL_HOSTID), joined over
NET/Socket; `fixtures/real/gpu/README.md` says how each capture was made.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from logsleuth.api import analyze

GPU = Path(__file__).resolve().parents[2] / "fixtures" / "real" / "gpu"
LIVE = GPU / "live"


def _diagnose(path: Path):  # type: ignore[no-untyped-def]
    return analyze([str(path)]).diagnosis


def _bundles() -> list[Path]:
    return [*sorted(p for p in LIVE.iterdir() if p.is_dir()), GPU / "manual", GPU / "all-subsys"]


@pytest.mark.parametrize("bundle", _bundles(), ids=lambda p: p.name)
def test_every_line_nccl_printed_is_recognized(bundle: Path) -> None:
    # NCCL's debug files (INIT,COLL,NET,RAS and ALL subsystems), its proxy-state dumps and
    # the ncclras reports; launcher logs hold the job's own prints, which stay unrecognized.
    d = _diagnose(bundle)
    nccl = [
        i for i in d.inputs if i.kind in ("nccl-log", "ras-report") and "launcher" not in i.source
    ]
    assert nccl, [i.source for i in d.inputs]
    assert [(i.source, i.unrecognized) for i in nccl if i.unrecognized or i.error] == []


@pytest.mark.parametrize(
    ("bundle", "kind", "culprits"),
    [
        ("healthy", "healthy", ()),
        ("exception", "process-died", (1,)),
        # rank 1 returns early without a word: live found no process to dump, peers lost it
        ("early-exit", "process-died", (1,)),
        ("skip-last-collective", "process-died", (1,)),
        ("order-mismatch", "collective-mismatch", (1,)),
        ("size-mismatch", "collective-mismatch", (1,)),
        ("size-mismatch-detail", "collective-mismatch", (1,)),
        ("ring-skip-hop", "collective-mismatch", (1,)),
        ("pipeline-drop-send", "missing-collective", (1,)),
        ("subgroup-barrier-skip", "missing-collective", (1,)),
        ("eval-stall", "non-collective-stall", (1,)),
        ("dataloader-stall", "non-collective-stall", (1,)),
        ("init-barrier-slow", "init-stall", (1,)),
    ],
)
def test_live_nccl_bundle_names_the_culprit_and_kind(
    bundle: str, kind: str, culprits: tuple[int, ...]
) -> None:
    d = _diagnose(LIVE / bundle)
    assert (d.verdict.kind, d.verdict.culprit_ranks) == (kind, culprits), d.verdict.summary


@pytest.mark.xfail(strict=True, reason="known gaps on NCCL, see fixtures/real/gpu/README.md")
@pytest.mark.parametrize(
    ("bundle", "kind", "culprits"),
    [
        # torch's NCCL barrier is a one-element AllReduce: opCount 5 reads as a count mismatch
        # (the culprit is right: rank 1)
        (LIVE / "skip-collective", "missing-collective", (1,)),
        (GPU / "manual", "missing-collective", (1,)),
        # rank 1 sleeps before init_process_group: read as its own code (culprit right)
        (LIVE / "init-never", "init-stall", (1,)),
        # NCCL's send is asynchronous: rank 0 is already in the barrier, not in send
        (LIVE / "pipeline-wrong-peer", "collective-mismatch", (1,)),
    ],
    ids=lambda v: v.name if isinstance(v, Path) else None,
)
def test_known_gaps_on_nccl(bundle: Path, kind: str, culprits: tuple[int, ...]) -> None:
    d = _diagnose(bundle)
    assert (d.verdict.kind, d.verdict.culprit_ranks) == (kind, culprits)


def test_ranks_that_share_a_gpu_as_separate_nccl_hosts_are_no_duplicate() -> None:
    # Each rank set its own NCCL_HOSTID and completed its init: NCCL's own check passed.
    for bundle in _bundles():
        assert not [f for f in _diagnose(bundle).findings if f.kind == "duplicate-gpu"], bundle


@pytest.mark.parametrize(
    "report",
    [
        "verbose_status.txt",  # `VERBOSE STATUS` through netcat
        "protocol_status.txt",  # after the protocol handshake: `SERVER PROTOCOL 2` first
        "protocol_verbose_status.json",  # `SET FORMAT json`: `SERVER PROTOCOL 2`, `OK`, JSON
    ],
)
def test_ncclras_answers_name_the_rank_behind(report: str) -> None:
    # Rank 1 skipped an all_reduce: RAS counts 5 AllReduce on it and 6 on the others.
    for round_no in (1, 2):
        d = _diagnose(GPU / "manual" / "ras" / f"{round_no}.{report}")
        assert (d.verdict.code, d.verdict.kind, d.verdict.culprit_ranks) == (
            "LS208",
            "missing-collective",
            (1,),
        ), d.verdict.summary
        assert "never launched operation 6 that 3 rank(s) wait in" in d.verdict.summary


def test_the_manual_hang_quotes_the_watchdog_and_flight_recorder() -> None:
    d = _diagnose(GPU / "manual")
    assert d.verdict.culprit_ranks == (1,)
    assert d.verdict.culprit_pids == (649,)
    sources = {i.source.split("/")[0] for i in d.inputs}
    assert {"fr", "ras", "stacks"} <= sources
