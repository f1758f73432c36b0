"""Stack dumps of a process: py-spy (text and JSON), faulthandler, and their threads.

The merged views of many processes (:class:`StackTreeNode`, :class:`StackSuspect`) are part
of the diagnosis and live in :mod:`logsleuth.model.diagnosis`; they are named here too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from logsleuth.model.base import Event
from logsleuth.model.diagnosis import Evidence, StackSuspect, StackTreeNode

__all__ = [
    "FAULTHANDLER",
    "GDB",
    "PYSPY",
    "PYSPY_JSON",
    "PYSTACK",
    "Frame",
    "StackDump",
    "StackDumpError",
    "StackSuspect",
    "StackTreeNode",
    "ThreadStack",
    "format_frame_line",
]

PYSPY = "py-spy"
"""``StackDump.fmt`` of ``py-spy dump`` text output."""
PYSPY_JSON = "py-spy-json"
"""``StackDump.fmt`` of ``py-spy dump --json`` output."""
FAULTHANDLER = "faulthandler"
"""``StackDump.fmt`` of CPython faulthandler output."""
PYSTACK = "pystack"
"""``StackDump.fmt`` of pystack's output (oldest call first; ``(Python)``/``(C)`` frames)."""
GDB = "gdb"
"""``StackDump.fmt`` of gdb ``thread apply all bt`` / ``py-bt`` and pstack output."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Frame:
    """One frame, innermost first in :class:`ThreadStack`.

    ``func`` is what the dumper printed (py-spy 0.4 qualifies it: ``Queue.get``);
    ``file`` is the (possibly shortened) file path; ``native`` marks C/C++ frames.
    ``at`` is the 1-based physical line the frame was printed on (None in py-spy
    ``--json``, which has no line per frame).

    ``raw`` is that line as evidence quotes it, kept only where :func:`format_frame_line`
    cannot rebuild it from the fields: a launcher prefix (``[default0]:``), faulthandler's
    indent cut to one space, py-spy's ``:0`` line, trailing blanks. Clean dumps, the usual
    case, carry no second copy of every frame line of every rank.
    """

    func: str
    file: str | None
    line: int | None
    native: bool = False
    locals: tuple[tuple[str, str], ...] = ()
    at: int | None = None
    raw: str | None = None


def format_frame_line(fmt: str, frame: Frame) -> str | None:
    """Rebuild the line a dumper of format ``fmt`` printed for ``frame``; None for JSON.

    py-spy text: ``    func (file:line)`` or ``    func (file)``; faulthandler:
    ``  File "file", line N in func`` with ``???`` for what it did not know; pystack's Python
    frames ``    (Python) File "file", line N, in func`` (its native frames are not rebuilt).
    """
    if fmt == PYSPY:
        where = f"{frame.file}:{frame.line}" if frame.line is not None else frame.file
        return f"    {frame.func} ({where})"
    if fmt == FAULTHANDLER:
        file = f'"{frame.file}"' if frame.file is not None else "???"
        line = frame.line if frame.line is not None else "???"
        return f"  File {file}, line {line} in {frame.func}"
    if fmt == PYSTACK and not frame.native and frame.file is not None:
        return f'    (Python) File "{frame.file}", line {frame.line or 0}, in {frame.func}'
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class ThreadStack:
    """One thread's stack, innermost frame first.

    ``tid``, ``name`` and ``state`` are None where the dump does not say them; all three
    are None for the frames of an excerpt cut above its thread's header line (the dump is
    then ``truncated``).
    """

    tid: int | None
    name: str | None
    state: str | None  # py-spy: "idle", "active", "gil"; faulthandler: "current" or None
    frames: tuple[Frame, ...]
    is_main: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class StackDump(Event):
    """A whole dump of one process.

    ``fmt`` is ``"py-spy"``, ``"py-spy-json"``, ``"faulthandler"`` or ``"gdb"``. ``pid`` and
    ``cmdline`` come from the py-spy header when present. ``truncated`` marks a dump cut
    short (file ended mid-thread, NUL padding, ...). ``last_line`` is the last physical
    line that belongs to the dump.

    ``parent_pid`` is py-spy's ``Parent Process`` (children printed by ``--subprocesses``),
    ``exe`` the resolved interpreter of the ``Python v`` line, and ``reason`` what the dump
    says made it happen: faulthandler's ``Fatal Python error: Segmentation fault`` or
    ``Timeout (0:00:01)!``, py-spy ``--core``'s ``Signal 6``.
    """

    fmt: str
    pid: int | None
    cmdline: str | None
    python: str | None
    threads: tuple[ThreadStack, ...]
    truncated: bool = False
    last_line: int = 0
    parent_pid: int | None = None
    exe: str | None = None
    reason: str | None = None

    def main_thread(self) -> ThreadStack | None:
        """Return the main thread, or the first thread when the dump marks none."""
        for thread in self.threads:
            if thread.is_main:
                return thread
        return self.threads[0] if self.threads else None

    def quote(self, frame: Frame) -> Evidence | None:
        """Quote the line ``frame`` of this dump was printed on; None when it has no line."""
        if frame.at is None:
            return None
        text = frame.raw if frame.raw is not None else format_frame_line(self.fmt, frame)
        return None if text is None else Evidence(self.ref.source, frame.at, text)


@dataclass(frozen=True, slots=True, kw_only=True)
class StackDumpError(Event):
    """The dumper itself failed (``Error: Failed to ... No such process``)."""

    RECOGNIZED: ClassVar[bool] = True
    message: str
    pid: int | None = None
