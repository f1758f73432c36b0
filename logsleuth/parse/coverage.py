"""Measure how much of the given logs logsleuth understands (``logsleuth coverage``).

Every input is read by the normal dispatcher; the result counts the events of each kind,
the lines that carry an NCCL prefix and how many of them were recognized, and groups the
unrecognized lines by shape (numbers and hex abstracted, the NCCL prefix dropped) with a
count and one example each, so that a user can send us what we miss.
"""

from __future__ import annotations

import io
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from rich import box
from rich.console import Console
from rich.table import Table

from logsleuth.errors import InputError
from logsleuth.model.nccl import NcclUnrecognized, NcclVersionRange
from logsleuth.parse.clean import clean, strip_prefixes
from logsleuth.parse.decode import decoded_lines
from logsleuth.parse.discover import InputSource, discover
from logsleuth.parse.dispatch import read_input
from logsleuth.parse.nccl_compact import line_shape
from logsleuth.parse.nccl_line import nccl_message

_NCCL_MODULE = NcclUnrecognized.__module__


@dataclass(frozen=True, slots=True)
class ShapeCount:
    """Unrecognized lines of one shape: how many, and the first one seen."""

    shape: str
    count: int
    nccl: bool
    """The lines carry an NCCL prefix (only their message is unknown)."""
    example: str
    source: str
    line: int


@dataclass(frozen=True, slots=True)
class Coverage:
    """What ``logsleuth coverage`` reports over a set of inputs."""

    inputs: int
    lines: int
    blank: int
    recognized: int
    unrecognized: int
    nccl_lines: int
    """Lines that carry an NCCL prefix (or are a bare ``NCCL version`` line)."""
    nccl_recognized: int
    kinds: tuple[tuple[str, int], ...]
    """Events per kind (event class), most frequent first."""
    shapes: tuple[ShapeCount, ...]
    """Unrecognized lines grouped by shape, most frequent first."""
    problems: tuple[tuple[str, str], ...]
    """Inputs that could not be read: (name, reason)."""

    @property
    def nccl_share(self) -> float:
        """Return the recognized share of the NCCL-prefixed lines (1.0 when there are none)."""
        return self.nccl_recognized / self.nccl_lines if self.nccl_lines else 1.0


def _shape_key(text: str) -> tuple[str, bool]:
    """Return the grouping shape of an unrecognized line and whether it is an NCCL line."""
    message = nccl_message(text)
    if message is not None:
        return line_shape(message).replace("\x00", "N"), True
    return line_shape(text.strip()).replace("\x00", "N"), False


def _missed_lines(source: InputSource, numbers: Sequence[int]) -> list[tuple[int, str, str]]:
    """Return (number, cleaned line, prefix-stripped text) of the wanted line numbers."""
    wanted = set(numbers)
    found: list[tuple[int, str, str]] = []
    if not wanted:
        return found
    for number, raw in enumerate(decoded_lines(source), 1):
        if number in wanted:
            cleaned = clean(raw)
            found.append((number, cleaned, strip_prefixes(cleaned)[0]))
    return found


@dataclass(slots=True)
class _Group:
    count: int
    example: str
    source: str
    line: int


def measure_coverage(paths: Sequence[str]) -> Coverage:
    """Read ``paths`` (files, directories, ``.gz``) and measure what was recognized.

    Raises:
        InputError: no path could be found at all.
    """
    sources, problems = discover(paths)
    if not sources and problems:
        raise InputError(problems[0].name, problems[0].reason)
    kinds: Counter[str] = Counter()
    groups: dict[tuple[str, bool], _Group] = {}
    totals: Counter[str] = Counter()
    failed = [(p.name, p.reason) for p in problems]
    for source in sources:
        try:
            result = read_input(source, audit=True)
        except InputError as exc:
            failed.append((source.name, exc.reason))
            continue
        summary = result.summary
        totals.update(
            lines=summary.lines,
            blank=summary.blank,
            recognized=summary.recognized,
            unrecognized=summary.unrecognized,
        )
        nccl_events: set[int] = set()
        for event in result.events:
            if isinstance(event, NcclVersionRange):
                continue  # a summary of a stream: it stands for no line of its own
            kinds[type(event).__name__] += 1
            if type(event).__module__ == _NCCL_MODULE:
                nccl_events.add(event.ref.line)
                totals["nccl"] += 1
                totals["nccl_ok"] += event.RECOGNIZED
        for number, cleaned, text in _missed_lines(source, result.unrecognized_lines):
            key = _shape_key(text)
            if key[1] and number not in nccl_events:
                totals["nccl"] += 1  # an NCCL line that no event stands for
            group = groups.get(key)
            if group is None:
                groups[key] = _Group(1, cleaned, source.name, number)
            else:
                group.count += 1
    shapes = sorted(
        (
            ShapeCount(s, g.count, nccl, g.example, g.source, g.line)
            for (s, nccl), g in groups.items()
        ),
        key=lambda g: (-g.count, g.shape),
    )
    return Coverage(
        inputs=len(sources),
        lines=totals["lines"],
        blank=totals["blank"],
        recognized=totals["recognized"],
        unrecognized=totals["unrecognized"],
        nccl_lines=totals["nccl"],
        nccl_recognized=totals["nccl_ok"],
        kinds=tuple(sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))),
        shapes=tuple(shapes),
        problems=tuple(failed),
    )


def coverage_json(coverage: Coverage) -> str:
    """Return the coverage as JSON (``logsleuth coverage --json``)."""
    data = asdict(coverage)
    data["kinds"] = dict(coverage.kinds)
    data["nccl_share"] = round(coverage.nccl_share, 6)
    return json.dumps(data, indent=2) + "\n"


def render_coverage(coverage: Coverage, *, width: int = 100, limit: int = 40) -> str:
    """Return the coverage as text: totals, events per kind, unrecognized shapes."""
    out = io.StringIO()
    console = Console(file=out, width=width, no_color=True, highlight=False, soft_wrap=False)
    share = f"{coverage.nccl_share:.2%}"
    console.print(
        f"{coverage.inputs} inputs, {coverage.lines} lines ({coverage.blank} blank): "
        f"{coverage.recognized} recognized, {coverage.unrecognized} unrecognized"
    )
    console.print(
        f"NCCL lines: {coverage.nccl_recognized} of {coverage.nccl_lines} recognized ({share})"
    )
    kinds = Table(box=box.SIMPLE, title="Events per kind", title_justify="left")
    kinds.add_column("kind")
    kinds.add_column("events", justify="right")
    for kind, count in coverage.kinds:
        kinds.add_row(kind, str(count))
    console.print(kinds)
    if coverage.shapes:
        table = Table(
            box=box.SIMPLE, title="Unrecognized lines by shape", title_justify="left", expand=True
        )
        table.add_column("lines", justify="right")
        table.add_column("NCCL")
        table.add_column("example (source:line)", overflow="fold")
        for group in coverage.shapes[:limit]:
            table.add_row(
                str(group.count),
                "yes" if group.nccl else "",
                f"{group.example}\n({group.source}:{group.line})",
            )
        console.print(table)
        if len(coverage.shapes) > limit:
            console.print(f"... and {len(coverage.shapes) - limit} more shapes (see --json)")
    for name, reason in coverage.problems:
        console.print(f"not read: {name}: {reason}")
    return out.getvalue()
