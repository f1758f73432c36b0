"""Every real incident in the corpus: the verdict kind and culprit its truth.json accepts.

The diagnosis JSON of each case is also kept as a golden file (regenerate with
``pytest --update-golden``) so that any change in what logsleuth concludes is reviewed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from logsleuth.api import analyze
from logsleuth.report.json import build_json, render_json

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fixtures" / "real" / "corpus"
GOLDEN = ROOT / "tests" / "golden" / "corpus"
CASES = sorted(p for p in CORPUS.iterdir() if p.is_dir())


def _inputs(case: Path) -> list[str]:
    return [str(p) for p in sorted(case.iterdir()) if not p.name.startswith("truth.")]


def _accepted(verdict: dict[str, object], accept: dict[str, object]) -> bool:
    if verdict["kind"] not in accept["kinds"]:  # type: ignore[operator]
        return False
    for key, field in (
        ("ranks", "culprit_ranks"),
        ("pids", "culprit_pids"),
        ("hosts", "culprit_hosts"),
    ):
        wanted = accept.get(key)
        if wanted and not set(wanted).issubset(set(verdict[field])):  # type: ignore[arg-type]
            return False
    return True


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name[:3])
def test_verdict_matches_truth(case: Path) -> None:
    truth = json.loads((case / "truth.json").read_text())
    data = build_json(analyze(_inputs(case)).diagnosis)
    verdict = data["verdict"]
    assert isinstance(verdict, dict)
    assert any(_accepted(verdict, a) for a in truth["accept"]), verdict


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
    assert "Traceback" not in result.stderr + result.stdout
    data = json.loads(result.stdout)
    assert data["schema"] == "logsleuth.diagnosis/1"
    expected = 0 if data["verdict"]["kind"] == "healthy" else 1
    assert result.returncode == expected
    assert result.stderr.startswith("VERDICT ")
