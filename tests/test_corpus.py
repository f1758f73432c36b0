"""Every real incident in the corpus, scored as the project is judged.

A case scores 1 when the verdict kind is one its truth.json accepts and the culprit
matches, 0.5 for the kind alone, 0 otherwise (the rules of the shared ``tools/score.py``).
The score per case and in total is printed at the end of the run. The diagnosis JSON of
each case is also kept as a golden file (regenerate with ``pytest --update-golden``) so
that any change in what logsleuth concludes is reviewed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from logsleuth.api import analyze
from logsleuth.report.json import build_json, render_json

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fixtures" / "real" / "corpus"
GOLDEN = ROOT / "tests" / "golden" / "corpus"
CASES = sorted(p for p in CORPUS.iterdir() if p.is_dir())

SCORE_FLOOR = 0.9
"""The corpus score (share of the best possible) that must not regress; raised as it improves."""


def _inputs(case: Path) -> list[str]:
    return [
        str(p) for p in sorted(case.rglob("*")) if p.is_file() and not p.name.startswith("truth.")
    ]


def _culprit_ok(verdict: dict[str, Any], accept: dict[str, Any]) -> bool:
    ok = True
    if "ranks" in accept:
        got = set(verdict.get("culprit_ranks") or [])
        required = set(accept["ranks"])
        allowed = set(accept.get("ranks_allowed", accept["ranks"]))
        # "ranks": [] with "ranks_allowed": naming no culprit, or only allowed ones, is right.
        if required or "ranks_allowed" in accept:
            ok &= required <= got <= allowed
        else:
            ok &= not got
    if "pids" in accept:
        ok &= set(accept["pids"]) <= set(verdict.get("culprit_pids") or [])
    if "hosts" in accept:
        ok &= set(accept["hosts"]) <= set(verdict.get("culprit_hosts") or [])
    return ok


def score_case(verdict: dict[str, Any], truth: dict[str, Any]) -> float:
    """Score one verdict against a case's truth.json as the project is judged."""
    best = 0.0
    for accept in truth["accept"]:
        if verdict.get("kind") in accept["kinds"]:
            best = max(best, 1.0 if _culprit_ok(verdict, accept) else 0.5)
    return best


def _ece(pairs: list[tuple[float, float]], bins: int = 5) -> float:
    """Expected calibration error: how far stated confidence is from the share right, per bin."""
    error = 0.0
    for b in range(bins):
        low, high = b / bins, (b + 1) / bins
        members = [(c, r) for c, r in pairs if low <= c < high or (b == bins - 1 and c == 1.0)]
        if members:
            stated = sum(c for c, _ in members) / len(members)
            right = sum(r for _, r in members) / len(members)
            error += len(members) / len(pairs) * abs(stated - right)
    return error


def test_corpus_score(figures: list[tuple[str, str]]) -> None:
    """The whole corpus, scored; the figure is printed at the end of every run."""
    lines: list[str] = []
    total = 0.0
    healthy_wrong: list[str] = []
    calibration: list[tuple[float, float]] = []
    for case in CASES:
        truth = json.loads((case / "truth.json").read_text())
        verdict = build_json(analyze(_inputs(case)).diagnosis)["verdict"]
        assert isinstance(verdict, dict)
        score = score_case(verdict, truth)
        total += score
        calibration.append((float(verdict["confidence"]), 1.0 if score == 1.0 else 0.0))
        culprits = verdict["culprit_ranks"] or verdict["culprit_hosts"] or verdict["culprit_pids"]
        lines.append(f"{score:3.1f}  {case.name[:58]:58s} {verdict['kind']} {culprits}")
        accepts_healthy = any("healthy" in a["kinds"] for a in truth["accept"])
        if verdict["kind"] == "healthy" and not accepts_healthy:
            healthy_wrong.append(case.name)
    share = total / len(CASES)
    lines.append(f"score {total:.1f}/{len(CASES)} ({100 * share:.0f}%)")
    lines.append(f"healthy verdicts on cases that are not healthy: {len(healthy_wrong)}")
    lines.append(f"expected calibration error of the verdict confidence: {_ece(calibration):.2f}")
    figures.append(("corpus score (truth.json of every case)", "\n".join(lines)))
    assert share >= SCORE_FLOOR, "\n".join(lines)
    # healthy only when proven: no failure case may come out healthy.
    assert not healthy_wrong, healthy_wrong


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name[:3])
def test_every_line_is_accounted_for(case: Path) -> None:
    for item in build_json(analyze(_inputs(case)).diagnosis)["inputs"]:  # type: ignore[union-attr]
        assert isinstance(item, dict)
        assert item["recognized"] + item["unrecognized"] + item["blank"] == item["lines"], item
        raw = (case / str(item["source"])).read_bytes()
        assert item["lines"] == raw.count(b"\n") + (0 if raw.endswith(b"\n") else 1)


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name[:3])
def test_golden_diagnosis(case: Path, request: pytest.FixtureRequest) -> None:
    text = render_json(analyze(_inputs(case)).diagnosis)
    assert text == render_json(analyze(_inputs(case)).diagnosis), "output is not deterministic"
    golden = GOLDEN / f"{case.name}.json"
    if request.config.getoption("--update-golden"):
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert golden.exists(), f"missing golden file; run pytest --update-golden ({golden})"
    assert text == golden.read_text()


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name[:3])
def test_cli_exit_code_and_json(case: Path) -> None:
    """As a user runs it: exit 0 or 1, valid JSON on stdout, no traceback anywhere."""
    result = subprocess.run(
        [sys.executable, "-m", "logsleuth", "analyze", *_inputs(case), "--json", "-"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode in (0, 1), result.stderr
    # Evidence may quote the job's own tracebacks; one through logsleuth's code is a crash.
    assert "/logsleuth/" not in result.stderr or "Traceback (most recent" not in result.stderr
    data = json.loads(result.stdout)
    assert data["schema"] == "logsleuth.diagnosis/1"
    expected = 0 if data["verdict"]["kind"] == "healthy" else 1
    assert result.returncode == expected
    assert result.stderr.startswith("VERDICT ")
