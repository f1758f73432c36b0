"""Wire the stages: inputs -> events -> diagnosis. No printing, no exiting."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import BinaryIO

from logsleuth import __version__
from logsleuth.analysis.diagnose import diagnose
from logsleuth.analysis.index import KEEP_OPS
from logsleuth.errors import InputError
from logsleuth.model.base import Event, InputSummary
from logsleuth.model.diagnosis import Diagnosis
from logsleuth.parse.base import InputResult
from logsleuth.parse.discover import Problem, discover
from logsleuth.parse.dispatch import InputReadError, ReadProgress, read_inputs
from logsleuth.parse.hostnames import by_host, one_name, renames
from logsleuth.parse.siblings import sibling_ranks, tee_ranks, with_rank


class NoAnalysableInput(InputError):
    """No input could be analysed; ``problems`` says why for each."""

    def __init__(self, source: str, reason: str, problems: Sequence[Problem]) -> None:
        super().__init__(source, reason)
        self.problems = tuple(problems)


@dataclass(frozen=True, slots=True)
class Analysis:
    """A diagnosis and the inputs that could not be read (one line each)."""

    diagnosis: Diagnosis
    problems: tuple[Problem, ...]
    files: tuple[Path, ...] = field(default=())
    """The files that were read (not standard input), so that no output overwrites one."""


def analyze(
    paths: Sequence[str],
    stdin: BinaryIO | None = None,
    *,
    scheduler: str | None = None,
    progress: ReadProgress | None = None,
) -> Analysis:
    """Analyse the given paths (files, directories, ``.gz``, ``-``, fsspec URLs).

    Each input is read in isolation: one that cannot be read, or only in part, becomes a
    problem (and a data gap) and the others are still analysed.

    Args:
        paths: What to read; URLs (``s3://bucket/job/``) need the ``[cluster]`` extra.
        stdin: Where ``-`` reads from.
        scheduler: ``local:N`` or ``tcp://HOST:PORT``: read the inputs on a Dask cluster
            (the diagnosis is the same as a local run's).
        progress: Told how far reading got (a progress bar).

    Raises:
        UsageError: ``scheduler`` cannot be used (Dask missing, scheduler unreachable).
        NoAnalysableInput: no input could be analysed at all; the message names the path(s)
            and why.
    """
    with _few_collections():
        return _analyze(paths, stdin, scheduler, progress)


@contextlib.contextmanager
def _few_collections() -> Iterator[None]:
    """Collect garbage rarely while a run builds its millions of long-lived events.

    With the default threshold a collection runs every 700 allocations, and the older
    generations, rescanned as they grow, fill with events that live until the diagnosis is
    made. Worker processes forked meanwhile inherit the setting.
    """
    before = gc.get_threshold()
    gc.set_threshold(max(before[0], _GEN0_THRESHOLD), *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


_GEN0_THRESHOLD = 100_000


def _analyze(
    paths: Sequence[str],
    stdin: BinaryIO | None,
    scheduler: str | None,
    progress: ReadProgress | None,
) -> Analysis:
    sources, problems = discover(paths, stdin=stdin)
    events: list[Event] = []
    summaries: list[InputSummary] = []
    usable = 0
    silent: list[Problem] = []
    # The index keeps the last KEEP_OPS collectives per process and communicator, so the
    # parser may skip building events for the COLL lines in between.
    results = list(read_inputs(sources, keep_ops=KEEP_OPS, scheduler=scheduler, progress=progress))
    # Per-process files whose names differ in one number: the siblings that name their rank
    # say what the number is for those that do not.
    read = {
        s.name: (i, r)
        for i, (s, r) in enumerate(zip(sources, results, strict=True))
        if isinstance(r, InputResult)
    }
    ranks = sibling_ranks([(n, r.events) for n, (_, r) in read.items()])
    # A collector's name for a machine and NCCL's own (``trainer-1  | a1b2c3:212:212 ...``).
    names = renames(pair for _, r in read.values() for pair in r.host_aliases)
    for name, (at, got) in read.items():
        got = tee_ranks(got)
        if name in ranks:
            got = with_rank(got, ranks[name])
        if names:
            got = replace(got, events=one_name(got.events, names))
        results[at] = got
    for source, result in zip(sources, results, strict=True):
        if isinstance(result, InputError):
            exc = result
            trace = exc.trace if isinstance(exc, InputReadError) else ""
            problems.append(Problem(source.name, exc.reason, trace))
            summaries.append(
                InputSummary(
                    source=source.name,
                    kind="unreadable",
                    lines=0,
                    recognized=0,
                    unrecognized=0,
                    blank=0,
                    error=exc.reason,
                )
            )
            continue
        summaries.append(result.summary)
        events.extend(result.events)
        if result.summary.error:
            problems.append(Problem(source.name, result.summary.error))
        if result.summary.recognized:
            usable += 1
        else:
            # Not an error while other inputs are usable: the data gaps list it.
            silent.append(
                Problem(source.name, "no line was recognized as a log or stack dump line")
            )
    if not usable:
        problems.extend(silent)
        if len(problems) == 1:
            raise NoAnalysableInput(problems[0].name, problems[0].reason, problems)
        if not problems:
            raise InputError("<input>", "no input paths were given")
        reasons = "; ".join(f"{p.name}: {p.reason}" for p in problems[:4])
        more = f" (and {len(problems) - 4} more)" if len(problems) > 4 else ""
        raise NoAnalysableInput("no analysable input", reasons + more, problems)
    diagnosis = diagnose(events, summaries, __version__)
    if names:
        # The report names a machine by NCCL's hostname; the reader may know it by the
        # collector's name only.
        diagnosis = replace(diagnosis, job=replace(diagnosis.job, host_aliases=by_host(names)))
    files = tuple(s.path for s in sources if s.path is not None and not s.name.startswith("<"))
    return Analysis(diagnosis=diagnosis, problems=tuple(problems), files=files)
