"""What live shows while it waits: a countdown on a terminal, nothing in a file or pipe."""

from __future__ import annotations

import io

import pytest

from logsleuth.live.display import ConsoleReporter


def test_no_spinner_in_a_file_or_pipe(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)
    stream = io.StringIO()
    reporter = ConsoleReporter(stream)
    reporter.waiting(12.0, 60.0, "NCCL debug files")
    reporter.note("stack snapshot 1/2")
    assert "stall in" not in stream.getvalue()
    assert "stack snapshot 1/2" in stream.getvalue()


def test_countdown_on_a_terminal_is_erased_before_the_next_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")
    stream = io.StringIO()
    reporter = ConsoleReporter(stream)
    reporter.waiting(12.0, 60.0, "NCCL debug files")
    reporter.waiting(13.0, 60.0, "NCCL debug files")
    reporter.note("stall: no progress signal for 60 s")
    text = stream.getvalue()
    countdown = text.index("no progress signal for 13 s (last: NCCL debug files); stall in 47 s")
    erased = text.index("\x1b[2K", countdown)  # the spinner's line is cleared ...
    assert text.index("stall: no progress signal for 60 s", erased) > erased  # ... before the note


def test_no_color_wins_over_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("NO_COLOR", "1")
    stream = io.StringIO()
    ConsoleReporter(stream).note("hello")
    assert "\x1b[3" not in stream.getvalue() and "hello" in stream.getvalue()
