"""The rule framework: one small class per finding code, documented for ``logsleuth explain``.

A rule's docstring has three paragraphs headed ``Symptom:``, ``Likely causes:`` and
``What to check:``; the explain command and the HTML report show them as written.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from itertools import chain
from typing import ClassVar

from logsleuth.analysis.index import EvidenceIndex, Stream
from logsleuth.model.base import Event
from logsleuth.model.diagnosis import Evidence, Finding
from logsleuth.model.ranks import format_ranks

MAX_EVIDENCE = 8
"""Evidence lines kept per finding; the rest are counted in ``evidence_total``."""


def evidence_of(
    events: Iterable[Event], limit: int = MAX_EVIDENCE, extra: Iterable[Evidence] = ()
) -> tuple[tuple[Evidence, ...], int]:
    """Quote ``events``, then ``extra``, deduplicated by source line in that order."""
    seen: set[tuple[str, int]] = set()
    quoted: list[Evidence] = []
    for item in chain((Evidence(e.ref.source, e.ref.line, e.text) for e in events), extra):
        key = (item.source, item.line)
        if key in seen:
            continue
        seen.add(key)
        quoted.append(item)
    return tuple(quoted[:limit]), len(quoted)


class Rule(ABC):
    """A check over the evidence index that yields findings of one kind."""

    code: ClassVar[str]
    name: ClassVar[str]
    kind: ClassVar[str]
    fallback: ClassVar[bool] = False
    """A fallback rule runs only when no other rule found an error or a critical finding."""

    @abstractmethod
    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        """Yield this rule's findings for ``index``."""

    @classmethod
    def explain(cls) -> str:
        """Return the rule's documentation: code, name, kind, symptom, causes, checks."""
        doc = (cls.__doc__ or "").strip()
        lines = [line[4:] if line.startswith("    ") else line for line in doc.splitlines()]
        return f"{cls.code} {cls.name} ({cls.kind})\n\n" + "\n".join(lines).strip() + "\n"

    @classmethod
    def summary(cls) -> str:
        """Return the first line of the docstring."""
        return (cls.__doc__ or "").strip().splitlines()[0]

    def finding(
        self,
        *,
        severity: str,
        title: str,
        detail: str,
        events: Sequence[Event] = (),
        ranks: Iterable[int] = (),
        hosts: Iterable[str] = (),
        pids: Iterable[int] = (),
        communicator: str | None = None,
        confidence: float = 0.5,
        next_steps: Sequence[str] = (),
        evidence: Sequence[Evidence] = (),
    ) -> Finding:
        """Build a finding of this rule with sorted, deduplicated culprit lists.

        ``evidence`` quotes lines no event stands for (a frame of a stack dump); it follows
        the lines of ``events``.
        """
        quoted, total = evidence_of(events, extra=evidence)
        return Finding(
            code=self.code,
            name=self.name,
            kind=self.kind,
            severity=severity,
            title=title,
            detail=detail,
            ranks=tuple(sorted(set(ranks))),
            hosts=tuple(sorted(set(hosts))),
            pids=tuple(sorted(set(pids))),
            communicator=communicator,
            confidence=round(max(0.0, min(1.0, confidence)), 2),
            evidence=quoted,
            evidence_total=total,
            next_steps=tuple(next_steps),
        )


def message_text(event: Event) -> str:
    """Return what an error event says: its reason, detail, message and exception text."""
    return " ".join(
        str(getattr(event, name, "") or "")
        for name in ("reason", "detail", "message", "exc_message")
    )


def culprits(
    index: EvidenceIndex, streams: Iterable[Stream]
) -> tuple[list[int], list[str], list[int]]:
    """Return (ranks, hosts, pids) of ``streams`` as far as they are known."""
    ranks: list[int] = []
    hosts: list[str] = []
    pids: list[int] = []
    for host, pid in streams:
        rank = index.rank_of(host, pid)
        if rank is not None:
            ranks.append(rank)
        if host:
            hosts.append(host)
        if pid is not None:
            pids.append(pid)
    return ranks, hosts, pids


def describe(index: EvidenceIndex, streams: Sequence[Stream], limit: int = 4) -> str:
    """Name processes for a sentence: ``rank 3 (gpu-a pid 12)``, or ``ranks 1-3`` when many."""
    labels = [index.stream_label(s) for s in streams]
    if len(labels) <= limit:
        return ", ".join(labels)
    ranks = [r for r in (index.rank_of(h, p) for h, p in streams) if r is not None]
    if len(ranks) == len(streams):
        return f"ranks {format_ranks(ranks)}"
    return ", ".join(labels[:limit]) + f" and {len(labels) - limit} more"
