"""Render a diagnosis for the terminal: the verdict first, then the evidence behind it."""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence

from rich import box
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from logsleuth.model.diagnosis import Diagnosis, Finding, RankView
from logsleuth.model.ranks import format_ranks
from logsleuth.report import common, text_sections, text_stacks
from logsleuth.report.topology_svg import topology_summary

TABLE_ROW_LIMIT = 20
"""Rows a terminal table shows before pointing at the HTML/JSON report for the rest."""

CULPRIT_ROW_LIMIT = 8

_SEVERITY_STYLE = {
    "critical": "bold red",
    "error": "red",
    "warning": "yellow",
    "info": "cyan",
}
_VERDICT_STYLE = {"healthy": "bold green", "inconclusive": "bold yellow"}


def _heading(title: str) -> Text:
    # Upper case stands out without colour, which is how most pasted reports are read.
    return Text(title.upper(), style="bold")


def _indent(renderable: RenderableType) -> Padding:
    return Padding(renderable, (0, 0, 0, 2))


def _table(*columns: str) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")
    for i, column in enumerate(columns):
        # The first column is an identifier (rank, communicator, path): keep it whole.
        table.add_column(column, overflow="fold", no_wrap=i == 0)
    return table


def _more(shown: int, total: int, what: str) -> Text | None:
    if total <= shown:
        return None
    return Text(f"... {total - shown} more {what} in the HTML and JSON reports", style="dim")


def _verdict(d: Diagnosis, primary: Finding | None) -> Iterator[RenderableType]:
    v = d.verdict
    severity = primary.severity if primary is not None else None
    style = _VERDICT_STYLE.get(v.kind, _SEVERITY_STYLE.get(severity or "", "bold"))
    headline = Text()
    headline.append("VERDICT ", style="bold")
    headline.append(v.kind, style=style)
    headline.append(": ")
    headline.append(v.summary)
    yield headline

    facts = Text(style="bold")
    for label, value in common.culprit_parts(d):
        facts.append(f"{label} {value} | ")
    facts.append(f"confidence {common.format_confidence(v.confidence)}")
    if v.code:
        rule = f"{v.code} {primary.name}" if primary is not None and primary.name else v.code
        facts.append(f" | rule {rule}", style="dim")
    yield _indent(facts)
    details = common.culprit_details(d)
    if details:
        yield _indent(Text(" | ".join(f"{label} {value}" for label, value in details)))
    if primary is not None and primary.detail:
        yield _indent(Text(primary.detail))


def _evidence(primary: Finding) -> Iterator[RenderableType]:
    if not primary.evidence:
        return
    yield Text()
    yield _heading("Evidence")
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True, style="cyan")
    grid.add_column(overflow="fold")
    for e in primary.evidence:
        grid.add_row(f"{e.source}:{e.line}", Text(e.text))
    yield _indent(grid)
    note = common.evidence_note(primary)
    if note:
        yield _indent(Text(f"({note})", style="dim"))


def _next_steps(primary: Finding) -> Iterator[RenderableType]:
    if not primary.next_steps:
        return
    yield Text()
    yield _heading("Next steps")
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True, justify="right")
    grid.add_column()
    for i, step in enumerate(primary.next_steps, 1):
        grid.add_row(f"{i}.", Text(step))
    yield _indent(grid)


def _findings(
    findings: Sequence[Finding], title: str, world: int | None = None
) -> Iterator[RenderableType]:
    if not findings:
        return
    yield Text()
    yield _heading(f"{title} ({len(findings)})")
    for kind, group in common.group_findings(findings):
        yield _indent(Text(f"{kind} ({len(group)})", style="bold"))
        grid = Table.grid(padding=(0, 2))
        grid.add_column(no_wrap=True)
        grid.add_column(no_wrap=True)
        grid.add_column(overflow="fold")
        for f in group:
            body = Text(f.title)
            where = common.who(f.ranks, f.hosts, f.pids, world)
            extra = [where] if where else []
            extra.append(f"confidence {common.format_confidence(f.confidence)}")
            body.append("\n" + "; ".join(extra), style="dim")
            grid.add_row(
                Text(f.severity.upper(), style=_SEVERITY_STYLE.get(f.severity, "")), f.code, body
            )
        yield _indent(_indent(grid))


def _culprits(d: Diagnosis) -> Iterator[RenderableType]:
    views = common.culprit_views(d)
    if not views:
        return
    yield Text()
    yield _heading("Culprit processes")
    table = _table("Rank", "Host", "PID", "GPU", "Last collective", "State", "First error")
    for r in views[:CULPRIT_ROW_LIMIT]:
        table.add_row(*_rank_cells(r))
    yield _indent(table)
    more = _more(CULPRIT_ROW_LIMIT, len(views), "culprit processes")
    if more is not None:
        yield _indent(more)


def _rank_cells(r: RankView) -> tuple[str, ...]:
    return (
        "?" if r.rank is None else str(r.rank),
        r.host or "?",
        "?" if r.pid is None else str(r.pid),
        ",".join(map(str, r.devices)),
        r.last_collective or "",
        r.state or "",
        r.first_error or "",
    )


def _stacks(d: Diagnosis) -> Iterator[RenderableType]:
    if not d.stack_classes:
        return
    yield Text()
    yield _heading(f"Stack classes ({len(d.stack_classes)})")
    table = _table("Ranks", "Count", "Category", "Call site", "Innermost frame")
    for s in d.stack_classes[:TABLE_ROW_LIMIT]:
        table.add_row(
            common.rank_set(s.ranks, d.job.world_size)[0] or common.name_list(s.pids),
            str(s.count),
            s.category,
            s.call_site or "",
            s.frames[0] if s.frames else "",
        )
    yield _indent(table)
    more = _more(TABLE_ROW_LIMIT, len(d.stack_classes), "stack classes")
    if more is not None:
        yield _indent(more)
    yield from text_stacks.stack_tree(d)


def _communicators(d: Diagnosis) -> Iterator[RenderableType]:
    if not d.communicators:
        return
    yield Text()
    yield _heading(f"Communicators ({len(d.communicators)})")
    table = _table("Communicator", "Size", "Init complete", "Init missing", "Aborted", "Progress")
    for c in d.communicators[:TABLE_ROW_LIMIT]:
        table.add_row(
            c.id,
            "?" if c.nranks is None else str(c.nranks),
            common.rank_set(c.init_complete, c.nranks)[0],
            common.rank_set(c.init_missing, c.nranks)[0],
            common.rank_set(c.aborted, c.nranks)[0],
            common.last_ops(c.last_op_counts),
        )
    yield _indent(table)
    more = _more(TABLE_ROW_LIMIT, len(d.communicators), "communicators")
    if more is not None:
        yield _indent(more)


def _topology(d: Diagnosis) -> Iterator[RenderableType]:
    if not d.topology:
        return
    yield Text()
    yield _heading(f"Topology ({len(d.topology)})")
    for view in d.topology[:TABLE_ROW_LIMIT]:
        yield _indent(Text(topology_summary(view)))
    more = _more(TABLE_ROW_LIMIT, len(d.topology), "communicators")
    if more is not None:
        yield _indent(more)


def _job(d: Diagnosis) -> Iterator[RenderableType]:
    summary = common.job_summary(d)
    if summary:
        yield Text()
        yield Text.assemble(("JOB ", "bold"), summary)
    versions = common.nccl_version_rows(d)
    if len(versions) > 1:
        for version, ranks, hosts in versions:
            yield _indent(Text(f"NCCL {version}: ranks {ranks or '?'} on {hosts or '?'}"))


def _inputs_total(d: Diagnosis) -> Text:
    lines = sum(i.lines for i in d.inputs)
    recognized = sum(i.recognized for i in d.inputs)
    unrecognized = sum(i.unrecognized for i in d.inputs)
    blank = sum(i.blank for i in d.inputs)
    count = len(d.inputs)
    return Text(
        f"{count} {common.plural(count, 'input')}, {lines:,} lines: {recognized:,} recognized, "
        f"{unrecognized:,} unrecognized, {blank:,} blank"
    )


def _inputs(d: Diagnosis, *, compact: bool) -> Iterator[RenderableType]:
    yield Text()
    yield Text.assemble(("INPUTS ", "bold"), _inputs_total(d))
    failed = [i for i in d.inputs if i.error]
    if compact:
        for i in failed:
            yield _indent(Text(f"{i.source}: {i.error}", style="red"))
        return
    if not d.inputs:
        return
    columns = ["Source", "Kind", "Lines", "Recognized", "Unrecognized", "Blank"]
    if failed:
        columns.append("Error")
    table = _table(*columns)
    for column in table.columns[2:6]:
        column.justify = "right"
    for i in d.inputs[:TABLE_ROW_LIMIT]:
        row = [
            i.source,
            i.kind,
            f"{i.lines:,}",
            f"{i.recognized:,}",
            f"{i.unrecognized:,}",
            f"{i.blank:,}",
        ]
        if failed:
            row.append(i.error or "")
        table.add_row(*row)
    yield _indent(table)
    more = _more(TABLE_ROW_LIMIT, len(d.inputs), "inputs")
    if more is not None:
        yield _indent(more)


def _gaps(d: Diagnosis) -> Iterator[RenderableType]:
    if not d.gaps:
        return
    yield Text()
    yield _heading("Data gaps")
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column()
    for gap in d.gaps:
        grid.add_row("-", Text(gap))
    yield _indent(grid)


def _counts(d: Diagnosis) -> Text:
    comms = len(d.communicators)
    classes = len(d.stack_classes)
    ranks = format_ranks(r.rank for r in d.ranks if r.rank is not None)
    seen = f"; ranks seen {ranks}" if ranks else ""
    return Text(
        f"{comms} {common.plural(comms, 'communicator')}, "
        f"{classes} {common.plural(classes, 'stack class', 'stack classes')}{seen}"
    )


def _sections(d: Diagnosis) -> Iterator[RenderableType]:
    primary = common.primary_finding(d)
    healthy = d.verdict.kind == "healthy"
    yield from _verdict(d, primary)
    yield from text_sections.story(d)
    if primary is not None:
        yield from _evidence(primary)
        yield from _next_steps(primary)
    if not healthy:
        yield from text_sections.progress(d)
        yield from text_sections.p2p(d)
        yield from text_sections.timeline(d)
    others = [f for f in d.findings if f is not primary]
    title = "Findings" if primary is None else "Other findings"
    yield from _findings(others, title, d.job.world_size)
    if not healthy:
        yield from _culprits(d)
        yield from _stacks(d)
        yield from _communicators(d)
    yield from text_sections.config(d)
    yield from _topology(d)
    # A healthy job needs one line about itself; a failed one the whole overview.
    yield from (_job(d) if healthy else text_sections.overview(d))
    if healthy and (d.communicators or d.stack_classes):
        yield _counts(d)
    yield from _inputs(d, compact=healthy)
    yield from _gaps(d)


def render_text(d: Diagnosis, *, width: int = 100, color: bool = False) -> str:
    """Render the terminal report; without colour the output is plain, deterministic text.

    Args:
        d: The diagnosis to show.
        width: Columns to wrap at.
        color: Emit ANSI colour codes (for a terminal); off for files, pipes and tests.
    """
    d = common.scrub_controls(d)
    buffer = io.StringIO()
    console = Console(
        file=buffer,
        width=width,
        color_system="standard" if color else None,
        force_terminal=color,
        force_jupyter=False,
        force_interactive=False,
        highlight=False,
        markup=False,
        emoji=False,
        legacy_windows=False,
    )
    console.print(Group(*_sections(d)))
    # Tables pad cells with spaces; trailing blanks only make diffs noisy.
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines()) + "\n"
