"""torchrun's restarts: say when the failure a finding reports was one attempt of several.

With ``--max-restarts`` torchrun restarts the worker group after a failure (``Worker group
FAILED. 2/3 attempts left; will restart worker group``): the evidence then spans attempts,
and the reader must know whether the failure quoted is the run's last word or an earlier
attempt's, after which the run went on (and perhaps finished).
"""

from __future__ import annotations

from dataclasses import replace

from logsleuth.analysis.index import EvidenceIndex
from logsleuth.model.diagnosis import Finding
from logsleuth.model.torch import LauncherEvent


def with_restarts(index: EvidenceIndex, findings: list[Finding]) -> list[Finding]:
    """Add to the first serious finding the restart that followed its evidence, and whether
    the restarted worker group finished; other findings as they are."""
    agent = sorted(index.all_of(LauncherEvent), key=lambda e: (e.ref.source, e.ref.line))
    restarts = [e for e in agent if e.action == "restart"]
    serious = [f for f in findings if f.severity in ("error", "critical")]
    if not restarts or not serious:
        return findings
    top = serious[0]
    after = [
        r
        for r in restarts
        if any(q.source == r.ref.source and q.line < r.ref.line for q in top.evidence)
    ]
    if not after:
        return findings
    first, last = after[0], after[-1]
    where = f"{first.ref.source}:{first.ref.line}"
    sentence = f" torchrun restarted its worker group after it ({where}: {first.message})"
    finished = next(
        (
            e
            for e in agent
            if e.action == "finished"
            and e.ref.source == last.ref.source
            and e.ref.line > last.ref.line
        ),
        None,
    )
    if finished is not None:
        sentence += (
            f", and the restarted group finished successfully ({finished.ref.source}:"
            f"{finished.ref.line}): this failure was an earlier attempt's, and the run recovered."
        )
    else:
        sentence += ": what the evidence shows after that line is a later attempt's."
    boosted = replace(top, detail=top.detail + sentence)
    return [boosted if f is top else f for f in findings]
