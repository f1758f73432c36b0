"""LS111 (unwaited collectives) and LS112 (one communicator, several threads): fire and not."""

from __future__ import annotations

from pathlib import Path

from benchmarks.synth import generate
from logsleuth.api import analyze

ROOT = Path(__file__).resolve().parents[2]
DIAGNOSE = ROOT / "fixtures" / "real" / "diagnose"
TORCH = ROOT / "fixtures" / "real" / "torch"


def _codes(paths: list[Path]) -> dict[str, list[tuple[str, tuple[int, ...]]]]:
    d = analyze([str(p) for p in paths]).diagnosis
    found: dict[str, list[tuple[str, tuple[int, ...]]]] = {}
    for f in d.findings:
        found.setdefault(f.code, []).append((f.severity, f.ranks))
    return found


def test_unwaited_collectives_at_exit_fire_ls111() -> None:
    d = analyze([str(DIAGNOSE / "torchrun_gloo_unwaited_functional_all_reduce.log")]).diagnosis
    found = [f for f in d.findings if f.code == "LS111"]
    assert len(found) == 1
    assert found[0].kind == "concurrent-use" and found[0].severity == "warning"
    assert found[0].ranks == (0, 1)
    assert found[0].title == "rank(s) 0-1 exited with up to 1 collective call(s) never waited for"
    assert [e.line for e in found[0].evidence] == [13, 17]
    # A warning, not a failure: the job itself ran to its end.
    assert d.verdict.kind == "healthy"


def test_a_failed_job_without_the_warning_does_not_fire_ls111() -> None:
    assert "LS111" not in _codes([TORCH / "torchrun_fail_exception_without_record.log"])


def test_threads_racing_on_one_communicator_fire_ls112(tmp_path: Path) -> None:
    truth = generate(
        tmp_path, ranks=16, hosts=2, ops=24, fault="concurrent-use", culprit=11, launcher=True
    )
    d = analyze([str(tmp_path)]).diagnosis
    assert (d.verdict.kind, d.verdict.code, d.verdict.culprit_ranks) == (
        "concurrent-use",
        "LS112",
        (11,),
    )
    assert d.verdict.culprit_pids == tuple(truth["culprit_pids"])
    top = d.findings[0]
    assert f"threads {truth['culprit_pids'][0]}, {truth['culprit_pids'][0] + 97}" in top.detail
    # The mismatch it causes is still listed, as the symptom.
    assert any(f.code == "LS102" and f.ranks == (11,) for f in d.findings)


def test_threads_taking_turns_in_the_same_order_everywhere_do_not_fire_ls112(
    tmp_path: Path,
) -> None:
    """DDP runs gradient all-reduces on autograd's thread: interleaving alone is not a race."""
    truth = generate(tmp_path, ranks=8, hosts=2, ops=24, fault="concurrent-use", culprit=5)
    # Without the rank where the order came out differently, every rank's threads took
    # turns in the same order: nothing is wrong with the communicator.
    (tmp_path / "nccl" / f"gpu-node002.{truth['culprit_pids'][0]}.log").unlink()
    found = _codes([tmp_path / "nccl"])
    assert "LS112" not in found and "LS102" not in found


def test_a_mismatch_without_threads_does_not_fire_ls112(tmp_path: Path) -> None:
    generate(tmp_path, ranks=8, hosts=2, ops=24, fault="size-mismatch", culprit=5)
    found = _codes([tmp_path])
    assert "LS112" not in found and "LS102" in found
