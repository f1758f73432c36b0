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
from dataclasses import dataclass, field, replace
from functools import cache, lru_cache
from itertools import pairwise
from typing import Any, cast

from lark import Lark, Token
from lark.exceptions import LarkError, UnexpectedInput

from logsleuth.model.base import NO_ORIGIN, Event, Origin, SourceRef
from logsleuth.model.messages import LogMessage
from logsleuth.model.nccl import (
    NcclChannelConnect,
    NcclCollective,
    NcclNetDevices,
    NcclProxyDump,
    NcclRasReport,
    NcclRing,
    NcclTree,
    NcclUnrecognized,
    NcclVersion,
    NcclVersionRange,
    NcclWarn,
)
from logsleuth.parse.base import Line, Reader, Sink
from logsleuth.parse.catalog import load_catalog
from logsleuth.parse.fingerprint import (
    StreamRange,
    VersionTracker,
    format_version,
    head_features,
    message_features,
    parse_version,
)
from logsleuth.parse.nccl_transform import Head, Parsed, ToEvents, head_of
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
# A complete NCCL prefix anywhere in a line (spec 4.3): where a torn line's next line begins.
_HEAD_AT = re.compile(
    r"[^\s:\[\]]+:\d+:\d+ (?:\[-?\d+\] (?:NCCL INFO|\d+\.\d+ \S+:\d+ NCCL TRACE"
    r"|[^\s:()]+:\d+(?: \(\S*?\))? NCCL (?:WARN|ABORT))|NCCL CALL)(?: |$)"
)
# The level word of an NCCL line wherever it stands (spec 1.3; before 2.5 without "NCCL"):
# the anchor of a line whose prefix is partial, redacted or foreign.
_MARKER = re.compile(
    r"\b(NCCL (?:INFO|WARN|TRACE|ABORT|CALL))\b"
    r"|\[-?\d+\] (INFO|WARN)\b"
    r"|\.(?:cc|cu|cpp|h|hpp|c):\d+ (WARN)\b"
)
# What is left of an NCCL prefix right before its level word: any of its fields may be
# missing, and a pid or tid may be redacted (``XXXXXX``).
_PARTIAL = re.compile(
    r"(?:(?P<host>[^\s:\[\]]+):(?P<pid>\w+):(?P<tid>\w+) )?"
    r"(?:\[(?P<dev>-?\d+)\] )?"
    r"(?:(?P<ms>\d+\.\d+) (?P<func>\S+:\d+) )?"
    r"(?:(?P<file>[^\s:()\[\]]+):(?P<line>\d+)(?: \((?P<fn>\S*?)\))? )?$"
)
_PARTIAL_SPAN = 240
"""How far before the level word a partial prefix is looked for."""
_STAMP_BEFORE = re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\] $")
_CUT_BYTES = (1022, 1023)
"""Up to 2.28.9 NCCL cut every line to 1023 bytes (a WARN shows 1022: its first byte is \\n)."""
_CUT_LISTS = (NcclRing, NcclTree, NcclNetDevices)
"""Events whose last item is unreliable when their line was cut."""
_CONNECTS_SEEN = 8
"""Transport lines per stream whose shapes are looked at for release features."""
_REJOIN_WINDOW = 20_000
"""Physical lines within which a torn line's tail is looked for (blocks are 4-8 KiB)."""


@cache
def _parser() -> Lark:
    """Build the LALR parser of ``grammars/nccl.lark`` once per process."""
    return Lark(
        read_grammar("nccl.lark"),
        parser="lalr",
        lexer="contextual",
        start=["line", "envelope", "proxy_line", "ras_line"],
        transformer=ToEvents(),
    )


def _parse(text: str) -> Parsed | None:
    """Parse ``text`` by rule ``line``, falling back to rule ``envelope``; None if not NCCL."""
    frequent = _parse_frequent(text)
    if frequent is not None:
        return frequent
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
        unknown = NcclUnrecognized(ref=ref, text=raw, origin=origin, level=head.level, message=body)
        return _catalog_message(unknown) or unknown
    event: Event = message.cls(ref=ref, text=raw, origin=origin, **message.fields)
    return event


def _catalog_message(event: NcclUnrecognized) -> LogMessage | None:
    """Type an NCCL message the grammar has no rule for by the format catalog, or None."""
    match = load_catalog().match(event.message)
    if match is None:
        return None
    return LogMessage(
        ref=event.ref,
        text=event.text,
        origin=event.origin,
        family="nccl",
        level=event.level,
        catalog=match.entry.id,
        message=event.message,
        fields=tuple((f"arg{i}", v.strip()) for i, v in enumerate(match.fields) if v.strip()),
        rank=event.origin.rank,
    )


@cache
def _terminals() -> tuple[re.Pattern[str], ...]:
    """Return the grammar's own INFO_HEAD, COLL_MSG and CHANNEL_CONNECT regexes, compiled."""
    parser = _parser()
    names = ("INFO_HEAD", "COLL_MSG", "CHANNEL_CONNECT")
    return tuple(re.compile(parser.get_terminal(n).pattern.to_regexp()) for n in names)


_TRANSFORMER = ToEvents()


def warm_up() -> None:
    """Build the parser and the terminal regexes now (before forking workers that share them)."""
    _terminals()


def _parse_frequent(text: str) -> Parsed | None:
    """Parse the two most frequent line kinds by their grammar terminals alone, or None.

    ``INFO_HEAD COLL_MSG`` (every collective) and ``INFO_HEAD CHANNEL_CONNECT REST`` (one
    per channel, peer and direction) are single terminals in ``grammars/nccl.lark``, and
    in the state after ``INFO_HEAD`` no terminal of higher priority matches their text;
    so a line whose parts match those terminals reduces to the same Transformer
    callbacks, which are called directly here (a fifth of the parser's cost). Anything
    else, a timestamped line included, goes to the parser.
    """
    head_re, coll_re, connect_re = _terminals()
    head = head_re.match(text)
    if head is None:
        return None
    body = text[head.end() :]
    message = None
    if body.startswith(("Channel ", "Ring ")):
        found = connect_re.match(body)
        rest = body[found.end() :] if found is not None else ""
        if found is not None and rest.strip():
            message = _TRANSFORMER.channel_connect(
                Token("CHANNEL_CONNECT", found.group()), Token("REST", rest)
            )
    elif "opCount " in body and coll_re.fullmatch(body) is not None:
        message = _TRANSFORMER.coll(Token("COLL_MSG", body))
    if message is None:
        return None
    token = Token("INFO_HEAD", head.group(), start_pos=0, end_pos=head.end())
    return None, head_of(token), message


def _maybe_nccl(text: str) -> bool:
    """Cheap pre-check: could ``text`` hold an NCCL prefix or version line at all?

    Saves the parser's error path on the many foreign lines that mention NCCL.
    """
    # NCCL before 2.3 wrote "[0] INFO" / "file:line WARN" without the word NCCL.
    return ("NCCL " in text or " INFO" in text or " WARN" in text) and _CANDIDATE.search(
        text
    ) is not None


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
    run: re.Pattern[str] | None = None
    """A run of ``\\n``-ended lines of the shape with the same key fields as the first."""


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
    pattern = run = None
    if key is not None:
        # Only the key fields are captured; the others just have to be there.
        pieces: list[str] = []
        first: list[str] = []
        rest: list[str] = []
        pos = 0
        for index, (start, end, value) in enumerate(fields, 1):
            literal = re.escape(text[pos:start])
            # A run takes the 0x of each field as the first line had it: one class, no
            # optional group, is three times faster in ``re`` (a line that differs falls
            # back to ``pattern``).
            field = "0x[0-9a-fA-F]++" if value.startswith("0x") else "[0-9a-fA-F]++"
            if index in key:
                group = f"k{len(first) // 2}"
                pieces += (literal, _FIELD_GROUP)
                first += (literal, f"(?P<{group}>{field})")
                rest += (literal, f"(?P={group})")
            else:
                pieces += (literal, _FIELD_ANY)
                first += (literal, field)
                rest += (literal, field)
            pos = end
        tail = re.escape(text[pos:])
        pattern = re.compile("".join((*pieces, tail)))
        run = re.compile("".join((*first, tail, "\n(?:", *rest, tail, "\n)*")))
        key = tuple(range(1, len(key) + 1))
    return Shape(pattern, kind, event.RECOGNIZED, key, run)


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
class _Fragment:
    """The head of a line another process's output cut off mid-way (spec 4.3)."""

    number: int
    text: str
    hint: Origin


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
class _OpenWarn:
    """A WARN whose message NCCL continues on prefix-less lines (spec 1.5)."""

    event: NcclWarn
    lines: list[int]
    remaining: int


class NcclReader(Reader):
    """Read NCCL log lines; keep a multi-line WARN open until its continuation lines came.

    Also: splits lines torn by another process's output at every NCCL prefix and re-joins
    each head fragment with its tail when that arrives (:meth:`rejoin`); drops the cut last
    item of a list line NCCL truncated at 1023 bytes; narrows each stream's NCCL release
    range from its line shapes (one :class:`NcclVersionRange` per stream at :meth:`close`).
    """

    name = "nccl"

    def __init__(self, source: str, keep_ops: int | None = None) -> None:
        super().__init__(source)
        self._open: _OpenWarn | None = None
        self._dump: _OpenDump | None = None
        self._ras: _OpenRas | None = None
        self._keep = keep_ops
        self._hot: Shape | None = None
        self._tails: dict[tuple[object, ...], _Tail] = {}
        self._fragments: dict[tuple[str | None, int | None], _Fragment] = {}
        self._hosts: set[str] = set()
        self.versions = VersionTracker()
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
            # Only COLL shapes are compacted: other lines need no shape (and no second parse).
            if "NCCL " not in text or "opCount " not in text:
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

    def take_run(self, text: str, pos: int, number: int) -> tuple[int, int] | None:
        """Take the run of hot-shape COLL lines at ``pos`` of ``text`` like :meth:`defer`.

        ``number`` is the line number at ``pos``. Returns (end of the run, lines taken), or
        None when the line at ``pos`` is not of the hot shape. Only clean, prefix-free lines
        match a shape's regex, so they need no cleaning; the caller must not use this while
        a reader is busy or when a numbering scheme is stripped.
        """
        shape = self._hot
        if shape is None or shape.run is None or self._keep is None or self._open is not None:
            return None
        found = shape.run.match(text, pos)
        if found is None:
            return None
        end = found.end()
        count = text.count("\n", pos, end)
        key = (shape, found.groups())
        tail = self._tails.get(key)
        if tail is None:
            line = text[pos : text.index("\n", pos)]
            tail = self._tails[key] = _Tail(
                (number, line, line, NO_ORIGIN), deque(maxlen=self._keep)
            )
        # Only the last keep_ops lines of the run can stay in the tail: find them backwards.
        kept: list[tuple[int, str, str, Origin]] = []
        stop = end - 1
        last = number + count - 1
        for offset in range(min(count, self._keep)):
            start = text.rfind("\n", pos, stop) + 1 or pos
            line = text[start:stop]
            kept.append((last - offset, line, line, NO_ORIGIN))
            stop = start - 1
        tail.last.extend(reversed(kept))
        self.deferred += count
        return end, count

    def feed(self, line: Line, sink: Sink) -> bool:
        """Offer ``line``; take it when it has an NCCL prefix or continues an open WARN."""
        text = line.text
        dump_line = self._dump is not None or text.startswith("ACTIVE OPS")
        if dump_line and self._feed_dump(line, sink):
            return True
        ras_line = self._ras is not None or text.startswith(("NCCL version", "Job summary"))
        if ras_line and self._feed_ras(line, sink):
            return True
        if text.count("NCCL ") > 1:
            text = self._split_torn(line, sink)
        parsed = _parse(text) if _maybe_nccl(text) else None
        if parsed is None and _MARKER.search(text) is not None:
            events = self._partial(text, line)
            if events:
                if self._open is not None:
                    self.close_warn(sink)
                for event in events:
                    sink.emit(event)
                return True
        pending = self._open
        if pending is not None:
            if parsed is None:
                pending.event = replace(
                    pending.event, message=f"{pending.event.message}\n{text.strip()}"
                )
                pending.lines.append(line.no)
                pending.remaining -= 1
                if pending.remaining <= 0:
                    self.close_warn(sink)
                return True
            self.close_warn(sink)
        if parsed is None:
            return False
        event = self._event(text, parsed, line.no, line.raw, line.hint)
        message = parsed[2]
        if message is not None and message.continuation and isinstance(event, NcclWarn):
            self._open = _OpenWarn(event, [line.no], message.continuation)
        else:
            sink.emit(event)
        return True

    def _partial(self, text: str, line: Line) -> list[Event]:
        """Read the NCCL messages of a line whose prefixes are partial or foreign.

        ``NCCL WARN msg`` pasted alone, ``[7] NCCL INFO msg``, a redacted pid, the pre-2.5
        ``file:line WARN`` form, a foreign prefix before ``host:pid:tid``, several messages
        run together on one line: each level word is an anchor; what precedes it is read
        for the prefix's fields as far as they are there, a missing field stays missing.
        """
        starts: list[tuple[int, str, int]] = []
        for marker in _MARKER.finditer(text):
            group = next(g for g in (1, 2, 3) if marker.group(g))
            at, word = marker.start(group), marker.group(group)
            begin = max(0, at - _PARTIAL_SPAN)
            if starts:
                begin = max(begin, starts[-1][2])
            found = _PARTIAL.search(text, begin, at)
            starts.append((found.start() if found else at, word, marker.end()))
        events: list[Event] = []
        for i, (start, word, _) in enumerate(starts):
            end = starts[i + 1][0] if i + 1 < len(starts) else len(text)
            event = self._partial_one(text[start:end].rstrip(), word, line)
            if event is not None and event.RECOGNIZED:
                events.append(event)
        return events

    def _partial_one(self, piece: str, level_word: str, line: Line) -> Event | None:
        level = level_word.split()[-1]
        head, sep, body = piece.partition(level_word)
        if not sep:
            return None
        found = _PARTIAL.search(head + " " if head and not head.endswith(" ") else head)
        fields = found.groupdict() if found else {}
        host = fields.get("host")
        pid = fields.get("pid")
        tid = fields.get("tid")
        dev = fields.get("dev")
        canon = f"{host or '_'}:{pid if pid and pid.isdigit() else 0}:"
        canon += f"{tid if tid and tid.isdigit() else 0}"
        if level != "CALL":
            canon += f" [{dev or 0}]"
        if level == "TRACE":
            canon += f" {fields.get('ms') or '0.0'} {fields.get('func') or '_:0'}"
        if level in ("WARN", "ABORT"):
            canon += f" {fields.get('file') or '_'}:{fields.get('line') or 0}"
            if fields.get("fn") is not None:
                canon += f" ({fields['fn']})"
        canon += f" NCCL {level}{body}"
        parsed = _parse(canon)
        if parsed is None or parsed[1] is None:
            return None
        ref = SourceRef(self.source, line.no)
        event = _build(canon, parsed, ref, line.raw, line.hint)
        if isinstance(event, NcclUnrecognized):
            event = _catalog_message(event) or event
        origin = replace(
            event.origin,
            host=host if host else line.hint.host,
            pid=int(pid) if pid and pid.isdigit() else line.hint.pid,
            tid=int(tid) if tid and tid.isdigit() else None,
            dev=int(dev) if dev is not None else None,
        )
        return replace(event, origin=origin)

    def _event(self, text: str, parsed: Parsed, number: int, raw: str, hint: Origin) -> Event:
        """Build the event of a parsed line; undo a 1023-byte cut; note release features."""
        ref = SourceRef(self.source, number)
        event = _build(text, parsed, ref, raw, hint)
        stamp, head, message = parsed
        if (
            len(text) >= _CUT_BYTES[0]
            and (message is None or isinstance(event, _CUT_LISTS))
            and len(text.encode("utf-8", "surrogateescape")) in _CUT_BYTES
        ):
            event = self._uncut(text, event, ref, raw, hint)
        if head is not None:
            self._hosts.add(head.host or "")
            if stamp is None and hint.time is not None and raw.endswith(text):
                # The dispatcher took "[%F %T] " for a collector's stamp; NCCL may have written it.
                found = _STAMP_BEFORE.search(raw, 0, len(raw) - len(text))
                stamp = found.group() if found else None
            stream = self._note_release(text, stamp, head, event, number)
            if stamp and event.origin.time and stream.within((2, 26, 0), (2, 26, 99)):
                # 2.26.x printed wrong sub-second digits (spec 1.4): keep whole seconds.
                origin = replace(event.origin, time=float(int(event.origin.time)))
                event = replace(event, origin=origin)
        return event

    @staticmethod
    def _uncut(text: str, event: Event, ref: SourceRef, raw: str, hint: Origin) -> Event:
        """Re-parse a line NCCL cut at 1023 bytes without its (cut) last items (spec 1.5)."""
        shorter = text
        for _ in range(3):
            shorter = shorter.rstrip().rsplit(None, 1)[0]
            parsed = _parse(shorter)
            if parsed is not None and parsed[2] is not None:
                cut = _build(shorter, parsed, ref, raw, hint)
                if isinstance(cut, _CUT_LISTS):
                    return replace(cut, truncated=True)
                return cut
        return event

    def _note_release(
        self, text: str, stamp: str | None, head: Head, event: Event, number: int
    ) -> StreamRange:
        """Narrow the writer's release range by what this line's shape says (spec 5)."""
        stream = self.versions.get((head.host, head.pid))
        if stream.exact is not None:
            return stream
        if isinstance(event, NcclVersion):
            version = parse_version(event.version)
            if version is not None:
                stream.pin(version, number, event.text)
            return stream
        old = head.level in ("INFO", "WARN") and "NCCL " + head.level not in text
        found = head_features(head.level, head.func, stamp, old)
        if found is not None:
            stream.narrow(*found, number, event.text)
        if isinstance(event, NcclChannelConnect):
            # A process logs one per channel, peer and direction; the first few tell all.
            stream.connects += 1
            if stream.connects > _CONNECTS_SEEN:
                return stream
        if not isinstance(event, NcclCollective) or event.op == "unknown":
            for feature in message_features(text[head.message_at :].strip()):
                stream.narrow(*feature, number, event.text)
        return stream

    def _split_torn(self, line: Line, sink: Sink) -> str:
        """Split a torn physical line at each NCCL prefix (spec 4.3); return its last line.

        ``…via P2gpu-a01:4722:4795 [1] NCCL INFO …``: the text before a mid-line prefix is
        the head of another line whose tail comes later as an orphan line; it is kept per
        (host, pid) until :meth:`rejoin` finds the tail. A host name glued to the fragment
        (``P2gpu-a01``) is cut to the longest host already seen in this input.
        """
        text = line.text
        starts = [m.start() for m in _HEAD_AT.finditer(text)]
        if len(starts) < 2:
            return text
        known = set(self._hosts)
        known.add(text[starts[0] :].split(":", 1)[0])
        # Host names of one job share a shape (gpu-a01, gpu-a02): digits may differ.
        shapes = re.compile(
            "|".join(sorted({re.sub(r"\d+", r"\\d+", re.escape(h)) for h in known if h}))
        )
        cuts = [0]
        for start in starts[1:]:
            token = text[start:].split(":", 1)[0]
            skip = next((i for i in range(1, len(token)) if shapes.fullmatch(token, i)), 0)
            cuts.append(start + skip)
        for begin, end in pairwise(cuts):
            piece = text[begin:end]
            parsed = _parse(piece)
            if parsed is None or parsed[1] is None:
                continue
            head = parsed[1]
            key = (head.host, head.pid)
            older = self._fragments.pop(key, None)
            if older is not None:
                self._emit_fragment(older, sink)
            self._fragments[key] = _Fragment(line.no, piece, line.hint)
        return text[cuts[-1] :]

    def rejoin(self, line: Line, sink: Sink) -> bool:
        """Join ``line`` (no reader took it) to a torn line's head; True when it fitted.

        The tail of a torn line has no prefix, so its writer is unknown: the oldest open
        fragment whose joined text the grammar recognizes takes it (a heuristic; spec 4.3).
        """
        if not self._fragments:
            return False
        for key, fragment in sorted(self._fragments.items(), key=lambda kv: kv[1].number):
            if line.no - fragment.number > _REJOIN_WINDOW:
                del self._fragments[key]
                self._emit_fragment(fragment, sink)
                continue
            joined = fragment.text + line.text
            parsed = _parse(joined)
            if parsed is None or parsed[2] is None:
                continue
            del self._fragments[key]
            event = self._event(joined, parsed, fragment.number, joined, fragment.hint)
            sink.emit(event, (fragment.number, line.no))
            return True
        return False

    def _emit_fragment(self, fragment: _Fragment, sink: Sink) -> None:
        """Emit a torn line's head that no tail joined: a WARN stays a WARN, else unrecognized."""
        parsed = _parse(fragment.text)
        if parsed is None or parsed[1] is None:
            return
        ref = SourceRef(self.source, fragment.number)
        event = _build(fragment.text, parsed, ref, fragment.text, fragment.hint)
        if not isinstance(event, NcclWarn):
            head = parsed[1]
            body = fragment.text[head.message_at :].strip()
            event = NcclUnrecognized(
                ref=ref, text=fragment.text, origin=event.origin, level=head.level, message=body
            )
        sink.events.append(event)
        if not event.RECOGNIZED:
            sink.unrecognized_events += 1

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
        if item is None or (report is None and item[0] not in ("version", "skip")):
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

    def close(self, sink: Sink) -> None:
        """Emit the open WARN or dump, unjoined fragments, kept COLL lines, release ranges."""
        self.close_warn(sink)
        self.close_dump(sink, complete=False)
        self.close_ras(sink)
        fragments, self._fragments = self._fragments, {}
        for fragment in fragments.values():
            self._emit_fragment(fragment, sink)
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
        # Not sink.emit: a range is a summary, it makes no line recognized.
        for (host, pid), stream in self.versions.streams.items():
            if not stream.evidence:
                continue
            sink.events.append(
                NcclVersionRange(
                    ref=SourceRef(self.source, stream.first_line),
                    text=stream.first_text,
                    origin=Origin(host=host, pid=pid),
                    low=format_version(stream.low),
                    high=format_version(stream.high),
                    exact=stream.exact is not None,
                    evidence=tuple(stream.evidence),
                )
            )
