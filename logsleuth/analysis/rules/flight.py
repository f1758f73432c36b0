"""Rules over PyTorch flight-recorder dumps."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from logsleuth.analysis.flight import FrIssue, match_dumps
from logsleuth.analysis.index import EvidenceIndex
from logsleuth.analysis.rules.base import Rule
from logsleuth.analysis.waitfor import rank_id, wait_for
from logsleuth.model.diagnosis import Evidence, Finding
from logsleuth.model.flight import FlightRecorderDump, FrEntry
from logsleuth.model.ranks import format_ranks
from logsleuth.model.waitfor import WaitFor

_KIND = {
    "missing": "missing-collective",
    "extra": "missing-collective",
    "type": "collective-mismatch",
    "size": "collective-mismatch",
    "dtype": "collective-mismatch",
}
_WORDS = {"type": "collective type", "size": "input sizes", "dtype": "data types"}


def _as_victim(finding: Finding, graph: WaitFor) -> Finding:
    """Demote a finding whose suspects the wait-for graph shows waiting for someone else.

    A rank behind in one process group may be waiting in another (a barrier of its own
    subgroup) for the real culprit: it is a victim, and the graph says whom it waits for.
    """
    ids = [rank_id(r) for r in finding.ranks]
    victims = dict(graph.victims)
    if not ids or any(i in graph.culprits or i not in victims for i in ids):
        return finding
    return replace(
        finding,
        severity="warning",
        confidence=round(min(finding.confidence, 0.3), 2),
        detail=f"{finding.detail} It waits itself, though: {ids[0]}, {victims[ids[0]]}.",
    )


def _quote(source_of: dict[int, str], pairs: Sequence[tuple[int, FrEntry]]) -> list[Evidence]:
    return [Evidence(source_of[r], e.index, f"rank {r}: {e.describe()}") for r, e in pairs]


class FlightRecorderMismatch(Rule):
    """Flight-recorder dumps show ranks that disagree on a collective of one process group.

    Symptom:
        Matched by ``collective_seq_id`` per process group, the ranks' flight-recorder
        entries differ: some ranks never enqueued collective N that the others did, or
        enqueued a different operation, input size or data type at the same position.

    Likely causes:
        Rank-dependent control flow around collectives, a rank that raised or stalled
        before the collective, tensors of different shapes per rank, collectives issued in
        a different order on different ranks.

    What to check:
        The call site quoted for each side (the first user frame of the entry); the
        culprit's stack and log before that call. Dumps are written with
        ``TORCH_FR_BUFFER_SIZE=2000 TORCH_FR_DUMP_ON_TIMEOUT=1`` (older names
        ``TORCH_NCCL_TRACE_BUFFER_SIZE``, ``TORCH_NCCL_DUMP_ON_TIMEOUT``).
    """

    code = "LS106"
    name = "flight.mismatch"
    kind = "collective-mismatch"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        dumps = index.all_of(FlightRecorderDump)
        if len(dumps) < 2:
            return
        source_of = {d.rank: d.ref.source for d in dumps if d.rank is not None}
        analysis = wait_for(index)
        for issue in match_dumps(dumps):
            if not issue.suspects:
                continue
            if (
                issue.kind == "missing"
                and not issue.suspect_entries
                and issue.pg not in ("", "0")
                and not any(g.ranks for d in dumps for g in d.groups if g.name == issue.pg)
            ):
                # A group whose members the dumps do not list (torch 2.13 lists only the
                # default group's) holds the ranks that used it: a rank with no entry in it
                # is not a member that stayed away.
                continue
            finding = self._finding(index, issue, source_of)
            yield _as_victim(finding, analysis.graph) if analysis is not None else finding

    def _finding(self, index: EvidenceIndex, issue: FrIssue, source_of: dict[int, str]) -> Finding:
        suspects = format_ranks(issue.suspects)
        reference = format_ranks(issue.reference)
        pg = issue.pg or "0"
        op = (
            (issue.reference_entries or issue.suspect_entries)[0][1].op
            if (issue.reference_entries or issue.suspect_entries)
            else "collective"
        )
        if issue.kind == "missing":
            title = f"rank(s) {suspects} never enqueued {op} #{issue.seq} of process group {pg}; rank(s) {reference} did"
            detail = (
                f"The flight recorder of rank(s) {reference} holds {op} with collective sequence "
                f"number {issue.seq} in process group {pg}; rank(s) {suspects} stopped before it "
                "(their last entries are quoted). The others wait for them."
            )
        elif issue.kind == "extra":
            title = f"rank(s) {suspects} enqueued {op} #{issue.seq} of process group {pg} that rank(s) {reference} never did"
            detail = (
                f"Only rank(s) {suspects} issued collective {issue.seq} in process group {pg}; "
                "they wait in a collective nobody else joins."
            )
        else:
            bad = issue.suspect_entries[0][1]
            good = issue.reference_entries[0][1]
            title = (
                f"rank(s) {suspects} issued {bad.profiling_name} where rank(s) {reference} issued "
                f"{good.profiling_name} at collective #{issue.seq} of process group {pg}"
            )
            detail = (
                f"At collective sequence number {issue.seq} of process group {pg} the ranks "
                f"disagree on the {_WORDS[issue.kind]}: {bad.describe()} on rank(s) {suspects} "
                f"versus {good.describe()} on rank(s) {reference}."
            )
        if issue.tie:
            detail += " Both sides are equally large, so which one diverged is uncertain."
        if issue.undumped:
            detail += f" No dump from rank(s) {format_ranks(issue.undumped)}."
        evidence = _quote(source_of, issue.suspect_entries) + _quote(
            source_of, issue.reference_entries[:3]
        )
        hosts: list[str] = []
        pids: list[int] = []
        for rank in issue.suspects:
            proc = index.proc_of_rank(rank)
            if proc is not None and proc.host:
                hosts.append(proc.host)
            if proc is not None and proc.pid is not None:
                pids.append(proc.pid)
        confidence = 0.45 if issue.tie else 0.85
        if issue.undumped:
            confidence *= 0.8
        return Finding(
            code=self.code,
            name=self.name,
            kind=_KIND[issue.kind],
            severity="critical",
            title=title,
            detail=detail,
            ranks=issue.suspects,
            hosts=tuple(sorted(set(hosts))),
            pids=tuple(sorted(set(pids))),
            communicator=f"pg {pg}",
            confidence=round(confidence, 2),
            evidence=tuple(evidence[:8]),
            evidence_total=len(issue.suspect_entries) + len(issue.reference_entries),
            next_steps=(
                f"Read the call site of rank(s) {suspects} quoted above and the code around it: "
                "a collective under a rank- or data-dependent condition is the usual cause.",
                "Compare with the reference ranks' call site; make every rank issue the same "
                "collectives in the same order with the same shapes.",
                "Dump the culprit's stacks (py-spy dump --pid PID) if it is still running.",
            ),
        )
