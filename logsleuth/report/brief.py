"""The brief terminal report: the verdict, the wait chain and the next steps in 15 lines or fewer.

What an on-call engineer reads after a job's own output scrolled past: the verdict first,
the chain from symptom to cause, what to do, where the full report is, and the verdict
again as the last line, so that it is the line left on the screen. Every line is cut to the
width (``...`` marks a cut); the full text report (``--format text``) has everything.
"""

from __future__ import annotations

import textwrap

from logsleuth.model.diagnosis import Diagnosis
from logsleuth.report import common
from logsleuth.report.story import build_story, culprit_sentence, hop_sentence, waiter_sentence

MAX_LINES = 15
"""The most lines the brief report prints, pointer to the full report and last line included."""
HEADLINE_LINES = 2
"""Lines the verdict's summary may wrap to at the top (the last line repeats it, cut)."""
MAX_STEPS = 3
MAX_HOPS = 2
"""Hops shown with their evidence; a longer chain says how many hops it skipped."""


def _cut(text: str, width: int) -> str:
    """Return ``text`` on one line of at most ``width`` characters, ``...`` marking a cut."""
    indent = text[: len(text) - len(text.lstrip(" "))]
    line = indent + " ".join(text.split())
    return line if len(line) <= width else line[: max(0, width - 3)].rstrip() + "..."


def verdict_line(d: Diagnosis) -> str:
    """Return the one-line verdict: ``VERDICT kind: summary``."""
    return f"VERDICT {d.verdict.kind}: {d.verdict.summary}"


def _facts(d: Diagnosis) -> str:
    v = d.verdict
    parts = [f"{label} {value}" for label, value in common.culprit_parts(d)]
    word = common.confidence_word(v.confidence)
    parts.append(f"confidence {common.format_confidence(v.confidence)} ({word})")
    if v.code:
        parts.append(f"rule {v.code}")
    return " | ".join(parts)


def _chain(d: Diagnosis, width: int, *, evidence: bool) -> list[str]:
    story = build_story(d)
    if story is None:
        return []
    lines = ["WAIT CHAIN (symptom to cause)"]
    hops = story.hops
    shown = hops if len(hops) <= MAX_HOPS else (hops[0], hops[-1])
    for i, hop in enumerate(shown):
        if i == 1 and len(hops) > len(shown):
            skipped = len(hops) - len(shown)
            lines.append(f"  ... {skipped} more {common.plural(skipped, 'hop')} (--format text)")
        lines.append(_cut(f"  {waiter_sentence(hop)}", width))
        lines.append(_cut(f"  -> {hop_sentence(hop)} [{hop.source}]", width))
        if evidence and hop.evidence is not None:
            e = hop.evidence
            lines.append(_cut(f"     {e.source}:{e.line}  {e.text}", width))
    lines.append(_cut(f"  => {culprit_sentence(story)}", width))
    return lines


def _steps(d: Diagnosis, width: int, limit: int) -> list[str]:
    primary = common.primary_finding(d)
    steps = list(primary.next_steps[:limit]) if primary is not None else []
    if not steps:
        return []
    return ["NEXT STEPS", *(_cut(f"  {i}. {s}", width) for i, s in enumerate(steps, 1))]


def render_brief(d: Diagnosis, *, width: int = 100, full_report: str | None = None) -> str:
    """Render the brief report: at most :data:`MAX_LINES` lines, the verdict first and last.

    Args:
        d: The diagnosis to show.
        width: Columns; every line is cut to fit.
        full_report: Where the full report is (a path or a command), for the pointer line.
    """
    d = common.scrub_controls(d)
    wrapped = textwrap.wrap(verdict_line(d), width=width, subsequent_indent="  ")
    head = wrapped[:HEADLINE_LINES]
    if len(wrapped) > HEADLINE_LINES:
        head[-1] = _cut(head[-1] + " " + " ".join(wrapped[HEADLINE_LINES:]), width)
    head.append(_cut(f"  {_facts(d)}", width))
    # A path is copied, not read: never cut it.
    tail = [f"full report: {full_report}"] if full_report else []
    tail.append(_cut(verdict_line(d), width))
    budget = MAX_LINES - len(head) - len(tail)
    chain = _chain(d, width, evidence=True)
    steps = _steps(d, width, MAX_STEPS)
    while len(chain) + len(steps) > budget and len(steps) > 2:
        steps = steps[:-1]  # keep at least one step
    if len(chain) + len(steps) > budget:
        chain = _chain(d, width, evidence=False)
    while len(chain) + len(steps) > budget and steps:
        steps = steps[:-1] if len(steps) > 2 else []
    body = (chain + steps)[:budget]
    return "\n".join([*head, *body, *tail]) + "\n"
