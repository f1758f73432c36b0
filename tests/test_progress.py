"""The progress bar for long reads: on a terminal's standard error only, never with --quiet."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from benchmarks.synth import generate
from logsleuth.cli import main


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """72 NCCL logs, their stacks, a launcher log: more inputs than the bar's threshold."""
    out = tmp_path_factory.mktemp("progress") / "job"
    generate(out, ranks=72, hosts=9, ops=20, fault="missing-collective", launcher=True, stacks=True)
    return out


def test_a_terminal_gets_a_bar_counting_files_and_bytes(
    bundle: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    terminal = _Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    monkeypatch.setenv("COLUMNS", "120")
    files = sum(1 for p in bundle.rglob("*") if p.is_file())
    assert main(["analyze", str(bundle), "--format", "json"]) == 1
    drawn = terminal.getvalue()
    assert "reading" in drawn
    assert f"{files}/{files} files" in drawn
    assert "MB" in drawn or "kB" in drawn
    assert '"verdict"' in capsys.readouterr().out  # the bar never goes to stdout


def test_quiet_or_no_terminal_draws_no_bar(
    bundle: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    terminal = _Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    assert main(["analyze", str(bundle), "--quiet"]) == 1
    assert "files" not in terminal.getvalue()
    monkeypatch.undo()
    assert main(["analyze", str(bundle), "--quiet"]) == 1
    assert "files" not in capsys.readouterr().err
