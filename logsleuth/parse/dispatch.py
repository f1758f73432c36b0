"""Read one input: decode, clean, strip prefixes, offer each line to the family readers.

Also the whole-file formats (py-spy ``--json``, bundle ``manifest.json``), which are
recognized by content, not by name.
"""

from __future__ import annotations

import codecs
import contextlib
import gzip
import io
import itertools
import json
import multiprocessing
import os
import re
import traceback
import zlib
from collections import Counter
from collections.abc import Generator, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextvars import ContextVar
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from logsleuth.errors import InputError
from logsleuth.model.base import NO_ORIGIN, Event, InputSummary, Origin, SourceRef
from logsleuth.model.bundle import BundleManifest, RankEntry
from logsleuth.model.messages import SectionHeader
from logsleuth.model.nccl import NcclConnectRun
from logsleuth.parse import budgets, pickling
from logsleuth.parse.base import Line, Reader, Sink
from logsleuth.parse.catalog import load_catalog
from logsleuth.parse.clean import (
    _PREFIX_FIRST,
    begins_line,
    clean,
    detect_numbering,
    detect_wrap,
    line_starts,
    strip_prefixes,
)
from logsleuth.parse.discover import InputSource, looks_binary, read_head
from logsleuth.parse.flight_recorder import (
    load_fr_pickle,
    looks_like_fr_json,
    looks_like_fr_pickle,
    parse_fr_dump,
)
from logsleuth.parse.gdb import GdbReader
from logsleuth.parse.messages import MessageReader
from logsleuth.parse.nccl import NcclReader, warm_up
from logsleuth.parse.pyspy_json import looks_like_pyspy_json, parse_pyspy_json
from logsleuth.parse.ras import looks_like_ras_json, parse_ras_json
from logsleuth.parse.remote import open_url
from logsleuth.parse.stacks import StackReader
from logsleuth.parse.summary import SummaryReader
from logsleuth.parse.torchlog import TorchReader

# Results travel from worker processes to the parent: the events' pickled state is built
# without a dataclasses.fields() call per object (see pickling.py).
pickling.install()

_SAMPLE_LINES = 200
_KIND_OF_READER = {
    "nccl": "nccl-log",
    "torch": "torch-log",
    "stacks": "stack-dump",
    "gdb": "stack-dump",
    "messages": "log",
}


@dataclass(frozen=True, slots=True)
class InputResult:
    """What reading one input gave: its events in input order and its line accounting."""

    events: tuple[Event, ...]
    summary: InputSummary
    unrecognized_samples: tuple[tuple[int, str], ...] = ()
    """Up to a few (line, text) examples of unrecognized lines, for the data-gaps section."""
    unrecognized_lines: tuple[int, ...] = ()
    """Every unrecognized line's number, only when read with ``audit=True`` (coverage)."""


_NOTES: ContextVar[list[str] | None] = ContextVar("_NOTES", default=None)
"""Data-gap notes of the input being read (a damaged .gz, a budget overrun), one line each."""


FAST_LANE = True
"""Read runs of plain NCCL INFO lines in the NCCL reader's fast lane (tests turn it off to
check that both ways give the same result)."""

_INT_LIMIT = 1 << 64
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _too_wide(value: object, depth: int = 0) -> bool:
    if isinstance(value, int):
        return not -_INT_LIMIT < value < _INT_LIMIT
    if isinstance(value, tuple) and depth < 3:
        # The ints of a list event (a Trees line: 32 channels x 6) are checked in the loop,
        # not by a call each.
        for item in value:
            if type(item) is int:
                if not -_INT_LIMIT < item < _INT_LIMIT:
                    return True
            elif _too_wide(item, depth + 1):
                return True
    return False


def _drop_wide_numbers(result: InputResult) -> InputResult:
    """Take out events holding a number wider than 64 bits: no NCCL, torch or py-spy field
    is, so such a line is damaged or crafted; it is counted unrecognized instead."""
    kept: list[Event] = []
    dropped: set[int] = set()
    for event in result.events:
        if type(event) is NcclConnectRun:
            kept.append(event)  # the fast lane leaves a line with a wide number out of runs
            continue
        names = _FIELD_NAMES.get(type(event))
        if names is None:
            names = _FIELD_NAMES[type(event)] = tuple(f.name for f in fields(event))
        # Most fields are no int and no tuple: only those go through _too_wide.
        for name in names:
            value = getattr(event, name)
            if isinstance(value, (int, tuple)) and _too_wide(value):
                dropped.add(event.ref.line)
                break
        else:
            kept.append(event)
    if not dropped:
        return result
    _note(
        f"{len(dropped)} line(s) hold a number wider than 64 bits (first: line {min(dropped)}); "
        "not used"
    )
    summary = result.summary
    moved = min(len(dropped), summary.recognized)
    summary = replace(
        summary, recognized=summary.recognized - moved, unrecognized=summary.unrecognized + moved
    )
    return replace(result, events=tuple(kept), summary=summary)


def _note(text: str) -> None:
    notes = _NOTES.get()
    if notes is not None and text not in notes:
        notes.append(text)


def _raw(source: InputSource) -> BinaryIO:
    if source.url is not None:
        return open_url(source.url)
    if source.data is not None:
        return io.BytesIO(source.data)
    assert source.path is not None
    return source.path.open("rb")


def _raw_chunks(source: InputSource) -> Generator[bytes, None, None]:
    with _raw(source) as handle:
        yield from iter(lambda: handle.read(1 << 20), b"")


def _gzip_header(data: bytes) -> int | None:
    """Return the length of the gzip member header at the start of ``data`` (RFC 1952),
    or None when more bytes are needed; raise zlib.error when it is not one."""
    if len(data) < 10:
        return None
    if data[:3] != b"\x1f\x8b\x08":
        raise zlib.error("not a gzip member header")
    flags, pos = data[3], 10
    if flags & 4:  # FEXTRA
        if len(data) < pos + 2:
            return None
        pos += 2 + int.from_bytes(data[pos : pos + 2], "little")
    for flag in (8, 16):  # FNAME, FCOMMENT: zero-terminated
        if flags & flag:
            end = data.find(b"\0", pos)
            if end < 0:
                return None
            pos = end + 1
    if flags & 2:  # FHCRC
        pos += 2
    return pos if len(data) >= pos else None


def _gunzipped(source: InputSource) -> Generator[bytes, None, None]:
    """Yield the decompressed bytes of a gzip input, streamed, within ``budgets.GZIP_BYTES``.

    Unlike :class:`gzip.GzipFile`, which drops what it decompressed in the ``read`` that
    hits the damage, every byte before a truncation, a corrupt block or a bad CRC is yielded
    (the CRC is checked here, after the data it covers was passed on).
    """
    total = 0
    budget = budgets.GZIP_BYTES
    buffer = b""
    inflate: Any = None
    """The raw-deflate decompressor of the current member; None between members."""
    crc = size = 0
    with _raw(source) as handle:
        for raw in iter(lambda: handle.read(1 << 18), b""):
            buffer += raw
            try:
                while buffer:
                    if inflate is None:
                        header = _gzip_header(buffer)
                        if header is None:
                            break
                        buffer, inflate, crc, size = buffer[header:], zlib.decompressobj(-15), 0, 0
                    out = inflate.decompress(buffer, 1 << 20)
                    buffer = inflate.unconsumed_tail
                    crc, size = zlib.crc32(out, crc), size + len(out)
                    total += len(out)
                    if total > budget:
                        _note(f"stopped after {budget >> 20} MiB decompressed (the .gz budget)")
                        yield out[: len(out) - (total - budget)]
                        return
                    if out:
                        yield out
                    if inflate.eof:
                        trailer = inflate.unused_data + buffer
                        if len(trailer) < 8:
                            buffer = trailer
                            break
                        if (
                            int.from_bytes(trailer[:4], "little") != crc
                            or int.from_bytes(trailer[4:8], "little") != size & 0xFFFFFFFF
                        ):
                            raise zlib.error("CRC or length check failed")
                        buffer, inflate = trailer[8:], None
                        if not buffer.strip(b"\0"):
                            buffer = b""  # zero padding after the last member
            except zlib.error as exc:
                _note(f"damaged data after {total:,} decompressed bytes ({exc}); read up to there")
                return
    if inflate is not None or buffer:
        _note(f"damaged data after {total:,} decompressed bytes (the .gz is cut short)")


def _decoded_chunks(source: InputSource) -> Iterator[str]:
    """Yield the decoded text in pieces of whole lines (each ends in ``\\n`` but the last).

    Linear in the input whatever its shape: a line longer than ``budgets.LINE_CHARS`` is cut
    there; a file whose lines end in CR alone is read as lines; a ``.gz`` input stops at
    ``budgets.GZIP_BYTES`` decompressed, and a damaged one yields what decompressed before
    the damage. Either way a note (:func:`_note`) says what was lost.
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pending: list[str] = []
    """Pieces of the line not ended yet, at most ``budgets.LINE_CHARS`` characters."""
    held = 0
    cr_only: bool | None = None
    with contextlib.ExitStack() as stack:
        chunks = _gunzipped(source) if source.compressed else _raw_chunks(source)
        stack.callback(chunks.close)
        for chunk in chunks:
            text = decoder.decode(chunk)
            if cr_only is None and text:
                cr_only = "\n" not in text and "\r" in text
            if cr_only:
                text = text.replace("\r", "\n")
            cut = text.rfind("\n") + 1
            if cut:
                if pending:
                    first = text.find("\n")
                    head = text[:first]
                    if held + len(head) > budgets.LINE_CHARS:
                        head = head[: max(0, budgets.LINE_CHARS - held)]
                        _note(
                            f"a line longer than {budgets.LINE_CHARS:,} characters was cut to that length"
                        )
                    yield "".join(pending) + head + text[first:cut]
                    pending, held = [], 0
                else:
                    yield text[:cut]
                text = text[cut:]
            if text:
                piece = text[: max(0, budgets.LINE_CHARS - held)]
                if piece:
                    pending.append(piece)
                    held += len(piece)
                if len(piece) < len(text):
                    _note(
                        f"a line longer than {budgets.LINE_CHARS:,} characters was cut to that length"
                    )
    rest = decoder.decode(b"", final=True)
    if rest and held < budgets.LINE_CHARS:
        pending.append(rest)
    if pending:
        yield "".join(pending)


def decoded_lines(source: InputSource) -> Iterator[str]:
    """Yield the decoded physical lines of ``source``, without their ``\\n``."""
    for chunk in _decoded_chunks(source):
        lines = chunk.split("\n")
        if lines[-1] == "":
            lines.pop()
        yield from lines


def _read_manifest(source: InputSource, text: str, data: object) -> InputResult | None:
    if not isinstance(data, dict) or not str(data.get("schema", "")).startswith(
        "logsleuth.bundle/"
    ):
        return None
    ranks: list[RankEntry] = []
    raw_ranks = data.get("ranks", {})
    if isinstance(raw_ranks, dict):
        for key, value in raw_ranks.items():
            if not (isinstance(value, dict) and str(key).lstrip("-").isdigit()):
                continue
            pid, host, local = value.get("pid"), value.get("host"), value.get("local_rank")
            ranks.append(
                RankEntry(
                    rank=int(key),
                    pid=pid if isinstance(pid, int) else None,
                    host=host if isinstance(host, str) else None,
                    local_rank=local if isinstance(local, int) else None,
                )
            )
    command = data.get("command", [])
    stalled = data.get("stalled_at")
    exit_info = data.get("exit")
    exit_info = exit_info if isinstance(exit_info, dict) else {}
    status, signame, ended_by = (exit_info.get(k) for k in ("status", "signal", "ended_by"))
    outcome = data.get("outcome")
    manifest = BundleManifest(
        ref=SourceRef(source.name, 1),
        text=text.splitlines()[0] if text else "",
        schema=str(data["schema"]),
        command=tuple(str(c) for c in command) if isinstance(command, list) else (),
        ranks=tuple(sorted(ranks, key=lambda r: r.rank)),
        stalled_at=str(stalled) if stalled is not None else None,
        outcome=outcome if isinstance(outcome, str) else None,
        exit_status=status if isinstance(status, int) and -(1 << 31) <= status < 1 << 31 else None,
        exit_signal=signame if isinstance(signame, str) else None,
        ended_by=ended_by if isinstance(ended_by, str) else None,
    )
    return _whole_file(source, text, (manifest,), "bundle-manifest")


def _whole_file(
    source: InputSource, text: str, events: tuple[Event, ...], kind: str
) -> InputResult:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    blank = sum(1 for line in lines if not line.strip())
    summary = InputSummary(
        source=source.name,
        kind=kind,
        lines=len(lines),
        recognized=len(lines) - blank,
        unrecognized=0,
        blank=blank,
    )
    return InputResult(events, summary)


def _looks_like_dump(head: str) -> bool:
    """A JSON document that logsleuth reads whole (py-spy, flight recorder, ncclras)."""
    return looks_like_pyspy_json(head) or (
        head.lstrip().startswith("{") and ('"entries"' in head or '"pg_config"' in head)
    )


def _read_json(source: InputSource) -> InputResult | None:
    """Read a whole-file JSON document within the JSON budgets; None when it is not one."""
    with source.open() as handle:
        try:
            raw = handle.read(budgets.JSON_BYTES + 1)
        except (EOFError, zlib.error, gzip.BadGzipFile):
            return None  # the line reader yields what decompressed, with a note
    text = raw.decode("utf-8", errors="replace")
    head = text[:4096]
    if len(raw) > budgets.JSON_BYTES:
        if _looks_like_dump(head):
            raise InputError(
                source.name,
                f"JSON document larger than {budgets.JSON_BYTES >> 20} MiB; not read",
            )
        return None
    # Every value but the last is followed by a comma or closes a container, so this
    # bounds the values from above before a single one is built.
    if sum(text.count(c) for c in ",[{") > budgets.JSON_VALUES:
        if _looks_like_dump(head):
            raise InputError(
                source.name, f"JSON document over budget: more than {budgets.JSON_VALUES:,} values"
            )
        return None
    try:
        data = json.loads(text)
    except RecursionError as exc:
        raise InputError(
            source.name, f"JSON nested more than {budgets.NESTING} levels deep; not read"
        ) from exc
    except ValueError:
        return None
    reason = budgets.over_budget(data, budgets.JSON_VALUES)
    if reason is not None:
        raise InputError(source.name, f"JSON document over budget: {reason}; not read")
    if isinstance(data, dict) and "schema" in data:
        return _read_manifest(source, text, data)
    if looks_like_ras_json(data):
        assert isinstance(data, dict)
        report = parse_ras_json(data, source.name, text.split("\n", 1)[0])
        return _whole_file(source, text, (report,), "ras-report")
    if looks_like_fr_json(data):
        assert isinstance(data, dict)
        return _whole_file(source, text, (parse_fr_dump(data, source.name),), "flight-recorder")
    if not looks_like_pyspy_json(head):
        return None
    dumps = parse_pyspy_json(text, source.name)
    return _whole_file(source, text, tuple(dumps), "py-spy-json")


def _read_fr_pickle(source: InputSource) -> InputResult:
    """A binary flight-recorder dump: its "lines" are its entries, each recognized."""
    with source.open() as handle:
        data = handle.read(budgets.PICKLE_BYTES + 1)
    dump = parse_fr_dump(load_fr_pickle(data, source.name), source.name)
    count = max(1, len(dump.entries))
    summary = InputSummary(
        source=source.name,
        kind="flight-recorder",
        lines=count,
        recognized=count,
        unrecognized=0,
        blank=0,
    )
    return InputResult((dump,), summary)


class InputReadError(InputError):
    """Reading one input raised an unexpected exception: a bug, contained to that input."""

    def __init__(self, source: str, reason: str, trace: str) -> None:
        super().__init__(source, reason)
        self.trace = trace


def _held(source: InputSource) -> tuple[InputSource, bytes]:
    """The input's first 4 KB; a plain file up to ``_HOLD_BYTES`` comes back read whole.

    Most inputs of a large job are small files (a log and a stack dump per rank): one open
    serves the sniffing here and the reading after it, where a path is opened three more
    times (a gzip probe for each of ``open`` and ``compressed``, then the read).
    """
    if source.path is None or source.data is not None or source.url is not None:
        return source, _text_head(source)
    with source.path.open("rb") as handle:
        head = handle.read(4096)
        data = None
        if head[:2] != _GZIP_MAGIC and os.fstat(handle.fileno()).st_size <= _HOLD_BYTES:
            data = head + handle.read(_HOLD_BYTES)
            if handle.read(1):
                data = None  # grew while being read: read it as a file
    if head[:2] == _GZIP_MAGIC:
        return source, _text_head(source)
    if data:
        source = replace(source, data=data)
    return source, _text_head(source, head)


_HOLD_BYTES = 1 << 20
"""Plain files up to this size are read in one go (each worker holds one at a time)."""


def _text_head(source: InputSource, head: bytes | None = None) -> bytes:
    """The first 4 KB of the input, or of its text after a leading block of NULs.

    ``head``: the first 4 KB, when the caller read them already.
    """
    if head is None:
        head = read_head(source)
    if len(head) < 4096 or head.strip(b"\0"):
        return head
    with source.open() as handle:
        seen = 0
        while seen < budgets.LINE_CHARS * 64:
            block = handle.read(1 << 16)
            if not block:
                break
            seen += len(block)
            text = block.lstrip(b"\0")
            if text:
                return text[:4096]
    return head


def read_input(
    source: InputSource,
    keep_ops: int | None = None,
    *,
    audit: bool = False,
    compact: bool = False,
) -> InputResult:
    """Read and parse one input, in isolation: nothing that goes wrong here escapes it.

    Args:
        source: The input.
        keep_ops: Keep only the first and the last ``keep_ops`` COLL events of each writer
            and communicator (all other events are kept); None keeps every event. Line
            accounting is the same either way.
        audit: Also list every unrecognized line's number (``unrecognized_lines``).
        compact: Leave runs of connection lines as :class:`NcclConnectRun` rows (what a
            worker sends; :func:`expand_runs` makes them events); else they are events.

    Returns:
        The result; when part of the input was lost (a damaged ``.gz``, a budget overrun)
        its summary's ``error`` says what, in one line.

    Raises:
        InputError: the input cannot be read at all (empty, binary, unreadable, over a
            budget); :class:`InputReadError` when reading it raised an unexpected exception.
    """
    notes: list[str] = []
    token = _NOTES.set(notes)
    try:
        # Checked on the events, which are few (COLL lines are compacted), not on the text.
        result = _drop_wide_numbers(_read_checked(source, keep_ops, audit))
    except InputError:
        raise
    except MemoryError as exc:
        raise InputError(source.name, "does not fit in memory; not read") from exc
    except RecursionError as exc:
        raise InputError(source.name, "nested too deeply to read") from exc
    except Exception as exc:
        reason = " ".join(str(exc).split())[:200]
        raise InputReadError(
            source.name,
            f"could not be read: {type(exc).__name__}: {reason} (a bug in logsleuth)",
            traceback.format_exc(),
        ) from exc
    finally:
        _NOTES.reset(token)
    if notes and result.summary.error is None:
        summary = replace(result.summary, error="; ".join(notes))
        result = replace(result, summary=summary)
    return result if compact else expand_runs(result)


def expand_runs(result: InputResult) -> InputResult:
    """Replace each :class:`NcclConnectRun` of ``result`` by its connection events, in place."""
    if not any(type(e) is NcclConnectRun for e in result.events):
        return result
    events: list[Event] = []
    for event in result.events:
        if type(event) is NcclConnectRun:
            events.extend(event.connects())
        else:
            events.append(event)
    # In line order, as read line by line (a stream's release range shares its first line).
    events.sort(key=lambda e: e.ref.line)
    return replace(result, events=tuple(events))


def _read_checked(source: InputSource, keep_ops: int | None, audit: bool) -> InputResult:
    try:
        source, head = _held(source)
    except OSError as exc:
        raise InputError(source.name, (exc.strerror or str(exc)).lower()) from exc
    if not head:
        raise InputError(source.name, "file is empty")
    if looks_like_fr_pickle(head):
        return _read_fr_pickle(source)
    if looks_binary(head):
        raise InputError(source.name, "binary data, not a log or a stack dump")
    stripped = head.lstrip()
    if stripped[:1] in (b"{", b"["):
        result = _read_json(source)
        if result is not None:
            return result
    return _read_lines(source, keep_ops, audit)


def _read_lines(source: InputSource, keep_ops: int | None, audit: bool = False) -> InputResult:
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
    chunks = _decoded_chunks(source)
    first = next(chunks, "")
    sample = [clean(raw) for raw in first.split("\n", _SAMPLE_LINES)[:_SAMPLE_LINES]]
    numbering = detect_numbering(sample)
    wrap = detect_wrap(sample)
    if numbering is None and wrap is None and first.startswith(_DUMP_HEADER):
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

    section = NO_ORIGIN
    """Who the lines under the last section header (``Rank A:``) come from."""

    def behind_labels(line: Line) -> str | None:
        """Look for a known message (or line prefix shape) behind host or tool labels."""
        for rest, hint in itertools.islice(_unlabelled(line.text, line.hint), 1, None):
            if messages.feed(Line(line.no, rest, line.raw, hint), sink):
                return messages.name
        return None

    def feed(number: int, cleaned: str) -> None:
        nonlocal blank, busy, section
        text, hint = strip_prefixes(cleaned, numbering)
        if not text.strip():
            blank += 1
            return
        header = _SECTION.fullmatch(text)
        if (
            header is not None
            and not busy
            and (header.group("colon") or text.lstrip().startswith(("#", "**", "__")))
        ):
            section = _section_origin(header)
            label = f"{header.group('word')} {header.group('id')}"
            ref = SourceRef(source.name, number)
            sink.emit(SectionHeader(ref=ref, text=cleaned, origin=section, label=label))
            taken_by["messages"] += 1
            offered.add(number)
            return
        hint = _merge_hints(hint, section)
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
                and messages.feed(replace(line, text=cleaned), sink)
            ):
                taker = messages.name
            if taker is None:
                taker = behind_labels(line)
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
        text = "".join(part for _, part in held)
        if len(held) > 1:
            joined[first_no] = [n for n, _ in held[1:]]
        held.clear()
        feed(first_no, text)

    def take(number: int, cleaned: str) -> None:
        if held and not continues(held[-1][1], cleaned):
            flush_held()
        held.append((number, cleaned))
        if not wrapped(cleaned) or len(held) >= _MAX_WRAPPED:
            flush_held()

    def wrapped(text: str) -> bool:
        # Hard wrap: a piece of exactly the terminal's width. Word wrap (rich, a ticket's
        # box): the cut leaves the blank at the end of the piece.
        if wrap is not None:
            return len(text) == wrap
        return len(text) >= _SOFT_WRAP_MIN and text.endswith(" ") and not is_nccl(text)

    def continues(before: str, text: str) -> bool:
        if wrap is not None:
            # Lines of one length that each begin a known message are not pieces of one line.
            return (
                not begins_line(text)
                and not _begins_message(text)
                and bool(text.strip().strip(_MARKUP))
            )
        return text[:1].isalnum() and not begins_line(text)

    defer = nccl.defer
    is_nccl = _NCCL_LINE.search
    # A run of COLL lines of the hot shape is taken in one regex match (NcclReader.take_run);
    # a prefix scheme would change the text, so numbered or wrapped files go line by line.
    take_run = nccl.take_run if numbering is None and wrap is None else None
    # Runs of plain NCCL INFO lines skip the per-line dispatch (NcclReader.take_lines).
    take_lines = nccl.take_lines if FAST_LANE else None
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
            take(total, clean(chunk[pos:stop]))
            pos = stop + 1
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
    events = sorted(sink.events, key=lambda e: e.ref.line)
    missed: tuple[int, ...] = ()
    if audit:
        missed = tuple(sorted(offered - sink.recognized))
    return InputResult(tuple(events), summary, tuple(unrecognized), missed)


_DUMP_HEADER = "Process "
"""How a py-spy dump file begins (``Process 4242: python train.py``)."""

_NOT_PLAIN = ("\x1b", "\r", "\x00", "&", "[repeated", "```", "~~~", " \n")
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
    cleaning or prefix stripping (``_NOT_PLAIN``, ``_PREFIX_FIRST``), no line is a wrapped
    piece or holds a launcher tag, the first line is declined by the NCCL and torch readers
    (offered first, as the dispatcher does; the NCCL lanes of the chunk loop want a
    ``host:pid:tid`` start, which ``Process`` is not) and every later line arrives while
    the stack reader is busy, which means the dispatcher offers it there first. Any line
    the stack reader declines ends this path (None) and the file is read again line by line.
    """
    if any(mark in text for mark in _NOT_PLAIN) or text.endswith(" "):
        return None
    if _LAUNCHER_TAG.search(text) is not None:
        return None
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    head = lines[0]
    if _SECTION.fullmatch(head) is not None:
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
        if line[:1] in _PREFIX_FIRST and line[:1] != " ":
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


_LAUNCHER_TAG = re.compile(r"\[(?:rank|default)\d+\]:|\[\d+,\d+\]<std(?:out|err|diag)>:")
_LABEL = re.compile(r"(?:[A-Za-z][\w.\-]{0,62}:|\[?\d{1,9}\]?) (?=\S)")
"""A host or tool label (pdsh ``gpu-a01: ``) or a line number on a line no reader took."""

_MAX_WRAPPED = 64
_SOFT_WRAP_MIN = 50
"""A word-wrapped piece is at least this long (a terminal or a ticket box is wider)."""
"""Physical lines joined into one at most (a wrapped message longer than this is cut)."""


_SECTION = re.compile(
    r"\s*(?:#{1,6}\s*|\*\*|__)?(?P<word>(?i:rank|worker|process))[ #]?(?P<id>[A-Za-z]|\d{1,6})"
    r"(?:\s*\((?:[^()]{0,60})\))?\s*(?:\*\*|__)?\s*(?P<colon>:)?\s*(?:\*\*|__)?\s*"
)
"""A header line of a pasted excerpt: ``Rank A:``, ``## rank 3``, ``**Worker 1 (node2):**``."""


def _section_origin(header: re.Match[str]) -> Origin:
    """The process a section header names: a rank when numeric, otherwise the label itself."""
    label = header.group("id")
    if label.isdigit():
        return Origin(rank=int(label))
    return Origin(host=f"{header.group('word')} {label}")


_MARKUP = "`~-=*#_ "
"""Characters of a line that is markup only (a code fence, a rule), never a wrapped piece."""


def _begins_message(text: str) -> bool:
    """Return True when ``text`` begins with a whole known message (the catalog's)."""
    found = load_catalog().match(text)
    return found is not None and found.whole and found.start == 0


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


_GZIP_MAGIC = b"\x1f\x8b"

_POOL_MIN_BYTES = 16 << 20
"""Below this much input, starting worker processes costs more than it saves."""


_Failure = tuple[str, str, int | None, str, str | None]
"""An InputError's arguments and the traceback of an unexpected exception: exceptions with
keyword-only state do not survive pickling."""


def _read_one(job: tuple[InputSource, int | None]) -> InputResult | _Failure:
    source, keep_ops = job
    try:
        return read_input(source, keep_ops, compact=True)
    except InputReadError as exc:
        return (exc.source, exc.reason, exc.line, exc.excerpt, exc.trace)
    except InputError as exc:
        return (exc.source, exc.reason, exc.line, exc.excerpt, None)


def _result(outcome: InputResult | _Failure) -> InputResult | InputError:
    if isinstance(outcome, InputResult):
        return outcome
    source, reason, line, excerpt, trace = outcome
    if trace is not None:
        return InputReadError(source, reason, trace)
    return InputError(source, reason, line, excerpt)


def _input_bytes(source: InputSource) -> int:
    if source.size is not None:
        return source.size
    if source.data is not None:
        return len(source.data)
    try:
        return source.path.stat().st_size if source.path is not None else 0
    except OSError:
        return 0


class ReadProgress(Protocol):
    """Told how far reading got (the command line draws a progress bar from it)."""

    def start(self, files: int, total_bytes: int) -> None:
        """Reading of ``files`` inputs, ``total_bytes`` in all, begins."""

    def advance(self, files: int, nbytes: int) -> None:
        """``files`` more inputs, ``nbytes`` bytes, were read."""


def read_inputs(
    sources: Sequence[InputSource],
    jobs: int | None = None,
    keep_ops: int | None = None,
    *,
    scheduler: str | None = None,
    progress: ReadProgress | None = None,
) -> Iterator[InputResult | InputError]:
    """Read ``sources`` in parallel; yield each result in input order.

    Runs of connection lines stay :class:`NcclConnectRun` rows (the analysis reads them as
    they are; :func:`expand_runs` turns them into events).

    The map (one input -> its result) runs in this process, in a pool of worker processes,
    or on a Dask cluster (``scheduler``); the results are the same whichever runs it.
    An input that cannot be read yields its :class:`InputError` instead of raising, so
    one bad file does not stop the others.

    Args:
        sources: The inputs, as :func:`~logsleuth.parse.discover.discover` returned them.
        jobs: Worker processes; None uses every core; 1 (or a small input) reads in this
            process.
        keep_ops: Passed to :func:`read_input`: keep only the first and the last
            ``keep_ops`` COLL events per writer and communicator.
        scheduler: ``local:N`` or ``tcp://HOST:PORT``: run the map on Dask
            (:mod:`logsleuth.parse.cluster`).
        progress: Told the totals, then each input's bytes as it is read.

    Raises:
        UsageError: ``scheduler`` is given and Dask is missing or unreachable.
    """
    work = [(source, keep_ops) for source in sources]
    sizes = [_input_bytes(s) for s in sources]
    if progress is not None:
        progress.start(len(sources), sum(sizes))
    if scheduler is not None:
        from logsleuth.parse.cluster import dask_map

        # Workers run elsewhere (another working directory, another machine on a shared
        # filesystem): a relative path is made absolute here.
        shipped = [
            (replace(s, path=Path(os.path.abspath(s.path))) if s.path is not None else s, k)
            for s, k in work
        ]
        size_of = {id(job[0]): size for job, size in zip(shipped, sizes, strict=True)}

        def done(batch: list[tuple[InputSource, int | None]]) -> None:
            if progress is not None:
                progress.advance(len(batch), sum(size_of[id(s)] for s, _ in batch))

        yield from map(_result, dask_map(scheduler, _read_one, shipped, done))
        return
    workers = min(jobs or os.cpu_count() or 1, len(work))
    if workers <= 1 or sum(sizes) < _POOL_MIN_BYTES:
        outcomes: Iterator[InputResult | _Failure] = map(_read_one, work)
    else:
        # fork: workers inherit the grammar and the catalog built once here; results come
        # back in submission order.
        warm_up()
        load_catalog()
        context = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=context)
        # Many small inputs: batches keep the hand-over cost per file small; few big ones
        # go one by one so that the workers share the load.
        chunksize = max(1, min(64, len(work) // (workers * 16)))
        outcomes = _pooled(pool, work, chunksize)
    for outcome, size in zip(outcomes, sizes, strict=True):
        if progress is not None:
            progress.advance(1, size)
        yield _result(outcome)


def _pooled(
    pool: ProcessPoolExecutor, work: list[tuple[InputSource, int | None]], chunksize: int
) -> Iterator[InputResult | _Failure]:
    with pool:
        yield from pool.map(_read_one, work, chunksize=chunksize)
