"""One exception base and the fixed exit codes of CONTRACT section 2."""

from __future__ import annotations

EXIT_OK = 0
"""Analyzed; nothing wrong found."""
EXIT_FINDINGS = 1
"""Analyzed; at least one error/critical finding, or an inconclusive hang."""
EXIT_USAGE = 2
"""Bad usage or no analyzable input."""
EXIT_INTERNAL = 3
"""A bug in logsleuth."""


class LogsleuthError(Exception):
    """Base of every error logsleuth expects and reports in one line."""

    exit_code = EXIT_INTERNAL


class UsageError(LogsleuthError):
    """The command line asks for something that cannot be done."""

    exit_code = EXIT_USAGE


class InputError(LogsleuthError):
    """An input cannot be analysed: the message names the source and the reason.

    ``line`` and ``excerpt`` point at the text when one line is to blame.
    """

    exit_code = EXIT_USAGE

    def __init__(
        self, source: str, reason: str, line: int | None = None, excerpt: str = ""
    ) -> None:
        self.source = source
        self.reason = reason
        self.line = line
        self.excerpt = excerpt
        where = f"{source}:{line}" if line is not None else source
        tail = f": {excerpt!r}" if excerpt else ""
        super().__init__(f"{where}: {reason}{tail}")


class CaptureError(LogsleuthError):
    """Live mode could not launch, watch or capture the job."""

    exit_code = EXIT_USAGE
