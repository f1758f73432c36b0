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
from collections import deque
from dataclasses import dataclass, replace
from functools import cache, lru_cache
from typing import Any, cast

from lark import Lark
from lark.exceptions import LarkError, UnexpectedInput

from logsleuth.model.base import NO_ORIGIN, Event, Origin, SourceRef
from logsleuth.model.nccl import NcclCollective, NcclUnrecognized, NcclWarn
from logsleuth.parse.base import Line, Reader, Sink
from logsleuth.parse.nccl_transform import Parsed, ToEvents
from logsleuth.resources import read_grammar

_STAMP = re.compile(
    r"(?:(\d{4})-(\d\d)-(\d\d)[T ]|([A-Z][a-z]{2}) +(\d\d?) )?(\d\d):(\d\d):(\d\d)(?:[.,](\d+))?"
)
_MONTHS = {m: i for i, m in enumerate(calendar.month_abbr) if m}
# Shape fields: word-bounded hex or decimal numbers (pointers, opCounts, bus ids, counts) and
# digit runs inside words (gpu-node001, mlx5_0). Two lines of one shape differ only there.
_FIELD = re.compile(r"\b(?:0x)?[0-9a-fA-F]+\b|\d+")
_FIELD_GROUP = "((?:0x)?[0-9a-fA-F]++)"
_FIELD_ANY = "(?:0x)?[0-9a-fA-F]++"
_MAX_SHAPES = 4096
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


def line_shape(text: str) -> str:
    """Return the shape of ``text``: the line with every number and hex field abstracted."""
    return _FIELD.sub("\x00", text)


@dataclass(frozen=True, slots=True, eq=False)
class Shape:
    """What the grammar said about the first line of one shape; the cached extractor.

    ``pattern`` matches the lines of the shape (literal text, one group per field); it
    is only built for shapes :class:`NcclReader` compacts.
    ``kind`` is the event class name the grammar gave (``None``: not an NCCL line) and
    ``recognized`` whether that class counts as recognized. For a COLL shape, ``key``
    lists the groups that name the writer and the communicator (``comm``), so that a
    line can be kept or dropped by :class:`NcclReader` without building its event.
    """

    pattern: re.Pattern[str] | None
    kind: str | None
    recognized: bool
    key: tuple[int, ...] | None = None


_SHAPES: dict[str, Shape] = {}


def _derive_shape(text: str) -> Shape:
    """Parse ``text`` by rule ``line`` and derive the extractor of its shape from the parse."""
    fields = [(f.start(), f.end(), f.group()) for f in _FIELD.finditer(text)]
    parsed = _parse(text) if _maybe_nccl(text) else None
    if parsed is None:
        return Shape(None, None, False)
    event = _build(text, parsed, SourceRef("<shape>", 1), text, NO_ORIGIN)
    kind = type(event).__name__
    head = parsed[1]
    key: tuple[int, ...] | None = None
    if isinstance(event, NcclCollective) and head is not None:
        # The writer is the prefix (host:pid:tid [dev]); the comm pointer is the one field
        # equal to the event's comm. Anything ambiguous is simply not compacted.
        writer = [
            i + 1 for i, (a, b, _) in enumerate(fields) if a >= head.start and b <= head.message_at
        ]
        comm = [i for i, (a, _, v) in enumerate(fields) if a >= head.message_at and v == event.comm]
        if len(comm) > 1:
            # Equal pointers (comm == stream): ask the grammar which field feeds ``comm``.
            comm = [i for i in comm if _feeds_comm(text, fields[i])]
        if len(comm) == 1 or not event.comm:
            key = (*writer, *(i + 1 for i in comm))
    pattern = None
    if key is not None:
        # Only the key fields are captured; the others just have to be there.
        pieces: list[str] = []
        pos = 0
        for index, (start, end, _) in enumerate(fields, 1):
            pieces += (re.escape(text[pos:start]), _FIELD_GROUP if index in key else _FIELD_ANY)
            pos = end
        pattern = re.compile("".join((*pieces, re.escape(text[pos:]))))
        key = tuple(range(1, len(key) + 1))
    return Shape(pattern, kind, event.RECOGNIZED, key)


def _feeds_comm(text: str, field: tuple[int, int, str]) -> bool:
    """Return True when the grammar takes ``comm`` from ``field`` (checked with a probe)."""
    start, end, _ = field
    probe = "0x5eed5eed"
    probed = text[:start] + probe + text[end:]
    parsed = _parse(probed)
    if parsed is None:
        return False
    event = _build(probed, parsed, SourceRef("<shape>", 1), probed, NO_ORIGIN)
    return isinstance(event, NcclCollective) and event.comm == probe


def shape_of(text: str) -> Shape:
    """Return the cached extractor of ``text``'s shape, deriving it on first sight."""
    shape = line_shape(text)
    found = _SHAPES.get(shape)
    if found is None:
        found = _derive_shape(text)
        if len(_SHAPES) < _MAX_SHAPES:
            _SHAPES[shape] = found
    return found


def nccl_message(text: str) -> str | None:
    """Return the message after the NCCL prefix of ``text``; None if it has no NCCL prefix."""
    parsed = _parse(text) if _maybe_nccl(text) else None
    if parsed is None:
        return None
    head = parsed[1]
    return text[head.message_at :].strip() if head is not None else text.strip()


@dataclass(slots=True)
class _Tail:
    """The first and the last few COLL lines of one writer and communicator."""

    first: tuple[int, str, str, Origin]
    last: deque[tuple[int, str, str, Origin]]


@dataclass(slots=True)
class _OpenWarn:
    """A WARN whose message NCCL continues on prefix-less lines (spec 1.5)."""

    event: NcclWarn
    lines: list[int]
    remaining: int


class NcclReader(Reader):
    """Read NCCL log lines; keep a multi-line WARN open until its continuation lines came."""

    name = "nccl"

    def __init__(self, source: str, keep_ops: int | None = None) -> None:
        super().__init__(source)
        self._open: _OpenWarn | None = None
        self._keep = keep_ops
        self._hot: Shape | None = None
        self._tails: dict[tuple[object, ...], _Tail] = {}
        self.deferred = 0
        """Lines :meth:`defer` took; they count as recognized (see :meth:`close`)."""

    def defer(self, number: int, text: str, raw: str, hint: Origin) -> bool:
        """Take a COLL line of a known shape without parsing it; False: offer it to ``feed``.

        Only with ``keep_ops``: per writer and communicator the first and the last
        ``keep_ops`` COLL lines are kept and parsed at :meth:`close`; the others count as
        recognized (their shape's first line was parsed by the grammar) and are dropped.
        The caller counts :attr:`deferred` lines as recognized.
        """
        if self._keep is None or self._open is not None:
            return False
        shape = self._hot
        found = shape.pattern.fullmatch(text) if shape is not None and shape.pattern else None
        if found is None:
            if "NCCL " not in text:
                return False
            shape = shape_of(text)
            if shape.key is None or shape.pattern is None:
                return False
            found = shape.pattern.fullmatch(text)
            if found is None:
                return False
            self._hot = shape
        assert shape is not None and shape.key is not None
        key = (shape, found.groups())
        entry = (number, text, raw, hint)
        tail = self._tails.get(key)
        if tail is None:
            self._tails[key] = _Tail(entry, deque((entry,), maxlen=self._keep))
        else:
            tail.last.append(entry)
        self.deferred += 1
        return True

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
        """Emit the open multi-line WARN, if any, and the COLL lines kept by :meth:`defer`."""
        pending, self._open = self._open, None
        if pending is not None:
            sink.emit(pending.event, pending.lines)
        tails, self._tails = self._tails, {}
        for tail in tails.values():
            kept = list(tail.last)
            if tail.first[0] < kept[0][0]:
                kept.insert(0, tail.first)
            for number, text, raw, hint in kept:
                parsed = _parse(text)
                if parsed is None:
                    self.deferred -= 1
                    continue
                event = _build(text, parsed, SourceRef(self.source, number), raw, hint)
                self.deferred -= not event.RECOGNIZED
                sink.events.append(event)
