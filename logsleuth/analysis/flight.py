"""Match flight-recorder entries across ranks, as ``fr_trace`` does, without its traps.

Entries are matched per process group by ``collective_seq_id``; a process group is its
name and its members (split groups reuse names, which ``fr_trace`` once conflated). Only the window that every
dumped rank still holds is compared (older entries fall out of the ring buffer at
different times). At each position the ranks are split by what they did; the majority is
the reference and the minority are the suspects, never "everyone who differs from the
first rank". Ranks without a dump are reported as missing evidence, never blamed. The
first disagreement of a group is the finding: what follows it is derivative.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from logsleuth.analysis.index import EvidenceIndex
from logsleuth.analysis.stack_classify import collective_call_site, frame_label
from logsleuth.model.base import Event
from logsleuth.model.flight import FlightRecorderDump, FrEntry
from logsleuth.model.stacks import Frame
from logsleuth.model.torch import DebugDump


@dataclass(frozen=True, slots=True)
class FrIssue:
    """The first disagreement found in one process group."""

    kind: str
    """``missing`` (some ranks never enqueued the collective), ``extra`` (a few ranks
    enqueued one nobody else did), ``type``, ``size`` or ``dtype``."""
    pg: str
    seq: int
    suspects: tuple[int, ...]
    reference: tuple[int, ...]
    suspect_entries: tuple[tuple[int, FrEntry], ...]
    reference_entries: tuple[tuple[int, FrEntry], ...]
    undumped: tuple[int, ...]
    tie: bool


def _signature(entry: FrEntry) -> tuple[object, ...]:
    return (entry.op, entry.input_sizes, entry.input_dtypes)


def _difference(a: FrEntry, b: FrEntry) -> str:
    if a.op != b.op:
        return "type"
    if a.input_sizes != b.input_sizes:
        return "size"
    return "dtype"


def _majority(groups: dict[object, list[int]]) -> tuple[list[int], list[int], bool]:
    ordered = sorted(groups.values(), key=lambda g: (-len(g), min(g)))
    tie = len(ordered) > 1 and len(ordered[0]) == len(ordered[1])
    return ordered[0], [r for g in ordered[1:] for r in g], tie


GroupKey = tuple[str, frozenset[int]]
"""A process group: its name and its members (empty when the dumps do not say)."""


def entries_by_group(
    dumps: Sequence[FlightRecorderDump],
) -> dict[GroupKey, dict[int, dict[int, FrEntry]]]:
    """Return group -> rank -> collective sequence id -> entry, P2P entries left out.

    A group is its name *and* its members: split groups reuse names ("1" on ranks 0-3 and
    "1" on ranks 4-7 are two groups), so entries are only compared within one.
    """
    by_rank = {d.rank: d for d in dumps if d.rank is not None}
    per_pg: dict[GroupKey, dict[int, dict[int, FrEntry]]] = defaultdict(lambda: defaultdict(dict))
    for rank, dump in sorted(by_rank.items()):
        own = {group.name: frozenset(group.ranks) for group in dump.groups}
        if "" in own and "0" not in own:
            own["0"] = own[""]  # torch 2.13 keys the default group's config by "", entries by "0"
        for entry in dump.entries:
            if entry.is_p2p or entry.collective_seq_id <= 0:
                continue
            members = own.get(entry.pg_name)
            if members is None and len(own) == 1:
                members = next(iter(own.values()))
            per_pg[(entry.pg_name, members or frozenset())][rank][entry.collective_seq_id] = entry
    return per_pg


def match_dumps(dumps: Sequence[FlightRecorderDump]) -> list[FrIssue]:
    """Return the first disagreement of every process group across the ranks' dumps."""
    by_rank = {d.rank: d for d in dumps if d.rank is not None}
    per_pg = entries_by_group(dumps)
    issues: list[FrIssue] = []
    for key in sorted(per_pg, key=lambda k: (k[0], sorted(k[1]))):
        pg, members = key
        ranks = per_pg[key]
        dumped = sorted(by_rank)  # a dumped rank with no entry in this group enqueued nothing
        expected = set(members) or set(dumped)
        undumped = tuple(sorted(expected - set(by_rank)))
        held = {r: ranks.get(r, {}) for r in dumped if r in expected}
        if len(held) < 2:
            continue
        start = max((min(seqs) for seqs in held.values() if seqs), default=1)
        top = max((max(seqs) for seqs in held.values() if seqs), default=0)
        for seq in range(start, top + 1):
            have = {r: e[seq] for r, e in held.items() if seq in e}
            lack = sorted(r for r in held if seq not in held[r])
            if lack:
                if len(lack) <= len(have):
                    suspects, reference, kind = lack, sorted(have), "missing"
                else:
                    suspects, reference, kind = sorted(have), lack, "extra"
                issues.append(
                    FrIssue(
                        kind=kind,
                        pg=pg,
                        seq=seq,
                        suspects=tuple(suspects),
                        reference=tuple(reference),
                        suspect_entries=tuple((r, _last(held[r])) for r in suspects if held[r]),
                        reference_entries=tuple((r, have[r]) for r in reference if r in have),
                        undumped=undumped,
                        tie=len(lack) == len(have),
                    )
                )
                break
            groups: dict[object, list[int]] = defaultdict(list)
            for rank, entry in have.items():
                groups[_signature(entry)].append(rank)
            if len(groups) > 1:
                reference, suspects, tie = _majority(groups)
                issues.append(
                    FrIssue(
                        kind=_difference(have[reference[0]], have[suspects[0]]),
                        pg=pg,
                        seq=seq,
                        suspects=tuple(sorted(suspects)),
                        reference=tuple(sorted(reference)),
                        suspect_entries=tuple((r, have[r]) for r in sorted(suspects)),
                        reference_entries=tuple((r, have[r]) for r in sorted(reference)),
                        undumped=undumped,
                        tie=tie,
                    )
                )
                break
    return issues


def _last(entries: dict[int, FrEntry]) -> FrEntry:
    return entries[max(entries)]


@dataclass(frozen=True, slots=True)
class FailedCallSite:
    """Where a rank enqueued the collective its watchdog failed on (torch 2.6+ prints the
    flight recorder's stack of it: ``Stack trace of the failed collective:``)."""

    rank: int | None
    collective: str
    site: str
    """The innermost frame of user code, ``func (file:line)``."""
    event: Event


def failed_call_sites(index: EvidenceIndex) -> list[FailedCallSite]:
    """Return each rank's call site of its failed collective, ranks in order (one per rank)."""
    found: dict[int | None, FailedCallSite] = {}
    for dump in index.all_of(DebugDump):
        if dump.kind != "trace" or not dump.frames:
            continue
        frames = [Frame(func=f, file=path, line=line) for f, path, line in dump.frames]
        site = collective_call_site(frames)
        if site is None:
            continue
        rank = index.writer_rank(dump)
        found.setdefault(rank, FailedCallSite(rank, frames[0].func, frame_label(site), dump))
    return sorted(found.values(), key=lambda s: (s.rank is None, s.rank or 0))
