"""What live mode shows while it works: the job's output and one status line per step."""

from __future__ import annotations

import time
from typing import Protocol, TextIO

from rich.console import Console
from rich.markup import escape


class Reporter(Protocol):
    """Receives live mode's status messages."""

    def note(self, message: str) -> None:
        """Show one status message."""

    def warn(self, message: str) -> None:
        """Show a problem that does not stop live mode."""


class ConsoleReporter:
    """Status lines on a terminal stream (stderr), styled when it is a terminal."""

    def __init__(self, stream: TextIO, *, color: bool | None = None) -> None:
        self._started = time.monotonic()
        self._console = Console(
            file=stream, highlight=False, soft_wrap=True, no_color=color is False
        )

    def note(self, message: str) -> None:
        """Show one status message."""
        self._console.print(
            f"[bold cyan]logsleuth live[/] [dim]{self._elapsed()}[/] {escape(message)}", markup=True
        )

    def warn(self, message: str) -> None:
        """Show a problem that does not stop live mode."""
        self._console.print(
            f"[bold yellow]logsleuth live[/] [dim]{self._elapsed()}[/] [yellow]warning:[/] "
            f"{escape(message)}",
            markup=True,
        )

    def _elapsed(self) -> str:
        return f"{time.monotonic() - self._started:6.1f}s"
