"""Read NCCL debug-log lines (``NCCL_DEBUG=VERSION|WARN|INFO|TRACE``) into model events.

The language is ``grammars/nccl.lark`` (rule ``line``); :mod:`logsleuth.parse.nccl_transform`
turns its reductions into event fields of :mod:`logsleuth.model.nccl`. A line whose prefix
is valid but whose message the grammar does not know becomes :class:`NcclUnrecognized`
(or a WARN of family ``other``), so the stream identity (host, pid) is still known. Text
without an NCCL prefix is declined.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass, replace
from functools import cache, lru_cache
from typing import Any, cast

from lark import Lark
from lark.exceptions import LarkError, UnexpectedInput

from logsleuth.model.base import NO_ORIGIN, Event, Origin, SourceRef
from logsleuth.model.nccl import NcclUnrecognized, NcclWarn
from logsleuth.parse.base import Line, Reader, Sink
from logsleuth.parse.nccl_transform import Parsed, ToEvents
from logsleuth.resources import read_grammar

_STAMP = re.compile(
    r"(?:(\d{4})-(\d\d)-(\d\d)[T ]|([A-Z][a-z]{2}) +(\d\d?) )?(\d\d):(\d\d):(\d\d)(?:[.,](\d+))?"
)
_MONTHS = {m: i for i, m in enumerate(calendar.month_abbr) if m}
# Anchored at line start or a blank so that a long run without ':' is scanned once.
_CANDIDATE = re.compile(r"(?:^|\s)[^\s:\[\]]+:\d+:\d+ (?:\[-?\d+\] |NCCL )|NCCL version \d")


@cache
def _parser() -> Lark:
    """Build the LALR parser of ``grammars/nccl.lark`` once per process."""
    return Lark(
        read_grammar("nccl.lark"),
        parser="lalr",
        lexer="contextual",
        start=["line", "envelope"],
        transformer=ToEvents(),
    )


def _parse(text: str) -> Parsed | None:
    """Parse ``text`` by rule ``line``, falling back to rule ``envelope``; None if not NCCL."""
    parser = _parser()
    try:
        return cast(Parsed, parser.parse(text, start="line"))
    except UnexpectedInput as exc:
        # An error at the first character means there is no NCCL prefix at all.
        if exc.pos_in_stream in (0, None):
            return None
    except LarkError:
        return None
    try:
        return cast(Parsed, parser.parse(text, start="envelope"))
    except LarkError:
        return None


@lru_cache(maxsize=4096)
def _stamp_seconds(stamp: str) -> float | None:
    """Return POSIX seconds of an NCCL timestamp (``[2026-04-22 21:34:20]``), naive local time."""
    found = _STAMP.search(stamp)
    if found is None:
        return None
    year, month, day, mon_name, mon_day, hour, minute, second, fraction = found.groups()
    if year is not None:
        date = (int(year), int(month), int(day))
    elif mon_name is not None and mon_name in _MONTHS:
        date = (1970, _MONTHS[mon_name], int(mon_day))
    else:
        date = (1970, 1, 1)
    seconds = calendar.timegm((*date, int(hour), int(minute), int(second), 0, 0, 0))
    return seconds + (float(f"0.{fraction}") if fraction else 0.0)


def _build(text: str, parsed: Parsed, ref: SourceRef, raw: str, hint: Origin) -> Event:
    """Make the event of a parsed line; the NCCL prefix names the writer, the hint the rank."""
    stamp, head, message = parsed
    time = _stamp_seconds(stamp) if stamp else None
    if time is None:
        time = hint.time
    if head is None:
        # A bare version line: only the launcher prefix can say who wrote it.
        assert message is not None
        return message.cls(ref=ref, text=raw, origin=replace(hint, time=time), **message.fields)
    origin = Origin(
        host=head.host,
        pid=head.pid,
        tid=head.tid,
        dev=head.dev,
        rank=hint.rank,
        local_rank=hint.local_rank,
        time=time,
    )
    body = text[head.message_at :].strip()
    if head.level in ("WARN", "ABORT") or (message is not None and message.cls is NcclWarn):
        fields: dict[str, Any] = {"family": "other"} if message is None else message.fields
        return NcclWarn(
            ref=ref,
            text=raw,
            origin=origin,
            file=head.file,
            line_no=head.line_no,
            func=head.func,
            message=body,
            **fields,
        )
    if message is None:
        return NcclUnrecognized(ref=ref, text=raw, origin=origin, level=head.level, message=body)
    event: Event = message.cls(ref=ref, text=raw, origin=origin, **message.fields)
    return event


def _maybe_nccl(text: str) -> bool:
    """Cheap pre-check: could ``text`` hold an NCCL prefix or version line at all?

    Saves the parser's error path on the many foreign lines that mention NCCL.
    """
    return "NCCL " in text and _CANDIDATE.search(text) is not None


def parse_nccl_line(text: str, *, source: str = "<line>", line_no: int = 1) -> Event | None:
    """Parse one NCCL log line by grammar rule ``line``; None when it has no NCCL prefix.

    The prefix alone gives the origin (no launcher hint); for WARNs that NCCL continues on
    further lines only the first line is read.
    """
    parsed = _parse(text) if _maybe_nccl(text) else None
    if parsed is None:
        return None
    return _build(text, parsed, SourceRef(source, line_no), text, NO_ORIGIN)


@dataclass(slots=True)
class _OpenWarn:
    """A WARN whose message NCCL continues on prefix-less lines (spec 1.5)."""

    event: NcclWarn
    lines: list[int]
    remaining: int


class NcclReader(Reader):
    """Read NCCL log lines; keep a multi-line WARN open until its continuation lines came."""

    name = "nccl"

    def __init__(self, source: str) -> None:
        super().__init__(source)
        self._open: _OpenWarn | None = None

    def feed(self, line: Line, sink: Sink) -> bool:
        """Offer ``line``; take it when it has an NCCL prefix or continues an open WARN."""
        text = line.text
        parsed = _parse(text) if _maybe_nccl(text) else None
        pending = self._open
        if pending is not None:
            if parsed is None:
                pending.event = replace(
                    pending.event, message=f"{pending.event.message}\n{text.strip()}"
                )
                pending.lines.append(line.no)
                pending.remaining -= 1
                if pending.remaining <= 0:
                    self.close(sink)
                return True
            self.close(sink)
        if parsed is None:
            return False
        event = _build(text, parsed, SourceRef(self.source, line.no), line.raw, line.hint)
        message = parsed[2]
        if message is not None and message.continuation and isinstance(event, NcclWarn):
            self._open = _OpenWarn(event, [line.no], message.continuation)
        else:
            sink.emit(event)
        return True

    def busy(self) -> bool:
        """Return True while a multi-line WARN waits for its continuation lines."""
        return self._open is not None

    def close(self, sink: Sink) -> None:
        """Emit the open multi-line WARN, if any, with the lines it has."""
        pending, self._open = self._open, None
        if pending is not None:
            sink.emit(pending.event, pending.lines)
