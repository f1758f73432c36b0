"""Findings to text, JSON and HTML. The only place that imports jinja2."""

from __future__ import annotations

from logsleuth.report.html import build_view, render_html
from logsleuth.report.json import build_json, render_json
from logsleuth.report.text import render_text

__all__ = ["build_json", "build_view", "render_html", "render_json", "render_text"]
