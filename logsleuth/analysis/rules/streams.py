"""Helpers the failure rules share: which process wrote an event, and in what order."""

from __future__ import annotations

from collections.abc import Iterable

from logsleuth.analysis.index import EvidenceIndex, Stream
from logsleuth.model.base import Event
from logsleuth.model.nccl import NcclErrorTrace, NcclWarn


def stream_of(event: Event) -> Stream:
    """Return the (host, pid) that wrote ``event``."""
    return (event.origin.host, event.origin.pid)


def first_by_time(events: Iterable[NcclWarn]) -> list[NcclWarn]:
    """Order WARNs by timestamp when every one has one, else keep input order."""
    items = list(events)
    if items and all(e.origin.time is not None for e in items):
        return sorted(items, key=lambda e: (e.origin.time or 0.0, e.ref.source, e.ref.line))
    return items


def traces_of(index: EvidenceIndex, stream: Stream) -> list[NcclErrorTrace]:
    """Return the error back-trace lines (``file.cc:N -> code``) of one process."""
    return [t for t in index.traces if stream_of(t) == stream]
