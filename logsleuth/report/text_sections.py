"""Terminal sections: the wait chain, job overview, communicator progress, first errors, config.

The same wording as the HTML report (:mod:`logsleuth.report.common`), as plain rich renderables.
"""

from __future__ import annotations

from collections.abc import Iterator

from rich.console import RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from logsleuth.model.diagnosis import Diagnosis
from logsleuth.report import common
from logsleuth.report.story import (
    Story,
    build_story,
    culprit_sentence,
    hop_sentence,
    waiter_sentence,
)

ROW_LIMIT = 10
"""Rows per section before pointing at the HTML and JSON reports."""


def _heading(title: str) -> Text:
    return Text(title.upper(), style="bold")


def _indent(renderable: RenderableType) -> Padding:
    return Padding(renderable, (0, 0, 0, 2))


def _grid() -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    return grid


def _more(total: int, what: str) -> Iterator[RenderableType]:
    if total > ROW_LIMIT:
        yield _indent(Text(f"... {total - ROW_LIMIT} more {what} in the HTML and JSON reports"))


def story_lines(story: Story) -> list[tuple[str, str, str]]:
    """Return the wait chain as (number, text, evidence) rows, symptom first, cause last."""
    rows: list[tuple[str, str, str]] = []
    for i, hop in enumerate(story.hops, 1):
        text = f"{waiter_sentence(hop)}\n-> {hop_sentence(hop)} [{hop.source}]"
        quoted = ""
        if hop.evidence is not None:
            quoted = f"{hop.evidence.source}:{hop.evidence.line}  {hop.evidence.text}"
        rows.append((f"{i}.", text, quoted))
    rows.append((f"{len(story.hops) + 1}.", f"{culprit_sentence(story)}  <- the cause", ""))
    return rows


def story(d: Diagnosis) -> Iterator[RenderableType]:
    """Yield the wait chain from the symptom to the cause, with the line that shows each hop."""
    found = build_story(d)
    if found is None:
        return
    yield Text()
    yield _heading("Wait chain (symptom to cause)")
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True, justify="right")
    grid.add_column(overflow="fold")
    for number, text, quoted in story_lines(found):
        body = Text(text)
        if quoted:
            body.append("\n" + quoted, style="cyan")
        grid.add_row(number, body)
    yield _indent(grid)
    if found.resolution:
        yield _indent(Text(f"(how the cause was chosen: {found.resolution})", style="dim"))


def overview(d: Diagnosis) -> Iterator[RenderableType]:
    """Yield the job overview as label/value lines."""
    yield Text()
    yield _heading("Job overview")
    grid = _grid()
    for label, value in common.overview_rows(d):
        grid.add_row(label, value)
    yield _indent(grid)


def progress(d: Diagnosis) -> Iterator[RenderableType]:
    """Yield where each communicator's members stopped; laggards first."""
    uneven, even = common.split_progress(d)
    if not uneven and not even:
        return
    yield Text()
    yield _heading("Communicator progress")
    for p in uneven[:ROW_LIMIT]:
        yield _indent(Text(common.progress_summary(p)))
        grid = _grid()
        for g in p.groups:
            grid.add_row(
                f"ranks {g.ranks} ({g.count})",
                f"{common.group_position(g)}; {common.group_lag(g)}",
            )
        yield _indent(_indent(grid))
    yield from _more(len(uneven), "communicators with laggards")
    if even:
        yield _indent(
            Text(f"{len(even)} communicator(s) whose members all stopped at the same collective")
        )


def timeline(d: Diagnosis) -> Iterator[RenderableType]:
    """Yield the first errors across ranks, earliest first."""
    if not d.timeline:
        return
    yield Text()
    yield _heading("First errors across ranks")
    grid = _grid()
    for e in d.timeline[:ROW_LIMIT]:
        where = f"\n{e.evidence.source}:{e.evidence.line}" if e.evidence is not None else ""
        grid.add_row(
            e.time or "no time",
            Text(f"{e.kind}: {common.first_error_who(e)}\n{e.message}{where}"),
        )
    yield _indent(grid)
    yield from _more(len(d.timeline), "first errors")


def config(d: Diagnosis) -> Iterator[RenderableType]:
    """Yield the configuration keys whose value differs across ranks."""
    differs = [c for c in d.config if c.differs]
    if not differs:
        return
    yield Text()
    yield _heading("Configuration differences")
    grid = _grid()
    for entry in differs[:ROW_LIMIT]:
        lines = [
            f"{v.value}: {common.config_value_who(entry, i)}" for i, v in enumerate(entry.values)
        ]
        if entry.unset:
            lines.append(f"not logged: ranks {entry.unset}")
        grid.add_row(entry.key, Text("\n".join(lines)))
    yield _indent(grid)
    yield from _more(len(differs), "differing settings")


def p2p(d: Diagnosis) -> Iterator[RenderableType]:
    """Yield the point-to-point frontier: each unanswered send/recv and what its peer does."""
    view = d.p2p
    if view is None or not view.stuck:
        return
    yield Text()
    yield _heading("Point-to-point frontier")
    if view.culprits:
        who = ", ".join(f"rank {r}" for r in view.culprits)
        yield _indent(Text(f"waiting ends at {who} ({view.kind})"))
    grid = _grid()
    for s in view.stuck[:ROW_LIMIT]:
        grid.add_row(f"rank {s.waiter} -> rank {s.peer}", Text(s.summary))
    yield _indent(grid)
    yield from _more(len(view.stuck), "unanswered point-to-point ops")
