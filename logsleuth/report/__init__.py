"""Findings to text, JSON and HTML. The only place that imports jinja2.

The renderers load on first use: ``analyze --json`` or ``--quiet`` needs neither jinja2
(HTML) nor rich (text), and importing them costs more than a small diagnosis.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from logsleuth.report.html import build_view, render_html
    from logsleuth.report.json import build_json, render_json
    from logsleuth.report.text import render_text

__all__ = ["build_json", "build_view", "render_html", "render_json", "render_text"]

_HOME = {
    "build_json": "logsleuth.report.json",
    "build_view": "logsleuth.report.html",
    "render_html": "logsleuth.report.html",
    "render_json": "logsleuth.report.json",
    "render_text": "logsleuth.report.text",
}


def __getattr__(name: str) -> object:
    """Import the renderer ``name`` from its module when it is first asked for."""
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(home), name)
