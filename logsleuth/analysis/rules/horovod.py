"""Horovod's stall inspector: which ranks did not submit which tensors."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import replace

from logsleuth.analysis.index import EvidenceIndex
from logsleuth.analysis.rules.base import Rule
from logsleuth.model.base import Event
from logsleuth.model.diagnosis import Finding
from logsleuth.model.messages import LogMessage
from logsleuth.model.ranks import format_ranks

_MISSING_RANK = re.compile(r"^\s*(\d{1,6}): \[(.*?)\]?,?\s*$")
_STALLED_OP = re.compile(r"^\s*(\S+) \[(ready|missing) ranks: ([\d, ]+)\],?\s*$")
_SPLIT = re.compile(r",\s*")
_STALL = re.compile(r"waiting for remainder of ranks|(?:^|\s)(?:Missing ranks|Stalled ops):")


class HorovodStall(Rule):
    """Horovod's stall inspector: some ranks submitted tensors the others did not.

    Symptom:
        ``One or more tensors were submitted to be reduced, gathered or broadcasted by subset
        of ranks and are waiting for remainder of ranks``, followed by ``Missing ranks:`` with
        ``N: [tensor, ...]`` per rank, or (newer Horovod) ``Stalled ops:`` with
        ``tensor [ready ranks: ...]``.

    Likely causes:
        Rank-divergent control flow: one rank took another branch (evaluation, early stop, a
        condition on its data) and submitted different tensors or none; tensors named
        differently on different ranks (names built from a per-rank counter).

    What to check:
        The code path of the ranks the inspector lists as missing tensors; whether every rank
        runs the same ops in the same order; HOROVOD_STALL_CHECK_TIME_SECONDS to see it sooner.
    """

    code = "LS121"
    name = "horovod.stall"
    kind = "missing-collective"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        messages = [m for m in index.all_of(LogMessage) if m.family == "horovod"]
        missing: dict[int, set[str]] = defaultdict(set)
        ready: dict[str, set[int]] = defaultdict(set)
        events: list[Event] = []
        for message in messages:
            if found := _MISSING_RANK.match(message.message):
                tensors = {t for t in _SPLIT.split(found.group(2)) if t and t != "..."}
                missing[int(found.group(1))] |= tensors
                events.append(message)
            elif found := _STALLED_OP.match(message.message):
                ranks = {int(r) for r in _SPLIT.split(found.group(3).strip()) if r.strip()}
                if found.group(2) == "ready":
                    ready[found.group(1)] |= ranks
                else:
                    for rank in ranks:
                        missing[rank].add(found.group(1))
                events.append(message)
        if ready and not missing:
            # Only the ranks that submitted are named; ranks are dense from 0, so the ones
            # below the highest ready rank that are not ready are the missing ones.
            submitted = set().union(*ready.values())
            top = max(submitted)
            if top < 2 * len(submitted) + 8:
                for rank in set(range(top + 1)) - submitted:
                    missing[rank] = set(ready)
        if not missing:
            headers = [m for m in messages if _STALL.search(f"{m.label} {m.message}")]
            if headers:
                # The stall report without its list (an excerpt cut after the first line):
                # ranks are missing, which ones the evidence does not say.
                finding = self.finding(
                    severity="error",
                    title="Horovod's stall inspector reports tensors some ranks never submitted; "
                    "the ranks it lists are not in the evidence",
                    detail=(
                        "Horovod's stall inspector found ranks waiting for tensors that other "
                        "ranks have not submitted. The lines after its report name the missing "
                        "ranks (Missing ranks: / Stalled ops:); they are not in the evidence."
                    ),
                    events=headers,
                    confidence=0.4,
                    next_steps=(
                        "Collect the lines after the stall report: the ranks it lists are the "
                        "ones that took another code path.",
                    ),
                )
                yield replace(finding, kind="missing-collective")
            return
        # Each rank misses tensors the others submitted: they run different ops (mismatch).
        # One rank (or a few) missing what all others submitted: they are missing.
        distinct = {frozenset(t) for t in missing.values()}
        if len(missing) > 1 and len(distinct) == len(missing):
            kind, culprits = "collective-mismatch", []
            title = (
                f"ranks {format_ranks(missing)} each wait for tensors the others never submit: "
                "they run different collectives"
            )
        else:
            kind, culprits = "missing-collective", sorted(missing)
            title = (
                f"rank(s) {format_ranks(missing)} never submitted "
                f"{_names(set().union(*missing.values()))} that the other ranks wait in"
            )
        finding = self.finding(
            severity="error",
            title=title,
            detail=(
                "Horovod's stall inspector lists, per rank, the tensors that rank has not "
                "submitted while other ranks have. "
                + "; ".join(f"rank {r}: {_names(t)}" for r, t in sorted(missing.items())[:6])
                + "."
            ),
            events=events,
            ranks=culprits,
            confidence=0.6 if culprits else 0.5,
            next_steps=(
                "Compare the code path of the listed ranks with the others at the named tensors "
                "(a branch on rank, on data, or an early stop taken by some ranks only).",
                "Give tensors the same names on every rank (no per-rank counters in the names).",
            ),
        )
        yield replace(finding, kind=kind)


def _names(tensors: set[str]) -> str:
    shown = sorted(tensors)[:3]
    more = len(tensors) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "") if shown else "tensors"
