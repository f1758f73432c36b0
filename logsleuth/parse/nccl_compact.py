"""Compact the COLL lines of an NCCL log: one grammar parse per line *shape*.

Every collective writes one ``opCount`` line per rank, so a long job logs millions of
them; they differ only in their number and pointer fields. The first line of a shape is
parsed by the grammar; :class:`Shape` then holds a regex that matches the other lines of
the shape and captures only the fields that name the writer and the communicator.
:class:`CollCompaction` (a part of :class:`~logsleuth.parse.nccl.NcclReader`) keeps, per
writer and communicator, the first and the last few lines and counts the others.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass

from logsleuth.model.base import NO_ORIGIN, Origin, SourceRef
from logsleuth.model.nccl import NcclCollective
from logsleuth.parse.base import Sink
from logsleuth.parse.nccl_blocks import OpenWarn
from logsleuth.parse.nccl_line import _build, _maybe_nccl, _parse

# Shape fields: word-bounded hex or decimal numbers (pointers, opCounts, bus ids, counts) and
# digit runs inside words (gpu-node001, mlx5_0). Two lines of one shape differ only there.
_FIELD = re.compile(r"\b(?:0x)?[0-9a-fA-F]+\b|\d+")
_FIELD_GROUP = "((?:0x)?[0-9a-fA-F]++)"
_FIELD_ANY = "(?:0x)?[0-9a-fA-F]++"
_MAX_SHAPES = 4096


def line_shape(text: str) -> str:
    """Return the shape of ``text``: the line with every number and hex field abstracted."""
    return _FIELD.sub("\x00", text)


@dataclass(frozen=True, slots=True, eq=False)
class Shape:
    """What the grammar said about the first line of one shape; the cached extractor.

    ``pattern`` matches the lines of the shape (literal text, one group per field); it
    is only built for shapes :class:`CollCompaction` compacts.
    ``kind`` is the event class name the grammar gave (``None``: not an NCCL line) and
    ``recognized`` whether that class counts as recognized. For a COLL shape, ``key``
    lists the groups that name the writer and the communicator (``comm``), so that a
    line can be kept or dropped by :class:`CollCompaction` without building its event.
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


@dataclass(slots=True)
class _Tail:
    """The first and the last few COLL lines of one writer and communicator."""

    first: tuple[int, str, str, Origin]
    last: deque[tuple[int, str, str, Origin]]


class CollCompaction:
    """The COLL compaction of :class:`~logsleuth.parse.nccl.NcclReader` (``keep_ops``).

    A mixin, so that :meth:`defer` and :meth:`take_run`, called for nearly every line of a
    large log, stay one method call. The reader sets ``source`` and ``_open`` (its open
    multi-line WARN: no line is deferred while one is open).
    """

    source: str
    _open: OpenWarn | None

    def _init_compaction(self, keep_ops: int | None) -> None:
        self._keep = keep_ops
        self._hot: Shape | None = None
        self._tails: dict[tuple[object, ...], _Tail] = {}
        self.deferred = 0
        """Lines :meth:`defer` took; they count as recognized (see :meth:`close_tails`)."""

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

    def close_tails(self, sink: Sink) -> None:
        """Parse and emit the COLL lines kept per writer and communicator."""
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
