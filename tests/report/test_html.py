"""The HTML report: escaped log text, an inert JSON payload, a strict CSP, one file."""

from __future__ import annotations

import base64
import dataclasses
import gzip
import hashlib
import json
from html.parser import HTMLParser

from logsleuth.model.diagnosis import RankView
from logsleuth.report.html import build_view, render_html, script_safe_json
from logsleuth.report.json import build_json
from logsleuth.resources import template_dir
from tests.conftest import Golden
from tests.report.diagnoses import (
    IMG_ATTACK,
    SCRIPT_ATTACK,
    healthy,
    hostile,
    large,
    missing_collective,
)

DATA_OPEN = '<script type="application/json" id="diagnosis-json">'


class _Page(HTMLParser):
    """Collect what a browser would build: elements, their attributes and script bodies."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[tuple[dict[str, str | None], str]] = []
        self.styles: list[str] = []
        self._raw: str | None = None
        self._raw_attrs: dict[str, str | None] = {}
        self._raw_tag = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag in ("script", "style"):
            self._raw, self._raw_attrs, self._raw_tag = "", dict(attrs), tag

    def handle_data(self, data: str) -> None:
        if self._raw is not None:
            self._raw += data

    def handle_endtag(self, tag: str) -> None:
        if self._raw is not None and tag == self._raw_tag:
            if tag == "script":
                self.scripts.append((self._raw_attrs, self._raw))
            else:
                self.styles.append(self._raw)
            self._raw = None


def _parse(html: str) -> _Page:
    page = _Page()
    page.feed(html)
    page.close()
    return page


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def test_log_text_with_markup_renders_escaped() -> None:
    html = render_html(hostile())
    assert SCRIPT_ATTACK not in html
    assert IMG_ATTACK not in html
    assert (
        "<code>node-b:4105:4105 [1] NCCL WARN &lt;script&gt;window.__pwned = 1; alert(1)"
        "&lt;/script&gt;</code>"
    ) in html
    assert (
        "<li><code>&lt;img src=x onerror=&#34;window.__pwned = 2; alert(1)&#34;&gt; "
        "(evil.py:2)</code></li>"
    ) in html


def test_injected_markup_creates_no_elements_or_handlers() -> None:
    page = _parse(render_html(hostile()))
    assert not [tag for tag, _ in page.tags if tag == "img"]
    handlers = [(tag, name) for tag, attrs in page.tags for name in attrs if name.startswith("on")]
    assert handlers == []
    assert [attrs.get("type") for attrs, _ in page.scripts] == ["application/json", None]


def test_embedded_json_survives_a_closing_script_tag_in_the_data() -> None:
    d = hostile()
    page = _parse(render_html(d))
    data_attrs, payload = page.scripts[0]
    assert data_attrs["id"] == "diagnosis-json"
    assert "<" not in payload and ">" not in payload and "&" not in payload
    assert json.loads(payload) == build_json(d)


def test_script_safe_json_escapes_html_significant_characters() -> None:
    assert script_safe_json({"a": "</script><!--&"}) == (
        '{"a":"\\u003c/script\\u003e\\u003c!--\\u0026"}'
    )


def test_content_security_policy_allows_only_the_inline_assets() -> None:
    html = render_html(missing_collective())
    page = _parse(html)
    meta = [
        a
        for tag, a in page.tags
        if tag == "meta" and a.get("http-equiv") == "Content-Security-Policy"
    ]
    assert len(meta) == 1
    policy = dict(directive.split(" ", 1) for directive in (meta[0]["content"] or "").split("; "))
    script = page.scripts[1][1]
    assert policy == {
        "default-src": "'none'",
        "style-src": _sha256(page.styles[0]),
        "script-src": _sha256(script),
        "img-src": "data:",
        "base-uri": "'none'",
        "form-action": "'none'",
    }


def test_page_references_nothing_outside_itself() -> None:
    page = _parse(render_html(missing_collective()))
    urls = [
        (tag, name, value)
        for tag, attrs in page.tags
        for name, value in attrs.items()
        if name in ("src", "href", "action", "srcset", "poster")
    ]
    assert all(
        value and (value.startswith("#") or value.startswith("data:")) for _, _, value in urls
    ), urls
    assert [tag for tag, _ in page.tags if tag in ("link",)] == ["link"]
    assert len(page.styles) == 1


def test_verdict_banner_comes_first() -> None:
    html = render_html(missing_collective())
    body = html.index("<body>")
    assert (
        html.index('id="verdict"', body) < html.index('id="evidence"') < html.index('id="findings"')
    )
    assert '<h1 id="verdict-summary">rank 5 (node-b pid 4105) never entered AllReduce #412' in html


def test_view_model_holds_formatted_values() -> None:
    view = build_view(missing_collective())
    verdict = view["verdict"]
    assert verdict == {
        "kind": "missing-collective",
        "summary": (
            "rank 5 (node-b pid 4105) never entered AllReduce #412 on comm "
            "0x7f3a9c2b11d04e55; the other 7 ranks wait in it"
        ),
        "tone": "critical",
        "severity": "critical",
        "culprits": [
            {"label": "rank", "value": "5", "href": "#rank-5", "filter": "5"},
            {"label": "host", "value": "node-b", "href": "#rank-5", "filter": "node-b"},
            {"label": "pid", "value": "4105", "href": "#rank-5", "filter": "4105"},
            {"label": "GPU", "value": "cudaDev 1 0000:18:00.0", "href": "", "filter": ""},
            {
                "label": "last collective",
                "value": "AllReduce #0x19b on comm 0x7f3a9c2b11d04e55",
                "href": "",
                "filter": "",
            },
            {"label": "stack", "value": "data loading", "href": "", "filter": ""},
        ],
        "time_span": "2026-03-21 01:58:40 to 2026-03-21 02:07:09",
        "confidence": "0.90",
        "confidence_word": "high",
        "rule": "LS101 collective.missing",
        "detail": missing_collective().findings[0].detail,
        "next_steps": list(missing_collective().findings[0].next_steps),
        "more_steps": 0,
    }
    groups = view["finding_groups"]
    assert isinstance(groups, list)
    assert [(g["kind"], g["count"]) for g in groups] == [
        ("missing-collective", 1),
        ("collective-timeout", 1),
        ("transport-degraded", 2),
    ]
    ranks = view["ranks"]
    assert isinstance(ranks, dict)
    assert [r["rank"] for r in ranks["rows"] if r["is_culprit"]] == ["5"]


def test_rank_table_is_collapsed_for_large_jobs() -> None:
    d = missing_collective()
    many = tuple(RankView(rank=r, host=f"node-{r // 8}", pid=1000 + r) for r in range(100))
    assert '<details id="rank-details" open>' in render_html(d)
    assert '<details id="rank-details">' in render_html(dataclasses.replace(d, ranks=many))


def test_healthy_report_omits_empty_sections() -> None:
    html = render_html(healthy())
    assert 'class="verdict tone-healthy"' in html
    assert 'id="evidence"' not in html
    assert 'id="stacks"' not in html
    assert "<p>No findings.</p>" in html


def test_control_characters_are_shown_not_embedded() -> None:
    d = missing_collective()
    verdict = dataclasses.replace(d.verdict, summary="stuck\x1b[2J\u202eevil")
    html = render_html(dataclasses.replace(d, verdict=verdict))
    assert "stuck\\x1b[2J\\u202eevil" in html
    assert "\x1b" not in html and "\u202e" not in html


def test_same_diagnosis_gives_identical_html() -> None:
    assert render_html(missing_collective()) == render_html(missing_collective())


def test_golden_html(golden: Golden) -> None:
    golden.check("report/missing_collective.html", render_html(missing_collective()))


def test_inlined_assets_cannot_close_their_own_elements() -> None:
    css = (template_dir() / "report.css").read_text(encoding="utf-8")
    js = (template_dir() / "report.js").read_text(encoding="utf-8")
    assert "</style" not in css.lower()
    assert "</script" not in js.lower() and "<!--" not in js


def test_log_text_in_every_new_section_stays_text() -> None:
    html = render_html(hostile())
    page = _parse(html)
    assert not [tag for tag, _ in page.tags if tag == "img"]
    assert html.count(SCRIPT_ATTACK) == 0 and html.count(IMG_ATTACK) == 0
    escaped_img = "&lt;img src=x onerror=&#34;window.__pwned = 2; alert(1)&#34;&gt;"
    # context line, progress caption and SVG title, timeline message, config key
    assert html.count(escaped_img) >= 6
    assert '<li class="current"><span class="loc">7</span>' in html


def test_large_job_pages_its_tables_and_compresses_its_data() -> None:
    d = large()
    html = render_html(d)
    assert len(html.encode()) < 1_000_000
    page = _parse(html)
    attrs, payload = page.scripts[0]
    assert attrs["type"] == "application/gzip"
    assert json.loads(gzip.decompress(base64.b64decode(payload))) == build_json(d)
    rows = [a for tag, a in page.tags if tag == "tr" and "data-rank" in a]
    assert len(rows) == 101  # the first page and the culprit, rank 1234
    assert rows[-1] == {"id": "rank-1234", "data-rank": "1234", "class": "culprit"}
    assert 'data-table="rank-table"' in html and 'data-table="input-table"' in html


def test_repeated_findings_of_one_rule_are_condensed() -> None:
    view = build_view(large())
    groups = {g["kind"]: g for g in view["finding_groups"]}  # type: ignore[union-attr]
    entries = groups["transport-degraded"]["findings"]
    assert len(entries) == 1
    assert entries[0]["similar_label"] == "39 similar findings of LS305"
    assert entries[0]["who"] == "on 40 hosts"
