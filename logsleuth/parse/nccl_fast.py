"""The NCCL reader's fast lane: runs of plain ``NCCL INFO`` lines, read without the dispatcher.

At 1,024 ranks and more nearly every line of an incident is an ``NCCL INFO`` line with a
full, clean prefix (``host:pid:tid [dev] NCCL INFO ...``), half of them channel-connection
lines, and the per-line work of the dispatcher (prefix stripping, wrap joining, offering the
line to each reader, relocation) cost more than reading them. :meth:`FastLane.take_lines`
reads a run of such lines straight from the decoded text, exactly as the line-by-line path
would (the same parse, the same events, the same release narrowing):

* a connection line becomes a row of :class:`~logsleuth.model.nccl.NcclConnectRun` (one
  per run of one writer's consecutive connection lines), not an event of its own;
* a COLL line goes to the compaction (:meth:`CollCompaction.defer`);
* any other INFO line is parsed and emitted as the dispatcher would.

A line the lane cannot be sure about ends the run and goes the long way: another level, a
line that needs cleaning (controls, escapes, entities), one with launcher tags, a torn line
(two prefixes), a version line, a line NCCL may have cut at 1023 bytes, a multi-line WARN
in an INFO line, numbers too wide to be real. ``tests/parse/test_nccl_fast.py`` reads every
fixture both ways and compares.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from logsleuth.model.base import NO_ORIGIN, Origin, SourceRef
from logsleuth.model.nccl import ConnectRow, NcclConnectRun, NcclWarn
from logsleuth.parse.base import Sink
from logsleuth.parse.budgets import INT_LIMIT
from logsleuth.parse.clean import PREFIX_FIRST
from logsleuth.parse.nccl_line import _origin, _parse, _terminals, info_head
from logsleuth.parse.nccl_transform import connect_message, connect_row

if TYPE_CHECKING:
    from logsleuth.model.base import Event
    from logsleuth.parse.fingerprint import VersionTracker
    from logsleuth.parse.nccl_transform import Parsed

CONNECTS_SEEN = 8
"""Connection lines per stream whose shapes are looked at for release features."""
_LONG = 1022
"""NCCL cut lines at 1023 bytes up to 2.28.9: a line this long may have lost its end."""
_FOREIGN = ("]:", ">:", "&", "<br", "[repeated", "ChildFailedError")
_FOREIGN_AT = re.compile("|".join(map(re.escape, _FOREIGN))).search
"""Text that makes the dispatcher look twice at a line (launcher tags, HTML entities and
line breaks, Ray's repeat marks, a torchrun summary): such a line goes the long way, as does a message holding
``NCCL `` (a torn line's second prefix, a version line)."""


class FastLane:
    """The fast lane of :class:`~logsleuth.parse.nccl.NcclReader` (a mixin).

    The reader provides ``source``, ``versions``, ``defer`` and ``_event``.
    """

    source: str
    versions: VersionTracker

    if TYPE_CHECKING:  # the reader's own methods

        def defer(self, number: int, text: str, raw: str, hint: Origin) -> bool: ...

        def _event(
            self, text: str, parsed: Parsed, number: int, raw: str, hint: Origin
        ) -> Event: ...

    def _init_lane(self) -> None:
        self._shared: dict[str | None, str | None] = {}
        self._shared_vias: dict[str, str] = {}

    def take_lines(
        self, text: str, pos: int, number: int, sink: Sink, offered: set[int]
    ) -> tuple[int, int, int] | None:
        """Read the run of plain ``NCCL INFO`` lines at ``pos`` of ``text``.

        ``number`` is the line number at ``pos``. Lines that became events are added to
        ``offered`` (as the dispatcher does); COLL lines the compaction took are not.
        Returns (where the run ended, lines read, lines taken as events), or None when the
        line at ``pos`` is not for the lane. The caller must not call this while a reader
        is busy, a wrapped line is held, or a prefix scheme or section header applies.
        """
        head_re, _coll, connect_re, *_others = _terminals()
        share = self._shared.setdefault
        shared_via = self._shared_vias.setdefault
        source = self.source
        rows: list[ConnectRow] = []
        run_head = ""
        run_origin = NO_ORIGIN
        lines = taken = 0

        def flush() -> None:
            if rows:
                first = rows[0]
                sink.emit(
                    NcclConnectRun(
                        ref=SourceRef(source, first[0]),
                        text=first[-1],
                        origin=run_origin,
                        rows=tuple(rows),
                    ),
                    [row[0] for row in rows],
                )
                rows.clear()

        while True:
            stop = text.find("\n", pos)
            if stop < 0:
                break
            line = text[pos:stop]
            if (
                not line
                or line[0] in PREFIX_FIRST  # a launcher prefix: the long way strips it
                or len(line) >= _LONG
                or not line.isprintable()
                or _FOREIGN_AT(line) is not None
            ):
                break
            found = head_re.match(line)
            if found is None:
                break
            prefix = found.group()
            head = info_head(prefix)
            body = line[found.end() :]
            if "NCCL " in body:
                break
            no = number + lines
            connect = connect_re.match(body) if body.startswith("Channel ") else None
            via = body[connect.end() :] if connect is not None else ""
            if connect is not None and via.strip():
                row = connect_row(connect.group(), via)
                if max(abs(row[0]), abs(row[1] or 0), abs(row[2]), abs(row[4])) >= INT_LIMIT:
                    break  # the long way drops that line alone, not the whole run
                stream = self.versions.get((head.host, head.pid))
                if stream.exact is None and stream.connects <= CONNECTS_SEEN:
                    # The first few connection lines of a stream narrow its release range
                    # (spec 5): they go through the reader's own event path for that.
                    self._event(line, (None, head, connect_message(row)), no, line, NO_ORIGIN)
                if prefix != run_head:
                    flush()
                    run_head = prefix
                    run_origin = _origin(head.host, head.pid, head.tid, head.dev, None, None, None)
                channel, index, src, src_dev, dst, dst_dev, direction, transport = row
                # The few device, direction and transport texts of a file are shared by its
                # rows: one object each, in memory and in the pickle sent to the parent.
                rows.append(
                    (
                        no,
                        channel,
                        index,
                        src,
                        share(src_dev, src_dev),
                        dst,
                        share(dst_dev, dst_dev),
                        share(direction, direction),
                        shared_via(transport, transport),
                        line,
                    )
                )
                offered.add(no)
                taken += 1
            else:
                flush()
                run_head = ""
                if "opCount " in body and self.defer(no, line, line, NO_ORIGIN):
                    pass
                else:
                    parsed = _parse(line)
                    if parsed is None or parsed[1] is None or parsed[0] is not None:
                        break
                    said = parsed[2]
                    if said is None or said.continuation or said.cls is NcclWarn:
                        break  # an unknown message may be wrapped: the long way holds it
                    # A number too wide is dropped with its event after reading, as ever.
                    sink.emit(self._event(line, parsed, no, line, NO_ORIGIN))
                    offered.add(no)
                    taken += 1
            lines += 1
            pos = stop + 1
        flush()
        if not lines:
            return None
        return pos, lines, taken
