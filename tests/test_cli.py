"""The command line as a user meets it: exit codes, one-line errors, explain, versions."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from logsleuth import __version__
from logsleuth.analysis.rules.registry import RULES
from logsleuth.cli import main

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fixtures" / "real" / "corpus"


def run(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    """Run the installed module as a user would, capturing both streams."""
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "logsleuth", *args],
        input=stdin.decode("latin-1") if stdin is not None else None,
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=False,
    )


def _one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0]


def test_version() -> None:
    result = run("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"logsleuth {__version__}"


def test_missing_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope.log"
    _one_line_error(run("analyze", str(missing)), "nope.log", "no such file or directory")


def test_empty_file(tmp_path: Path) -> None:
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    _one_line_error(run("analyze", str(empty)), "empty.log", "file is empty")


def test_empty_directory(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    _one_line_error(run("analyze", str(tmp_path / "logs")), "logs", "directory contains no files")


def test_random_bytes(tmp_path: Path) -> None:
    noise = tmp_path / "noise.bin"
    noise.write_bytes(random.Random(7).randbytes(8192))
    _one_line_error(run("analyze", str(noise)), "noise.bin", "binary data")


def test_text_that_is_not_a_log(tmp_path: Path) -> None:
    prose = tmp_path / "notes.txt"
    prose.write_text("shopping list\neggs\nmilk\n")
    _one_line_error(run("analyze", str(prose)), "notes.txt", "no line was recognized")


def test_bad_input_beside_good_input_is_a_warning(tmp_path: Path) -> None:
    noise = tmp_path / "noise.bin"
    noise.write_bytes(random.Random(3).randbytes(4096))
    case = CORPUS / "003-ci-pod-dev-shm-exhausted" / "combined.log"
    result = run("analyze", str(case), str(noise), "--json", "-")
    assert result.returncode == 1
    assert "warning:" in result.stderr and "noise.bin: binary data" in result.stderr
    data = json.loads(result.stdout)
    assert data["verdict"]["kind"] == "resource-exhausted"
    unreadable = [i for i in data["inputs"] if i["source"].endswith("noise.bin")]
    assert unreadable and unreadable[0]["kind"] == "unreadable"


def test_unknown_option_is_usage_error() -> None:
    result = run("analyze", "--frobnicate", "x")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr


def test_stdin_input() -> None:
    data = (CORPUS / "001-horovod-duplicate-gpu-all-on-busid-1000" / "fragment_a.log").read_bytes()
    result = run("analyze", "-", "--quiet", stdin=data)
    assert result.returncode == 1
    assert result.stdout.startswith("duplicate-gpu: ")


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_explain_every_code(rule: type, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", rule.code]) == 0  # type: ignore[attr-defined]
    out = capsys.readouterr().out
    assert out.startswith(f"{rule.code} {rule.name} ({rule.kind})")  # type: ignore[attr-defined]
    for heading in ("Symptom:", "Likely causes:", "What to check:"):
        assert heading in out


def test_explain_unknown_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "LS999"]) == 2
    assert "unknown finding code 'LS999'" in capsys.readouterr().err


def test_explain_lists_all_codes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain"]) == 0
    out = capsys.readouterr().out
    assert [line.split()[0] for line in out.splitlines()] == [r.code for r in RULES]


def test_html_and_json_files_are_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    html, js = tmp_path / "out" / "report.html", tmp_path / "out" / "diagnosis.json"
    code = main(
        [
            "analyze",
            str(CORPUS / "011-rccl-opcount-mismatch-allgather-vs-allreduce"),
            "--html",
            str(html),
            "--json",
            str(js),
        ]
    )
    assert code == 1
    out = capsys.readouterr().out
    assert out.splitlines()[0].strip() != ""
    assert f"report: {html}" in out
    assert html.read_text().lstrip().lower().startswith("<!doctype html>")
    assert json.loads(js.read_text())["verdict"]["kind"] == "collective-mismatch"
