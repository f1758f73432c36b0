"""Shared by the live tests: a recording reporter and checks for leftover job processes."""

from __future__ import annotations

import os
from pathlib import Path

from logsleuth.live.procs import is_alive, read_environ


class Recorder:
    """A :class:`logsleuth.live.display.Reporter` that keeps the messages."""

    def __init__(self) -> None:
        self.notes: list[str] = []
        self.warnings: list[str] = []
        self.waits: list[tuple[float, float, str]] = []

    def note(self, message: str) -> None:
        self.notes.append(message)

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    def waiting(self, quiet: float, timeout: float, signal: str) -> None:
        self.waits.append((quiet, timeout, signal))


def job_survivors(out_dir: Path) -> list[int]:
    """Return living processes started for the bundle ``out_dir`` (its NCCL_DEBUG_FILE says so)."""
    prefix = str(out_dir.resolve())
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or not is_alive(int(name)):
            continue
        env = read_environ(int(name)) or {}
        if env.get("NCCL_DEBUG_FILE", "").startswith(prefix):
            found.append(int(name))
    return found
