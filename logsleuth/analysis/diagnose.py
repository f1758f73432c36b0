"""From all the evidence to one verdict: run the rules, rank the findings, build the views."""

from __future__ import annotations

import contextlib
import gc
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import replace
from datetime import datetime, timezone

from logsleuth.analysis.attempts import with_restarts
from logsleuth.analysis.flight import failed_call_sites
from logsleuth.analysis.index import EvidenceIndex, Proc, Stream, build_index
from logsleuth.analysis.overview import (
    build_config,
    build_progress,
    build_timeline,
    last_ops,
    with_context,
)
from logsleuth.analysis.p2p import p2p_view
from logsleuth.analysis.rules.base import evidence_of
from logsleuth.analysis.rules.registry import RULES
from logsleuth.analysis.rules.stacks import proc_stacks, stack_classes
from logsleuth.analysis.stacks import build_class_tree, find_outliers
from logsleuth.analysis.topology import build_topology_views
from logsleuth.analysis.waitfor import wait_for
from logsleuth.model.base import Event, InputSummary
from logsleuth.model.diagnosis import (
    SEVERITIES,
    CommunicatorView,
    Diagnosis,
    Finding,
    InputView,
    JobView,
    RankView,
    Verdict,
)
from logsleuth.model.ranks import LISTED_RANKS, absent_ranks, format_ranks, name_ranks
from logsleuth.model.torch import LauncherEvent, TorchVersion

PRECEDENCE = (
    "duplicate-gpu",
    "resource-exhausted",
    "cuda-error",
    "config-mismatch",
    "bootstrap-failure",
    "concurrent-use",
    "collective-mismatch",
    "process-died",
    "non-collective-stall",
    "missing-collective",
    "init-stall",
    "network-error",
    "watchdog-stuck",
    "transport-mismatch",
    "transport-degraded",
    "collective-timeout",
    "inconclusive",
)
"""Root causes before their symptoms: when two findings are equally severe, the earlier
kind explains the later (mismatched versions break bootstrap; a dead rank makes peers
time out; a stalled rank makes a collective time out; threads that race on one
communicator make the ranks' collectives mismatch)."""


_POSITION_KINDS = frozenset(
    {
        "missing-collective",
        "collective-mismatch",
        "collective-timeout",
        "non-collective-stall",
        "init-stall",
        "watchdog-stuck",
        "concurrent-use",
    }
)
"""Verdict kinds that say where each rank is, so that ranks without evidence weaken them."""


def _rank_key(finding: Finding) -> tuple[int, int, float, int, str, str]:
    return (
        -SEVERITIES.index(finding.severity),
        PRECEDENCE.index(finding.kind) if finding.kind in PRECEDENCE else len(PRECEDENCE),
        -finding.confidence,
        # Of two equally sure findings, the one that names who is to blame says more: a
        # process (its rank or pid) more than a host, a host more than nobody.
        0 if finding.ranks or finding.pids else 1 if finding.hosts else 2,
        finding.code,
        finding.title,
    )


_DIED_OF = frozenset({"network-error", "transport-mismatch"})
"""Kinds that rank after ``process-died`` (a dead peer makes the others' links fail), but that
are what a rank died of when it printed one of its own before it died."""


def _own_error_first(
    index: EvidenceIndex, findings: list[Finding], events: Sequence[Event]
) -> list[Finding]:
    """Lead with the error a dead or absent rank printed itself, not with what it caused.

    When the lead says ranks R died, or never entered the collective the others timed out
    in, and an equally severe finding is a network error of exactly R (UCX's ``Transport
    retry count exceeded`` on rank 5, then ``mpirun noticed that process rank 5 ... exited
    on signal 6``; rank 13's watchdog ending on an IB completion error while the others
    wait for it), the error is why R died or never came: it leads, and the death or the
    others' wait corroborates it. A network error is R's when it blames R, or when R wrote
    every line of it (an error that points at R's peer).
    """
    if not findings or findings[0].kind not in _ABSENCES or not findings[0].ranks:
        return findings
    death = findings[0]
    at: dict[tuple[str, int], Event] | None = None
    own = None
    for f in findings[1:]:
        if f.kind not in _DIED_OF or f.severity != death.severity:
            continue
        if f.ranks == death.ranks:
            own = f
            break
        if f.ranks or not f.evidence:
            continue
        # Only the evidence lines' writers are looked up, not every event's.
        at = at if at is not None else {(e.ref.source, e.ref.line): e for e in events}
        lines = [at.get((e.source, e.line)) for e in f.evidence]
        if {index.writer_rank(e) if e is not None else None for e in lines} == set(death.ranks):
            own = f
            break
    if own is None:
        return findings
    # The wait ends at R: an error that points at R's peer keeps that peer in its text only.
    hosts = (own.hosts or death.hosts) if own.ranks else death.hosts
    pids = own.pids or death.pids
    if death.kind == "process-died":
        lead = _with_death(
            own,
            death,
            f"The rank then died of it: {death.title.rstrip('.')}.",
            ranks=death.ranks,
            hosts=hosts,
            pids=pids,
        )
    else:
        # The others' wait corroborates the error (``_corroborate`` quotes it).
        said = (
            ""
            if own.ranks
            else f" Rank(s) {format_ranks(death.ranks)} wrote it and never joined the "
            "collective the others wait in: their wait ends there."
        )
        lead = replace(own, detail=own.detail + said, ranks=death.ranks, hosts=hosts, pids=pids)
    return [lead, *(f for f in findings if f is not own)]


_ABSENCES = frozenset({"process-died", "missing-collective"})
"""Lead kinds that say ranks R are gone from the collective (dead, or never entered it)."""


def _with_death(
    cause: Finding,
    death: Finding,
    said: str,
    *,
    ranks: tuple[int, ...],
    hosts: tuple[str, ...],
    pids: tuple[int, ...],
) -> Finding:
    """``cause`` as the reason for ``death``: ``said`` added to its detail, the death's first
    evidence lines after its own, and the culprits given."""
    return replace(
        cause,
        detail=f"{cause.detail} {said}",
        evidence=cause.evidence + tuple(e for e in death.evidence[:2] if e not in cause.evidence),
        ranks=ranks,
        hosts=hosts,
        pids=pids,
    )


_OWNERLESS_CAUSES = frozenset({"cuda-error", "resource-exhausted", "network-error"})
"""Kinds of a cause a process suffers itself: an error of one of them that no line ties to
a process is the one dead rank's when the evidence shows exactly one."""


def _ownerless_cause_of_death(index: EvidenceIndex, findings: list[Finding]) -> list[Finding]:
    """Give an error that names no process to the one rank that died.

    An excerpt often holds the error without its writer's prefix (torchelastic's
    ``error.json``, a pasted traceback) next to the launcher's account of the one worker that
    failed (``Root Cause (first observed failure): rank 5``). The error is what that rank died
    of: the lead names the rank and says the link is inferred. With several workers that
    failed of their own, or none, nothing is joined.
    """
    if not findings:
        return findings
    lead = findings[0]
    if lead.kind not in _OWNERLESS_CAUSES or lead.ranks or lead.hosts or lead.pids:
        return findings
    deaths = [f for f in findings[1:] if f.kind == "process-died" and len(f.ranks) == 1]
    failed = {f.rank for f in index.failures if f.exitcode not in (None, 0)}
    if not deaths or len(failed | set(deaths[0].ranks)) != 1:
        return findings
    death = deaths[0]
    joined = _with_death(
        lead,
        death,
        f"No line ties this error to a process; the one rank that died, "
        f"{death.title.rstrip('.')}, is taken as its writer.",
        ranks=death.ranks,
        hosts=death.hosts,
        pids=death.pids,
    )
    return [joined, *findings[1:]]


def _coverage(index: EvidenceIndex) -> float:
    """Share of the world's ranks we have any evidence from (1.0 when unknown)."""
    if not index.world_size:
        return 1.0
    known = {p.rank for p in index.procs.values() if p.rank is not None}
    return min(1.0, len(known) / index.world_size) if known else 1.0


def _merge(findings: Sequence[Finding]) -> list[Finding]:
    """Collapse findings that say the same thing (same kind and culprits) from different evidence.

    The strongest one is kept; the others' evidence is appended (up to the usual limit) and
    their count recorded, so one conclusion reached twice reads as one, better supported.
    """
    groups: dict[tuple[str, tuple[int, ...], tuple[str, ...], tuple[int, ...]], list[Finding]] = {}
    for finding in findings:
        key = (finding.kind, finding.ranks, finding.hosts, finding.pids)
        groups.setdefault(key, []).append(finding)
    merged: list[Finding] = []
    for group in groups.values():
        group.sort(key=lambda f: (-f.confidence, f.code, f.title))
        best = group[0]
        if len(group) > 1 and best.ranks + best.hosts + best.pids:
            extra = [e for f in group[1:] for e in f.evidence if e not in best.evidence]
            evidence = (best.evidence + tuple(extra))[: max(len(best.evidence), 12)]
            also = "; ".join(f.title for f in group[1:])
            best = replace(
                best,
                detail=f"{best.detail} Also seen as: {also}.",
                evidence=evidence,
                evidence_total=sum(f.evidence_total for f in group),
                confidence=round(min(0.98, best.confidence + 0.05 * (len(group) - 1)), 2),
            )
            merged.append(best)
        else:
            merged.extend(group)
    return merged


_STALL_KINDS = frozenset(
    {
        "missing-collective",
        "collective-timeout",
        "collective-mismatch",
        "watchdog-stuck",
        "process-died",
        "non-collective-stall",
    }
)
"""Kinds of a failure that left ranks in a collective, whose call site says which one."""


def _with_failed_call_sites(index: EvidenceIndex, findings: list[Finding]) -> list[Finding]:
    """Say where the ranks enqueued the collective that failed, where torch printed it.

    torch 2.6+ follows a watchdog timeout with the flight recorder's stack of the failed
    collective (``#2 gather_metrics from /workspace/eval.py:57``); its innermost frame of
    user code is the call site the reader needs, quoted in each finding about a stalled
    collective.
    """
    sites = failed_call_sites(index)
    if not sites:
        return findings
    distinct: dict[tuple[str, str], list[int]] = {}
    for site in sites:
        ranks = distinct.setdefault((site.collective, site.site), [])
        if site.rank is not None:
            ranks.append(site.rank)
    said = "; ".join(
        f"{name_ranks(ranks) if ranks else 'a rank'} enqueued {collective} at {where}"
        for (collective, where), ranks in list(distinct.items())[:3]
    )
    sentence = f" The flight recorder's stack of the failed collective: {said}."
    quoted = evidence_of(s.event for s in sites[:2])[0]
    out = []
    for f in findings:
        if f.kind in _STALL_KINDS and sentence not in f.detail:
            f = replace(
                f,
                detail=f.detail + sentence,
                evidence=f.evidence + tuple(q for q in quoted if q not in f.evidence),
            )
        out.append(f)
    return out


def _corroborate(findings: list[Finding]) -> list[Finding]:
    """Attach to the primary finding the evidence of findings that point at the same culprit.

    A rank stuck in its DataLoader (stacks) also shows as the rank whose COLL lines stop one
    collective early (NCCL) and as the rank whose watchdog did not fire (torch): the
    primary quotes all three, and the symptoms stay listed as findings of their own.
    """
    serious = [f for f in findings if f.severity in ("error", "critical")]
    if not serious or not serious[0].ranks:
        return findings
    top = serious[0]
    support = [
        f
        for f in findings[1:]
        if f is not top and f.ranks == top.ranks and f.kind in _SYMPTOM_KINDS
    ]
    if not support:
        return findings
    extra = [e for f in support for e in f.evidence[:2] if e not in top.evidence]
    boosted = replace(
        top,
        detail=top.detail + " Corroborated by: " + "; ".join(f.title for f in support) + ".",
        evidence=top.evidence + tuple(extra[:6]),
        evidence_total=top.evidence_total + sum(f.evidence_total for f in support),
        confidence=round(min(0.98, top.confidence + 0.03 * len(support)), 2),
    )
    return [boosted if f is top else f for f in findings]


_SYMPTOM_KINDS = frozenset({"missing-collective", "collective-timeout", "init-stall"})


def _truncated_ranks(index: EvidenceIndex) -> set[int]:
    """Ranks whose stack dump was cut short (the evidence about where they are is partial)."""
    ranks: set[int] = set()
    for dump in index.dumps:
        if dump.truncated:
            rank = dump.origin.rank
            if rank is None:
                rank = index.rank_of(dump.origin.host, dump.pid or dump.origin.pid)
            if rank is not None:
                ranks.add(rank)
    return ranks


_SYMPTOMS = frozenset({"LS702"})
"""Rules that report what a victim saw: at warning severity they explain no LS002."""


def _lead(
    findings: list[Finding], coverage: float, truncated: set[int]
) -> tuple[list[Finding], bool]:
    """Put the finding the verdict restates first, with the confidence the verdict states.

    That is the most serious finding; when it is only LS002 (nothing failed, nothing proves
    health), a degradation that was seen is the better answer and leads instead. Its
    confidence is lowered for ranks without any evidence (coverage), for a rival finding as
    severe and nearly as sure that blames other ranks (ambiguity), and for a culprit whose
    stack dump is truncated; the verdict and the finding then state the same figure.
    Returns the findings and whether one leads (False: nothing serious, the run is healthy).
    """
    serious = [f for f in findings if f.severity in ("error", "critical")]
    if not serious:
        return findings, False
    top = serious[0]
    confidence = top.confidence
    if top.code == "LS002":
        # A victim's warning (the store's host gone, as at the end of a run) is no answer.
        degraded = [
            f
            for f in findings
            if f.severity == "warning" and f.kind != "inconclusive" and f.code not in _SYMPTOMS
        ]
        if degraded:
            top = degraded[0]
            confidence = top.confidence * 0.8
    # A claim about where every rank is (a hang's kinds) is weaker for each rank without
    # evidence; a failure a process printed about itself is not.
    factor = 0.7 + 0.3 * coverage if top.kind in _POSITION_KINDS else 1.0
    rivals = [
        f
        for f in serious
        if f is not top
        and f.severity == top.severity
        and f.ranks
        and top.ranks
        and not set(f.ranks) & set(top.ranks)
        and f.confidence >= top.confidence - 0.1
    ]
    if rivals:
        factor *= 0.8
    if truncated & set(top.ranks):
        factor *= 0.85
    lead = replace(top, confidence=round(confidence * factor, 2))
    return [lead, *(f for f in findings if f is not top)], True


def _verdict(findings: Sequence[Finding], led: bool) -> Verdict:
    """Restate the lead finding (see :func:`_lead`) for the first line of every report."""
    if not led:
        return Verdict(
            kind="healthy",
            summary="No failure or hang was found, and the evidence shows the run ended "
            "normally or was progressing.",
            confidence=0.6,
        )
    top = findings[0]
    return Verdict(
        kind=top.kind,
        summary=top.title,
        culprit_ranks=top.ranks,
        culprit_hosts=top.hosts,
        culprit_pids=top.pids,
        confidence=top.confidence,
        code=top.code,
    )


FIRST_ERROR_CHARS = 160
"""Characters of a rank's first error kept in its row; a longer message ends in an ellipsis."""


def _cut(message: str) -> str:
    if len(message) <= FIRST_ERROR_CHARS:
        return message
    return message[: FIRST_ERROR_CHARS - 1].rstrip() + "\u2026"


def _fmt_time(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _job(index: EvidenceIndex, events: Sequence[Event]) -> JobView:
    hosts = sorted({p.host for p in index.procs.values() if p.host})
    versions: dict[str, tuple[set[int], set[str]]] = defaultdict(lambda: (set(), set()))
    for proc in index.procs.values():
        if proc.nccl_version:
            ranks, vhosts = versions[proc.nccl_version]
            if proc.rank is not None:
                ranks.add(proc.rank)
            if proc.host:
                vhosts.add(proc.host)
    torch_versions = sorted({e.version for e in index.all_of(TorchVersion)})
    launcher = None
    if index.failures or len(index.all_of(LauncherEvent)) > 0:
        launcher = "torchrun"
    elif index.manifests:
        launcher = "logsleuth live"
    times = [
        e.origin.time for e in events if e.origin.time is not None and e.origin.time > 86400 * 365
    ]
    known = [p.rank for p in index.procs.values() if p.rank is not None]
    world = index.world_size or (max(known) + 1 if known else None)
    return JobView(
        world_size=world,
        hosts=tuple(hosts),
        nccl_versions=tuple(
            (v, tuple(sorted(r)), tuple(sorted(h))) for v, (r, h) in sorted(versions.items())
        ),
        torch_version=torch_versions[0] if torch_versions else None,
        launcher=launcher,
        time_range=(_fmt_time(min(times)), _fmt_time(max(times))) if times else None,
    )


def _label(index: EvidenceIndex, stream: Stream) -> str:
    rank = index.rank_of(*stream)
    if rank is not None:
        return str(rank)
    return f"pid {stream[1]}" if stream[1] is not None else str(stream[0])


def _communicators(index: EvidenceIndex) -> tuple[CommunicatorView, ...]:
    views: list[CommunicatorView] = []
    tops = last_ops(index)
    for key in sorted(index.comms):
        state = index.comms[key]
        seen = {r for r in state.members.values() if r is not None}
        if not seen:
            seen = {r for s in state.members if (r := index.rank_of(*s)) is not None}
        missing = ""
        if state.nranks and state.started:
            absent = absent_ranks(state.nranks, [*state.started, *state.completed], LISTED_RANKS)
            missing = format_ranks(absent) if absent is not None else ""
        groups: dict[tuple[int, str], list[Stream]] = defaultdict(list)
        for stream, last in tops[key].items():
            groups[(last.op_count, last.op)].append(stream)
        positions = []
        for (op_count, op), streams in sorted(groups.items(), key=lambda kv: (-kv[0][0], kv[0][1])):
            ranks = [r for s in streams if (r := index.rank_of(*s)) is not None]
            who = (
                format_ranks(ranks)
                if len(ranks) == len(streams)
                else ", ".join(sorted(_label(index, s) for s in streams))
            )
            positions.append((who, op_count, op))
        transports: Counter[str] = Counter()
        for via, lines in state.connect_vias.items():
            transports["/".join(via.split("/")[:2])] += lines
        aborted = {
            r
            for s, e in state.ended.items()
            if e.phase == "Abort" and (r := state.members.get(s)) is not None
        }
        hosts = sorted({s[0] for s in state.members if s[0]})
        channels = state.connect_channels
        views.append(
            CommunicatorView(
                id=key,
                nranks=state.nranks,
                ranks_seen=format_ranks(seen),
                init_complete=format_ranks(state.completed),
                init_missing=missing,
                hosts=tuple(hosts),
                aborted=format_ranks(aborted),
                last_op_counts=tuple(positions),
                channels=len(channels) or None,
                transports=tuple(sorted(transports.items())),
            )
        )
    return tuple(views)


def _ranks(index: EvidenceIndex) -> tuple[RankView, ...]:
    merged: dict[object, list[Proc]] = defaultdict(list)
    for stream, proc in index.procs.items():
        if proc.rank is None and proc.families <= {"torch"}:
            continue  # the launcher agent's own log lines: not a rank process
        merged[("r", proc.rank) if proc.rank is not None else ("s", stream)].append(proc)
    states: dict[object, str] = {}
    for ps in proc_stacks(index):
        if ps.dump.main_thread() is None:
            continue
        category, collective, site = ps.state()
        text = collective or category
        if site:
            text += f" at {site}"
        states[("r", ps.rank) if ps.rank is not None else ("s", (ps.host, ps.pid))] = text
    first_error: dict[Stream, str] = {}
    for warn in index.warns:
        first_error.setdefault((warn.origin.host, warn.origin.pid), _cut(warn.message.strip()))
    last_coll: dict[Stream, str] = {}
    # The largest communicator (the world) says most about where a rank stopped.
    tops = last_ops(index)
    for comm in sorted(index.comms, key=lambda k: (index.comms[k].nranks or 0, k)):
        for stream, last in tops[comm].items():
            last_coll[stream] = f"{last.op} opCount {last.op_count:#x} on {comm}"
    views: list[RankView] = []
    for key, procs in merged.items():
        streams = [(p.host, p.pid) for p in procs]
        host = next((p.host for p in procs if p.host), None)
        pid = next((p.pid for p in procs if p.pid is not None and p.host), None)
        if pid is None:
            pid = next((p.pid for p in procs if p.pid is not None), None)
        views.append(
            RankView(
                rank=procs[0].rank,
                host=host,
                pid=pid,
                devices=tuple(sorted({d for p in procs for d in p.devices})),
                bus_ids=tuple(sorted({b for p in procs for b in p.bus_ids})),
                nccl_version=next((p.nccl_version for p in procs if p.nccl_version), None),
                sources=tuple(sorted({s for p in procs for s in p.sources})),
                last_collective=next((last_coll[s] for s in streams if s in last_coll), None),
                state=states.get(key),
                first_error=next((first_error[s] for s in streams if s in first_error), None),
            )
        )
    # Ranks that only a line's prefix names (``[rank2]: Traceback ...``): they have evidence.
    placed = {v.rank for v in views}
    for rank, sources in index.prefix_ranks.items():
        if rank not in placed:
            views.append(
                RankView(
                    rank=rank,
                    host=None,
                    pid=None,
                    sources=tuple(sorted(sources)),
                    state=states.get(("r", rank)),
                )
            )
    views.sort(key=lambda v: (v.rank is None, v.rank or 0, v.host or "", v.pid or 0))
    return tuple(views)


def _gaps(index: EvidenceIndex, inputs: Sequence[InputView]) -> tuple[str, ...]:
    gaps: list[str] = []
    if index.world_size:
        known = {p.rank for p in index.procs.values() if p.rank is not None}
        known.update(index.prefix_ranks)
        missing = absent_ranks(index.world_size, known, LISTED_RANKS)
        count = index.world_size - len({r for r in known if 0 <= r < index.world_size})
        if count and known:
            listed = format_ranks(missing) if missing is not None else "too many to list"
            gaps.append(f"no evidence from {count} of {index.world_size} ranks: {listed}")
    partial = [v for v in inputs if not v.error and v.unrecognized]
    for view in inputs:
        if view.error:
            gaps.append(f"{view.source}: {view.error}")
    if len(partial) > 3:
        lines = sum(v.unrecognized for v in partial)
        gaps.append(
            f"{len(partial)} inputs have lines logsleuth does not recognize ({lines:,} lines in all)"
        )
    else:
        for view in partial:
            gaps.append(f"{view.source}: {view.unrecognized} of {view.lines} lines not recognized")
    for key in sorted(k for k, state in index.comms.items() if state.static_op_count()):
        gaps.append(
            f"communicator {key}: every collective line says opCount 0 (NCCL 2.8.x, or 2.27.3+ "
            "on a communicator without network operations), so NCCL's lines cannot tell where "
            "each rank stopped; stack dumps or flight-recorder dumps can"
        )
    for source in sorted(index.truncated_sources):
        gaps.append(
            f"{source}: ends in the middle of a line (cut while being written or copied); "
            "what the process did after it is not known"
        )
    for dump in index.dumps:
        if dump.truncated:
            gaps.append(f"{dump.ref.source}:{dump.ref.line}: stack dump is truncated")
    return tuple(gaps)


def diagnose(
    events: Sequence[Event],
    inputs: Sequence[InputSummary],
    version: str,
) -> Diagnosis:
    """Run every rule over ``events`` and build the :class:`Diagnosis` the reports show.

    Args:
        events: All events, file by file in input order.
        inputs: The line accounting of each input (failed inputs carry ``error``).
        version: logsleuth's version, for the report header.
    """
    with _collector_paused():
        return _diagnose(events, inputs, version)


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Keep the cyclic garbage collector still while the diagnosis is made.

    What the analysis allocates (the index, its views, the findings) lives until the
    diagnosis is made, and frees itself by reference counting: at 4,096 ranks only a few
    thousand objects of it end in cycles. Each collection meanwhile rescans the surviving
    young objects (and, for the oldest generation, every event), which cost about 1.5 s of
    9 at 4,096 ranks. Collection resumes, as the caller had it, once the diagnosis is made.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _diagnose(events: Sequence[Event], inputs: Sequence[InputSummary], version: str) -> Diagnosis:
    index = build_index(events, inputs)
    findings: list[Finding] = []
    for rule in RULES:
        if not rule.fallback:
            findings.extend(rule().check(index))
    if not any(f.severity in ("error", "critical") for f in findings):
        for rule in RULES:
            if rule.fallback:
                findings.extend(rule().check(index))
    findings = _merge(findings)
    findings.sort(key=_rank_key)
    findings = _ownerless_cause_of_death(index, _own_error_first(index, findings, events))
    findings = with_restarts(index, _with_failed_call_sites(index, findings))
    findings, led = _lead(_corroborate(findings), _coverage(index), _truncated_ranks(index))
    input_views = tuple(
        InputView(
            source=i.source,
            kind=i.kind,
            lines=i.lines,
            recognized=i.recognized,
            unrecognized=i.unrecognized,
            blank=i.blank,
            error=i.error,
        )
        for i in sorted(inputs, key=lambda i: i.source)
    )
    classes = stack_classes(index)
    return Diagnosis(
        verdict=_verdict(findings, led),
        findings=with_context(findings, events),
        job=_job(index, events),
        communicators=_communicators(index),
        stack_classes=classes,
        ranks=_ranks(index),
        inputs=input_views,
        gaps=_gaps(index, input_views),
        version=version,
        topology=build_topology_views(index, findings),
        progress=build_progress(index),
        timeline=build_timeline(index),
        config=build_config(index),
        waitfor=found.graph if (found := wait_for(index)) is not None else None,
        p2p=p2p_view(index),
        stack_tree=build_class_tree(classes) if classes else None,
        stack_suspects=find_outliers(classes),
    )
