"""Report the knowledge base's figures at the end of the run, with or without ``-s``."""

from __future__ import annotations

import pytest

FIGURES: list[str] = []
"""Lines the knowledge tests want shown in the terminal summary."""


@pytest.fixture
def report_figure() -> list[str]:
    """Return the list a test appends its figure to."""
    return FIGURES


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if FIGURES:
        terminalreporter.section("knowledge base")
        for line in FIGURES:
            terminalreporter.write_line(line)
