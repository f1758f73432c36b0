"""The ``manifest.json`` of a bundle that ``logsleuth live`` writes (CONTRACT section 4)."""

from __future__ import annotations

from dataclasses import dataclass

from logsleuth.model.base import Event


@dataclass(frozen=True, slots=True, kw_only=True)
class RankEntry:
    """One rank process as live mode found it."""

    rank: int
    pid: int | None
    host: str | None
    local_rank: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class BundleManifest(Event):
    """``manifest.json`` (schema ``logsleuth.bundle/1``): the job's command and its rank processes."""

    schema: str
    command: tuple[str, ...]
    ranks: tuple[RankEntry, ...]
    stalled_at: str | None = None
