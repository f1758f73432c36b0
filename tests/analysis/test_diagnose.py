"""The verdict: one primary finding, a confidence that says what is missing, what to collect."""

from __future__ import annotations

from pathlib import Path

from benchmarks.synth import generate
from logsleuth.analysis.diagnose import _lead, _verdict
from logsleuth.api import analyze
from logsleuth.model.diagnosis import Finding, Verdict


def _finding(kind: str, ranks: tuple[int, ...], confidence: float, code: str = "LS101") -> Finding:
    return Finding(
        code=code,
        name="x.y",
        kind=kind,
        severity="critical",
        title=f"{kind} on {ranks}",
        detail="",
        ranks=ranks,
        confidence=confidence,
    )


def _verdict_of(findings: list[Finding], coverage: float, truncated: set[int]) -> Verdict:
    led, lead = _lead(findings, coverage, truncated)
    verdict = _verdict(led, lead)
    # The verdict restates its finding: the same culprits, the same confidence.
    assert (verdict.code, verdict.confidence) == (led[0].code, led[0].confidence)
    return verdict


def test_missing_ranks_lower_the_confidence(tmp_path: Path) -> None:
    truth = generate(tmp_path, ranks=16, hosts=2, ops=24, fault="missing-collective", culprit=9)
    full = analyze([str(tmp_path)]).diagnosis.verdict
    # Keep the culprit's host only: half of the world's ranks have no evidence.
    kept = sorted(p for p in (tmp_path / "nccl").iterdir() if p.name.startswith("gpu-node002."))
    half = analyze([str(p) for p in kept]).diagnosis
    assert full.culprit_ranks == half.verdict.culprit_ranks == tuple(truth["culprit_ranks"])
    assert half.verdict.confidence < full.confidence
    assert "no evidence from 8 of 16 ranks: 0-7" in half.gaps


def test_a_rival_blaming_other_ranks_makes_the_verdict_less_sure() -> None:
    top = _finding("non-collective-stall", (3,), 0.9, "LS104")
    alone = _verdict_of([top], coverage=1.0, truncated=set())
    same_rank = _verdict_of([top, _finding("missing-collective", (3,), 0.9)], 1.0, set())
    rival = _verdict_of([top, _finding("missing-collective", (5,), 0.85)], 1.0, set())
    weak = _verdict_of([top, _finding("missing-collective", (5,), 0.5)], 1.0, set())
    assert (alone.kind, alone.culprit_ranks, alone.confidence) == (
        "non-collective-stall",
        (3,),
        0.9,
    )
    assert same_rank.confidence == weak.confidence == 0.9
    assert rival.confidence == 0.72


def test_a_truncated_dump_of_the_culprit_makes_the_verdict_less_sure() -> None:
    top = _finding("non-collective-stall", (3,), 0.9, "LS104")
    assert _verdict_of([top], 1.0, truncated={3}).confidence == 0.77
    assert _verdict_of([top], 1.0, truncated={4}).confidence == 0.9


def test_ranks_without_evidence_weaken_a_hang_verdict_but_not_a_printed_failure() -> None:
    hang = _finding("missing-collective", (3,), 0.8)
    printed = _finding("resource-exhausted", (3,), 0.8, "LS302")
    assert _verdict_of([hang], coverage=0.5, truncated=set()).confidence == 0.68
    assert _verdict_of([printed], coverage=0.5, truncated=set()).confidence == 0.8


def test_inconclusive_names_exactly_what_is_missing(tmp_path: Path) -> None:
    log = tmp_path / "nccl.log"
    log.write_text(
        "gpu-node001:4242:4242 [0] NCCL INFO Bootstrap : Using eth0:10.42.0.11<0>\n"
        "\n"
        # A WARN no knowledge-base entry reads (a known harmless one would leave it healthy).
        "gpu-node001:4242:4290 [0] net_custom.cc:88 NCCL WARN NET/Custom : transport reported state 7\n"
    )
    d = analyze([str(log)]).diagnosis
    assert (d.verdict.kind, d.verdict.code) == ("inconclusive", "LS001")
    (finding,) = [f for f in d.findings if f.code == "LS001"]
    assert finding.next_steps == (
        "The NCCL logs have no COLL lines: add COLL to NCCL_DEBUG_SUBSYS "
        "(NCCL_DEBUG_SUBSYS=INIT,COLL,NET) to see where each rank stopped.",
        "Dump every rank's stacks while it hangs: py-spy dump --pid PID for each rank "
        "process (or run the job under logsleuth live, which does it for you).",
        "Enable the flight recorder: TORCH_NCCL_TRACE_BUFFER_SIZE=2000 "
        "TORCH_NCCL_DUMP_ON_TIMEOUT=1, and include the dumps.",
    )


def test_a_healthy_job_gets_no_fallback_finding(tmp_path: Path) -> None:
    generate(tmp_path, ranks=8, hosts=2, ops=24, fault="healthy", launcher=True)
    d = analyze([str(tmp_path)]).diagnosis
    assert d.verdict.kind == "healthy"
    assert not [f for f in d.findings if f.code == "LS001"]


def test_a_log_cut_mid_line_is_a_data_gap(tmp_path: Path) -> None:
    generate(tmp_path, ranks=8, hosts=1, ops=12, fault="healthy")
    logs = sorted((tmp_path / "nccl").iterdir())
    cut = logs[3]
    data = cut.read_bytes()
    cut.write_bytes(data[: data.rindex(b"\n", 0, len(data) - 1) + 20])  # into the last line
    diagnosis = analyze([str(tmp_path)]).diagnosis
    name = f"nccl/{cut.name}"
    assert [g for g in diagnosis.gaps if "middle of a line" in g] == [
        f"{name}: ends in the middle of a line (cut while being written or copied); "
        "what the process did after it is not known"
    ]
    (view,) = [v for v in diagnosis.inputs if v.source == name]
    assert view.lines == data.count(b"\n")
