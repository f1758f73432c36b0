"""Two names for one machine: the host a collector's prefix names and NCCL's own hostname.

``docker compose logs`` names a container by its service (``trainer-1  | ``), ``kubectl logs
--prefix`` by its pod, Ray by its worker's IP; the NCCL lines behind that prefix name the
machine as ``gethostname()`` returns it (``a1b2c3d4e5f6:212:212 [0] NCCL INFO ...``). A line
that carries both says they are one machine. Each input records the pairs it saw; across
all inputs, a collector's name paired with exactly one NCCL hostname (and that hostname with
no other collector's name) is renamed to the NCCL hostname, the name NCCL's peers, its other
files and its addresses use. The lines a process printed outside NCCL (a traceback, a closing
summary, in that input or another the same collector prefixed) and its NCCL lines then name
one host.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from contextvars import ContextVar
from dataclasses import replace

from logsleuth.model.base import Event

ALIASES: ContextVar[dict[str, set[str]] | None] = ContextVar("ALIASES", default=None)
"""Per input read: collector host -> the NCCL hostnames on the lines it prefixed."""


def note_alias(collector: str, own: str) -> None:
    """Record that a line prefixed as ``collector``'s names its writer's host ``own``."""
    aliases = ALIASES.get()
    # A section label standing in for a host (``Rank A``) is no machine's name.
    if aliases is not None and " " not in collector:
        aliases.setdefault(collector, set()).add(own)


def renames(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The collector names that stand for exactly one NCCL hostname, and it for them only."""
    aliases: dict[str, set[str]] = defaultdict(set)
    for collector, own in pairs:
        aliases[collector].add(own)
    claimed: dict[str, int] = defaultdict(int)
    for owns in aliases.values():
        for own in owns:
            claimed[own] += 1
    return {
        collector: own
        for collector, owns in aliases.items()
        if len(owns) == 1 and claimed[(own := next(iter(owns)))] == 1
    }


def by_host(names: dict[str, str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``names`` (collector name -> hostname) as (hostname, its collector names), sorted."""
    aliases: dict[str, set[str]] = defaultdict(set)
    for collector, own in names.items():
        aliases[own].add(collector)
    return tuple((host, tuple(sorted(n))) for host, n in sorted(aliases.items()))


def one_name(events: tuple[Event, ...], names: dict[str, str]) -> tuple[Event, ...]:
    """``events`` with every origin host in ``names`` renamed."""
    if not names:
        return events
    return tuple(
        replace(e, origin=replace(e.origin, host=names[e.origin.host]))
        if e.origin.host in names
        else e
        for e in events
    )
