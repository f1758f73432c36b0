"""Read one input: decode, clean, strip prefixes, offer each line to the family readers.

Also the whole-file formats (py-spy ``--json``, bundle ``manifest.json``), which are
recognized by content, not by name.
"""

from __future__ import annotations

import codecs
import gzip
import json
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from logsleuth.errors import InputError
from logsleuth.model.base import Event, InputSummary, SourceRef
from logsleuth.model.bundle import BundleManifest, RankEntry
from logsleuth.parse.base import Line, Reader, Sink
from logsleuth.parse.clean import clean, detect_numbering, strip_prefixes
from logsleuth.parse.discover import InputSource, looks_binary, read_head
from logsleuth.parse.nccl import NcclReader
from logsleuth.parse.stacks import StackReader, looks_like_pyspy_json, parse_pyspy_json
from logsleuth.parse.torchlog import TorchReader

_SAMPLE_LINES = 200
_KIND_OF_READER = {"nccl": "nccl-log", "torch": "torch-log", "stacks": "stack-dump"}


@dataclass(frozen=True, slots=True)
class InputResult:
    """What reading one input gave: its events in input order and its line accounting."""

    events: tuple[Event, ...]
    summary: InputSummary
    unrecognized_samples: tuple[tuple[int, str], ...] = ()
    """Up to a few (line, text) examples of unrecognized lines, for the data-gaps section."""


def _decoded_lines(source: InputSource) -> Iterator[str]:
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    with source.open() as handle:
        pending = ""
        try:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                text = pending + decoder.decode(chunk)
                lines = text.split("\n")
                pending = lines.pop()
                yield from lines
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            raise InputError(source.name, f"corrupt gzip data ({exc})") from exc
        pending += decoder.decode(b"", final=True)
        if pending:
            yield pending


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
    if not looks_like_pyspy_json(text[:4096]):
        return None
    dumps = parse_pyspy_json(text, source.name)
    return _whole_file(source, text, tuple(dumps), "py-spy-json")


def read_input(source: InputSource) -> InputResult:
    """Read and parse one input.

    Raises:
        InputError: the input cannot be read at all (empty, binary, unreadable).
    """
    try:
        head = read_head(source)
    except OSError as exc:
        raise InputError(source.name, exc.strerror or str(exc)) from exc
    if not head:
        raise InputError(source.name, "file is empty")
    if looks_binary(head):
        raise InputError(source.name, "binary data, not a log or a stack dump")
    stripped = head.lstrip()
    if stripped[:1] in (b"{", b"["):
        result = _read_json(source)
        if result is not None:
            return result
    return _read_lines(source)


def _read_lines(source: InputSource) -> InputResult:
    readers: list[Reader] = [
        NcclReader(source.name),
        TorchReader(source.name),
        StackReader(source.name),
    ]
    sink = Sink()
    lines_iter = _decoded_lines(source)
    sample: list[str] = []
    for raw in lines_iter:
        sample.append(clean(raw))
        if len(sample) >= _SAMPLE_LINES:
            break
    numbering = detect_numbering(sample)
    total = blank = 0
    unrecognized: list[tuple[int, str]] = []
    taken_by: Counter[str] = Counter()
    offered: set[int] = set()

    def feed(number: int, cleaned: str) -> None:
        nonlocal blank
        text, hint = strip_prefixes(cleaned, numbering)
        if not text.strip():
            blank += 1
            return
        line = Line(number, text, cleaned, hint)
        offered.add(number)
        ordered = [r for r in readers if r.busy()] + [r for r in readers if not r.busy()]
        for reader in ordered:
            if reader.feed(line, sink):
                taken_by[reader.name] += 1
                return
        if len(unrecognized) < 5:
            unrecognized.append((number, cleaned))

    for cleaned in sample:
        total += 1
        feed(total, cleaned)
    for raw in lines_iter:
        total += 1
        feed(total, clean(raw))
    for reader in readers:
        reader.close(sink)
    recognized = len(sink.recognized & offered)
    for event in sink.events:
        if not event.RECOGNIZED and len(unrecognized) < 5:
            unrecognized.append((event.ref.line, event.text))
    unrecognized.sort()
    kind = _KIND_OF_READER[taken_by.most_common(1)[0][0]] if taken_by else "unknown"
    summary = InputSummary(
        source=source.name,
        kind=kind,
        lines=total,
        recognized=recognized,
        unrecognized=total - blank - recognized,
        blank=blank,
    )
    events = sorted(sink.events, key=lambda e: e.ref.line)
    return InputResult(tuple(events), summary, tuple(unrecognized))
