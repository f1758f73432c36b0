"""Read NCCL debug-log lines (``NCCL_DEBUG=VERSION|WARN|INFO|TRACE``) into model events.

The language is ``grammars/nccl.lark`` (rule ``line``); :mod:`logsleuth.parse.nccl_transform`
turns its reductions into event fields of :mod:`logsleuth.model.nccl`. A line whose prefix
is valid but whose message the grammar does not know becomes :class:`NcclUnrecognized`
(or a WARN of family ``other``), so the stream identity (host, pid) is still known. Text
without an NCCL prefix is declined.

:class:`NcclReader` wires the parts: one line (:mod:`~logsleuth.parse.nccl_line`), the COLL
compaction (:mod:`~logsleuth.parse.nccl_compact`), the multi-line blocks
(:mod:`~logsleuth.parse.nccl_blocks`); here are the reading of torn lines and of partial
prefixes, and the narrowing of each stream's release range.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from itertools import pairwise

from logsleuth.model.base import Event, Origin, SourceRef
from logsleuth.model.nccl import (
    NcclChannelConnect,
    NcclCollective,
    NcclNetDevices,
    NcclRing,
    NcclTree,
    NcclUnrecognized,
    NcclVersion,
    NcclVersionRange,
    NcclWarn,
)
from logsleuth.parse.base import Line, Reader, Sink
from logsleuth.parse.clean import BARE_COLL
from logsleuth.parse.fingerprint import (
    StreamRange,
    VersionTracker,
    format_version,
    head_features,
    message_features,
    parse_version,
)
from logsleuth.parse.nccl_blocks import RAS_OPENERS, NcclBlocks
from logsleuth.parse.nccl_compact import CollCompaction
from logsleuth.parse.nccl_fast import CONNECTS_SEEN, FastLane
from logsleuth.parse.nccl_line import (
    _build,
    _catalog_message,
    _maybe_nccl,
    _parse,
    head_at,
    level_marker,
    parse_nccl_line,
    partial_fields,
    partial_prefix,
    warm_up,
)
from logsleuth.parse.nccl_transform import Head, Parsed

__all__ = ["NcclReader", "parse_nccl_line", "warm_up"]

_PARTIAL_SPAN = 240
_BARE_COLL = re.compile(BARE_COLL)
"""How far before the level word a partial prefix is looked for."""
_STAMP_BEFORE = re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\] $")
_CUT_BYTES = (1022, 1023)
"""Up to 2.28.9 NCCL cut every line to 1023 bytes (a WARN shows 1022: its first byte is \\n)."""
_WRAP_MIN = 60
"""The narrowest hard wrap (a terminal's or a ticket's width) a held unknown line may have had."""
_CUT_LISTS = (NcclRing, NcclTree, NcclNetDevices)
"""Events whose last item is unreliable when their line was cut."""
_CONNECTS_SEEN = 8
"""Transport lines per stream whose shapes are looked at for release features."""
_REJOIN_WINDOW = 20_000
"""Physical lines within which a torn line's tail is looked for (blocks are 4-8 KiB)."""


def _unknown(event: Event) -> bool:
    """An NCCL line whose message no grammar rule or catalog entry names (a WARN of no
    known family included)."""
    return type(event) is NcclUnrecognized or (type(event) is NcclWarn and event.family == "other")


def _says_more(held: Event, joined: Event) -> bool:
    """Whether a held line joined with the next one reads as more than the held line did:
    a known message where there was none, or a WARN of a known family it did not have."""
    if not joined.RECOGNIZED or _unknown(joined):
        return False
    if type(held) is NcclWarn and type(joined) is NcclWarn:
        return joined.family != held.family
    return _unknown(held)


@dataclass(slots=True)
class _Fragment:
    """The head of a line another process's output cut off mid-way (spec 4.3)."""

    number: int
    text: str
    hint: Origin


class NcclReader(FastLane, CollCompaction, NcclBlocks, Reader):
    """Read NCCL log lines; keep a multi-line WARN open until its continuation lines came.

    Also: splits lines torn by another process's output at every NCCL prefix and re-joins
    each head fragment with its tail when that arrives (:meth:`rejoin`); drops the cut last
    item of a list line NCCL truncated at 1023 bytes; narrows each stream's NCCL release
    range from its line shapes (one :class:`NcclVersionRange` per stream at :meth:`close`).
    """

    name = "nccl"

    def __init__(self, source: str, keep_ops: int | None = None) -> None:
        super().__init__(source)
        self._init_blocks()
        self._init_compaction(keep_ops)
        self._init_lane()
        self._fragments: dict[tuple[str | None, int | None], _Fragment] = {}
        self._cut: tuple[_Fragment, Event] | None = None
        """A long NCCL line of unknown message, or a WARN, held for one line: a hard wrap (a
        terminal, a ticket) may have put the rest of its message on the next line."""
        self._hosts: set[str] = set()
        self.versions = VersionTracker()
        self.hard_wraps = True
        """Whether a line may continue on the next (False: the lines are a list's items)."""

    def feed(self, line: Line, sink: Sink) -> bool:
        """Offer ``line``; take it when it has an NCCL prefix or continues an open WARN."""
        if self._cut is not None and line.no > self._cut[0].number + 1:
            sink.emit(self._cut[1])  # the next line went elsewhere: nothing to join
            self._cut = None
        text = line.text
        dump_line = self._dump is not None or text.startswith("ACTIVE OPS")
        if dump_line and self._feed_dump(line, sink):
            return True
        ras_line = self._ras is not None or text.startswith(RAS_OPENERS)
        if ras_line and self._feed_ras(line, sink):
            return True
        if text.count("NCCL ") > 1:
            text = self._split_torn(line, sink)
        parsed = _parse(text) if _maybe_nccl(text) else None
        if parsed is None and level_marker().search(text) is not None:
            events = self._partial(text, line)
            if events:
                if self._open is not None:
                    self.close_warn(sink)
                for event in events:
                    sink.emit(event)
                return True
        if self._open is not None:
            if parsed is None:
                self._continue_warn(text, line.no, sink)
                return True
            self.close_warn(sink)
        if parsed is None and _BARE_COLL.match(text):
            # A COLL line whose prefix the paster cut (``AllReduce: opCount 3 sendbuff ...``).
            bare = self._partial_one("NCCL INFO " + text, "NCCL INFO", line)
            if bare is not None and bare.RECOGNIZED:
                sink.emit(bare)
                return True
        if parsed is None:
            return False
        event = self._event(text, parsed, line.no, line.raw, line.hint)
        message = parsed[2]
        if message is not None and message.continuation and isinstance(event, NcclWarn):
            self._open_warn(event, line.no, message.continuation)
        elif (
            self.hard_wraps
            and len(text) >= _WRAP_MIN
            and (_unknown(event) or isinstance(event, NcclWarn))
        ):
            if self._cut is not None:
                sink.emit(self._cut[1])
            self._cut = (_Fragment(line.no, text, line.hint), event)
        else:
            sink.emit(event)
        return True

    def _join_cut(self, line: Line, sink: Sink) -> bool:
        """Join ``line``, which no reader took, to the held line before it; True when the
        two read as a message the held line alone did not say.

        A hard wrap cuts anywhere, a blank included: the pieces are joined as they stand,
        then with one blank between them.
        """
        assert self._cut is not None
        fragment, event = self._cut
        if line.no != fragment.number + 1:
            return False
        tail = line.text.rstrip()
        for joined in (fragment.text + tail, f"{fragment.text.rstrip()} {tail.lstrip()}"):
            parsed = _parse(joined)
            if parsed is None or parsed[1] is None:
                continue
            raw = fragment.text + line.raw.strip()
            whole = _build(
                joined, parsed, SourceRef(self.source, fragment.number), raw, fragment.hint
            )
            if _says_more(event, whole):
                self._cut = None
                sink.emit(whole, (fragment.number, line.no))
                return True
        return False

    def _partial(self, text: str, line: Line) -> list[Event]:
        """Read the NCCL messages of a line whose prefixes are partial or foreign.

        ``NCCL WARN msg`` pasted alone, ``[7] NCCL INFO msg``, a redacted pid, the pre-2.5
        ``file:line WARN`` form, a foreign prefix before ``host:pid:tid``, several messages
        run together on one line: each level word is an anchor; what precedes it is read
        for the prefix's fields as far as they are there, a missing field stays missing.
        """
        starts: list[tuple[int, str, int]] = []
        partial = partial_prefix()
        for marker in level_marker().finditer(text):
            group = next(g for g in (1, 2, 3) if marker.group(g))
            at, word = marker.start(group), marker.group(group)
            begin = max(0, at - _PARTIAL_SPAN)
            if starts:
                begin = max(begin, starts[-1][2])
            found = partial.search(text, begin, at)
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
        found = partial_prefix().search(head + " " if head and not head.endswith(" ") else head)
        fields = partial_fields(found)
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
            if stream.connects > CONNECTS_SEEN:
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
        starts = [m.start() for m in head_at().finditer(text)]
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
        The line right after a long line of unknown message or a WARN may be the rest of
        it, wrapped.
        """
        if self._cut is not None and self._join_cut(line, sink):
            return True
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
        """Emit a torn line's head that no tail joined: a WARN stays a WARN, a message the
        grammar reads whole is that message (two lines joined without their line break),
        else it is unrecognized."""
        parsed = _parse(fragment.text)
        if parsed is None or parsed[1] is None:
            return
        ref = SourceRef(self.source, fragment.number)
        event = _build(fragment.text, parsed, ref, fragment.text, fragment.hint)
        if not isinstance(event, NcclWarn) and parsed[2] is None:
            head = parsed[1]
            body = fragment.text[head.message_at :].strip()
            unknown = NcclUnrecognized(
                ref=ref, text=fragment.text, origin=event.origin, level=head.level, message=body
            )
            event = _catalog_message(unknown) or unknown
        sink.events.append(event)
        if not event.RECOGNIZED:
            sink.unrecognized_events += 1

    def close(self, sink: Sink) -> None:
        """Emit the open WARN or dump, unjoined fragments, kept COLL lines, release ranges."""
        if self._cut is not None:
            sink.emit(self._cut[1])
            self._cut = None
        self.close_warn(sink)
        self.close_dump(sink, complete=False)
        self.close_ras(sink)
        fragments, self._fragments = self._fragments, {}
        for fragment in fragments.values():
            self._emit_fragment(fragment, sink)
        self.close_tails(sink)
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
