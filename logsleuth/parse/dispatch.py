"""Read one input, or many in parallel: pick the reader by content, keep what went wrong
with it to one line, and map the inputs over a process pool or a Dask cluster.

The whole-file formats (py-spy ``--json``, bundle ``manifest.json``, flight-recorder dumps,
NCCL RAS JSON) are recognized by content, not by name; line-based inputs are read by
:mod:`logsleuth.parse.lines`.
"""

from __future__ import annotations

import gzip
import json
import multiprocessing
import os
import re
import traceback
import zlib
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import fields, replace
from operator import attrgetter
from pathlib import Path
from typing import Protocol

from logsleuth.errors import InputError
from logsleuth.model.base import Event, InputSummary, SourceRef, rank_in_file_name
from logsleuth.model.bundle import BundleManifest, RankEntry
from logsleuth.model.nccl import NcclConnectRun
from logsleuth.parse import budgets, pickling
from logsleuth.parse.base import InputResult
from logsleuth.parse.catalog import load_catalog
from logsleuth.parse.decode import NOTES, as_utf8, held, note, text_encoding
from logsleuth.parse.discover import InputSource, looks_binary
from logsleuth.parse.flight_recorder import (
    load_fr_pickle,
    looks_like_fr_json,
    looks_like_fr_pickle,
    parse_fr_dump,
)
from logsleuth.parse.hostnames import ALIASES
from logsleuth.parse.lines import read_lines
from logsleuth.parse.nccl import warm_up
from logsleuth.parse.pyspy_json import looks_like_pyspy_json, parse_pyspy_json
from logsleuth.parse.ras import looks_like_ras_json, parse_ras_json
from logsleuth.parse.siblings import with_rank

# Results travel from worker processes to the parent: the events' pickled state is built
# without a dataclasses.fields() call per object (see pickling.py).
pickling.install()

_VALUES: dict[type, Callable[[Event], tuple[object, ...]]] = {}
"""Per event class: a getter of the fields that may hold a number (all but ref, text, origin)."""


def _too_wide(value: object, depth: int = 0) -> bool:
    if isinstance(value, int):
        return not -budgets.INT_LIMIT < value < budgets.INT_LIMIT
    if isinstance(value, tuple) and depth < 3:
        # The ints of a list event (a Trees line: 32 channels x 6) are checked in the loop,
        # not by a call each.
        for item in value:
            if type(item) is int:
                if not -budgets.INT_LIMIT < item < budgets.INT_LIMIT:
                    return True
            elif _too_wide(item, depth + 1):
                return True
    return False


def _values_of(cls: type[Event]) -> Callable[[Event], tuple[object, ...]]:
    names = [f.name for f in fields(cls) if f.name not in ("ref", "text", "origin")]
    # attrgetter of one name returns the value, not a 1-tuple.
    if len(names) == 1:
        one = attrgetter(names[0])
        return lambda event: (one(event),)
    return attrgetter(*names) if names else (lambda event: ())


def _drop_wide_numbers(result: InputResult) -> InputResult:
    """Take out events holding a number wider than 64 bits: no NCCL, torch or py-spy field
    is, so such a line is damaged or crafted; it is counted unrecognized instead."""
    kept: list[Event] = []
    dropped: set[int] = set()
    limit = budgets.INT_LIMIT
    for event in result.events:
        cls = type(event)
        if cls is NcclConnectRun:
            kept.append(event)  # the fast lane leaves a line with a wide number out of runs
            continue
        values = _VALUES.get(cls)
        if values is None:
            values = _VALUES[cls] = _values_of(cls)
        # One C call reads the fields; most are str or None and cost one test each.
        for value in values(event):
            if value is None or type(value) is str:
                continue
            if type(value) is int:
                if -limit < value < limit:
                    continue
            elif not (isinstance(value, (int, tuple)) and _too_wide(value)):
                continue
            dropped.add(event.ref.line)
            break
        else:
            kept.append(event)
    if not dropped:
        return result
    note(
        f"{len(dropped)} line(s) hold a number wider than 64 bits (first: line {min(dropped)}); "
        "not used"
    )
    summary = result.summary
    moved = min(len(dropped), summary.recognized)
    summary = replace(
        summary, recognized=summary.recognized - moved, unrecognized=summary.unrecognized + moved
    )
    return replace(result, events=tuple(kept), summary=summary)


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


_RAS_ANSWER = re.compile(rb"(?:(?:SERVER PROTOCOL \d+|OK)\r?\n)+")
"""What the RAS socket answers before a JSON report to a client that spoke its protocol
(``CLIENT PROTOCOL 2``, ``SET FORMAT json`` through netcat; spec 2.13)."""


def _read_json(source: InputSource) -> InputResult | None:
    """Read a whole-file JSON document within the JSON budgets; None when it is not one."""
    with source.open() as handle:
        try:
            raw = handle.read(budgets.JSON_BYTES + 1)
        except (EOFError, zlib.error, gzip.BadGzipFile):
            return None  # the line reader yields what decompressed, with a note
    text = raw.decode(text_encoding(raw[:4096]), errors="replace")
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
    # The answer is ASCII: its length in bytes is its length in characters.
    answer = _RAS_ANSWER.match(raw.lstrip())
    try:
        data = json.loads(text.lstrip()[answer.end() :] if answer else text)
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
    token = NOTES.set(notes)
    aliases: dict[str, set[str]] = {}
    named = ALIASES.set(aliases)
    try:
        # Checked on the events, which are few (COLL lines are compacted), not on the text.
        result = _drop_wide_numbers(_read_checked(source, keep_ops, audit))
        if aliases:
            pairs = tuple(sorted((c, own) for c, owns in aliases.items() for own in owns))
            result = replace(result, host_aliases=pairs)
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
        NOTES.reset(token)
        ALIASES.reset(named)
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
        source, head = held(source)
    except OSError as exc:
        raise InputError(source.name, (exc.strerror or str(exc)).lower()) from exc
    if not head:
        raise InputError(source.name, "file is empty")
    if looks_like_fr_pickle(head):
        return _read_fr_pickle(source)
    if looks_binary(head):
        raise InputError(source.name, "binary data, not a log or a stack dump")
    stripped = as_utf8(head).lstrip()
    answer = _RAS_ANSWER.match(stripped)
    if stripped[:1] in (b"{", b"[") or (answer and stripped[answer.end() :][:1] == b"{"):
        result = _read_json(source)
        if result is not None:
            return result
    return _named_rank(source.name, read_lines(source, keep_ops, audit))


def _named_rank(name: str, result: InputResult) -> InputResult:
    """Give the rank a per-process file's name states (``rank2.log``) to its bare lines."""
    rank = rank_in_file_name(name)
    return result if rank is None else with_rank(result, rank)


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
