"""Render a diagnosis as one self-contained HTML incident report.

The page is data first (:func:`build_view`), then a template with no logic beyond loops
and conditions. CSS, JavaScript and the diagnosis JSON are inlined, and a strict
Content-Security-Policy allows exactly that inline style and script, so the report works
from ``file://``, makes no network request and cannot run script that a log line carries.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
from functools import cache
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup

from logsleuth.model.diagnosis import (
    SEVERITIES,
    Diagnosis,
    Evidence,
    Finding,
    InputView,
    RankView,
    StackClass,
)
from logsleuth.report import common, html_sections, html_topology
from logsleuth.report.json import build_json, communicator_entries, dumps_canonical
from logsleuth.resources import template_dir

TEMPLATE = "report.html.j2"
STYLESHEET = "report.css"
SCRIPT = "report.js"

OPEN_RANK_TABLE_LIMIT = 64
"""Jobs up to this many processes show the per-rank table expanded."""
TOPOLOGY_HELP = (
    "How NCCL wired each communicator at init: hosts as boxes (with their rank ranges) and "
    "their GPUs inside, ring connections coloured by transport, the culprit's GPU, host and "
    "links in red, and hosts or ranks a topology finding names outlined in red; the culprit's "
    "communicator comes first. Communicators on many hosts are summarized, not drawn."
)
VERDICT_STEPS = 3
"""Next steps the verdict banner lists; the primary finding below has all of them."""
COMPRESS_ABOVE = 256 * 1024
"""Embedded JSON larger than this many bytes is stored gzip-compressed and base64-encoded."""

TITLE_LIMIT = 120

_TONES = {"healthy": "healthy", "inconclusive": "inconclusive"}
"""Verdict kinds with a colour of their own; other verdicts take their finding's severity."""

# JSON inside <script> ends at the first "</script" and HTML parsers treat "<!--" specially;
# escaping every <, > and & keeps the payload inert and is still the same JSON.
_SCRIPT_SAFE = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})


@cache
def _environment() -> Environment:
    return Environment(
        loader=FileSystemLoader(template_dir()),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


@cache
def _asset(name: str) -> str:
    return (template_dir() / name).read_text(encoding="utf-8")


def _csp_hash(source: str) -> str:
    digest = hashlib.sha256(source.encode("utf-8")).digest()
    return "'sha256-" + base64.b64encode(digest).decode("ascii") + "'"


def content_security_policy(style: str, script: str) -> str:
    """Build the page's policy: only the given inline style and script, data: images.

    Args:
        style: The exact text of the page's one ``<style>`` element.
        script: The exact text of the page's one executable ``<script>`` element.
    """
    return "; ".join(
        (
            "default-src 'none'",
            f"style-src {_csp_hash(style)}",
            f"script-src {_csp_hash(script)}",
            "img-src data:",
            "base-uri 'none'",
            "form-action 'none'",
        )
    )


def script_safe_json(value: object) -> str:
    """Serialize ``value`` as compact JSON that cannot end or disturb a ``<script>`` element."""
    return dumps_canonical(value, indent=None).translate(_SCRIPT_SAFE)


def _severity_class(severity: str | None) -> str:
    return severity if severity in SEVERITIES else "unknown"


def _evidence_view(evidence: tuple[Evidence, ...]) -> list[dict[str, object]]:
    return html_sections.evidence_view(evidence)


def _evidence_label(f: Finding) -> str:
    label = f"Evidence: {len(f.evidence)} {common.plural(len(f.evidence), 'line')}"
    note = common.evidence_note(f)
    return f"{label} ({note})" if note else label


def _finding_view(
    f: Finding, primary: Finding | None, index: int, world: int | None
) -> dict[str, object]:
    return {
        "anchor": f"finding-{index}",
        "code": f.code,
        "name": f.name,
        "kind": f.kind,
        "severity": f.severity,
        "severity_class": _severity_class(f.severity),
        "title": f.title,
        "detail": f.detail,
        "who": common.who(f.ranks, f.hosts, f.pids, world),
        "links": html_sections.row_links(f.ranks, f.hosts, f.pids),
        "communicator": f.communicator or "",
        "confidence": common.format_confidence(f.confidence),
        "confidence_word": common.confidence_word(f.confidence),
        "evidence": _evidence_view(f.evidence),
        "evidence_label": _evidence_label(f),
        "next_steps": list(f.next_steps),
        "is_primary": f is primary,
        "similar": [],
        "similar_label": "",
    }


def _verdict_view(
    d: Diagnosis, primary: Finding | None, topology: dict[str, Any]
) -> dict[str, object]:
    v = d.verdict
    severity = primary.severity if primary is not None else None
    rule = ""
    if v.code:
        rule = f"{v.code} {primary.name}" if primary is not None and primary.name else v.code
    return {
        "kind": v.kind,
        "summary": v.summary,
        "tone": _TONES.get(v.kind, _severity_class(severity)),
        "severity": severity or "",
        "culprits": html_sections.culprit_links(d)
        + html_sections.culprit_facts(d)
        + [
            {
                "label": "topology",
                "value": f"comm {v['id']}",
                "href": f"#{v['anchor']}",
                "filter": "",
            }
            for v in topology["views"][:1]
            if v["culprit"]
        ],
        "time_span": common.time_range(d),
        "confidence": common.format_confidence(v.confidence),
        "confidence_word": common.confidence_word(v.confidence),
        "rule": rule,
        "detail": primary.detail if primary is not None else "",
        "next_steps": list(primary.next_steps[:VERDICT_STEPS]) if primary is not None else [],
        "more_steps": max(0, len(primary.next_steps) - VERDICT_STEPS) if primary is not None else 0,
    }


def _rank_view(r: RankView, is_culprit: bool, anchor: str) -> dict[str, object]:
    gpu = ",".join(map(str, r.devices))
    if r.bus_ids:
        gpu = f"{gpu} ({','.join(r.bus_ids)})" if gpu else ",".join(r.bus_ids)
    return {
        "anchor": anchor,
        "rank": "?" if r.rank is None else str(r.rank),
        "host": r.host or "?",
        "pid": "?" if r.pid is None else str(r.pid),
        "devices": gpu,
        "last_collective": r.last_collective or "",
        "state": r.state or "",
        "first_error": r.first_error or "",
        "nccl_version": r.nccl_version or "",
        "is_culprit": is_culprit,
    }


def _stack_view(s: StackClass, index: int, world: int | None) -> dict[str, object]:
    return {
        "anchor": f"stack-{index}",
        "ranks": html_sections.ranks_view(s.ranks, world, s.pids),
        "count": s.count,
        "category": s.category,
        "call_site": s.call_site or "",
        "collective": s.collective or "",
        "top_frame": s.frames[0] if s.frames else "",
        "frames": list(s.frames),
        "hosts": common.name_list(sorted(set(s.hosts))),
    }


def _communicator_view(c: dict[str, Any]) -> dict[str, object]:
    """Return one row of the communicator table from its ``communicators[]`` JSON entry."""
    nranks = c["nranks"]
    ops = [(g["ranks"], g["op_count"], g["collective"]) for g in c["last_op_counts"]]
    return {
        "id": c["id"],
        "size": "?" if nranks is None else str(nranks),
        "ranks_seen": html_sections.ranks_view(c["ranks_seen"], nranks),
        "init_complete": html_sections.ranks_view(c["init_complete"], nranks),
        "init_missing": html_sections.ranks_view(c["init_missing"], nranks),
        "aborted": html_sections.ranks_view(c["aborted"], nranks),
        "progress": common.last_ops(ops),
        "channels": "" if c["channels"] is None else str(c["channels"]),
        "transports": common.transports(c["transports"].items()),
        "hosts": common.name_list(c["hosts"]),
    }


def _input_view(i: InputView) -> dict[str, object]:
    return {
        "source": i.source,
        "kind": i.kind,
        "lines": f"{i.lines:,}",
        "recognized": f"{i.recognized:,}",
        "unrecognized": f"{i.unrecognized:,}",
        "blank": f"{i.blank:,}",
        "error": i.error or "",
    }


def _inputs_view(inputs: tuple[InputView, ...]) -> dict[str, object]:
    return {
        "rows": [_input_view(i) for i in inputs[: html_sections.PAGE_ROWS]],
        "paged": len(inputs) > html_sections.PAGE_ROWS,
        "total": {
            "count": f"{len(inputs)} {common.plural(len(inputs), 'input')}",
            "lines": f"{sum(i.lines for i in inputs):,}",
            "recognized": f"{sum(i.recognized for i in inputs):,}",
            "unrecognized": f"{sum(i.unrecognized for i in inputs):,}",
            "blank": f"{sum(i.blank for i in inputs):,}",
        },
        "has_errors": any(i.error for i in inputs),
    }


def _title(d: Diagnosis) -> str:
    title = f"logsleuth: {d.verdict.kind}: {d.verdict.summary}"
    return title if len(title) <= TITLE_LIMIT else title[: TITLE_LIMIT - 3] + "..."


def embedded_data(d: Diagnosis) -> tuple[str, str]:
    """Return the script type and body that carry the diagnosis JSON inside the page.

    Small documents are script-safe JSON as they are. Large ones (a 4,096-rank job is
    several megabytes of repetitive JSON) are gzip-compressed with a fixed mtime, so the
    bytes stay deterministic, and base64-encoded, which cannot close the element either.
    """
    data = script_safe_json(build_json(d))
    if len(data) <= COMPRESS_ABOVE:
        return "application/json", data
    packed = gzip.compress(data.encode("utf-8"), compresslevel=9, mtime=0)
    return "application/gzip", base64.b64encode(packed).decode("ascii")


def _rank_rows(d: Diagnosis) -> list[dict[str, object]]:
    culprits = {id(r) for r in common.culprit_views(d)}
    shown = list(d.ranks[: html_sections.PAGE_ROWS])
    # Without the pager (no JavaScript) the blamed processes must still be in the table.
    shown += [r for r in d.ranks[html_sections.PAGE_ROWS :] if id(r) in culprits]
    anchors: set[str] = set()
    rows = []
    for r in shown:
        anchor = f"rank-{r.rank}" if r.rank is not None else ""
        if anchor in anchors:
            anchor = ""  # one process of a rank seen twice (a restart) keeps the anchor
        anchors.add(anchor)
        rows.append(_rank_view(r, id(r) in culprits, anchor))
    return rows


def build_view(d: Diagnosis) -> dict[str, object]:
    """Build everything the page shows, formatted, so the template only places it.

    Strings are plain text; the template's autoescaping makes them safe. The only markup
    values are the inlined CSS/JS files of the package, the SVG drawings (which escape
    their text themselves) and the script-safe JSON payload.
    """
    data_type, data = embedded_data(d)
    topology = html_topology.topology_view(common.scrub_controls(d))
    d = common.scrub_controls(d)
    # The table lists what the JSON's communicators[] lists: split communicators included.
    comms = communicator_entries(d)
    primary = common.primary_finding(d)
    index = {id(f): i for i, f in enumerate(d.findings, 1)}
    by_kind = dict(common.group_findings(d.findings))
    groups: list[dict[str, object]] = [
        {
            "kind": kind,
            "count": len(findings),
            "findings": [
                _finding_view(f, primary, index[id(f)], d.job.world_size) for f in findings
            ],
        }
        for kind, findings in by_kind.items()
    ]
    css = _asset(STYLESHEET)
    js = _asset(SCRIPT)
    ranks_known = common.rank_set(
        [r.rank for r in d.ranks if r.rank is not None], d.job.world_size
    )[0]
    page = html_sections.PAGE_ROWS
    topology["help"] = TOPOLOGY_HELP
    return {
        "title": _title(d),
        "generator": f"logsleuth {d.version}",
        "help": dict(common.SECTION_HELP),
        "verdict": _verdict_view(d, primary, topology),
        "story": html_sections.story_view(d),
        "evidence": {
            "lines": _evidence_view(primary.evidence) if primary is not None else [],
            "note": common.evidence_note(primary) if primary is not None else "",
        },
        "finding_groups": html_sections.condense_groups(groups, by_kind),
        "counts": {
            "findings": len(d.findings),
            "stacks": len(d.stack_classes),
            "communicators": len(comms),
            "gaps": len(d.gaps),
            "timeline": len(d.timeline),
            "config_differs": sum(1 for c in d.config if c.differs),
        },
        "overview": common.overview_rows(d),
        "progress": html_sections.progress_view(d),
        "p2p": html_sections.p2p_view(d),
        "timeline": html_sections.timeline_view(d),
        "config": html_sections.config_view(d),
        "ranks": {
            "rows": _rank_rows(d),
            "count": len(d.ranks),
            "known": ranks_known,
            "open": len(d.ranks) <= OPEN_RANK_TABLE_LIMIT,
            "paged": len(d.ranks) > page,
        },
        "stacks": [_stack_view(s, i, d.job.world_size) for i, s in enumerate(d.stack_classes, 1)],
        "stack_tree": html_sections.stack_tree_view(d) if len(d.stack_classes) > 1 else [],
        "communicators": [_communicator_view(c) for c in comms[:page]],
        "communicators_paged": len(comms) > page,
        "job": {
            "summary": common.job_summary(d),
            "nccl_versions": [
                {"version": version, "ranks": ranks, "hosts": hosts}
                for version, ranks, hosts in common.nccl_version_rows(d)
            ],
            "version_mismatch": len(d.job.nccl_versions) > 1,
        },
        "topology": topology,
        "inputs": _inputs_view(d.inputs),
        "gaps": list(d.gaps),
        "unrecognized": html_sections.unrecognized_view(d),
        "csp": content_security_policy(css, js),
        "css": Markup(css),
        "js": Markup(js),
        "data_type": data_type,
        "data_json": Markup(data),
    }


def render_html(d: Diagnosis) -> str:
    """Render the self-contained HTML incident report."""
    return _environment().get_template(TEMPLATE).render(build_view(d))
