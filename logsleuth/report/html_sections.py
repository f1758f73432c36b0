"""View models of the HTML report's sections beyond the verdict and findings.

Each function turns part of a :class:`~logsleuth.model.diagnosis.Diagnosis` into the plain
strings and lists the template places; large parts are capped or left to the page's pager,
which draws further rows from the embedded JSON.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import cast

from markupsafe import Markup

from logsleuth.model.diagnosis import Diagnosis, Evidence, Finding, StackTreeNode
from logsleuth.model.ranks import parse_ranks
from logsleuth.report import common
from logsleuth.report.progress_svg import render_progress_svg
from logsleuth.report.story import Party, build_story, culprit_sentence, hop_sentence

PAGE_ROWS = 100
"""Rows a paged table holds in the HTML itself; the pager draws the rest from the JSON."""
DRAWN_PROGRESS = 4
"""Communicators with laggards whose rank grid is drawn."""
EVEN_PROGRESS_ROWS = 50
TIMELINE_ROWS = 100
UNRECOGNIZED_ROWS = 20
TREE_NODE_LIMIT = 400
"""Tree nodes drawn; a deeper or wider tree ends in a note (every class is in the table)."""
P2P_ROWS = 50
"""Unanswered point-to-point ops shown; the rest are in the embedded JSON."""
SIMILAR_MIN = 3
"""Findings of one rule whose titles differ only in numbers are condensed from this many."""

_NUMBERS = re.compile(r"0x[0-9a-fA-F]+|\d+")


def evidence_view(evidence: Sequence[Evidence]) -> list[dict[str, object]]:
    """Return each evidence line with its context rows (the line itself marked, gaps counted)."""
    views: list[dict[str, object]] = []
    for e in evidence:
        rows: list[dict[str, object]] = []
        lines = sorted([*e.context, (e.line, e.text)])
        previous: int | None = None
        for number, text in lines:
            if previous is not None and number > previous + 1:
                skipped = number - previous - 1
                gap = f"{skipped} {common.plural(skipped, 'line')} not kept"
                rows.append({"gap": gap, "line": "", "text": "", "current": False})
            rows.append({"gap": "", "line": number, "text": text, "current": number == e.line})
            previous = number
        views.append(
            {
                "location": f"{e.source}:{e.line}",
                "source": e.source,
                "line": e.line,
                "text": e.text,
                "context": rows if e.context else [],
            }
        )
    return views


def ranks_view(
    ranks: str | Sequence[int], world: int | None, pids: Sequence[int] = ()
) -> dict[str, str]:
    """Return a rank set STAT-style (``short``) with the whole list (``full``) when cut."""
    short, full = common.rank_set(ranks, world)
    if not short and pids:
        short = f"{common.plural(len(pids), 'pid')} {common.name_list(pids)}"
        full = ", ".join(map(str, pids)) if len(pids) > common.LIST_LIMIT else ""
    return {"short": short, "full": full}


def row_links(
    ranks: Sequence[int], hosts: Sequence[str] = (), pids: Sequence[int] = ()
) -> list[dict[str, str]]:
    """Return links to the rows of a few processes: each rank, else each pid, and each host."""
    links: list[dict[str, str]] = []
    unique = sorted(set(ranks))
    if 0 < len(unique) <= common.LIST_LIMIT:
        links += [{"text": f"rank {r}", "href": f"#rank-{r}", "filter": str(r)} for r in unique]
    elif not unique and 0 < len(set(pids)) <= common.LIST_LIMIT:
        links += [
            {"text": f"pid {p}", "href": "#ranks", "filter": str(p)} for p in sorted(set(pids))
        ]
    names = sorted(set(hosts))
    if 0 < len(names) <= common.LIST_LIMIT:
        links += [{"text": h, "href": "#ranks", "filter": h} for h in names]
    return links


def party_link(p: Party) -> dict[str, str]:
    """Return a process as a cross-link: to its rank's row, else to the rank table filtered."""
    if p.rank is not None:
        return {"text": p.label(), "href": f"#rank-{p.rank}", "filter": str(p.rank)}
    key = str(p.pid) if p.pid is not None else (p.host or p.id)
    return {"text": p.label(), "href": "#ranks", "filter": key}


def story_view(d: Diagnosis) -> dict[str, object] | None:
    """Return the wait chain from the symptom to the cause, each hop with its evidence line."""
    story = build_story(d)
    if story is None:
        return None
    hops = [
        {
            "waiter": party_link(h.waiter),
            "doing": h.waiter.doing(),
            "sentence": hop_sentence(h),
            "source": h.source,
            "evidence": evidence_view([h.evidence]) if h.evidence is not None else [],
        }
        for h in story.hops
    ]
    culprit = party_link(story.culprit) if story.culprit is not None else None
    sentence = culprit_sentence(story)
    if story.culprit is not None:
        sentence = sentence[len(story.culprit.label()) :].strip()
    return {
        "hops": hops,
        "culprit": culprit,
        "culprit_sentence": sentence,
        "resolution": story.resolution,
    }


def culprit_links(d: Diagnosis) -> list[dict[str, str]]:
    """Return the verdict's ranks, hosts and pids, each a link to the culprit's row."""
    v = d.verdict
    first = min(v.culprit_ranks) if v.culprit_ranks else None
    links = []
    for label, value in common.culprit_parts(d):
        if label.startswith("rank") and first is not None:
            links.append(
                {"label": label, "value": value, "href": f"#rank-{first}", "filter": value}
            )
        else:
            target = f"#rank-{first}" if first is not None else "#ranks"
            first_value = value.split(",")[0].split(" ")[0]
            links.append({"label": label, "value": value, "href": target, "filter": first_value})
    return links


def culprit_facts(d: Diagnosis) -> list[dict[str, str]]:
    """Return GPU, last collective and stack of the verdict's culprits as label/value pairs."""
    return [
        {"label": label, "value": value, "href": "", "filter": ""}
        for label, value in common.culprit_details(d)
    ]


def _condensed(group: list[dict[str, object]], findings: list[Finding]) -> list[dict[str, object]]:
    """Fold findings of one rule whose titles differ only in numbers into one entry."""
    buckets: dict[tuple[str, str], list[int]] = {}
    for i, f in enumerate(findings):
        buckets.setdefault((f.code, _NUMBERS.sub("#", f.title)), []).append(i)
    out: list[dict[str, object]] = []
    for indices in buckets.values():
        first = group[indices[0]]
        if len(indices) < SIMILAR_MIN or first["is_primary"]:
            out.extend(group[i] for i in indices)
            continue
        members = [findings[i] for i in indices]
        who = common.who(
            [r for f in members for r in f.ranks],
            [h for f in members for h in f.hosts],
            [p for f in members for p in f.pids],
        )
        out.append(
            {
                **first,
                "who": who,
                "similar": [str(group[i]["title"]) for i in indices[1:]],
                "similar_label": f"{len(indices) - 1} similar findings of {first['code']}",
            }
        )
    return out


def condense_groups(
    groups: list[dict[str, object]], findings_by_kind: dict[str, list[Finding]]
) -> list[dict[str, object]]:
    """Condense repeated findings within each kind group (see :func:`_condensed`)."""
    for group in groups:
        views = cast(list[dict[str, object]], group["findings"])
        group["findings"] = _condensed(views, findings_by_kind[str(group["kind"])])
    return groups


def progress_view(d: Diagnosis) -> dict[str, object]:
    """Return the progress section: communicators with laggards drawn, the others listed."""
    uneven, even = common.split_progress(d)
    comms = []
    for i, p in enumerate(uneven):
        svg = render_progress_svg(p) if i < DRAWN_PROGRESS else ""
        comms.append(
            {
                "id": p.id,
                "summary": common.progress_summary(p),
                "svg": Markup(svg),
                "groups": [
                    {
                        "ranks": ranks_view(g.ranks, p.nranks),
                        "count": g.count,
                        "position": common.group_position(g),
                        "lag": common.group_lag(g),
                        "laggard": g.behind != 0,
                    }
                    for g in p.groups
                ],
            }
        )
    return {
        "uneven": comms,
        "even": [common.progress_summary(p) for p in even[:EVEN_PROGRESS_ROWS]],
        "even_count": len(even),
        "even_more": max(0, len(even) - EVEN_PROGRESS_ROWS),
    }


def _is_ranks(text: str) -> bool:
    return bool(text) and all(part.replace("-", "").isdigit() for part in text.split(","))


def timeline_view(d: Diagnosis) -> dict[str, object]:
    """Return the first-error rows, earliest first, capped at :data:`TIMELINE_ROWS`."""
    rows = []
    for e in d.timeline[:TIMELINE_ROWS]:
        rows.append(
            {
                "time": e.time or "",
                "last_time": e.last_time or "",
                "kind": e.kind,
                "who": common.first_error_who(e),
                "links": row_links(parse_ranks(e.ranks) if _is_ranks(e.ranks) else (), e.hosts),
                "message": e.message,
                "evidence": evidence_view([e.evidence]) if e.evidence is not None else [],
            }
        )
    return {"rows": rows, "more": max(0, len(d.timeline) - TIMELINE_ROWS)}


def config_view(d: Diagnosis) -> dict[str, object]:
    """Return keys whose value differs (with who has which) and the keys all agree on."""
    differs = []
    same = []
    for entry in d.config:
        if entry.differs:
            differs.append(
                {
                    "key": entry.key,
                    "options": [
                        {"value": v.value, "who": common.config_value_who(entry, i)}
                        for i, v in enumerate(entry.values)
                    ],
                    "unset": entry.unset,
                }
            )
        else:
            value = entry.values[0].value if entry.values else ""
            note = f" (not logged by ranks {entry.unset})" if entry.unset else ""
            same.append({"key": entry.key, "value": value, "note": note})
    return {"differs": differs, "same": same}


def _tree_node(node: StackTreeNode, budget: list[int], world: int | None) -> dict[str, object]:
    """Return a node and the chain of single children below it as one collapsible entry."""
    frames = [node.frame]
    while len(node.children) == 1 and node.children[0].count == node.count and not node.category:
        node = node.children[0]
        frames.append(node.frame)
    budget[0] -= 1
    who = ranks_view(node.ranks, world, node.pids)
    ends = ""
    if node.category:
        ends = node.category + (f" ({node.collective})" if node.collective else "")
    children = []
    for child in node.children:
        if budget[0] <= 0:
            break
        children.append(_tree_node(child, budget, world))
    return {
        "frames": frames,
        "who": who,
        "count": node.count,
        "ends": ends,
        "suspect": node.suspect or "",
        "children": children,
        "cut": len(node.children) - len(children),
    }


def stack_tree_view(d: Diagnosis) -> list[dict[str, object]]:
    """Return the STAT prefix tree of the stack classes, outermost frame first."""
    root = d.stack_tree
    if root is None:
        return []
    budget = [TREE_NODE_LIMIT]
    world = d.job.world_size
    return [_tree_node(child, budget, world) for child in root.children if budget[0] > 0]


def unrecognized_view(d: Diagnosis) -> dict[str, object]:
    """Return the inputs with the most unrecognized lines, for the data-gaps section."""
    partial = sorted(
        (i for i in d.inputs if i.unrecognized), key=lambda i: (-i.unrecognized, i.source)
    )
    return {
        "rows": [
            {"source": i.source, "unrecognized": f"{i.unrecognized:,}", "lines": f"{i.lines:,}"}
            for i in partial[:UNRECOGNIZED_ROWS]
        ],
        "more": max(0, len(partial) - UNRECOGNIZED_ROWS),
        "total": f"{sum(i.unrecognized for i in partial):,}",
    }


def p2p_view(d: Diagnosis) -> dict[str, object]:
    """Return the point-to-point frontier: who waits for whom in which send/recv."""
    view = d.p2p
    if view is None or not view.stuck:
        return {"rows": [], "culprits": "", "kind": "", "more": 0}
    rows = [
        {"pair": f"rank {s.waiter} \u2192 rank {s.peer}", "kind": s.kind, "text": s.summary}
        for s in view.stuck[:P2P_ROWS]
    ]
    return {
        "rows": rows,
        "culprits": ", ".join(f"rank {r}" for r in view.culprits),
        "kind": view.kind,
        "more": max(0, len(view.stuck) - P2P_ROWS),
    }
