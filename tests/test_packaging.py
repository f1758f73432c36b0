"""The wheel carries the grammars and templates, and an installed copy finds them."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    (found,) = out.glob("nccl_logsleuth-*.whl")
    return found


def test_wheel_contains_grammars_and_templates(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for grammar in (ROOT / "grammars").glob("*.lark"):
        assert f"logsleuth/_data/grammars/{grammar.name}" in names
    for template in (ROOT / "templates").iterdir():
        assert f"logsleuth/_data/templates/{template.name}" in names
    assert "logsleuth/cli.py" in names


def test_installed_wheel_analyses_without_the_checkout(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    case = ROOT / "fixtures" / "real" / "corpus" / "003-ci-pod-dev-shm-exhausted" / "combined.log"
    env = {**os.environ, "PYTHONPATH": str(target)}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "logsleuth",
            "analyze",
            str(case),
            "--quiet",
            "--html",
            str(tmp_path / "r.html"),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode == 1, result.stderr
    assert result.stdout.startswith("resource-exhausted: ")
    check = subprocess.run(
        [
            sys.executable,
            "-c",
            "import logsleuth.resources as r; print(r.grammar_path('nccl.lark'))",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=True,
    )
    assert str(target) in check.stdout
