"""The event model: frozen values that parse/ produces and analysis/ consumes. Stdlib only."""

from __future__ import annotations

from logsleuth.model.base import NO_ORIGIN, Event, InputSummary, Origin, SourceRef
from logsleuth.model.ranks import format_ranks, parse_ranks

__all__ = [
    "NO_ORIGIN",
    "Event",
    "InputSummary",
    "Origin",
    "SourceRef",
    "format_ranks",
    "parse_ranks",
]
