"""The README's example output is what ``make demo`` prints (at 100 columns), line for line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from logsleuth.cli import main

ROOT = Path(__file__).resolve().parent.parent


def _example() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```\n\$ logsleuth analyze fixtures/demo\n(.*?)```", readme, re.DOTALL)
    assert block is not None, "the README lost its example"
    return block.group(1).splitlines()


def test_readme_example_is_the_real_output(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    assert main(["analyze", str(ROOT / "fixtures" / "demo")]) == 1
    real = capsys.readouterr().out.splitlines()
    shown = [line for line in _example() if line.strip() != "..."]
    assert len(shown) >= 8
    # Lines the README shows appear in the output in the same order ("..." skips lines).
    position = 0
    for line in shown:
        assert line in real[position:], f"not in the output (in order): {line!r}"
        position = real.index(line, position) + 1
