"""Read one input: decode, clean, strip prefixes, offer each line to the family readers.

Also the whole-file formats (py-spy ``--json``, bundle ``manifest.json``), which are
recognized by content, not by name.
"""

from __future__ import annotations

import codecs
import gzip
import itertools
import json
import multiprocessing
import os
import re
import zlib
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace

from logsleuth.errors import InputError
from logsleuth.model.base import Event, InputSummary, Origin, SourceRef
from logsleuth.model.bundle import BundleManifest, RankEntry
from logsleuth.parse.base import Line, Reader, Sink
from logsleuth.parse.catalog import load_catalog
from logsleuth.parse.clean import (
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


@dataclass(frozen=True, slots=True)
class InputResult:
    """What reading one input gave: its events in input order and its line accounting."""

    events: tuple[Event, ...]
    summary: InputSummary
    unrecognized_samples: tuple[tuple[int, str], ...] = ()
    """Up to a few (line, text) examples of unrecognized lines, for the data-gaps section."""
    unrecognized_lines: tuple[int, ...] = ()
    """Every unrecognized line's number, only when read with ``audit=True`` (coverage)."""


def _decoded_chunks(source: InputSource) -> Iterator[str]:
    """Yield the decoded text in pieces of whole lines (each ends in ``\\n`` but the last)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    with source.open() as handle:
        pending = ""
        try:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                text = pending + decoder.decode(chunk)
                cut = text.rfind("\n") + 1
                pending = text[cut:]
                if cut:
                    yield text[:cut]
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            raise InputError(source.name, f"corrupt gzip data ({exc})") from exc
        pending += decoder.decode(b"", final=True)
        if pending:
            yield pending


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
    manifest = BundleManifest(
        ref=SourceRef(source.name, 1),
        text=text.splitlines()[0] if text else "",
        schema=str(data["schema"]),
        command=tuple(str(c) for c in command) if isinstance(command, list) else (),
        ranks=tuple(sorted(ranks, key=lambda r: r.rank)),
        stalled_at=str(stalled) if stalled is not None else None,
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


def _read_json(source: InputSource) -> InputResult | None:
    with source.open() as handle:
        text = handle.read().decode("utf-8", errors="replace")
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if isinstance(data, dict) and "schema" in data:
        return _read_manifest(source, text, data)
    if looks_like_ras_json(data):
        assert isinstance(data, dict)
        report = parse_ras_json(data, source.name, text.split("\n", 1)[0])
        return _whole_file(source, text, (report,), "ras-report")
    if looks_like_fr_json(data):
        assert isinstance(data, dict)
        return _whole_file(source, text, (parse_fr_dump(data, source.name),), "flight-recorder")
    if not looks_like_pyspy_json(text[:4096]):
        return None
    dumps = parse_pyspy_json(text, source.name)
    return _whole_file(source, text, tuple(dumps), "py-spy-json")


def _read_fr_pickle(source: InputSource) -> InputResult:
    """A binary flight-recorder dump: its "lines" are its entries, each recognized."""
    with source.open() as handle:
        dump = parse_fr_dump(load_fr_pickle(handle.read(), source.name), source.name)
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


def read_input(
    source: InputSource, keep_ops: int | None = None, *, audit: bool = False
) -> InputResult:
    """Read and parse one input.

    Args:
        source: The input.
        keep_ops: Keep only the first and the last ``keep_ops`` COLL events of each writer
            and communicator (all other events are kept); None keeps every event. Line
            accounting is the same either way.
        audit: Also list every unrecognized line's number (``unrecognized_lines``).

    Raises:
        InputError: the input cannot be read at all (empty, binary, unreadable).
    """
    try:
        head = read_head(source)
    except OSError as exc:
        raise InputError(source.name, exc.strerror or str(exc)) from exc
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
        ordered = [r for r in readers if r.busy()] + [r for r in readers if not r.busy()]
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
            rest, more = strip_prefixes(text[base:])
            merged = _merge_hints(hint, more)
            for _ in range(4):  # labels nest: "gpu-a01: RuntimeError: ..."
                if rest not in tried:
                    tried.add(rest)
                    taker = offer(Line(line.no, rest, line.raw, merged))
                    if taker is not None:
                        return taker
                label = _LABEL.match(rest)
                if label is None:
                    break
                rest, more = strip_prefixes(rest[label.end() :])
                merged = _merge_hints(merged, more)
        return None

    def feed(number: int, cleaned: str) -> None:
        nonlocal blank, busy
        text, hint = strip_prefixes(cleaned, numbering)
        if not text.strip():
            blank += 1
            return
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
            if taker is not None:
                taken_by[taker] += 1
                return
            if len(unrecognized) < 5:
                unrecognized.append((number, cleaned))
        finally:
            busy = any(r.busy() for r in readers)

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
            return True
        return text[:1].isalnum() and not begins_line(text)

    defer = nccl.defer
    is_nccl = _NCCL_LINE.search
    # A run of COLL lines of the hot shape is taken in one regex match (NcclReader.take_run);
    # a prefix scheme would change the text, so numbered or wrapped files go line by line.
    take_run = nccl.take_run if numbering is None and wrap is None else None
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
    recognized = len(sink.recognized & offered) + nccl.deferred
    if nccl.deferred:
        taken_by["nccl"] += nccl.deferred
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
        truncated=bool(chunk) and not chunk.endswith("\n"),
    )
    events = sorted(sink.events, key=lambda e: e.ref.line)
    missed: tuple[int, ...] = ()
    if audit:
        missed = tuple(sorted(offered - sink.recognized))
    return InputResult(tuple(events), summary, tuple(unrecognized), missed)


_NCCL_LINE = re.compile(r"NCCL (?:INFO|WARN|TRACE|ABORT|CALL)|^\S+:\d+:\d+ ")


_LAUNCHER_TAG = re.compile(r"\[(?:rank|default)\d+\]:|\[\d+,\d+\]<std(?:out|err|diag)>:")
_LABEL = re.compile(r"(?:[A-Za-z][\w.\-]{0,62}:|\[?\d{1,9}\]?) (?=\S)")
"""A host or tool label (pdsh ``gpu-a01: ``) or a line number on a line no reader took."""

_MAX_WRAPPED = 64
_SOFT_WRAP_MIN = 50
"""A word-wrapped piece is at least this long (a terminal or a ticket box is wider)."""
"""Physical lines joined into one at most (a wrapped message longer than this is cut)."""


def _merge_hints(outer: Origin, inner: Origin) -> Origin:
    """Combine what two layers of prefixes said; the outer (launcher) layer wins."""
    return Origin(
        host=outer.host or inner.host,
        pid=outer.pid if outer.pid is not None else inner.pid,
        tid=outer.tid if outer.tid is not None else inner.tid,
        dev=outer.dev if outer.dev is not None else inner.dev,
        rank=outer.rank if outer.rank is not None else inner.rank,
        local_rank=outer.local_rank if outer.local_rank is not None else inner.local_rank,
        time=outer.time if outer.time is not None else inner.time,
    )


_POOL_MIN_BYTES = 16 << 20
"""Below this much input, starting worker processes costs more than it saves."""


_Failure = tuple[str, str, int | None, str]
"""An InputError's arguments: exceptions with keyword-only state do not survive pickling."""


def _read_one(job: tuple[InputSource, int | None]) -> InputResult | _Failure:
    source, keep_ops = job
    try:
        return read_input(source, keep_ops)
    except InputError as exc:
        return (exc.source, exc.reason, exc.line, exc.excerpt)


def _result(outcome: InputResult | _Failure) -> InputResult | InputError:
    return outcome if isinstance(outcome, InputResult) else InputError(*outcome)


def _input_bytes(source: InputSource) -> int:
    if source.data is not None:
        return len(source.data)
    try:
        return source.path.stat().st_size if source.path is not None else 0
    except OSError:
        return 0


def read_inputs(
    sources: Sequence[InputSource], jobs: int | None = None, keep_ops: int | None = None
) -> Iterator[InputResult | InputError]:
    """Read ``sources`` in parallel worker processes; yield each result in input order.

    An input that cannot be read yields its :class:`InputError` instead of raising, so
    one bad file does not stop the others. Results are the same for any ``jobs``.

    Args:
        sources: The inputs, as :func:`~logsleuth.parse.discover.discover` returned them.
        jobs: Worker processes; None uses every core; 1 (or a small input) reads in this
            process.
        keep_ops: Passed to :func:`read_input`: keep only the first and the last
            ``keep_ops`` COLL events per writer and communicator.
    """
    work = [(source, keep_ops) for source in sources]
    workers = min(jobs or os.cpu_count() or 1, len(work))
    if workers <= 1 or sum(_input_bytes(s) for s in sources) < _POOL_MIN_BYTES:
        yield from map(_result, map(_read_one, work))
        return
    # fork: workers inherit the grammar and the catalog built once here; results come back
    # in submission order.
    warm_up()
    load_catalog()
    context = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        yield from map(_result, pool.map(_read_one, work, chunksize=1))
