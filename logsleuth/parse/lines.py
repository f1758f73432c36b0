"""Read a line-based input: clean, strip prefixes, join wrapped lines, offer each line to the
family readers (NCCL, torch/launcher, stack dumps, gdb, catalog messages) and account for it.

Runs of plain NCCL INFO lines go through the NCCL reader's fast lane, and a file of py-spy
dumps straight to the stack reader, when that gives what the line-by-line reading gives.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace

from logsleuth.model.base import (
    NO_ORIGIN,
    Event,
    InputSummary,
    Origin,
    SourceRef,
    host_in_file_name,
)
from logsleuth.model.messages import SectionHeader
from logsleuth.model.torch import PythonTraceback
from logsleuth.parse.base import InputResult, Line, Reader, Sink
from logsleuth.parse.catalog import load_catalog, whole_message
from logsleuth.parse.clean import (
    FRAMEWORK_PREFIX,
    MPI_TAG,
    PREFIX_FIRST,
    QUOTE_MARKS,
    RANK_TAG,
    TYPOGRAPHY,
    WRITER_RANK,
    begins_line,
    clean,
    detect_frame,
    detect_hard_wrap,
    detect_indent,
    detect_lead,
    detect_word_wrap,
    is_bullet,
    line_starts,
    strip_prefixes,
    unframe,
    unhung,
    word_wrapped,
)
from logsleuth.parse.decode import decoded_chunks
from logsleuth.parse.discover import InputSource
from logsleuth.parse.envelope import Envelope, detect_envelope
from logsleuth.parse.gdb import GdbReader
from logsleuth.parse.messages import MessageReader
from logsleuth.parse.nccl import NcclReader
from logsleuth.parse.nccl_line import info_head_re
from logsleuth.parse.numbering import detect_numbering, strip_numbering
from logsleuth.parse.richtb import BOX_FIRST, RichTraceback
from logsleuth.parse.sections import Sections, begins_section
from logsleuth.parse.stacks import StackReader
from logsleuth.parse.summary import SummaryReader
from logsleuth.parse.torchlog import TorchReader

_SAMPLE_LINES = 200
_KIND_OF_READER = {
    "nccl": "nccl-log",
    "torch": "torch-log",
    "stacks": "stack-dump",
    "gdb": "stack-dump",
    "messages": "log",
}


FAST_LANE = True
"""Read runs of plain NCCL INFO lines in the NCCL reader's fast lane (tests turn it off to
check that both ways give the same result)."""


def _plain_nccl(sample: list[str]) -> bool:
    """Say whether every line of ``sample`` but a last cut one is a plain ``NCCL INFO`` line."""
    head = info_head_re()
    lines = sample[:-1] if len(sample) == _SAMPLE_LINES else sample
    lines = [line for line in lines if line]
    return len(lines) >= 8 and all(head.match(line) for line in lines)


def read_lines(source: InputSource, keep_ops: int | None, audit: bool = False) -> InputResult:
    """Read a line-based input; every line ends up recognized, blank or counted unrecognized.

    ``keep_ops`` is passed to the NCCL reader's COLL compaction; ``audit`` lists every
    unrecognized line's number in the result.
    """
    nccl = NcclReader(source.name, keep_ops)
    readers: list[Reader] = [
        nccl,
        TorchReader(source.name),
        StackReader(source.name),
        GdbReader(source.name),
    ]
    messages = MessageReader(source.name)
    broken_summary = SummaryReader(source.name)
    sink = Sink()
    chunks = decoded_chunks(source)
    first = next(chunks, "")
    sample = first.split("\n", _SAMPLE_LINES)[:_SAMPLE_LINES]
    # NCCL's own file (NCCL_DEBUG_FILE): every line begins with its INFO prefix, so no
    # envelope, frame, indent, numbering, lead or wrap can be there.
    sample = [] if _plain_nccl(sample) else [clean(raw) for raw in sample]
    envelope = detect_envelope(sample)
    if envelope is not None:
        sample = [clean(piece) for line in sample for piece in _opened(envelope, line)[0]]
    # A paste boxed in pipes (``| line |``): the frame goes first, then what is inside it.
    frame = detect_frame(sample)
    if frame:
        sample = [unframe(line) for line in sample]
    indent = detect_indent(sample)
    if indent:
        sample = [line.removeprefix(indent) for line in sample]
    numbering = detect_numbering(sample)
    if numbering is not None:
        sample = [strip_numbering(line, numbering)[0] for line in sample]
    # A job's own tag on every line (``[job-7f3a][trainer] ``) goes as an indent does; a
    # numbering scheme's label (pdsh's host, a stamp) says more and is read instead.
    lead = detect_lead(sample) if numbering is None else ""
    if lead:
        sample = [line.removeprefix(lead) for line in sample]
    # Word wrap that dropped the blank at each break: the pieces are joined with one. Its
    # longest pieces share a length too, so it is told from a hard wrap first.
    word_wrap = detect_word_wrap(sample)
    # With a hard wrap, the blanks a wrapping handler put before the pieces after the first
    # (rich's message column): they go when the pieces are joined.
    # A list's items (a bullet on every line) are lines of their own: one item as long as a
    # terminal is wide is no wrap with the next item.
    nccl.hard_wraps = not is_bullet(lead)
    wrap, hang = (
        detect_hard_wrap(sample, lone_cut=nccl.hard_wraps) if word_wrap is None else (None, "")
    )
    if (
        not frame
        and not indent
        and not lead
        and numbering is None
        and wrap is None
        and envelope is None
        and first.startswith(_DUMP_HEADER)
    ):
        # A py-spy dump file: read whole by the stack reader when it holds nothing else.
        # The text comes in one piece, or two when its last line has no newline.
        more = list(itertools.islice(chunks, 2))
        if len(more) < 2:
            dumped = _read_plain_dump(source, "".join((first, *more)), keep_ops, audit)
            if dumped is not None:
                return dumped
        chunks = itertools.chain(more, chunks)
    total = blank = 0
    unrecognized: list[tuple[int, str]] = []
    taken_by: Counter[str] = Counter()
    offered: set[int] = set()
    # Physical lines a terminal wrapped at ``wrap`` columns are read as one; the lines
    # after the first count with it.
    joined: dict[int, list[int]] = {}
    labels: dict[int, tuple[Origin, str]] = {}
    """Line number -> what its numbering prefix said and the prefix, where it was taken off."""
    enveloped: dict[int, Origin] = {}
    """Line number -> what its collector's envelope said of the writer."""
    held: list[tuple[int, str]] = []
    # Readers change their busy state only when fed, so it is asked after each slow line only.
    busy = False

    def offer(line: Line) -> str | None:
        # A reader in the middle of a block sees the line first (each asked once).
        waiting = [r for r in readers if r.busy()]
        ordered = waiting + [r for r in readers if r not in waiting] if waiting else readers
        for reader in ordered:
            if reader.feed(line, sink):
                return reader.name
        return None

    def relocate(line: Line, hint: Origin) -> str | None:
        """Offer the line from each place a known line may begin behind an unknown prefix."""
        text = line.text
        after = load_catalog().prefix_end(text)
        bases = [after, *line_starts(text)] if after else [*line_starts(text)]
        tried: set[str] = {text}
        for base in [0, *bases]:
            start, more = strip_prefixes(text[base:])
            for rest, merged in _unlabelled(start, _merge_hints(hint, more)):
                if rest not in tried:
                    tried.add(rest)
                    taker = offer(Line(line.no, rest, line.raw, merged))
                    if taker is not None:
                        return taker
        return None

    sections = Sections()
    host = host_in_file_name(source.name)
    first_section = section = NO_ORIGIN if host is None else Origin(host=host)
    """Who the lines under the last section header (``Rank A:``) come from: at first, the
    host a kernel log's file name gives (``node03-dmesg.txt``)."""
    stand_in = False
    """Whether the section's label stands in for its host (see ``Header.stands_in``)."""
    record = (0, NO_ORIGIN)
    """The last line whose own format tagged its rank (``[rank 3] ``), and its prefixes."""
    rich = RichTraceback()

    def behind_labels(line: Line) -> str | None:
        """Look for a known message (or line prefix shape) behind host or tool labels."""
        for rest, hint in itertools.islice(_unlabelled(line.text, line.hint), 1, None):
            if messages.feed(Line(line.no, rest, line.raw, hint), sink):
                return messages.name
        return None

    def feed(number: int, cleaned: str) -> None:
        nonlocal blank, busy, section, record, stand_in
        numbered = labels.pop(number, None) if labels else None
        if numbered is None:
            text, hint = strip_prefixes(cleaned, numbering)
        else:
            text, hint = strip_prefixes(cleaned)
            hint = _merge_hints(hint, numbered[0])  # as in strip_prefixes: inner prefixes win
            cleaned = numbered[1] + cleaned  # evidence quotes the line as written
        if enveloped:
            hint = _merge_hints(hint, enveloped.get(number, NO_ORIGIN))
        if rich.inside or text[:1] in BOX_FIRST:
            text = rich.rewrite(text)
        if not text.strip():
            blank += 1
            return
        if messages.first_line is None:
            messages.first_line = number
        header = sections.header(number, text, hint)
        if header is not None:
            if busy:
                # A reader in the middle of a block (a stack dump) sees the line first; one
                # that does not take it has ended its block, and the header starts a section.
                line = Line(number, text, cleaned, hint)
                taker = next((r.name for r in readers if r.busy() and r.feed(line, sink)), None)
                busy = any(r.busy() for r in readers)
                if taker is not None:
                    taken_by[taker] += 1
                    offered.add(number)
                    return
            # A header that names no one ends the section before it: back to what the file's
            # name says of its lines.
            section = first_section if header.origin == NO_ORIGIN else header.origin
            stand_in = header.stands_in
            ref = SourceRef(source.name, header.lines[0])
            quoted = cleaned if len(header.lines) == 1 else header.label
            sink.emit(
                SectionHeader(ref=ref, text=quoted, origin=section, label=header.label),
                header.lines,
            )
            taken_by["messages"] += 1
            offered.update(header.lines)
            unrecognized[:] = [seen for seen in unrecognized if seen[0] not in header.lines]
            return
        hint = _merge_hints(section, hint) if stand_in else _merge_hints(hint, section)
        if hint.rank is not None and RANK_TAG.search(cleaned):
            record = (number, hint)
        elif (
            hint.rank is None
            and _ERROR_LEVEL.search(cleaned, 0, _TAG_REACH)
            and (tag := WRITER_RANK.search(cleaned, 0, _TAG_REACH))
        ):
            # An error record (``logger.exception``) whose format tags its rank (``[RANK 2]``,
            # ``(rank 2)``, ``rank=2``, ``| rank 2 |``) and whose message no catalog knows:
            # the traceback under it is its writer's. An INFO line's neighbour is not.
            rank = int(next(g for g in tag.groups() if g))
            record = (number, _merge_hints(hint, Origin(rank=rank)))
        elif (
            record[0] == number - 1
            and text.startswith(_TRACEBACK_HEAD)
            and hint.rank is None
            and hint.pid is None
        ):
            # A logger's record with the exception it logged (``logger.exception``, loguru's
            # ``@logger.catch``): the traceback right under the record's line is its writer's.
            # Only a rank tag the record's own format wrote says so: a launcher's tag
            # (``[rank1]:``) is on every line its rank writes, so a bare line is another's.
            hint = _merge_hints(hint, record[1])
        if not busy and defer(number, text, cleaned, hint):
            return
        offered.add(number)
        line = Line(number, text, cleaned, hint)
        broken_summary.watch(line)
        try:
            taker = None
            # A launcher's rank tag starts a line: what stands before one is foreign (a
            # timestamp, a progress bar, another tool's prefix glued to it).
            tag = _LAUNCHER_TAG.search(text, 1)
            if tag is not None:
                rest, more = strip_prefixes(text[tag.start() :])
                taker = offer(Line(number, rest, cleaned, _merge_hints(hint, more)))
            if taker is None:
                taker = offer(line)
            # Only a line no reader wants may be the tail of a torn NCCL line (spec 4.3).
            if taker is None and nccl.rejoin(line, sink):
                taker = nccl.name
            # A known line start behind an unknown prefix (a foreign timestamp, a progress
            # bar, a log viewer's columns): read the line from there, the rest is its label.
            if taker is None:
                taker = relocate(line, hint)
            if taker is None and broken_summary.feed(line, sink):
                taker = broken_summary.name
            if taker is None and messages.feed(line, sink):
                taker = messages.name
            # A prefix strip can be wrong (a path taken for a CloudWatch stream name): the
            # line as it stands is looked at too.
            if (
                taker is None
                and text != cleaned
                and messages.feed(replace(line, text=cleaned), sink, bare_prefix=False)
            ):
                taker = messages.name
            if taker is None:
                taker = behind_labels(line)
            # A serving framework's logger prefix says whose output the line is even when
            # the message behind it is one the catalogs do not know.
            if (
                taker is None
                and (framework := FRAMEWORK_PREFIX.search(cleaned)) is not None
                and messages.feed(replace(line, text=cleaned[framework.start() :]), sink)
            ):
                taker = messages.name
            if taker is not None:
                taken_by[taker] += 1
                return
            if len(unrecognized) < 5:
                unrecognized.append((number, cleaned))
        finally:
            busy = False
            for reader in readers:
                if reader.busy():
                    busy = True
                    break

    def flush_held() -> None:
        if not held:
            return
        first_no = held[0][0]
        text = (" " if word_wrap is not None else "").join(part for _, part in held)
        if len(held) > 1:
            joined[first_no] = [n for n, _ in held[1:]]
        held.clear()
        feed(first_no, text)

    def take(number: int, cleaned: str) -> None:
        physical = cleaned  # a piece fills the width with the hang a wrapping handler put
        if held:
            bare = _continued(held[0][1], cleaned)
            piece = unhung(bare, hang)
            # A word wrap happens where the text is pasted, after any prefixes: a piece
            # that carries one of its own begins a line. Quote markers come after the wrap
            # (a mail client's reply quotes the lines it wrapped). A piece under the
            # wrapping handler's hanging indent continues, whatever its first word looks
            # like (``endError: ...`` is the end of ``DistBackendError``).
            if (piece != bare or continues(held[-1][1], piece)) and (
                word_wrap is None or piece == cleaned or _quoted(cleaned, piece)
            ):
                cleaned = piece
            else:
                flush_held()
        held.append((number, cleaned))
        if not wrapped(physical) or len(held) >= _MAX_WRAPPED:
            flush_held()

    def wrapped(text: str) -> bool:
        # Hard wrap: a piece of exactly the terminal's width. Word wrap (rich, a ticket's
        # box): the cut leaves the blank at the end of the piece, or drops it (a piece that
        # nearly fills the width; the next piece decides).
        if wrap is not None:
            return len(text) == wrap
        if word_wrap is not None:
            return len(text) >= word_wrap - 20
        # A whole known message that ends in a blank (NCCL's ``ncclSystemError: ... device
        # error. ``) is not a piece of a longer line.
        return (
            len(text) >= _SOFT_WRAP_MIN
            and text.endswith(" ")
            and not is_nccl(text)
            and not whole_message(text)
        )

    def continues(before: str, text: str) -> bool:
        if wrap is not None:
            # Lines of one length that each begin a known message are not pieces of one line.
            return (
                not begins_line(text)
                and not _begins_message(text)
                and bool(text.strip().strip(_MARKUP))
            )
        if word_wrap is not None:
            return word_wrapped(before, text, word_wrap)
        return text[:1].isalnum() and not begins_line(text)

    def physical(number: int, line: str) -> None:
        if frame:
            line = unframe(line)
        if indent:
            line = line.removeprefix(indent)
        if lead:
            line = line.removeprefix(lead)
        elif numbering is not None:
            # The label of each physical line goes before wrapped pieces are joined.
            line, label = strip_numbering(line, numbering)
            if label is not None:
                labels[number] = label
        take(number, line)

    defer = nccl.defer
    is_nccl = _NCCL_LINE.search
    # A run of COLL lines of the hot shape is taken in one regex match (NcclReader.take_run);
    # a prefix scheme would change the text, so numbered or wrapped files go line by line.
    plain = (
        numbering is None
        and wrap is None
        and word_wrap is None
        and not frame
        and not indent
        and not lead
    )
    take_run = nccl.take_run if plain and envelope is None else None
    # Runs of plain NCCL INFO lines skip the per-line dispatch (NcclReader.take_lines).
    take_lines = (
        nccl.take_lines
        if FAST_LANE and not frame and not indent and not lead and envelope is None
        else None
    )
    chunk = first
    for chunk in itertools.chain((first,), chunks):
        pos, end = 0, len(chunk)
        while pos < end:
            if take_run is not None and not busy:
                taken = take_run(chunk, pos, total + 1)
                if taken:
                    pos, count = taken
                    total += count
                    continue
                if take_lines is not None and not held and section == NO_ORIGIN:
                    ran = take_lines(chunk, pos, total + 1, sink, offered)
                    if ran:
                        pos, count, took = ran
                        total += count
                        taken_by["nccl"] += took
                        busy = any(r.busy() for r in readers)
                        continue
            stop = chunk.find("\n", pos)
            if stop < 0:
                stop = end
            total += 1
            line = clean(chunk[pos:stop])
            pos = stop + 1
            if envelope is None:
                physical(total, line)
                continue
            if envelope.is_header(line):
                sink.recognized.add(total)  # the export's own column names
                offered.add(total)
                continue
            # The lines inside an envelope go on one by one under its line number.
            pieces, origin = _opened(envelope, line)
            if origin is not NO_ORIGIN:
                enveloped[total] = origin
            for piece in pieces:
                physical(total, clean(piece))
    flush_held()
    for reader in (*readers, broken_summary):
        reader.close(sink)
    for first_no, rest in joined.items():
        if first_no in sink.recognized:
            sink.recognized.update(rest)
        offered.update(rest)
    if nccl.deferred:
        taken_by["nccl"] += nccl.deferred
    truncated = bool(chunk) and not chunk.endswith("\n")
    return _line_result(
        source,
        sink,
        (total, blank, nccl.deferred, truncated),
        offered,
        taken_by,
        unrecognized,
        audit,
    )


def _line_result(
    source: InputSource,
    sink: Sink,
    counts: tuple[int, int, int, bool],
    offered: set[int],
    taken_by: Counter[str],
    unrecognized: list[tuple[int, str]],
    audit: bool,
) -> InputResult:
    """The result of a line-by-line read: events in line order and the line accounting.

    ``counts``: lines, blank lines, lines recognized without being offered (deferred COLL
    lines), whether the last line is cut.
    """
    total, blank, deferred, truncated = counts
    recognized = len(sink.recognized & offered) + deferred
    for event in sink.events:
        if not event.RECOGNIZED and len(unrecognized) < 5:
            unrecognized.append((event.ref.line, event.text))
    unrecognized.sort()
    # The reader that took most lines names the kind; ties go to the more specific reader.
    order = list(_KIND_OF_READER)
    top = max(taken_by, key=lambda name: (taken_by[name], -order.index(name)), default=None)
    kind = _KIND_OF_READER[top] if top is not None else "unknown"
    summary = InputSummary(
        source=source.name,
        kind=kind,
        lines=total,
        recognized=recognized,
        unrecognized=total - blank - recognized,
        blank=blank,
        truncated=truncated,
    )
    events = sorted(_once(sink.events), key=lambda e: e.ref.line)
    missed: tuple[int, ...] = ()
    if audit:
        missed = tuple(sorted(offered - sink.recognized))
    return InputResult(tuple(events), summary, tuple(unrecognized), missed)


def _once(events: list[Event]) -> list[Event]:
    """Drop an exception line read on its own where its whole traceback was read too (a
    logger's message line above the traceback it logs, an error file's message beside its
    call stack): one exception, one event."""
    framed = {
        (e.rank, e.exc_type, e.exc_message)
        for e in events
        if isinstance(e, PythonTraceback) and e.frames
    }
    if not framed:
        return events
    return [
        e
        for e in events
        if not (
            isinstance(e, PythonTraceback)
            and not e.frames
            and (e.rank, e.exc_type, e.exc_message) in framed
        )
    ]


_DUMP_HEADER = "Process "
"""How a py-spy dump file begins (``Process 4242: python train.py``)."""

_NOT_PLAIN = ("\x1b", "\r", "\x00", "&", "<br", "[repeated", "```", "~~~", " \n", "\n\t")
"""Text that :func:`clean` or :func:`strip_prefixes` would change, or a word-wrapped piece
(a line ending in a blank): a file holding any goes line by line through the dispatcher."""


def _read_plain_dump(
    source: InputSource, text: str, keep_ops: int | None, audit: bool
) -> InputResult | None:
    """Read a file of py-spy dumps straight through the stack reader; None: read it by line.

    A py-spy dump file is one dump per process, 30 lines or so; at thousands of ranks the
    dispatcher's per-line work (prefix stripping, section headers, the offer order) cost
    four times the dump's own. The result is the one the dispatcher gives, because here
    every line reaches the stack reader as it stands: nothing in the text is changed by
    cleaning or prefix stripping (``_NOT_PLAIN``, ``PREFIX_FIRST``), no line is a wrapped
    piece or holds a launcher tag, the first line is declined by the NCCL and torch readers
    (offered first, as the dispatcher does; the NCCL lanes of the chunk loop want a
    ``host:pid:tid`` start, which ``Process`` is not) and every later line arrives while
    the stack reader is busy, which means the dispatcher offers it there first. Any line
    the stack reader declines ends this path (None) and the file is read again line by line.
    """
    if any(mark in text for mark in _NOT_PLAIN) or text.endswith(" "):
        return None
    if not text.isascii() and any(chr(c) in text for c in TYPOGRAPHY):
        return None
    if _LAUNCHER_TAG.search(text) is not None:
        return None
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    head = lines[0]
    if begins_section(head):
        return None
    nccl = NcclReader(source.name, keep_ops)
    torch, stacks = TorchReader(source.name), StackReader(source.name)
    readers = (nccl, torch, stacks, GdbReader(source.name), SummaryReader(source.name))
    sink = Sink()
    first = Line(1, head, head, NO_ORIGIN)
    if nccl.defer(1, head, head, NO_ORIGIN) or nccl.feed(first, sink) or torch.feed(first, sink):
        return None
    if not stacks.feed(first, sink):
        return None
    feed = stacks.feed_plain
    offered = {1}
    blank = 0
    for number, line in enumerate(lines[1:], 2):
        if not line.strip():
            blank += 1
            continue
        if line[:1] in PREFIX_FIRST and line[:1] != " ":
            return None
        if not feed(number, line, sink):
            return None
        offered.add(number)
    for reader in readers:
        reader.close(sink)
    taken_by = Counter({stacks.name: len(offered)})
    counts = (len(lines), blank, 0, not text.endswith("\n"))
    return _line_result(source, sink, counts, offered, taken_by, [], audit)


_NCCL_LINE = re.compile(r"NCCL (?:INFO|WARN|TRACE|ABORT|CALL)|^\S+:\d+:\d+ ")


_LAUNCHER_TAG = re.compile(rf"\[(?:rank|default)\d+\]:|{MPI_TAG.pattern}")
_LABEL = re.compile(r"(?:[A-Za-z][\w.\-]{0,62}:|\[?\d{1,9}\]?) (?=\S)")
"""A host or tool label (pdsh ``gpu-a01: ``) or a line number on a line no reader took."""

_TRACEBACK_HEAD = "Traceback (most recent call last):"

_MAX_WRAPPED = 64
"""Physical lines joined into one at most (a wrapped message longer than this is cut)."""
_TAG_REACH = 160
"""How far into a line a log format's rank tag and level are looked for (its prefix)."""
_ERROR_LEVEL = re.compile(r"\b(?:ERROR|CRITICAL|FATAL|error|critical|fatal)\b")
"""The level of a record that logs an exception (``logger.exception`` logs at ERROR)."""
_SOFT_WRAP_MIN = 50
"""A word-wrapped piece is at least this long (a terminal or a ticket box is wider)."""


def _opened(envelope: Envelope, line: str) -> tuple[list[str], Origin]:
    """The lines inside ``line`` (its blank ones dropped when it holds several) and what
    its envelope says of their writer; ``line`` itself when it is not in the envelope."""
    opened = envelope.open(line)
    if opened is None:
        return [line], NO_ORIGIN
    pieces, origin = opened
    if len(pieces) > 1:
        pieces = [piece for piece in pieces if piece.strip()] or [""]
    return pieces, origin


_MARKUP = "`~-=*#_ "
"""Characters of a line that is markup only (a code fence, a rule), never a wrapped piece."""


def _begins_message(text: str) -> bool:
    """Return True when ``text`` begins with a whole known message (the catalog's)."""
    found = load_catalog().match(text)
    if found is None or not found.whole or found.start != 0:
        return False
    # A format that begins with a value (``{}Process group watchdog thread terminated``,
    # the value torch's log prefix) matches a piece cut anywhere in that prefix (``efault_pg)
    # Rank 5] Process group ...``): the piece is the tail of a wrapped line, not a message.
    leads_with_value = found.entry.fmt[:1] in ("{", "%") and found.entry.fmt[:2] != "%%"
    return not (leads_with_value and found.fields and found.fields[0].strip())


def _quoted(line: str, piece: str) -> bool:
    """Say whether ``line`` is ``piece`` behind quote markers only (``> ``, ``> > ``)."""
    return (
        line.endswith(piece) and QUOTE_MARKS.fullmatch(line[: len(line) - len(piece)]) is not None
    )


def _continued(first: str, piece: str) -> str:
    """``piece`` as the continuation of the wrapped line that began with ``first``.

    A collector or launcher that prefixes every physical line (``[rank0]:``, a CRI
    timestamp, ``> `` quote markers) prefixes the pieces of a wrapped message too: when
    both carry prefixes, the piece joins without its own.
    """
    bare = strip_prefixes(piece)[0]
    if bare == piece or strip_prefixes(first)[0] == first:
        return piece
    return bare


def _unlabelled(text: str, hint: Origin) -> Iterator[tuple[str, Origin]]:
    """Yield ``text`` and what follows each of up to 3 nested labels at its start.

    Labels nest: ``gpu-a01: RuntimeError: ...``, ``gpu-a01: [2025-02-24 14:09:34 TP12] ...``;
    the prefixes after each label add to ``hint``.
    """
    yield text, hint
    for _ in range(3):
        label = _LABEL.match(text)
        if label is None:
            return
        text, more = strip_prefixes(text[label.end() :])
        hint = _merge_hints(hint, more)
        yield text, hint


def _merge_hints(outer: Origin, inner: Origin) -> Origin:
    """Combine what two layers of prefixes said; the outer (launcher) layer wins."""
    if inner is NO_ORIGIN and outer.host != "":  # nearly every line: nothing to combine
        return outer
    if outer is NO_ORIGIN:
        return inner
    return Origin(
        host=outer.host or inner.host,
        pid=outer.pid if outer.pid is not None else inner.pid,
        tid=outer.tid if outer.tid is not None else inner.tid,
        dev=outer.dev if outer.dev is not None else inner.dev,
        rank=outer.rank if outer.rank is not None else inner.rank,
        local_rank=outer.local_rank if outer.local_rank is not None else inner.local_rank,
        time=outer.time if outer.time is not None else inner.time,
    )
