"""Read the NCCL blocks that span lines: a WARN continued on prefix-less lines (spec 1.5),
the proxy-state dump (spec 3.2) and the ncclras text report (spec 2.13).

:class:`NcclBlocks` is a part of :class:`~logsleuth.parse.nccl.NcclReader`: it keeps the
open block and emits it as one event when it ends. The dump and report lines are parsed
by the start symbols ``proxy_line`` and ``ras_line`` of ``grammars/nccl.lark``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, cast

from lark.exceptions import LarkError

from logsleuth.model.base import Origin, SourceRef
from logsleuth.model.nccl import NcclProxyDump, NcclRasReport, NcclWarn
from logsleuth.parse.base import Line, Sink
from logsleuth.parse.nccl_line import _parser

_RAS_OPENING = frozenset({"version", "record", "rank", "process", "missing"})
"""The ncclras line kinds a report may begin with: an excerpt pasted from the middle of
one starts at a communicator record or a rank line as often as at its header."""

_RAS_TITLES = ("Job summary", "SERVER PROTOCOL", "Communicators")
"""The headings (``ras_skip`` lines) that open a report: the others (a ``#`` table header,
a rule of ``=``) are shapes other tools print too (nccl-tests' ``#`` lines)."""


def _opens_ras(kind: str, text: str) -> bool:
    """Say whether a line of ``kind`` may be the first line of an ncclras report."""
    return kind in _RAS_OPENING or (kind == "skip" and text.startswith(_RAS_TITLES))


RAS_OPENERS = (
    "NCCL version",
    *_RAS_TITLES,
    "#",
    "Rank ",
    "Process ",
    "The missing rank",
)
"""How the lines begin that may open an ncclras text report: its header, or, in an excerpt
cut above it, a communicator record or a rank, process or missing-rank line of its errors."""


def opens_ras(text: str) -> bool:
    """Say whether ``text`` is a line an ncclras text report may begin with.

    Another reader that would take such a line behind a prefix (a logger's) leaves it to
    the NCCL reader, so that the report reads the same with and without the prefix.
    """
    if not text.startswith(RAS_OPENERS):
        return False
    item = _block_item(text, "ras_line")
    return item is not None and _opens_ras(item[0], text)


@dataclass(slots=True)
class _OpenDump:
    """A proxy-state dump in progress (spec 3.2)."""

    number: int
    text: str
    hint: Origin
    lines: list[int]
    ops: list[tuple[int, int, int, str, tuple[tuple[int, str | None, int], ...]]]
    chained: list[bool]
    leaks: list[str]


@dataclass(slots=True)
class _OpenRas:
    """An ncclras text report in progress (spec 2.13)."""

    number: int
    text: str
    hint: Origin
    lines: list[int]
    version: str | None = None
    records: list[tuple[str, str, str]] = field(default_factory=list)
    ranks: list[tuple[int, str, int, str, str]] = field(default_factory=list)
    missing: list[int] = field(default_factory=list)
    processes: list[tuple[int, str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _block_item(text: str, rule: str) -> tuple[str, Any] | None:
    """Parse one line of a bare block by ``rule`` (``proxy_line``, ``ras_line``), or None."""
    try:
        return cast(tuple[str, Any], _parser().parse(text.strip(), start=rule))
    except LarkError:
        return None


@dataclass(slots=True)
class OpenWarn:
    """A WARN whose message NCCL continues on prefix-less lines (spec 1.5)."""

    event: NcclWarn
    lines: list[int]
    remaining: int


class NcclBlocks:
    """The multi-line blocks of :class:`~logsleuth.parse.nccl.NcclReader` (a mixin).

    The reader sets ``source``.
    """

    source: str

    def _init_blocks(self) -> None:
        self._open: OpenWarn | None = None
        self._dump: _OpenDump | None = None
        self._ras: _OpenRas | None = None

    def _open_warn(self, event: NcclWarn, number: int, continuation: int) -> None:
        """Keep ``event`` open: NCCL continues its message on ``continuation`` more lines."""
        self._open = OpenWarn(event, [number], continuation)

    def _continue_warn(self, text: str, number: int, sink: Sink) -> None:
        """Append the prefix-less line ``text`` to the open WARN; emit it when complete."""
        pending = self._open
        assert pending is not None
        pending.event = replace(pending.event, message=f"{pending.event.message}\n{text.strip()}")
        pending.lines.append(number)
        pending.remaining -= 1
        if pending.remaining <= 0:
            self.close_warn(sink)

    def _feed_dump(self, line: Line, sink: Sink) -> bool:
        """Take a line of a proxy-state dump (spec 3.2); False: not one (an open dump ends)."""
        item = _block_item(line.text, "proxy_line")
        dump = self._dump
        if item is None or (dump is None and item[0] != "active"):
            self.close_dump(sink, complete=False)
            return False
        kind, value = item
        if dump is None or kind == "active":
            self.close_dump(sink, complete=False)
            self._dump = _OpenDump(line.no, line.raw, line.hint, [line.no], [], [], [])
            return True
        dump.lines.append(line.no)
        if kind in ("op", "peer"):
            dump.ops.append(value)
            dump.chained.append(kind == "peer")
        elif kind == "leak":
            dump.leaks.append(value)
        elif kind == "end":
            self.close_dump(sink, complete=True)
        return True

    def close_dump(self, sink: Sink, *, complete: bool) -> None:
        """Emit the open proxy-state dump, if any."""
        dump, self._dump = self._dump, None
        if dump is None:
            return
        event = NcclProxyDump(
            ref=SourceRef(self.source, dump.number),
            text=dump.text,
            origin=dump.hint,
            ops=tuple(dump.ops),
            chained=tuple(dump.chained),
            leaks=tuple(dump.leaks),
            complete=complete,
        )
        sink.emit(event, dump.lines)

    def _feed_ras(self, line: Line, sink: Sink) -> bool:
        """Take a line of an ncclras text report; False: not one (an open report ends)."""
        item = _block_item(line.text, "ras_line")
        report = self._ras
        if item is None or (report is None and not _opens_ras(item[0], line.text)):
            self.close_ras(sink)
            return False
        kind, value = item
        if report is None or kind == "version":
            self.close_ras(sink)
            report = self._ras = _OpenRas(line.no, line.raw, line.hint, [])
        report.lines.append(line.no)
        if kind == "version":
            report.version = value
        elif kind == "record":
            report.records.append(value)
        elif kind == "rank":
            report.ranks.append(value)
        elif kind == "missing":
            report.missing.extend(value)
        elif kind == "process":
            report.processes.append(value)
        elif kind in ("text", "kind"):
            report.notes.append(value)
        return True

    def close_ras(self, sink: Sink) -> None:
        """Emit the open ncclras report, if any."""
        report, self._ras = self._ras, None
        if report is None:
            return
        event = NcclRasReport(
            ref=SourceRef(self.source, report.number),
            text=report.text,
            origin=report.hint,
            version=report.version,
            records=tuple(report.records),
            ranks=tuple(report.ranks),
            missing_ranks=tuple(report.missing),
            processes=tuple(report.processes),
            notes=tuple(report.notes),
        )
        sink.emit(event, report.lines)

    def busy(self) -> bool:
        """Return True while a multi-line WARN, a proxy-state dump or a RAS report is open."""
        return self._open is not None or self._dump is not None or self._ras is not None

    def close_warn(self, sink: Sink) -> None:
        """Emit the open multi-line WARN, if any."""
        pending, self._open = self._open, None
        if pending is not None:
            sink.emit(pending.event, pending.lines)
