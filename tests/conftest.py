"""Suite-wide options: ``--update-golden`` and the ``golden`` file comparison helper."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path

import pytest

GOLDEN_ROOT = Path(__file__).resolve().parent / "golden"
DIFF_LINES = 80


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite the expected outputs under tests/golden/ from the current code",
    )


@dataclass(frozen=True)
class Golden:
    """Compare generated text with a file under tests/golden/, or rewrite it on request."""

    root: Path
    update: bool

    def check(self, name: str, actual: str) -> None:
        """Assert that ``actual`` equals ``tests/golden/<name>`` byte for byte.

        With ``--update-golden`` the file is written instead, so golden files are always
        generated, never edited by hand.
        """
        path = self.root / name
        if self.update:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(actual.encode("utf-8"))
            return
        if not path.exists():
            pytest.fail(f"golden file {path} is missing; run pytest --update-golden")
        expected = path.read_bytes().decode("utf-8")
        if actual != expected:
            diff = difflib.unified_diff(
                expected.splitlines(keepends=True),
                actual.splitlines(keepends=True),
                fromfile=f"golden/{name}",
                tofile="actual",
            )
            shown = "".join(list(diff)[:DIFF_LINES])
            pytest.fail(
                f"output differs from golden/{name} (run pytest --update-golden if the "
                f"change is intended):\n{shown}"
            )


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> Golden:
    """Return the golden-file helper, in update mode under ``--update-golden``."""
    return Golden(root=GOLDEN_ROOT, update=bool(request.config.getoption("--update-golden")))


_FIGURES: list[tuple[str, str]] = []


@pytest.fixture(scope="session")
def figures() -> list[tuple[str, str]]:
    """Collect (title, text) figures that the run prints in its closing summary.

    Acceptance figures (corpus score, line coverage, catalog recognition rates) are shown
    on every ``make test``, not only when a test fails.
    """
    return _FIGURES


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the collected figures after the test results."""
    for title, text in _FIGURES:
        terminalreporter.section(title)
        terminalreporter.write_line(text)
