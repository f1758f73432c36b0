"""Build the report's overview views from the evidence: progress, first errors, configuration.

These are facts, not conclusions: where each member of a communicator stopped, which error
each process logged first, and which configuration values differ across processes. The
rules draw conclusions from the same index; the report shows these views next to them so a
reader can check a verdict against the raw picture.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone

from logsleuth.analysis.correlate import clock_offsets, host_of_event
from logsleuth.analysis.index import EvidenceIndex, OpRecord, Proc, Stream
from logsleuth.model.base import Event
from logsleuth.model.diagnosis import (
    CommProgress,
    ConfigEntry,
    ConfigValue,
    Evidence,
    Finding,
    FirstError,
    ProgressGroup,
)
from logsleuth.model.nccl import NcclConnectRun, NcclEnv, NcclErrorTrace, NcclWarn
from logsleuth.model.ranks import format_ranks
from logsleuth.model.torch import (
    ChildFailure,
    GlooError,
    HeartbeatMonitor,
    MonitoredBarrierError,
    PythonTraceback,
    TorchVersion,
    WatchdogError,
    WatchdogTimeout,
)

CONTEXT_LINES = 3
"""Lines before and after an evidence line that its context may cover."""

MESSAGE_LIMIT = 300
"""Characters of a first-error message kept; the evidence line has the whole text."""

SHAPE_CHARS = 120
"""Leading characters (numbers masked) that decide whether two first errors are the same.

Long lines are often cut at different places by excerpts and log collectors; the start of
a message says what happened, the tail mostly repeats sizes and durations.
"""

_ERROR_KINDS: tuple[tuple[type[Event], str], ...] = (
    (NcclWarn, "NCCL WARN"),
    (NcclErrorTrace, "NCCL error"),
    (WatchdogTimeout, "watchdog timeout"),
    (WatchdogError, "watchdog"),
    (HeartbeatMonitor, "watchdog"),
    (MonitoredBarrierError, "barrier"),
    (GlooError, "gloo"),
    (PythonTraceback, "traceback"),
    (ChildFailure, "process failed"),
)
"""Event types that mean something went wrong, with the word the timeline shows."""

_NUMBERS = re.compile(r"0x[0-9a-fA-F]+|\d+")
_YEAR_SECONDS = 86400 * 365

Identity = tuple[str, object]
"""``("r", rank)`` for a process with a known rank, else ``("s", (host, pid))``."""


@dataclass(slots=True)
class _Members:
    """Identities in one group, with the ranks and hosts to show for them."""

    identities: set[Identity] = field(default_factory=set)
    ranks: set[int] = field(default_factory=set)
    hosts: set[str] = field(default_factory=set)
    labels: set[str] = field(default_factory=set)

    def add(self, identity: Identity, rank: int | None, host: str | None, label: str) -> None:
        self.identities.add(identity)
        if rank is not None:
            self.ranks.add(rank)
        else:
            self.labels.add(label)
        if host:
            self.hosts.add(host)

    def ranks_text(self) -> str:
        parts = [format_ranks(self.ranks)] if self.ranks else []
        return ", ".join(parts + sorted(self.labels))


def _label(stream: Stream) -> str:
    if stream[1] is not None:
        return f"{stream[0]} pid {stream[1]}" if stream[0] else f"pid {stream[1]}"
    return stream[0] or "unknown process"


def _identity(index: EvidenceIndex, stream: Stream) -> tuple[Identity, int | None]:
    rank = index.rank_of(*stream)
    return (("r", rank) if rank is not None else ("s", stream)), rank


def last_ops(index: EvidenceIndex) -> dict[str, dict[Stream, OpRecord]]:
    """Return, per communicator and member, the logged collective with the highest opCount.

    The first such record where several share it (as ``max`` picks). The progress view, the
    communicator table and the rank table all ask; worked out once per index.
    """
    cached = index.derived.get("last_ops")
    if isinstance(cached, dict):
        return cached
    found: dict[str, dict[Stream, OpRecord]] = {}
    for key, state in index.comms.items():
        mine = found[key] = {}
        for stream, ops in state.ops.items():
            if ops:
                counts = [r.op_count for r in ops]
                mine[stream] = ops[counts.index(max(counts))]
    index.derived["last_ops"] = found
    return found


def build_progress(index: EvidenceIndex) -> tuple[CommProgress, ...]:
    """Group each communicator's members by the last collective they logged.

    Communicators whose members stopped at different places come first, then by size.
    """
    views: list[CommProgress] = []
    tops = last_ops(index)
    for key, state in index.comms.items():
        streams = set(state.members) | set(state.ops)
        last: dict[Stream, tuple[int, str] | None] = {}
        mine = tops[key]
        for stream in streams:
            top = mine.get(stream)
            last[stream] = None if top is None else (top.op_count, top.op)
        logged = [v[0] for v in last.values() if v is not None]
        if not logged:
            continue
        most = max(logged)
        groups: dict[tuple[int, str] | None, _Members] = defaultdict(_Members)
        for stream, where in last.items():
            identity, rank = _identity(index, stream)
            groups[where].add(identity, rank, stream[0], _label(stream))
        # Ties (one opCount, different collectives: a mismatch) order by name, not by hash.
        ordered = sorted(
            groups.items(),
            key=lambda kv: (kv[0] is None, -(kv[0] or (0, ""))[0], (kv[0] or (0, ""))[1]),
        )
        laggards: set[int] = set()
        out: list[ProgressGroup] = []
        for where, members in ordered:
            behind = None if where is None else most - where[0]
            if behind != 0:
                laggards |= members.ranks
            out.append(
                ProgressGroup(
                    ranks=members.ranks_text(),
                    count=len(members.identities),
                    op_count=None if where is None else where[0],
                    collective="" if where is None else where[1],
                    behind=behind,
                )
            )
        views.append(
            CommProgress(
                id=key,
                nranks=state.nranks,
                members=len(streams),
                groups=tuple(out),
                laggards=format_ranks(laggards),
            )
        )
    views.sort(key=lambda v: (len(v.groups) == 1, -(v.nranks or v.members), v.id))
    return tuple(views)


def _format_time(seconds: float) -> str:
    moment = datetime.fromtimestamp(seconds, tz=timezone.utc)
    # Lines without a year were placed in 1970; a date there would be invented.
    pattern = "%Y-%m-%d %H:%M:%S.%f" if seconds > _YEAR_SECONDS else "%H:%M:%S.%f"
    return moment.strftime(pattern)[:-3]


def _is_error(event: Event) -> bool:
    return not isinstance(event, NcclErrorTrace) or event.code != 0


def _failure_text(event: ChildFailure) -> str:
    # The summary entry's first line is only ``[3]:``; its fields say what happened.
    parts = [f"exitcode {event.exitcode}" if event.exitcode is not None else "failed"]
    if event.signal:
        parts.append(f"signal {event.signal}")
    if event.exc_type:
        parts.append(f"{event.exc_type}: {event.exc_message or ''}".rstrip(": "))
    return ", ".join(parts)


def _message(event: Event) -> str:
    if isinstance(event, NcclWarn):
        text = event.message
    elif isinstance(event, ChildFailure):
        text = _failure_text(event)
    else:
        text = event.text
    text = " ".join(text.split())
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 3] + "..."


def _error_identity(index: EvidenceIndex, event: Event) -> tuple[Identity, int | None]:
    origin = event.origin
    rank = event.rank if isinstance(event, ChildFailure) else None
    if rank is None:
        rank = index.rank_of(origin.host, origin.pid)
    if rank is None and origin.rank is not None:
        rank = origin.rank
    if rank is not None:
        return ("r", rank), rank
    if origin.host is None and origin.pid is None:
        # Nothing says who wrote it: count each file once rather than every line.
        return ("f", event.ref.source), None
    return ("s", (origin.host, origin.pid)), None


def build_timeline(index: EvidenceIndex) -> tuple[FirstError, ...]:
    """Return each process's first error, grouped by kind and message (numbers ignored).

    Groups are ordered by their earliest timestamp on the clock the diagnosis reasons with
    (host clocks shifted by :func:`~logsleuth.analysis.correlate.clock_offsets`), so the
    timeline agrees with "first failure in time"; the times shown are the logged ones.
    Groups without a timestamp follow in input order.
    """
    offsets = clock_offsets(index)
    first: dict[Identity, tuple[tuple[bool, float, int], Event, str, int | None]] = {}
    order = 0
    for event_type, kind in _ERROR_KINDS:
        for event in index.all_of(event_type):
            order += 1
            if not _is_error(event):
                continue
            identity, rank = _error_identity(index, event)
            time = event.origin.time
            if time is not None:
                time -= offsets.get(host_of_event(index, event) or "", 0.0)
            key = (time is None, time or 0.0, order)
            known = first.get(identity)
            if known is None or key < known[0]:
                first[identity] = (key, event, kind, rank)
    groups: dict[tuple[str, str], list[tuple[tuple[bool, float, int], Event, int | None]]] = (
        defaultdict(list)
    )
    for key, event, kind, rank in first.values():
        shape = _NUMBERS.sub("#", _message(event))[:SHAPE_CHARS]
        groups[(kind, shape)].append((key, event, rank))
    entries: list[tuple[tuple[bool, float, int], FirstError]] = []
    for (kind, _shape), members in groups.items():
        members.sort(key=lambda m: m[0])
        earliest = members[0][1]
        times = [m[1].origin.time for m in members if m[1].origin.time is not None]
        ranks = {m[2] for m in members if m[2] is not None}
        hosts = {h for m in members if (h := host_of_event(index, m[1]))}
        entries.append(
            (
                members[0][0],
                FirstError(
                    kind=kind,
                    message=_message(earliest),
                    ranks=format_ranks(ranks),
                    processes=len(members),
                    hosts=tuple(sorted(hosts)),
                    time=_format_time(min(times)) if times else None,
                    last_time=_format_time(max(times)) if len(times) > 1 else None,
                    evidence=Evidence(earliest.ref.source, earliest.ref.line, earliest.text),
                ),
            )
        )
    entries.sort(key=lambda e: (e[0][0], e[0][1], e[1].evidence.source if e[1].evidence else ""))
    return tuple(entry for _, entry in entries)


def _driver(version: int) -> str:
    return f"{version // 1000}.{version % 1000 // 10} ({version})"


def _proc_values(proc: Proc) -> Iterable[tuple[str, str]]:
    if proc.nccl_version:
        yield "NCCL version", proc.nccl_version
    if proc.cuda_driver is not None:
        yield "CUDA driver", _driver(proc.cuda_driver)
    if proc.net_plugin:
        yield "NET plugin", proc.net_plugin
    if proc.network:
        yield "network", proc.network


def build_config(index: EvidenceIndex) -> tuple[ConfigEntry, ...]:
    """Collect versions, network choices and ``NCCL_*`` variables per process and compare them.

    Keys whose value differs across processes come first (a variable set on some ranks only
    counts as a difference where the others logged their variables too); then the keys every
    process agrees on, alphabetically.
    """
    values: dict[str, dict[Identity, str]] = defaultdict(dict)
    who: dict[Identity, tuple[int | None, str | None, str]] = {}
    writers: set[Identity] = set()
    env_writers: set[Identity] = set()
    for stream, proc in index.procs.items():
        identity, rank = _identity(index, stream)
        who.setdefault(identity, (rank, proc.host, _label(stream)))
        if "nccl" in proc.families:
            writers.add(identity)
        for key, value in _proc_values(proc):
            values[key].setdefault(identity, value)
    for event_type in (NcclEnv, TorchVersion):
        for event in index.all_of(event_type):
            stream = (event.origin.host, event.origin.pid)
            if stream not in index.procs:
                continue
            identity, rank = _identity(index, stream)
            who.setdefault(identity, (rank, stream[0], _label(stream)))
            if isinstance(event, NcclEnv):
                values[event.name][identity] = event.value
                env_writers.add(identity)
            elif isinstance(event, TorchVersion):
                values["torch version"].setdefault(identity, event.version)
    entries: list[ConfigEntry] = []
    for key, by_identity in values.items():
        grouped: dict[str, _Members] = defaultdict(_Members)
        for identity, value in by_identity.items():
            grouped[value].add(identity, *who[identity])
        silent = writers - set(by_identity)
        unset = {rank for identity in silent if (rank := who[identity][0]) is not None}
        ordered = sorted(grouped.items(), key=lambda kv: (-len(kv[1].identities), kv[0]))
        # A variable missing from a process that logged other variables was not set there;
        # missing from one that logged none, its log may just be an excerpt.
        differs = len(grouped) > 1 or (key.startswith("NCCL_") and bool(silent & env_writers))
        entries.append(
            ConfigEntry(
                key=key,
                values=tuple(
                    ConfigValue(
                        value=value,
                        ranks=members.ranks_text(),
                        processes=len(members.identities),
                        hosts=tuple(sorted(members.hosts)),
                    )
                    for value, members in ordered
                ),
                unset=format_ranks(unset),
                differs=differs,
            )
        )
    entries.sort(key=lambda e: (not e.differs, e.key))
    return tuple(entries)


def _lines_by_source(
    events: Sequence[Event], sources: set[str]
) -> dict[str, list[tuple[int, str]]]:
    lines: dict[str, dict[int, str]] = defaultdict(dict)
    for event in events:
        ref = event.ref
        if ref.source in sources:
            if isinstance(event, NcclConnectRun):
                for row in event.rows:
                    lines[ref.source].setdefault(row[0], row[-1])
            else:
                lines[ref.source].setdefault(ref.line, event.text)
    return {source: sorted(found.items()) for source, found in lines.items()}


def _with_context(evidence: Evidence, lines: list[tuple[int, str]]) -> Evidence:
    numbers = [n for n, _ in lines]
    lo = bisect_left(numbers, evidence.line - CONTEXT_LINES)
    hi = bisect_right(numbers, evidence.line + CONTEXT_LINES)
    context = tuple((n, text) for n, text in lines[lo:hi] if n != evidence.line)
    return replace(evidence, context=context)


def with_context(findings: Sequence[Finding], events: Sequence[Event]) -> tuple[Finding, ...]:
    """Attach to every evidence line the kept lines within :data:`CONTEXT_LINES` of it."""
    sources = {e.source for f in findings for e in f.evidence}
    if not sources:
        return tuple(findings)
    lines = _lines_by_source(events, sources)
    empty: list[tuple[int, str]] = []
    return tuple(
        replace(f, evidence=tuple(_with_context(e, lines.get(e.source, empty)) for e in f.evidence))
        for f in findings
    )
