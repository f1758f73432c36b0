"""Wording and grouping that the text and HTML reports share, so they tell the same story."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from operator import is_not
from typing import cast

from logsleuth.model.diagnosis import (
    SEVERITIES,
    CommProgress,
    ConfigEntry,
    Diagnosis,
    Finding,
    FirstError,
    ProgressGroup,
    RankView,
)
from logsleuth.model.ranks import LISTED_RANKS, absent_ranks, format_ranks, parse_ranks
from logsleuth.report.section_help import SECTION_HELP as SECTION_HELP  # the reports' help

LIST_LIMIT = 6
"""How many hosts or pids a one-line summary names before it says ``+N more``."""

_CONTROL_CHARS = (
    *(c for c in range(0x20) if c not in (0x09, 0x0A)),
    0x7F,
    *range(0x80, 0xA0),
    # Bidirectional overrides can make a quoted line read differently from its bytes.
    *range(0x202A, 0x202F),
    *range(0x2066, 0x206A),
)
_VISIBLE_CONTROLS = {c: f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}" for c in _CONTROL_CHARS}


def _scrub(value: object) -> object:
    """Return ``value`` with control characters escaped in every string inside it.

    A value with nothing to escape is returned as it is, not rebuilt: at 4,096 ranks a
    diagnosis holds over a million strings, numbers, tuples and records, nearly all clean.
    """
    kind = type(value)
    if kind in _PLAIN:
        return value
    if isinstance(value, str):
        if kind is str and value.isascii() and value.isprintable():
            return value
        return value.translate(_VISIBLE_CONTROLS)
    if isinstance(value, tuple):
        # Numbers inline: rings and rank lists are long tuples of them.
        scrubbed = tuple([x if type(x) in _PLAIN else _scrub(x) for x in value])
        if kind is tuple and not any(map(is_not, scrubbed, value)):
            return value
        return scrubbed
    names = _FIELD_NAMES.get(kind)
    if names is None:
        if kind in _OTHER or not dataclasses.is_dataclass(value) or isinstance(value, type):
            _OTHER.add(kind)
            return value
        names = _FIELD_NAMES[kind] = tuple(f.name for f in dataclasses.fields(value))
    changes = {}
    for name in names:
        old = getattr(value, name)
        new = _scrub(old)
        if new is not old:
            changes[name] = new
    return dataclasses.replace(value, **changes) if changes else value  # type: ignore[type-var]


_PLAIN = frozenset({int, float, bool, type(None)})
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}
"""The field names of each dataclass :func:`_scrub` met (``dataclasses.fields`` is slow)."""
_OTHER: set[type] = set()
"""Types :func:`_scrub` met that are neither strings, tuples nor dataclass records."""


def scrub_controls(d: Diagnosis) -> Diagnosis:
    """Return ``d`` with control characters in every string shown as ``\\xNN`` escapes.

    Quoted log lines reach a terminal or a page verbatim; an escape sequence in a log must
    not recolour, retitle or rewrite the reader's terminal, and must stay visible as evidence.
    """
    return cast(Diagnosis, _scrub(d))


RANK_SET_CHARS = 40
"""The longest rank list written out in a line; longer ones are summarized, STAT-style."""


def rank_set(ranks: Iterable[int] | str, world: int | None = None) -> tuple[str, str]:
    """Describe a set of ranks as STAT does, and return the full list when it is cut.

    ``4,093 of 4,096 ranks (all but 12,1365,2047)``, ``all 4,096 ranks``, ``ranks 0-3,5``;
    a list too long for a line gives ``1,200 ranks (0-7,9,11,...)``. Returns (short, full),
    with ``full`` empty when ``short`` already names every rank.
    """
    if isinstance(ranks, str):
        try:
            values = sorted(set(parse_ranks(ranks)))
        except ValueError:
            return ranks, ""  # processes named otherwise than by rank (``host pid 7``)
    else:
        values = sorted(set(ranks))
    if not values:
        return "", ""
    n = len(values)
    full = format_ranks(values)
    inside = world is not None and world > 0 and values[-1] < world and values[0] >= 0
    if inside and world is not None and n == world:
        return (f"all {world:,} ranks" if world > 1 else "rank 0"), ""
    # "all but" reads best when few are missing, or when the list itself is too long.
    few_missing = world is not None and (world - n) * 8 <= world
    if (
        inside
        and world is not None
        and n * 2 > world
        and n > 1
        and (few_missing or len(full) > RANK_SET_CHARS)
    ):
        missing = format_ranks(set(range(world)) - set(values))
        if len(missing) <= RANK_SET_CHARS:
            cut = full if len(full) > RANK_SET_CHARS else ""
            return f"{n:,} of {world:,} ranks (all but {missing})", cut
    if len(full) <= RANK_SET_CHARS:
        return f"{plural(n, 'rank')} {full}", ""
    head = full[:RANK_SET_CHARS].rsplit(",", 1)[0]
    return f"{n:,} ranks ({head},...)", full


def format_confidence(value: float) -> str:
    """Format a confidence as the two decimals the JSON carries."""
    return f"{value:.2f}"


def confidence_word(value: float) -> str:
    """Say how sure a confidence is in a word: ``high``, ``medium`` or ``low``."""
    if value >= 0.8:
        return "high"
    if value >= 0.5:
        return "medium"
    return "low"


def severity_rank(severity: str) -> int:
    """Return the position of ``severity`` in :data:`SEVERITIES` (-1 when unknown)."""
    return SEVERITIES.index(severity) if severity in SEVERITIES else -1


def primary_finding(d: Diagnosis) -> Finding | None:
    """Return the finding the verdict restates, or ``None`` for a verdict without one.

    The verdict names its rule by code; the kind disambiguates a rule that fired twice.
    """
    if d.verdict.code is None:
        return None
    for finding in d.findings:
        if finding.code == d.verdict.code and finding.kind == d.verdict.kind:
            return finding
    for finding in d.findings:
        if finding.code == d.verdict.code:
            return finding
    return None


def group_findings(findings: Iterable[Finding]) -> list[tuple[str, list[Finding]]]:
    """Group findings by kind, the most severe group first, ties in order of appearance."""
    groups: dict[str, list[Finding]] = {}
    for finding in findings:
        groups.setdefault(finding.kind, []).append(finding)
    order = {kind: i for i, kind in enumerate(groups)}
    return sorted(
        groups.items(),
        key=lambda item: (-max(severity_rank(f.severity) for f in item[1]), order[item[0]]),
    )


def name_list(values: Sequence[object], limit: int = LIST_LIMIT) -> str:
    """Join values with commas, naming at most ``limit`` of them."""
    shown = ", ".join(str(v) for v in values[:limit])
    extra = len(values) - limit
    return f"{shown} +{extra} more" if extra > 0 else shown


def plural(count: int, noun: str, many: str | None = None) -> str:
    """Return ``noun`` for one, else ``many`` (default: ``noun`` with an ``s``)."""
    if count == 1:
        return noun
    return many if many is not None else f"{noun}s"


def who(
    ranks: Sequence[int], hosts: Sequence[str], pids: Sequence[int], world: int | None = None
) -> str:
    """Describe processes compactly: ``rank 5 on node-b (pid 4105)``, ``ranks 0-4,6-7 on 2 hosts``.

    Returns an empty string when nothing is known.
    """
    parts: list[str] = []
    unique_ranks = sorted(set(ranks))
    unique_hosts = sorted(set(hosts))
    unique_pids = sorted(set(pids))
    if unique_ranks:
        parts.append(rank_set(unique_ranks, world)[0])
    if unique_hosts:
        if len(unique_hosts) > LIST_LIMIT:
            parts.append(f"on {len(unique_hosts)} hosts")
        else:
            parts.append(f"on {', '.join(unique_hosts)}")
    # Pids only help when there are few of them; a rank range already says more.
    if unique_pids and len(unique_pids) <= LIST_LIMIT:
        parts.append(f"({plural(len(unique_pids), 'pid')} {', '.join(map(str, unique_pids))})")
    return " ".join(parts)


def culprit_parts(d: Diagnosis) -> list[tuple[str, str]]:
    """Return the verdict's culprits as (label, value) pairs: rank, host, pid."""
    v = d.verdict
    parts: list[tuple[str, str]] = []
    ranks = sorted(set(v.culprit_ranks))
    hosts = sorted(set(v.culprit_hosts))
    pids = sorted(set(v.culprit_pids))
    if ranks:
        parts.append((plural(len(ranks), "rank"), format_ranks(ranks)))
    if hosts:
        parts.append((plural(len(hosts), "host"), name_list(hosts)))
    if pids:
        parts.append((plural(len(pids), "pid"), name_list(pids)))
    return parts


def culprit_views(d: Diagnosis) -> list[RankView]:
    """Return the processes the verdict blames: by rank, else by pid (on the named hosts)."""
    v = d.verdict
    ranks, hosts, pids = set(v.culprit_ranks), set(v.culprit_hosts), set(v.culprit_pids)
    if ranks:
        return [r for r in d.ranks if r.rank in ranks]
    # Without a known rank, a pid is only unique together with its host.
    return [r for r in d.ranks if r.pid in pids and (not hosts or r.host in hosts)]


def evidence_note(finding: Finding) -> str:
    """Say how many supporting lines were cut, or nothing when all are shown."""
    total = max(finding.evidence_total, len(finding.evidence))
    if total > len(finding.evidence):
        return f"showing {len(finding.evidence)} of {total} supporting lines"
    return ""


def job_summary(d: Diagnosis) -> str:
    """Summarize the job in one line: world size, hosts, versions, launcher."""
    job = d.job
    parts: list[str] = []
    if job.world_size is not None:
        parts.append(f"{job.world_size} {plural(job.world_size, 'rank')}")
    if job.hosts:
        hosts = sorted(set(job.hosts))
        parts.append(f"{len(hosts)} {plural(len(hosts), 'host')} ({name_list(hosts)})")
    if job.nccl_versions:
        versions = sorted({version for version, _, _ in job.nccl_versions})
        parts.append(f"NCCL {', '.join(versions)}")
    if job.torch_version:
        parts.append(f"torch {job.torch_version}")
    if job.launcher:
        parts.append(f"launched by {job.launcher}")
    return "; ".join(parts)


def nccl_version_rows(d: Diagnosis) -> list[tuple[str, str, str]]:
    """Return (version, rank range, hosts) per NCCL version, for a mismatch at a glance."""
    return [
        (version, format_ranks(ranks), name_list(sorted(set(hosts))))
        for version, ranks, hosts in sorted(d.job.nccl_versions)
    ]


def last_ops(groups: Iterable[tuple[str, int, str]]) -> str:
    """Describe a communicator's progress groups: ``0-4,6-7 at AllReduce #412 (0x19c)``.

    NCCL logs opCount in hex, so the hex form is shown too for searching the logs.
    """
    parts = []
    for ranks, op_count, collective in groups:
        name = f"{collective} " if collective else ""
        parts.append(f"{ranks} at {name}#{op_count} ({op_count:#x})")
    return "; ".join(parts)


def transports(pairs: Iterable[tuple[str, int]]) -> str:
    """Describe transports with their connection counts: ``NET/IB 16, P2P/IPC 24``."""
    return ", ".join(f"{name} {count}" for name, count in sorted(pairs))


def time_range(d: Diagnosis) -> str:
    """Describe the time span the logs cover, or an empty string."""
    if d.job.time_range is None:
        return ""
    start, end = d.job.time_range
    return start if start == end else f"{start} to {end}"


def overview_rows(d: Diagnosis) -> list[tuple[str, str]]:
    """Return the job overview as (label, value) rows, only for what is known."""
    job = d.job
    ranks = sorted({r.rank for r in d.ranks if r.rank is not None})
    rows: list[tuple[str, str]] = []
    if job.world_size is not None:
        rows.append(("world size", f"{job.world_size} {plural(job.world_size, 'rank')}"))
    seen = rank_set(ranks, job.world_size)[0] if ranks else "none"
    rows.append(("ranks with evidence", seen))
    if job.host_aliases:
        rows.append(
            (
                "hosts also named",
                "; ".join(f"{host} is {', '.join(names)}" for host, names in job.host_aliases),
            )
        )
    if job.world_size:
        count = job.world_size - len([r for r in ranks if 0 <= r < job.world_size])
        missing = absent_ranks(job.world_size, ranks, LISTED_RANKS)
        if count and ranks:
            listed = format_ranks(missing) if missing is not None else "too many to list"
            rows.append(("ranks without evidence", f"{count} ({listed})"))
    unranked = sum(1 for r in d.ranks if r.rank is None)
    if unranked:
        rows.append(("processes without a known rank", str(unranked)))
    hosts = sorted(set(job.hosts))
    if hosts:
        per_host: dict[str, int] = {}
        for r in d.ranks:
            if r.host:
                per_host[r.host] = per_host.get(r.host, 0) + 1
        counts = sorted(set(per_host.values()))
        spread = f"; {name_list(counts)} processes per host" if counts else ""
        rows.append(("hosts", f"{len(hosts)} ({name_list(hosts)}){spread}"))
    for version, ranks_text, host_text in nccl_version_rows(d):
        rows.append(("NCCL", f"{version} (ranks {ranks_text or '?'} on {host_text or '?'})"))
    for entry in d.config:
        if entry.key in ("CUDA driver", "network", "NET plugin"):
            rows.append((entry.key, ", ".join(v.value for v in entry.values)))
    if job.torch_version:
        rows.append(("torch", job.torch_version))
    if job.launcher:
        rows.append(("launcher", job.launcher))
    span = time_range(d)
    if span:
        rows.append(("time range", span))
    rows.append(("communicators", str(len(d.communicators))))
    lines = sum(i.lines for i in d.inputs)
    rows.append(("inputs", f"{len(d.inputs)} {plural(len(d.inputs), 'file')}, {lines:,} lines"))
    return rows


def group_position(g: ProgressGroup) -> str:
    """Say where a progress group stopped: ``AllReduce #412 (0x19c)`` or ``no collective``."""
    if g.op_count is None:
        return "no collective logged"
    name = f"{g.collective} " if g.collective else ""
    return f"{name}#{g.op_count} ({g.op_count:#x})"


def group_lag(g: ProgressGroup) -> str:
    """Say how far a group is behind the most advanced one."""
    if g.behind is None:
        return "-"
    return "most advanced" if g.behind == 0 else f"{g.behind} behind"


def progress_summary(p: CommProgress) -> str:
    """Describe one communicator's progress in a line."""
    size = p.nranks if p.nranks is not None else p.members
    if len(p.groups) == 1:
        return f"comm {p.id} ({size} ranks): all at {group_position(p.groups[0])}"
    return f"comm {p.id} ({size} ranks): laggards {p.laggards or '(no rank known)'}"


def split_progress(d: Diagnosis) -> tuple[list[CommProgress], list[CommProgress]]:
    """Split communicators into those with laggards and those whose members agree."""
    uneven = [p for p in d.progress if len(p.groups) > 1]
    even = [p for p in d.progress if len(p.groups) <= 1]
    return uneven, even


def first_error_who(e: FirstError) -> str:
    """Describe the processes of a timeline entry: ``ranks 0-6 (7 processes) on 2 hosts``."""
    parts = []
    if e.ranks:
        parts.append(rank_set(e.ranks)[0])
    if e.processes > 1 or not e.ranks:
        parts.append(f"({e.processes} {plural(e.processes, 'process', 'processes')})")
    if e.hosts:
        hosts = sorted(set(e.hosts))
        parts.append(
            f"on {name_list(hosts)}" if len(hosts) <= LIST_LIMIT else f"on {len(hosts)} hosts"
        )
    return " ".join(parts)


def config_value_who(entry: ConfigEntry, index: int) -> str:
    """Describe who had the ``index``-th value of a configuration key."""
    value = entry.values[index]
    who_text = rank_set(value.ranks)[0] if value.ranks else f"{value.processes} processes"
    hosts = sorted(set(value.hosts))
    if hosts:
        who_text += f" on {name_list(hosts) if len(hosts) <= LIST_LIMIT else f'{len(hosts)} hosts'}"
    return who_text


def culprit_details(d: Diagnosis) -> list[tuple[str, str]]:
    """Return GPU, last collective and stack state of the verdict's culprits, when few and known."""
    views = culprit_views(d)
    if not views or len(views) > LIST_LIMIT:
        return []
    facts: list[tuple[str, str]] = []
    gpus = []
    for r in views:
        devices = ",".join(map(str, r.devices))
        bus = ",".join(r.bus_ids)
        if devices or bus:
            gpus.append(" ".join(x for x in (f"cudaDev {devices}" if devices else "", bus) if x))
    if gpus:
        facts.append((plural(len(gpus), "GPU"), "; ".join(gpus)))
    collectives = sorted({r.last_collective for r in views if r.last_collective})
    if collectives:
        facts.append(("last collective", "; ".join(collectives)))
    states = sorted({r.state for r in views if r.state})
    if states:
        facts.append(("stack", "; ".join(states)))
    return facts
