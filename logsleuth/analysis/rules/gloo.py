"""Rules specific to the gloo backend: its size check, read together with flight recorders."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from math import prod

from logsleuth.analysis.flight import entries_by_group
from logsleuth.analysis.index import EvidenceIndex
from logsleuth.analysis.rules.base import Rule, message_text
from logsleuth.model.base import Event
from logsleuth.model.diagnosis import Evidence, Finding
from logsleuth.model.flight import FlightRecorderDump, FrEntry
from logsleuth.model.ranks import format_ranks

_PREAMBLE = re.compile(r"op\.preamble\.length <= op\.nbytes\. (\d+) vs (\d+)")
"""gloo's tcp transport: the peer announced (first) more bytes than the receiver posted (second)."""


@dataclass(frozen=True, slots=True)
class _Position:
    """One collective as the dumped ranks hold it, by process group and sequence number."""

    pg: str
    seq: int
    entries: dict[int, FrEntry]


def _numel(entry: FrEntry) -> int:
    return sum(prod(shape) for shape in entry.input_sizes)


def _positions(dumps: Sequence[FlightRecorderDump]) -> list[_Position]:
    """Return the collectives every dumped member holds, oldest first, per process group."""
    positions: list[_Position] = []
    groups = entries_by_group(dumps)
    for pg, members in sorted(groups, key=lambda k: (k[0], sorted(k[1]))):
        ranks = groups[(pg, members)]
        expected = [
            d.rank for d in dumps if d.rank is not None and (not members or d.rank in members)
        ]
        if len(expected) < 2:
            continue
        common = set.intersection(*(set(ranks.get(r, {})) for r in expected))
        positions += [
            _Position(pg, seq, {r: ranks[r][seq] for r in expected}) for seq in sorted(common)
        ]
    return positions


def _in_flight(positions: Sequence[_Position]) -> _Position | None:
    """Return the first position where the ranks' sizes differ, else the newest one."""
    for position in positions:
        if len({(e.op, e.input_sizes, e.input_dtypes) for e in position.entries.values()}) > 1:
            return position
    return max(
        positions,
        key=lambda p: max(e.time_created_ns or 0 for e in p.entries.values()),
        default=None,
    )


class GlooSizeSender(Rule):
    """gloo's size check failed on one rank; the other ranks' flight recorders name the odd one.

    Symptom:
        One rank aborts (SIGABRT) with gloo's ``op.preamble.length <= op.nbytes. X vs Y``:
        a peer sent X bytes into the Y-byte buffer this rank had posted for the collective.
        Flight-recorder dumps of other ranks (``logsleuth live`` has every rank that dies
        of a Python exception or of SIGTERM write one into ``fr/``) hold that collective
        with each rank's input sizes. The rank that aborted wrote none, but its message
        says how it differs: it posted less than a peer sent, so its tensor is smaller
        than that peer's. Counting it with the dumped ranks whose tensors are smaller,
        the rank(s) on the minority side are the culprits. When every dump agrees, the
        aborted rank itself is the odd one.

    Likely causes:
        A tensor whose shape depends on the rank's data (a last batch of another size,
        variable-length sequences without padding), a model partitioned unevenly, a rank
        that took another code path and passes another buffer to the same collective.

    What to check:
        The culprit's call site (quoted from its flight-recorder entry) and the shape of
        what it passes there; make every rank pass the same shapes. Ranks that neither
        dumped nor aborted are not counted: the confidence falls with their number.
    """

    code = "LS109"
    name = "gloo.size_sender"
    kind = "collective-mismatch"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        hit = next(((e, m) for e in index.torch if (m := _PREAMBLE.search(message_text(e)))), None)
        aborted = [f for f in index.failures if f.rank is not None and f.signal == "SIGABRT"]
        if hit is None or len({f.rank for f in aborted}) != 1:
            return
        event, match = hit
        sent, posted = int(match.group(1)), int(match.group(2))
        detector = aborted[0].rank
        assert detector is not None
        dumps = sorted(
            (d for d in index.all_of(FlightRecorderDump) if d.rank not in (None, detector)),
            key=lambda d: d.rank or 0,
        )
        if sent <= posted or len(dumps) < 2:
            return
        position = _in_flight(_positions(dumps))
        if position is not None:
            finding = self._judge(index, position, detector, (sent, posted), [event, *aborted])
            if finding is not None:
                yield finding

    def _judge(
        self,
        index: EvidenceIndex,
        position: _Position,
        detector: int,
        sizes: tuple[int, int],
        events: Sequence[Event],
    ) -> Finding | None:
        entries = position.entries
        if len({(e.op, e.input_dtypes) for e in entries.values()}) > 1:
            return None  # Another operation or data type: not a size question.
        by_size: dict[int, list[int]] = defaultdict(list)
        for rank, entry in sorted(entries.items()):
            by_size[_numel(entry)].append(rank)
        if len(by_size) > 2:
            return None
        # The detector posted less than its peer sent: it holds the smaller tensor.
        smaller = by_size[min(by_size)] if len(by_size) == 2 else []
        small_side = sorted([*smaller, detector])
        big_side = by_size[max(by_size)]
        if len(small_side) == len(big_side):
            return None
        odd, reference = (
            (big_side, small_side) if len(big_side) < len(small_side) else (small_side, big_side)
        )
        counted = len(entries) + 1
        world = max(index.world_size or 0, counted)
        pg = position.pg or "0"
        op = next(iter(entries.values())).profiling_name
        listed = "; ".join(
            f"rank(s) {format_ranks(ranks)}: {size} elements"
            for size, ranks in sorted(by_size.items())
        )
        side = (
            f"smaller than the sender's, as on rank(s) {format_ranks(smaller)}"
            if smaller
            else "smaller than theirs"
        )
        quoted = [
            Evidence(_source(index, rank), entry.index, f"rank {rank}: {entry.describe()}")
            for rank, entry in sorted(entries.items(), key=lambda kv: (kv[0] not in odd, kv[0]))
        ]
        procs = [p for p in (index.proc_of_rank(r) for r in odd) if p is not None]
        return self.finding(
            severity="critical",
            title=(
                f"rank(s) {format_ranks(odd)} passed a tensor of another size to {op} "
                f"#{position.seq} of process group {pg}"
            ),
            detail=(
                f"At collective #{position.seq} of process group {pg} the flight recorders "
                f"give {listed}. Rank {detector} has no dump: it aborted on receiving "
                f"{sizes[0]} bytes into the {sizes[1]}-byte buffer it had posted, so its "
                f"tensor is {side}. Counted that way, rank(s) {format_ranks(odd)} differ from "
                f"rank(s) {format_ranks(reference)}."
                + (
                    f" {world - counted} rank(s) neither dumped nor aborted and are not counted."
                    if world > counted
                    else ""
                )
            ),
            events=events,
            evidence=quoted,
            ranks=odd,
            hosts=[p.host for p in procs if p.host],
            pids=[p.pid for p in procs if p.pid is not None],
            communicator=f"pg {pg}",
            confidence=0.85 * (0.7 + 0.3 * counted / world),
            next_steps=(
                f"Read the call site of rank(s) {format_ranks(odd)} quoted above and log the "
                "shape of the tensor passed there.",
                "Make every rank pass tensors of the same shape (pad the last batch, or drop "
                "it with drop_last=True).",
            ),
        )


def _source(index: EvidenceIndex, rank: int) -> str:
    for dump in index.all_of(FlightRecorderDump):
        if dump.rank == rank:
            return dump.ref.source
    return "?"
