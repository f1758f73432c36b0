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
    outcome: str | None = None
    """``finished`` (the job ended by itself), ``stalled``, ``interrupted``, ``running``
    (logsleuth did not get to the end) or ``orphaned`` (logsleuth died; its supervisor ended
    the job); None in bundles written before it was recorded."""
    exit_status: int | None = None
    """The job's (launcher's) exit status, when it exited."""
    exit_signal: str | None = None
    """The signal that ended the job's launcher (``SIGSEGV`` ...), when one did."""
    ended_by: str | None = None
    """Who ended the job: ``job`` (it exited by itself), ``logsleuth`` or ``supervisor``."""

    @property
    def failed_by_itself(self) -> bool:
        """Return True when the job ended on its own with a non-zero status or a signal."""
        return self.ended_by == "job" and (
            self.exit_signal is not None or (self.exit_status or 0) != 0
        )
