"""LS124: every NCCL log ends inside communicator set-up; the step names what to try."""

from __future__ import annotations

from pathlib import Path

from logsleuth.api import analyze

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "real" / "corpus"


def test_a_log_ending_in_nvls_binding_is_an_init_stall_there() -> None:
    (case,) = CORPUS.glob("233-*")
    d = analyze([str(case)]).diagnosis
    assert (d.verdict.kind, d.verdict.code) == ("init-stall", "LS124")
    # Every process stopped in set-up: they wait together, nobody is the culprit.
    assert (d.verdict.culprit_ranks, d.verdict.culprit_hosts) == ((), ())
    assert "NVLS" in d.verdict.summary
    assert any("NCCL_NVLS_ENABLE=0" in step for step in d.findings[0].next_steps)


def test_a_log_that_goes_on_after_set_up_is_not_stuck_there(tmp_path: Path) -> None:
    p = "node-a:10:11 [0] NCCL INFO "
    (tmp_path / "a.log").write_text(
        f"{p}NVLS Bind mem 0xac0000000 UC handle 0x7f3310ccb240 MC handle 0x7f3310ccaa20 size 1\n"
        f"{p}comm 0x55 rank 0 nranks 2 cudaDev 0 busId 18000 commId 0xab - Init COMPLETE\n"
    )
    d = analyze([str(tmp_path)]).diagnosis
    assert "LS124" not in {f.code for f in d.findings}


def test_threads_creating_communicators_at_once_are_concurrent_use() -> None:
    (case,) = CORPUS.glob("226-*")
    d = analyze([str(case)]).diagnosis
    assert (d.verdict.kind, d.verdict.code) == ("concurrent-use", "LS124")
    assert d.verdict.summary.startswith("7 threads of rank 0 (v08 pid 1707) create communicators")
    assert len(d.findings[0].evidence) == 7
