"""Render a diagnosis as one self-contained HTML incident report.

The page is data first (:func:`build_view`), then a template with no logic beyond loops
and conditions. CSS, JavaScript and the diagnosis JSON are inlined, and a strict
Content-Security-Policy allows exactly that inline style and script, so the report works
from ``file://``, makes no network request and cannot run script that a log line carries.
"""

from __future__ import annotations

import base64
import hashlib
from functools import cache

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup

from logsleuth.model.diagnosis import (
    SEVERITIES,
    CommunicatorView,
    Diagnosis,
    Evidence,
    Finding,
    InputView,
    RankView,
    StackClass,
)
from logsleuth.model.ranks import format_ranks
from logsleuth.report import common
from logsleuth.report.json import build_json, dumps_canonical
from logsleuth.report.topology_svg import render_topology_svg, topology_summary
from logsleuth.resources import template_dir

TEMPLATE = "report.html.j2"
STYLESHEET = "report.css"
SCRIPT = "report.js"

OPEN_RANK_TABLE_LIMIT = 64
TOPOLOGY_HELP = (
    "How NCCL wired each communicator at init: hosts as boxes with their GPUs inside, ring "
    "connections coloured by transport, and hosts or ranks a topology finding names outlined in red."
)
"""Jobs up to this many processes show the per-rank table expanded."""

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
    return [
        {"location": f"{e.source}:{e.line}", "source": e.source, "line": e.line, "text": e.text}
        for e in evidence
    ]


def _evidence_label(f: Finding) -> str:
    label = f"Evidence: {len(f.evidence)} {common.plural(len(f.evidence), 'line')}"
    note = common.evidence_note(f)
    return f"{label} ({note})" if note else label


def _finding_view(f: Finding, primary: Finding | None, index: int) -> dict[str, object]:
    return {
        "anchor": f"finding-{index}",
        "code": f.code,
        "name": f.name,
        "kind": f.kind,
        "severity": f.severity,
        "severity_class": _severity_class(f.severity),
        "title": f.title,
        "detail": f.detail,
        "who": common.who(f.ranks, f.hosts, f.pids),
        "communicator": f.communicator or "",
        "confidence": common.format_confidence(f.confidence),
        "confidence_word": common.confidence_word(f.confidence),
        "evidence": _evidence_view(f.evidence),
        "evidence_label": _evidence_label(f),
        "next_steps": list(f.next_steps),
        "is_primary": f is primary,
    }


def _verdict_view(d: Diagnosis, primary: Finding | None) -> dict[str, object]:
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
        "culprits": [{"label": label, "value": value} for label, value in common.culprit_parts(d)],
        "confidence": common.format_confidence(v.confidence),
        "confidence_word": common.confidence_word(v.confidence),
        "rule": rule,
        "detail": primary.detail if primary is not None else "",
        "next_steps": list(primary.next_steps) if primary is not None else [],
    }


def _rank_view(r: RankView, is_culprit: bool) -> dict[str, object]:
    return {
        "rank": "?" if r.rank is None else str(r.rank),
        "host": r.host or "?",
        "pid": "?" if r.pid is None else str(r.pid),
        "devices": ",".join(map(str, r.devices)),
        "last_collective": r.last_collective or "",
        "state": r.state or "",
        "first_error": r.first_error or "",
        "nccl_version": r.nccl_version or "",
        "is_culprit": is_culprit,
    }


def _stack_view(s: StackClass, index: int) -> dict[str, object]:
    return {
        "anchor": f"stack-{index}",
        "ranks": s.ranks or common.name_list(s.pids),
        "count": s.count,
        "category": s.category,
        "call_site": s.call_site or "",
        "collective": s.collective or "",
        "top_frame": s.frames[0] if s.frames else "",
        "frames": list(s.frames),
        "hosts": common.name_list(sorted(set(s.hosts))),
    }


def _communicator_view(c: CommunicatorView) -> dict[str, object]:
    return {
        "id": c.id,
        "size": "?" if c.nranks is None else str(c.nranks),
        "ranks_seen": c.ranks_seen,
        "init_complete": c.init_complete,
        "init_missing": c.init_missing,
        "aborted": c.aborted,
        "progress": common.last_ops(c.last_op_counts),
        "channels": "" if c.channels is None else str(c.channels),
        "transports": common.transports(c.transports),
        "hosts": common.name_list(sorted(set(c.hosts))),
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
        "rows": [_input_view(i) for i in inputs],
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


def build_view(d: Diagnosis) -> dict[str, object]:
    """Build everything the page shows, formatted, so the template only places it.

    Strings are plain text; the template's autoescaping makes them safe. The only markup
    values are the inlined CSS/JS files of the package and the script-safe JSON payload.
    """
    data = script_safe_json(build_json(d))
    d = common.scrub_controls(d)
    primary = common.primary_finding(d)
    index = {id(f): i for i, f in enumerate(d.findings, 1)}
    groups = [
        {
            "kind": kind,
            "count": len(findings),
            "findings": [_finding_view(f, primary, index[id(f)]) for f in findings],
        }
        for kind, findings in common.group_findings(d.findings)
    ]
    culprits = {id(r) for r in common.culprit_views(d)}
    css = _asset(STYLESHEET)
    js = _asset(SCRIPT)
    ranks_known = format_ranks(r.rank for r in d.ranks if r.rank is not None)
    return {
        "title": _title(d),
        "generator": f"logsleuth {d.version}",
        "help": dict(common.SECTION_HELP),
        "verdict": _verdict_view(d, primary),
        "evidence": {
            "lines": _evidence_view(primary.evidence) if primary is not None else [],
            "note": common.evidence_note(primary) if primary is not None else "",
        },
        "finding_groups": groups,
        "counts": {
            "findings": len(d.findings),
            "stacks": len(d.stack_classes),
            "communicators": len(d.communicators),
            "gaps": len(d.gaps),
        },
        "ranks": {
            "rows": [_rank_view(r, id(r) in culprits) for r in d.ranks],
            "count": len(d.ranks),
            "known": ranks_known,
            "open": len(d.ranks) <= OPEN_RANK_TABLE_LIMIT,
        },
        "stacks": [_stack_view(s, i) for i, s in enumerate(d.stack_classes, 1)],
        "communicators": [_communicator_view(c) for c in d.communicators],
        "job": {
            "summary": common.job_summary(d),
            "nccl_versions": [
                {"version": version, "ranks": ranks, "hosts": hosts}
                for version, ranks, hosts in common.nccl_version_rows(d)
            ],
            "version_mismatch": len(d.job.nccl_versions) > 1,
        },
        "topology": {
            "help": TOPOLOGY_HELP,
            "views": [
                {"summary": topology_summary(t), "svg": Markup(render_topology_svg(t))}
                for t in d.topology
            ],
        },
        "inputs": _inputs_view(d.inputs),
        "gaps": list(d.gaps),
        "csp": content_security_policy(css, js),
        "css": Markup(css),
        "js": Markup(js),
        "data_json": Markup(data),
    }


def render_html(d: Diagnosis) -> str:
    """Render the self-contained HTML incident report."""
    return _environment().get_template(TEMPLATE).render(build_view(d))
