"""What live mode shows while it works: the job's output and one status line per step.

While no progress signal comes, a terminal shows a spinner with the countdown to the stall
timeout; it is erased before the job's next output and never reaches a file or a pipe.
Colour follows ``NO_COLOR``/``FORCE_COLOR`` (rich reads them).
"""

from __future__ import annotations

import time
from typing import Protocol, TextIO

from rich.console import Console
from rich.markup import escape
from rich.status import Status


class Reporter(Protocol):
    """Receives live mode's status messages."""

    def note(self, message: str) -> None:
        """Show one status message."""

    def warn(self, message: str) -> None:
        """Show a problem that does not stop live mode."""

    def waiting(self, quiet: float, timeout: float, signal: str) -> None:
        """Show how long no progress signal came (``quiet`` 0: progress again, hide it)."""


class ConsoleReporter:
    """Status lines on a terminal stream (stderr), styled when it is a terminal."""

    def __init__(self, stream: TextIO, *, color: bool | None = None) -> None:
        self._started = time.monotonic()
        # None leaves NO_COLOR / FORCE_COLOR / TERM to rich; False forces plain text.
        self._console = Console(
            file=stream, highlight=False, soft_wrap=True, no_color=True if color is False else None
        )
        self._status: Status | None = None

    def waiting(self, quiet: float, timeout: float, signal: str) -> None:
        """Show a spinner with the countdown to the stall timeout, on a terminal only."""
        if quiet <= 0 or not self._console.is_terminal:
            self._stop()
            return
        left = max(0.0, timeout - quiet)
        text = (
            f"[cyan]waiting[/] no progress signal for {quiet:.0f} s "
            f"(last: {escape(signal)}); stall in {left:.0f} s"
        )
        if self._status is None:
            self._status = self._console.status(text, spinner="dots")
            self._status.start()
        else:
            self._status.update(text)

    def _stop(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    def note(self, message: str) -> None:
        """Show one status message."""
        self._stop()
        self._console.print(
            f"[bold cyan]logsleuth live[/] [dim]{self._elapsed()}[/] {escape(message)}", markup=True
        )

    def warn(self, message: str) -> None:
        """Show a problem that does not stop live mode."""
        self._stop()
        self._console.print(
            f"[bold yellow]logsleuth live[/] [dim]{self._elapsed()}[/] [yellow]warning:[/] "
            f"{escape(message)}",
            markup=True,
        )

    def _elapsed(self) -> str:
        return f"{time.monotonic() - self._started:6.1f}s"
