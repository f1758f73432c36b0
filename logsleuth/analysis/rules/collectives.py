"""Rules about where each rank is in its communicators' sequence of collectives."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from operator import attrgetter

from logsleuth.analysis.correlate import own_deaths, pg_links
from logsleuth.analysis.health import EndedRun, ended_runs
from logsleuth.analysis.index import CommState, EvidenceIndex, OpRecord, Stream
from logsleuth.analysis.overview import last_ops
from logsleuth.analysis.rules.base import Rule, culprits, describe, evidence_of, message_text
from logsleuth.analysis.waitfor import global_rank
from logsleuth.model.base import Event
from logsleuth.model.diagnosis import Finding
from logsleuth.model.ranks import absent_ranks, format_ranks
from logsleuth.model.torch import (
    CollectiveFingerprint,
    WatchdogProgress,
    WatchdogTimeout,
    work_label,
)

_BYTE_TYPES = (0, 1)
"""ncclInt8/ncclUint8: the dtype of torch's ``*_object`` collectives (pickled bytes)."""


_SIGNATURE = attrgetter("op", "count", "datatype", "root")
"""What members at one position must agree on."""


def _coverage(state: CommState) -> float:
    """Share of the communicator's ranks whose logs we have (1.0 when unknown)."""
    if not state.nranks:
        return 1.0
    return min(1.0, len(state.members) / state.nranks)


def _split_majority(groups: dict[object, list[Stream]]) -> tuple[list[Stream], list[Stream], bool]:
    """Return (reference streams, odd streams, tie) from streams grouped by what they did."""
    ordered = sorted(groups.values(), key=lambda g: (-len(g), min(str(s) for s in g)))
    reference = ordered[0]
    odd = [s for g in ordered[1:] for s in g]
    tie = len(ordered) > 1 and len(ordered[1]) == len(reference)
    return reference, odd, tie


class MissingCollective(Rule):
    """Some ranks never entered a collective that the others are blocked in.

    Symptom:
        The last collective each rank logged (NCCL COLL lines, ``opCount``) differs: most
        ranks reached position N of a communicator while a few stopped at an earlier one,
        or a few issued a collective that nobody else did. The ranks at N wait forever.

    Likely causes:
        Rank-divergent control flow (``if rank == 0: dist.all_reduce(...)``), a rank that
        raised or exited early, a rank stuck outside communication (data loading, I/O, a
        lock), uneven numbers of batches per rank, an early ``break`` on one rank.

    What to check:
        The culprit's stack (``py-spy dump --pid PID``) and its last log lines; code paths
        that call collectives under rank- or data-dependent conditions; per-rank dataset
        lengths (``drop_last``, ``DistributedSampler``).
    """

    code = "LS101"
    name = "collective.missing"
    kind = "missing-collective"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        tops = last_ops(index)
        for key in sorted(index.comms):
            state = index.comms[key]
            if state.static_op_count():
                found = self._last_differs(index, state)
                if found is not None:
                    yield found
                continue
            last = {s: record.op_count for s, record in tops[key].items()}
            if len(last) < 2:
                continue
            top = max(last.values())
            ahead = sorted((s for s, n in last.items() if n == top), key=str)
            behind = sorted((s for s, n in last.items() if n < top), key=str)
            if not behind:
                continue
            if len(behind) <= len(ahead):
                yield self._never_entered(index, state, ahead, behind, last, top)
            else:
                yield self._extra_call(index, state, ahead, behind, top)

    def _last_differs(self, index: EvidenceIndex, state: CommState) -> Finding | None:
        """Compare each member's last collective where opCount gives no positions.

        Ranks whose last logged collective differs from the majority's did not enter the
        collective the majority waits in; whether they issued another one at that step
        (a mismatch) or are a step behind cannot be told without positions.
        """
        last: dict[Stream, OpRecord] = {}
        for stream, ops in state.ops.items():
            colls = [r for r in ops if r.op not in ("Send", "Recv")]
            if colls:
                last[stream] = colls[-1]
        groups: dict[object, list[Stream]] = defaultdict(list)
        for stream, record in last.items():
            groups[(record.op, record.count, record.datatype, record.root)].append(stream)
        if len(groups) < 2:
            return None
        reference, odd, tie = _split_majority(groups)
        if tie:
            return None
        ref, bad = last[reference[0]], last[odd[0]]
        ranks, hosts, pids = culprits(index, odd)
        return self.finding(
            severity="critical",
            title=(
                f"{describe(index, odd)} never entered the {ref.op} that {describe(index, reference)} "
                f"last issued on comm {state.key} (its last collective was {bad.op})"
            ),
            detail=(
                f"The last collective {describe(index, reference)} logged on communicator "
                f"{state.key} is {ref.op}(count={ref.count}, datatype={ref.datatype}); "
                f"{describe(index, odd)} last logged {bad.op}(count={bad.count}, "
                f"datatype={bad.datatype}). This communicator's opCount stays 0 (NCCL 2.8.x, or "
                "2.27.3+ without network operations), so NCCL's lines give no positions: the odd "
                "ranks either issued another collective at that step (a mismatch) or are a step "
                "behind. Their stacks tell which."
            ),
            events=[last[s].event for s in (*odd, *reference)],
            ranks=ranks,
            hosts=hosts,
            pids=pids,
            communicator=state.key,
            confidence=0.55 * (0.6 + 0.4 * _coverage(state)),
            next_steps=(
                f"Dump the odd ranks' stacks: py-spy dump --pid {pids[0] if pids else 'PID'} "
                "(on its host) to see which call they are in.",
                "Re-run with TORCH_DISTRIBUTED_DEBUG=DETAIL, or enable the flight recorder "
                "(TORCH_FR_BUFFER_SIZE=2000), to get per-collective sequence numbers.",
            ),
        )

    def _record(self, state: CommState, stream: Stream, op_count: int) -> OpRecord | None:
        for record in reversed(state.ops[stream]):
            if record.op_count == op_count:
                return record
        return None

    def _never_entered(
        self,
        index: EvidenceIndex,
        state: CommState,
        ahead: list[Stream],
        behind: list[Stream],
        last: dict[Stream, int],
        top: int,
    ) -> Finding:
        sample = self._record(state, ahead[0], top)
        op = sample.op if sample else "collective"
        ranks, hosts, pids = culprits(index, behind)
        tie = len(behind) == len(ahead)
        confidence = (0.45 if tie else 0.85) * (0.6 + 0.4 * _coverage(state))
        events: list[Event] = []
        for stream in behind:
            record = self._record(state, stream, last[stream])
            if record:
                events.append(record.event)
        if sample:
            events.append(sample.event)
        stuck_at = sorted({last[s] for s in behind})
        title = f"{describe(index, behind)} never entered {op} #{top} (opCount {top:#x}) on comm {state.key}"
        detail = (
            f"{len(ahead)} rank(s) logged {op} at opCount {top:#x} on communicator {state.key} and "
            f"wait in it; {describe(index, behind)} stopped at opCount "
            f"{', '.join(f'{n:#x}' for n in stuck_at)} and never issued it."
        )
        link = next((k for k in pg_links(index) if k.comm == state.key), None)
        if link is not None:
            detail += (
                f" In PyTorch's numbering this is SeqNum {top + link.offset} of process group "
                f"{link.pg} (its watchdog's last enqueued work on {len(link.ranks)} rank(s) is "
                f"opCount + {link.offset})."
            )
        if tie:
            detail += " The two sides are equally large, so which one diverged is uncertain."
        return self.finding(
            severity="critical",
            title=title,
            detail=detail,
            events=events,
            ranks=ranks,
            hosts=hosts,
            pids=pids,
            communicator=state.key,
            confidence=confidence,
            next_steps=(
                f"Dump the culprit's stacks: py-spy dump --pid {pids[0] if pids else 'PID'} "
                "(on its host) to see where it is instead of in the collective.",
                "Look for collectives under rank- or data-dependent conditions and for an "
                "exception or early exit on the culprit (its launcher log lines).",
                "Re-run with TORCH_DISTRIBUTED_DEBUG=DETAIL to get the desync report naming the call.",
            ),
        )

    def _extra_call(
        self,
        index: EvidenceIndex,
        state: CommState,
        ahead: list[Stream],
        behind: list[Stream],
        top: int,
    ) -> Finding:
        sample = self._record(state, ahead[0], top)
        op = sample.op if sample else "collective"
        ranks, hosts, pids = culprits(index, ahead)
        events: list[Event] = [r.event for s in ahead if (r := self._record(state, s, top))]
        return self.finding(
            severity="critical",
            title=f"{describe(index, ahead)} issued {op} #{top} that the other ranks never issued",
            detail=(
                f"{describe(index, ahead)} logged {op} at opCount {top:#x} on communicator "
                f"{state.key}; the other {len(behind)} rank(s) stopped at an earlier position, so "
                "the culprit waits in a collective nobody else joins."
            ),
            events=events,
            ranks=ranks,
            hosts=hosts,
            pids=pids,
            communicator=state.key,
            confidence=0.7 * (0.6 + 0.4 * _coverage(state)),
            next_steps=(
                "Find the rank-conditional collective on the culprit (logging, metrics, "
                "checkpointing done on one rank with a collective inside).",
                "Dump the stacks of all ranks (py-spy dump) to see where the others are.",
            ),
        )


class CollectiveMismatch(Rule):
    """Ranks of one communicator issued different collectives at the same position.

    Symptom:
        At the same ``opCount`` of one communicator, ranks logged different operations
        (AllGather vs AllReduce), sizes, data types or roots; or the PyTorch DETAIL desync
        report says ``Detected mismatch between collectives on ranks``.

    Likely causes:
        Collectives issued in a different order on different ranks (rank-conditional
        code, a dict iterated in different orders, uneven model partitions), an object
        collective (``all_gather_object``, ``broadcast_object_list``) on one rank only,
        different tensor shapes per rank.

    What to check:
        The call sites of both collectives on the named ranks; run with
        ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` to get the Python call that diverged; a flight
        recorder dump (``TORCH_NCCL_TRACE_BUFFER_SIZE``) shows the sequence per rank.
    """

    code = "LS102"
    name = "collective.mismatch"
    kind = "collective-mismatch"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        for key in sorted(index.comms):
            finding = self._check_comm(index, index.comms[key])
            if finding is not None:
                yield finding
        yield from self._check_fingerprints(index)
        yield from self._check_watchdog(index)

    def _check_watchdog(self, index: EvidenceIndex) -> Iterable[Finding]:
        """Compare what the ranks' watchdogs say they were running at one SeqNum.

        Every rank that timed out prints its work (``SeqNum``, ``OpType``, ``NumelIn``,
        ``NumelOut``); ranks of one process group at one SeqNum must agree. The first SeqNum
        where they do not is a mismatch, and the ranks outside the majority are the odd ones.
        """
        timeouts = [e for e in index.torch if isinstance(e, WatchdogTimeout)]
        by_seq: dict[tuple[str | None, int], dict[int, WatchdogTimeout]] = defaultdict(dict)
        for e in timeouts:
            rank = global_rank(e, e.rank, e.pg)
            # Without a SeqNum (torch before 1.10) there is no position to compare ranks at.
            if rank is not None and e.seq is not None:
                by_seq[(e.pg, e.seq)].setdefault(rank, e)
        for (pg, seq), per_rank in sorted(by_seq.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
            groups: dict[tuple[str, int | None, int | None], list[int]] = defaultdict(list)
            for rank, e in sorted(per_rank.items()):
                groups[(e.op_type, e.numel_in, e.numel_out)].append(rank)
            if len(groups) < 2:
                continue
            ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), min(kv[1])))
            (ref_sig, reference), (bad_sig, _) = ordered[0], ordered[1]
            odd = sorted(r for _, ranks in ordered[1:] for r in ranks)
            tie = len(ordered[1][1]) == len(reference)
            what = (
                f"{bad_sig[0]} versus {ref_sig[0]}"
                if bad_sig[0] != ref_sig[0]
                else f"NumelIn/NumelOut {bad_sig[1]}/{bad_sig[2]} versus {ref_sig[1]}/{ref_sig[2]}"
            )
            hosts: list[str] = []
            pids: list[int] = []
            for rank in odd:
                proc = index.proc_of_rank(rank)
                if proc is not None and proc.host:
                    hosts.append(proc.host)
                if proc is not None and proc.pid is not None:
                    pids.append(proc.pid)
            yield self.finding(
                severity="critical",
                title=(
                    f"rank(s) {_fmt(odd)} ran a different collective at SeqNum {seq} ({what}) "
                    f"than rank(s) {_fmt(reference)}"
                ),
                detail=(
                    f"The watchdogs of {len(per_rank)} rank(s) timed out at SeqNum {seq}"
                    + (f" of process group {pg}" if pg else "")
                    + f"; rank(s) {_fmt(reference)} were in {ref_sig[0]} with NumelIn/NumelOut "
                    f"{ref_sig[1]}/{ref_sig[2]} and rank(s) {_fmt(odd)} in {bad_sig[0]} with "
                    f"{bad_sig[1]}/{bad_sig[2]}. Ranks at one position must run the same "
                    "collective with the same sizes; the odd one out is the culprit."
                    + (
                        " The sides are equally large: which one diverged is uncertain."
                        if tie
                        else ""
                    )
                ),
                events=[per_rank[r] for r in (*odd, *reference)],
                ranks=odd,
                hosts=hosts,
                pids=pids,
                confidence=0.45 if tie else 0.8,
                next_steps=(
                    f"Compare the call sites of rank(s) {_fmt(odd)} with the others' at that step "
                    "(the tensor shapes, the order of the collectives).",
                ),
            )
            return

    def _check_comm(self, index: EvidenceIndex, state: CommState) -> Finding | None:
        if state.static_op_count():
            return None  # no positions to compare at; MissingCollective reads last collectives
        positions: dict[int, dict[Stream, OpRecord]] = defaultdict(dict)
        for stream, ops in state.ops.items():
            for record in ops:
                if record.op in ("Send", "Recv"):
                    continue
                positions[record.op_count][stream] = record
        for op_count in sorted(positions):
            by_stream = positions[op_count]
            if len(by_stream) < 2 or len(set(map(_SIGNATURE, by_stream.values()))) < 2:
                continue  # (the usual case, told without grouping thousands of members)
            groups: dict[object, list[Stream]] = defaultdict(list)
            for stream, record in by_stream.items():
                groups[(record.op, record.count, record.datatype, record.root)].append(stream)
            if len(groups) < 2:
                continue
            reference, odd, tie = _split_majority(groups)
            if tie:
                reference, odd = self._break_tie(index, by_stream, reference, odd)
            ref = by_stream[reference[0]]
            bad = by_stream[odd[0]]
            what = self._difference(ref, bad)
            ranks, hosts, pids = culprits(index, odd)
            confidence = (0.5 if tie else 0.85) * (0.6 + 0.4 * _coverage(state))
            events: list[Event] = [by_stream[s].event for s in (*odd, *reference)]
            return self.finding(
                severity="critical",
                title=(
                    f"{describe(index, odd)} issued {bad.op} where {describe(index, reference)} issued "
                    f"{ref.op} at opCount {op_count:#x} on comm {state.key}"
                ),
                detail=(
                    f"At position {op_count:#x} of communicator {state.key} the ranks disagree on "
                    f"{what}: {self._sig(bad)} on {describe(index, odd)} versus {self._sig(ref)} on "
                    f"{describe(index, reference)}. NCCL matches collectives by position, so the job "
                    "hangs or exchanges garbage."
                    + (
                        " The sides are equally large; the side with a byte-typed (object) "
                        "collective, else the side without the lowest rank, is taken as the odd one."
                        if tie
                        else ""
                    )
                ),
                events=events,
                ranks=ranks,
                hosts=hosts,
                pids=pids,
                communicator=state.key,
                confidence=confidence,
                next_steps=(
                    f"Find where {describe(index, odd)} calls {bad.op} (an all_gather_object or "
                    "broadcast_object_list behind a rank check is the classic cause).",
                    "Re-run with TORCH_DISTRIBUTED_DEBUG=DETAIL: the desync report names both Python calls.",
                    "Make every rank issue the same collectives in the same order.",
                ),
            )
        return None

    @staticmethod
    def _sig(record: OpRecord) -> str:
        return f"{record.op}(count={record.count}, datatype={record.datatype}, root={record.root})"

    @staticmethod
    def _difference(ref: OpRecord, bad: OpRecord) -> str:
        if ref.op != bad.op:
            return "the operation"
        if ref.count != bad.count:
            return "the element count"
        if ref.datatype != bad.datatype:
            return "the data type"
        return "the root"

    @staticmethod
    def _break_tie(
        index: EvidenceIndex,
        by_stream: dict[Stream, OpRecord],
        reference: list[Stream],
        odd: list[Stream],
    ) -> tuple[list[Stream], list[Stream]]:
        def byte_typed(streams: list[Stream]) -> bool:
            return any(by_stream[s].datatype in _BYTE_TYPES for s in streams)

        if byte_typed(reference) != byte_typed(odd):
            return (odd, reference) if byte_typed(reference) else (reference, odd)

        def lowest(streams: list[Stream]) -> tuple[int, int]:
            ranks = [r for r in (index.rank_of(h, p) for h, p in streams) if r is not None]
            devs = [d for s in streams for d in sorted(index.proc(s).devices)]
            return (min(ranks) if ranks else 1 << 30, min(devs) if devs else 1 << 30)

        return (reference, odd) if lowest(reference) <= lowest(odd) else (odd, reference)

    def _check_fingerprints(self, index: EvidenceIndex) -> Iterable[Finding]:
        """Name the odd one out of the DETAIL fingerprints by majority, not by the first pair.

        Every rank that sees a difference prints its own fingerprint and the first other
        rank's that differs, so a culprit appears in most messages and each victim in one.
        Each rank's fingerprint (op, shape, dtype) is taken from what it said itself, else
        from what others quoted of it; at the first sequence number where they differ, the
        ranks whose fingerprint is not the majority's are the culprits.
        """
        prints = [e for e in index.torch if isinstance(e, CollectiveFingerprint)]
        if not prints:
            return
        own: dict[tuple[int | None, int], tuple[str | None, str | None, str | None]] = {}
        quoted: dict[tuple[int | None, int], tuple[str | None, str | None, str | None]] = {}
        for e in prints:
            if e.rank is not None:
                own[(e.seq, e.rank)] = (e.op_type, e.shape, e.dtype)
            if e.other_rank is not None:
                quoted.setdefault(
                    (e.seq, e.other_rank), (e.other_op_type, e.other_shape, e.other_dtype)
                )
        prints_of = {**quoted, **own}
        seqs = sorted({seq for seq, _ in prints_of}, key=lambda s: (s is None, s or 0))
        seq = seqs[0]
        votes = {rank: sig for (s, rank), sig in prints_of.items() if s == seq}
        groups: dict[tuple[str | None, str | None, str | None], list[int]] = defaultdict(list)
        for rank, sig in sorted(votes.items()):
            groups[sig].append(rank)
        ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), min(kv[1])))
        tie = len(ordered) > 1 and len(ordered[0][1]) == len(ordered[1][1])
        first = prints[0]
        if len(ordered) < 2:
            odd_ranks = sorted({e.other_rank for e in prints if e.other_rank is not None})
            reference: list[int] = []
            what = "their collectives"
        else:
            reference = ordered[0][1]
            odd_ranks = sorted(r for _, ranks in ordered[1:] for r in ranks)
            (ref_op, ref_shape, ref_dtype), (bad_op, bad_shape, bad_dtype) = (
                ordered[0][0],
                ordered[1][0],
            )
            if ref_op != bad_op:
                what = f"the operation ({bad_op} versus {ref_op})"
            elif ref_shape != bad_shape:
                what = f"the tensor shape ({bad_shape} versus {ref_shape})"
            else:
                what = f"the data type ({bad_dtype} versus {ref_dtype})"
        hosts: list[str] = []
        pids: list[int] = []
        for rank in odd_ranks:
            proc = index.proc_of_rank(rank)
            if proc is not None and proc.host:
                hosts.append(proc.host)
            if proc is not None and proc.pid is not None:
                pids.append(proc.pid)
        if reference:
            detail = (
                f"TORCH_DISTRIBUTED_DEBUG=DETAIL compared the collectives of {len(votes)} rank(s) "
                f"at sequence number {seq}: rank(s) {_fmt(reference)} agree and rank(s) "
                f"{_fmt(odd_ranks)} differ in {what}. The odd one out is the culprit; the others "
                "only reported the difference."
            )
            if tie:
                detail += " The sides are equally large, so which one diverged is uncertain."
        else:
            detail = (
                f"TORCH_DISTRIBUTED_DEBUG=DETAIL reported {first.op_type} on rank {first.rank} "
                f"versus {first.other_op_type} on rank {first.other_rank} at sequence {first.seq}."
            )
        yield self.finding(
            severity="critical",
            title=(
                f"rank(s) {_fmt(odd_ranks)} issued a different collective at sequence number {seq}"
                + (f" ({what}) than rank(s) {_fmt(reference)}" if reference else "")
                if odd_ranks
                else "PyTorch detected mismatched collectives"
            ),
            detail=detail,
            events=prints,
            ranks=odd_ranks,
            hosts=hosts,
            pids=pids,
            confidence=(0.5 if tie else 0.9) if reference else 0.6,
            next_steps=(
                "Compare the call sites of the odd rank(s) with the others' and make them agree "
                "(the shape passed to the collective, the order of the calls).",
            ),
        )


def _listed_in_rank_order(lines: Sequence[WatchdogTimeout | WatchdogProgress]) -> bool:
    """Say whether one input lists the ranks' watchdog lines rank by rank, in rank order."""
    if len({e.ref.source for e in lines}) != 1:
        return False
    order: list[int] = []
    for event in sorted(lines, key=lambda e: e.ref.line):
        rank = global_rank(event, event.rank, event.pg)
        if rank is None:
            return False
        if not order or order[-1] != rank:
            order.append(rank)
    return order == sorted(set(order))


class CollectiveTimeout(Rule):
    """A collective timed out on every rank that reported, with every rank inside it.

    Symptom:
        The ProcessGroupNCCL watchdog reports ``Watchdog caught collective operation
        timeout: WorkNCCL(SeqNum=S, OpType=...)`` on the ranks, all for the same SeqNum,
        and every rank enqueued work past S (``last enqueued`` >= S): no rank is missing
        from the collective, the collective itself did not finish.

    Likely causes:
        A network or transport stall (IB link flaps, a congested or misrouted fabric), a
        GPU hung inside the kernel (another kernel spinning, ECC/Xid errors), NVLink
        problems, or a rank whose own logs are missing and that is elsewhere.

    What to check:
        ``NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL,NET`` logs of all ranks, ``dmesg`` for
        Xid errors, ``ibstat``/``ibv_devinfo`` port state, and a flight recorder dump
        (``TORCH_NCCL_TRACE_BUFFER_SIZE=2000 TORCH_NCCL_DUMP_ON_TIMEOUT=1``).
    """

    code = "LS103"
    name = "collective.timeout"
    kind = "collective-timeout"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        timeouts = [e for e in index.torch if isinstance(e, WatchdogTimeout)]
        progress = [e for e in index.torch if isinstance(e, WatchdogProgress)]
        if not timeouts:
            yield from self._behind_without_timeouts(index, progress)
            return
        by_seq: dict[tuple[str | None, int | None, str], list[WatchdogTimeout]] = defaultdict(list)
        for e in timeouts:
            by_seq[(e.pg, e.seq, e.op_type)].append(e)
        (pg, seq, op_type), group = max(
            by_seq.items(), key=lambda kv: (len(kv[1]), _order(kv[0][1]), str(kv[0][0]))
        )
        work = work_label(op_type, seq)
        # Global ranks only: ``[PG ID 11 PG GUID 119 Rank 1]`` is rank 1 of group 119.
        ranks = sorted({r for e in group if (r := global_rank(e, e.rank, e.pg)) is not None})
        # The timeout line often names no group ([Rank N] prefix): then every group's counts
        # are taken, as before; a named group is compared only with itself.
        mine = [p for p in progress if pg is None or p.pg is None or p.pg == pg]
        # Without a SeqNum (torch before 1.10) no rank's enqueued work can be placed before
        # or after the timed-out collective.
        placed = (
            []
            if seq is None
            else [(r, p) for p in mine if (r := global_rank(p, p.rank, p.pg)) is not None]
        )
        behind = sorted(
            {r for r, p in placed if p.last_enqueued is not None and p.last_enqueued < (seq or 0)}
        )
        inside = {r for r, p in placed if (p.last_enqueued or 0) >= (seq or 0)}
        moved_on = self._moved_on(mine, seq, set(ranks)) if seq is not None else None
        if moved_on is not None:
            stuck, past, frontier = moved_on
            yield self._laggards(
                index,
                group,
                progress,
                stuck,
                frontier,
                "collective",
                past,
                waited="wait in it (their watchdogs' last enqueued work)",
                why=(
                    f"Ranks {_fmt(past)} completed {op_type} SeqNum {seq} and enqueued work up "
                    f"to SeqNum {frontier}, which they did not complete; rank(s) {_fmt(stuck)} "
                    f"are still in SeqNum {seq} (their watchdogs timed out there or completed "
                    "less): they never reached the collective the others wait in."
                ),
            )
            return
        left = [
            e
            for e in ended_runs(index)
            if e.rank is None or (e.rank not in ranks and e.rank not in inside)
        ]
        if left and not behind:
            yield self._left_loop(index, group, progress, left, seq, op_type, ranks)
            return
        silent = self._silent_ranks(index, set(ranks) | inside, [*group, *mine])
        ranks = sorted(set(ranks) | inside)
        if len(ranks) < 2 and not behind:
            # One rank's line says that it waited, not why: never "every rank is inside".
            yield self._one_side(index, group, progress, seq, op_type, ranks)
            return
        if behind or silent:
            missing = sorted(set(behind) | set(silent))
            yield self._laggards(index, group, progress, missing, seq, op_type, ranks)
            return
        numel = group[0].numel_in
        timeout_s = (group[0].timeout_ms or 0) / 1000
        facts = [f"SeqNum {seq}"] if seq is not None else []
        facts += [f"{numel:,} elements"] if numel else []
        facts += [f"timeout {timeout_s:g} s"] if timeout_s else []
        dead = sorted({d.rank for d in own_deaths(index) if d.rank is not None} - set(ranks))
        if dead:
            # A rank that died before the collective was not there to finish it: the timeout
            # is its consequence (ProcessDied names it), not a stall inside communication.
            yield self.finding(
                severity="warning",
                title=f"{work} timed out on ranks {_fmt(ranks)} after rank(s) {_fmt(dead)} had died",
                detail=(
                    f"{len(ranks)} rank(s) report that {work} did not finish; "
                    f"rank(s) {_fmt(dead)} had already ended on their own account (torchrun's "
                    "summary), so the collective could not complete. The timeout follows the death."
                ),
                events=[*group, *progress],
                ranks=ranks,
                confidence=0.7,
                next_steps=(f"Find out why rank(s) {_fmt(dead)} died (their own output, dmesg).",),
            )
            return
        if unsaid := self._mostly_unsaid(index, group, ranks):
            yield self._few_inside([*group, *progress], work, ranks, unsaid, op_type, facts)
            return
        confidence = 0.6 if len(ranks) > 1 else 0.4
        yield self._all_inside([*group, *progress], work, ranks, confidence, op_type, facts)

    def _all_inside(
        self,
        events: list[WatchdogTimeout | WatchdogProgress],
        work: str,
        ranks: list[int],
        confidence: float,
        what: str | None = None,
        facts: Iterable[str] = (),
    ) -> Finding:
        """Every reporting rank timed out inside ``work`` and none is behind: the collective
        itself stalled. ``what``: the collective as the lines name it (its type), if not
        ``work``; ``facts``: what they say of it."""
        said = ", ".join(facts)
        return self.finding(
            severity="error",
            title=f"{work} timed out on ranks {_fmt(ranks)} with every reporting rank inside it",
            detail=(
                f"{len(ranks)} rank(s) report that {what or work}"
                + (f" ({said})" if said else "")
                + " did not finish, and none is behind in enqueueing work. The collective itself "
                "stalled: a network/transport problem or a GPU hung inside the kernel, not a rank "
                "that skipped the call."
            ),
            events=events,
            ranks=ranks,
            confidence=confidence,
            next_steps=(
                "Collect NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL,NET logs from every rank and re-run analysis.",
                "Check dmesg for Xid/ECC errors and the IB ports (ibstat, ibv_devinfo) on the hosts involved.",
                "Enable the flight recorder (TORCH_NCCL_TRACE_BUFFER_SIZE=2000, "
                "TORCH_NCCL_DUMP_ON_TIMEOUT=1) to see which ranks completed which collectives.",
            ),
        )

    def _few_inside(
        self,
        events: list[WatchdogTimeout | WatchdogProgress],
        work: str,
        ranks: list[int],
        unsaid: str,
        what: str,
        facts: Iterable[str] = (),
    ) -> Finding:
        """Every reporting rank timed out inside ``work``, but most ranks of the job said
        nothing about it: the reporters waited; whether the others were inside is unknown."""
        said = ", ".join(facts)
        return self.finding(
            severity="error",
            title=f"{work} timed out on ranks {_fmt(ranks)}; {unsaid} left no line about it",
            detail=(
                f"{len(ranks)} rank(s) report that {what}"
                + (f" ({said})" if said else "")
                + f" did not finish, and none of them is behind in enqueueing work; {unsaid} "
                "left no line about it. The reporters are the ones that waited: the collective "
                "stalled inside communication, or a rank whose log is missing never entered "
                "it. Only the missing logs tell which."
            ),
            events=events,
            confidence=0.3,
            next_steps=(
                f"Collect the logs of {unsaid} (their watchdog lines, or the launcher's combined "
                "output): a rank that reported no timeout, or enqueued less work, is the culprit.",
                "Dump the stacks of all ranks while the job hangs (py-spy dump --pid PID), or "
                "enable the flight recorder (TORCH_FR_BUFFER_SIZE=2000, TORCH_FR_DUMP_ON_TIMEOUT=1).",
            ),
        )

    @staticmethod
    def _mostly_unsaid(
        index: EvidenceIndex, group: list[WatchdogTimeout], ranks: list[int]
    ) -> str | None:
        """Name the ranks of the job that said nothing about the timed-out collective, when
        they are more than half as many as the reporters; None otherwise.

        Ranks count from 0, so every rank below the highest reporter exists; the world size
        says how many more do. A few ranks missing from an excerpt (one of five) leave the
        reporters' agreement standing; most of the job missing does not.
        """
        if not all(global_rank(e, e.rank, e.pg) is not None for e in group) or not ranks:
            return None  # a process group's own ranks: its size is unknown
        size = max(index.world_size or 0, max(ranks) + 1)
        count = size - len(set(ranks))
        if count * 2 <= len(ranks):
            return None
        listed = absent_ranks(size, ranks, 64)
        if listed is None:
            return f"{count} other ranks"
        return f"rank{'s' if count > 1 else ''} {format_ranks(listed)}"

    def _behind_without_timeouts(
        self, index: EvidenceIndex, progress: list[WatchdogProgress]
    ) -> Iterable[Finding]:
        """Ranks whose watchdogs enqueued less work than the others', with no timeout quoted.

        The timeout itself is often on a rank whose lines are not in the excerpt: the others
        print where they stood when its dump signal reached them (``Received a dump signal
        due to a collective timeout from rank 1 ... Last enqueued NCCL work: 4410, last
        completed NCCL work: 4409``). Work S = the highest enqueued, not completed by anyone
        that enqueued it, is the stuck collective; a minority that never enqueued S is where
        the waiting ends.
        """
        by_pg: dict[str | None, dict[int, WatchdogProgress]] = defaultdict(dict)
        for p in progress:
            rank = global_rank(p, p.rank, p.pg)
            if rank is not None and p.last_enqueued is not None:
                by_pg[p.pg][rank] = p
        for _pg, ranks in sorted(by_pg.items(), key=lambda kv: str(kv[0])):
            seq = max(p.last_enqueued or 0 for p in ranks.values())
            inside = sorted(r for r, p in ranks.items() if p.last_enqueued == seq)
            behind = sorted(r for r, p in ranks.items() if (p.last_enqueued or 0) < seq)
            stuck = all((c := ranks[r].last_completed) is not None and c < seq for r in inside)
            # Each rank's own watchdog line (``Timeout at NCCL work: S``), not a dump signal
            # relayed from the rank that timed out: a rank of the world that printed none had
            # not enqueued S.
            own = stuck and not behind and all(ranks[r].work == seq for r in inside)
            if own:
                behind = self._silent_ranks(index, set(inside), list(ranks.values()))
            if behind and stuck and len(behind) < len(inside):
                yield self._laggards(
                    index,
                    [],
                    list(ranks.values()),
                    behind,
                    seq,
                    "collective",
                    inside,
                    waited="wait in it (their watchdogs' last enqueued work)",
                )
            elif own and len(inside) > 1:
                yield self._all_inside(list(ranks.values()), f"work {seq}", inside, 0.5)
            elif own:
                # One rank's own "Timeout at NCCL work: S": it waited, not why.
                yield self._one_side(index, [], list(ranks.values()), seq, "NCCL work", inside)
            elif stuck and not behind:
                # Only dump signals relayed from the rank that timed out, every rank that
                # printed one inside S: they wait there too, for whom the lines do not say.
                yield self._relayed(list(ranks.values()), seq, inside)

    def _relayed(self, progress: list[WatchdogProgress], seq: int, inside: list[int]) -> Finding:
        """Ranks that received a dump signal after another rank's timeout, all still in S."""
        signal = next((m for p in progress if (m := _SIGNALLED_BY.search(p.text))), None)
        source = f"rank {signal.group(1)}" if signal else "another rank"
        who = f"rank(s) {_fmt(inside)}"
        return Finding(
            code=self.code,
            name=self.name,
            kind="missing-collective",
            severity="error",
            title=f"a collective timed out on {source}; {who} received its dump signal while "
            f"waiting in NCCL work {seq}",
            detail=(
                f"{who[0].upper()}{who[1:]} printed the flight recorder's dump signal that "
                f"{source}'s watchdog sent after its collective timed out; their own last "
                f"enqueued work ({seq}) had not completed: they wait in it too. The rank(s) that "
                "never entered it are not among these lines."
            ),
            confidence=0.3,
            evidence=evidence_of(progress)[0],
            evidence_total=len(progress),
            next_steps=(
                f"Collect the output of {source} (its watchdog's timeout line names the "
                "collective and its SeqNum) and of every other rank: a rank whose last enqueued "
                f"work is below {seq} never entered the collective.",
                "Include the flight recorder dumps the signal wrote (TORCH_FR_DUMP_TEMP_FILE, by "
                "default /tmp/nccl_trace_rank_<rank>); logsleuth reads them.",
            ),
        )

    @staticmethod
    def _moved_on(
        mine: list[WatchdogProgress], seq: int, timed_out: set[int]
    ) -> tuple[list[int], list[int], int] | None:
        """(stuck, past, frontier) when other ranks completed the collective that timed out.

        ``last completed NCCL work: S`` on some ranks while others time out in S: those that
        completed it went on and wait in their last enqueued work (the frontier); the ranks
        still in S never reached it. None when no rank got past S to a later collective.
        """
        past: dict[int, int] = {}
        stuck = set(timed_out)
        for p in mine:
            rank = global_rank(p, p.rank, p.pg)
            if rank is None or p.last_enqueued is None:
                continue
            if p.last_completed is not None and p.last_completed >= seq:
                past[rank] = p.last_enqueued
            elif p.last_enqueued >= seq:
                stuck.add(rank)
        stuck -= past.keys()
        frontier = max(past.values(), default=seq)
        if not stuck or frontier <= seq:
            return None
        return sorted(stuck), sorted(past), frontier

    def _one_side(
        self,
        index: EvidenceIndex,
        group: list[WatchdogTimeout],
        progress: list[WatchdogProgress],
        seq: int | None,
        op_type: str,
        ranks: list[int],
    ) -> Finding:
        work = work_label(op_type, seq)
        who = f"rank {ranks[0]}" if ranks else "one rank"
        world = index.world_size
        others = (
            f"the other {world - 1} rank(s) left no line about it"
            if world
            else "no other rank's side is in the evidence"
        )
        # What one side shows: a rank waited and somebody did not complete the other side.
        # Most often that rank never entered the collective (missing-collective); the culprit
        # stays unnamed, and the confidence says how little one line proves.
        return Finding(
            code=self.code,
            name=self.name,
            kind="missing-collective",
            severity="error",
            title=f"{who} timed out waiting in {work}; {others}",
            detail=(
                f"Only {who} reports the timeout of {op_type}"
                + (f" (SeqNum {seq})" if seq is not None else "")
                + ". A timeout says that "
                f"{who} waited, not why: it is the one that waited, not the culprit, and one "
                "rank's line cannot show that every rank was inside the collective. The rank(s) "
                "that did not arrive are among those whose logs are missing."
            ),
            confidence=0.3,
            evidence=evidence_of([*group, *progress])[0],
            evidence_total=len(group) + len(progress),
            next_steps=(
                "Collect the logs of every rank (the launcher's combined output, or each rank's "
                "stderr): the rank(s) that reported no timeout, or enqueued less work, are the suspects.",
                "Dump the stacks of all ranks while the job hangs (py-spy dump --pid PID), or "
                "enable the flight recorder (TORCH_FR_BUFFER_SIZE=2000, TORCH_FR_DUMP_ON_TIMEOUT=1).",
            ),
        )

    @staticmethod
    def _silent_ranks(
        index: EvidenceIndex,
        reporting: set[int],
        lines: Sequence[WatchdogTimeout | WatchdogProgress] = (),
    ) -> list[int]:
        """Ranks the evidence names (a line, a process) that did not time out while the others
        did. ``lines``: the reporters' watchdog lines."""
        if len(reporting) < 2:
            return []
        seen = set(index.named_ranks())
        world = index.world_size
        if world is not None:
            # Every rank of the world counts as seen when nearly all of them reported.
            rest = absent_ranks(world, reporting, max(1, world // 8))
            seen |= reporting | set(rest) if rest is not None else set()
        # Rank 0 exists in every job, and it is the rank that runs the work guarded by
        # ``if rank == 0:`` (evaluation, checkpoints, data preparation): when ranks 1..k all
        # time out and rank 0 says nothing, its silence counts. Other gaps are more often a
        # cut excerpt, so only that shape implies a silent rank.
        if min(reporting) == 1 and max(reporting) == len(reporting):
            seen.add(0)
        # A hole inside a listing of the reporters in rank order (0-4 and 6-7 time out, 5
        # says nothing) is no cut: a cut loses the listing's head or tail. Where the ranks'
        # lines interleave, a cut may have lost any of them.
        low, high = min(reporting), max(reporting)
        holes = [r for r in range(low, high + 1) if r not in reporting]
        if (
            low <= 1
            and len(reporting) >= 4
            and 0 < len(holes) <= max(1, len(reporting) // 8)
            and _listed_in_rank_order(lines)
        ):
            seen.update(holes)
        # A rank torchrun lists as failed or stopped had its fate decided before its watchdog
        # could fire (stopped with its host when a sibling died): its silence says nothing.
        # Unless the agent stopped it (SIGTERM) only after the reporters' own aborts, their
        # watchdog timeouts: its watchdog had then run as long as theirs.
        ended = {f.rank for f in index.failures if f.rank is not None}
        failed = {f.rank for f in index.failures if f.signal != "SIGTERM"}
        if failed and failed <= reporting:
            ended &= failed
        candidates = sorted(seen - reporting - ended)
        # Only when the silent ranks are a clear minority does silence point at them.
        return candidates if 0 < len(candidates) < len(reporting) else []

    def _left_loop(
        self,
        index: EvidenceIndex,
        group: list[WatchdogTimeout],
        progress: list[WatchdogProgress],
        left: list[EndedRun],
        seq: int | None,
        op_type: str,
        ranks: list[int],
    ) -> Finding:
        """Processes said their training loop reached its end while ranks timed out in a
        collective: they left the others waiting there."""
        missing = sorted({e.rank for e in left if e.rank is not None})
        pids = sorted({e.pid for e in left if e.pid is not None})
        hosts = sorted({e.host for e in left if e.host})
        if missing:
            who = f"rank(s) {_fmt(missing)}"
        else:
            who = ("pid " if len(pids) == 1 else "pids ") + ", ".join(map(str, pids))
        work = work_label(op_type, seq)
        evidence = evidence_of([*(e.event for e in left), *group, *progress])
        return Finding(
            code=MissingCollective.code,
            name=MissingCollective.name,
            kind=MissingCollective.kind,
            severity="critical",
            title=f"{who} ended their training loop; ranks {_fmt(ranks)} timed out waiting for "
            f"them in {work}",
            detail=(
                f"The process(es) of {who} reached the end of their training loop "
                f"({_message_of(left[0].event)}) while ranks {_fmt(ranks)} still waited in "
                f"{work}: the finished processes issued fewer collectives than the others, "
                "whose last one then had no partner on them."
            ),
            ranks=tuple(missing),
            hosts=tuple(hosts),
            pids=tuple(pids),
            confidence=0.65,
            evidence=evidence[0],
            evidence_total=evidence[1],
            next_steps=(
                f"Compare the number of steps or batches each rank runs: {who} stopped first "
                "(a max_steps or epoch length computed per rank, an uneven data shard, an early "
                "stop decided on one rank).",
                "Make the stopping decision shared (all-reduce a stop flag) or even out the "
                "batches per rank (DistributedSampler with drop_last, Join for uneven inputs).",
            ),
        )

    def _laggards(
        self,
        index: EvidenceIndex,
        group: list[WatchdogTimeout],
        progress: list[WatchdogProgress],
        missing: list[int],
        seq: int | None,
        op_type: str,
        ranks: list[int],
        waited: str = "timed out in it",
        why: str | None = None,
    ) -> Finding:
        work = work_label(op_type, seq)
        hosts: list[str] = []
        pids: list[int] = []
        evidence = evidence_of([*group, *progress])
        for rank in missing:
            proc = index.proc_of_rank(rank)
            if proc is not None:
                hosts += [proc.host] if proc.host else []
                pids += [proc.pid] if proc.pid is not None else []
        return Finding(
            code=MissingCollective.code,
            name=MissingCollective.name,
            kind=MissingCollective.kind,
            severity="critical",
            title=f"rank(s) {_fmt(missing)} never entered {work}; ranks {_fmt(ranks)} {waited}",
            detail=why
            or (
                (
                    f"The watchdog of ranks {_fmt(ranks)} timed out in {work}"
                    if group
                    else f"The watchdogs of ranks {_fmt(ranks)} enqueued {work} "
                    "and did not complete it"
                )
                + f", but rank(s) "
                f"{_fmt(missing)} either enqueued less work or reported no timeout at all: they never "
                "joined the collective."
            ),
            ranks=tuple(missing),
            hosts=tuple(sorted(set(hosts))),
            pids=tuple(sorted(set(pids))),
            confidence=0.6,
            evidence=evidence[0],
            evidence_total=evidence[1],
            next_steps=(
                f"Dump the stacks of rank(s) {_fmt(missing)} (py-spy dump --pid PID) to see where they are.",
                "Look for an exception, an early exit or rank-dependent control flow on those ranks.",
            ),
        )


_SIGNALLED_BY = re.compile(r"dump signal due to a collective timeout from\s+rank (\d+)")
"""The rank whose watchdog timed out, as a relayed dump signal names it."""


def _message_of(event: Event) -> str:
    text = str(getattr(event, "message", "") or event.text).replace("`", "").strip()
    return text if len(text) <= 80 else text[:79] + "…"


def _fmt(ranks: Iterable[int]) -> str:
    return format_ranks(ranks) or "?"


_SIZE_CHECK = re.compile(
    r"Is there a distributed collective mismatch|Received data size doesn't match expected size"
    r"|message truncated : receiving \d+ bytes instead of \d+",
    re.IGNORECASE,
)
_BYTES = re.compile(r"(\d+) vs (\d+)|receiving (\d+) bytes instead of (\d+)")


class TransportSizeCheck(Rule):
    """The transport itself saw a message of the wrong size: ranks called mismatched collectives.

    Symptom:
        gloo aborts with ``op.preamble.length <= op.nbytes. 1024 vs 512. Received data size
        doesn't match expected size. Is there a distributed collective mismatch in your
        code?``, or NCCL's socket transport warns ``message truncated : receiving N bytes
        instead of M``; the detecting process dies (SIGABRT) and its peers then lose their
        connections.

    Likely causes:
        Ranks passing tensors of different sizes to the same collective (a last batch of a
        different size, shapes that depend on the rank's data), or ranks calling different
        collectives at the same point.

    What to check:
        Tensor shapes at the failing call on every rank (log ``tensor.shape`` before the
        call, or run with ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` to make PyTorch compare them
        and name the ranks). The process that detected the mismatch is usually not the one
        that sent the odd size.
    """

    code = "LS108"
    name = "collective.size_check"
    kind = "collective-mismatch"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        hits: list[Event] = []
        for event in (*index.torch, *index.warns):
            if _SIZE_CHECK.search(message_text(event)):
                hits.append(event)
        if not hits:
            return
        first = hits[0]
        sizes = _BYTES.search(message_text(first))
        got = expected = None
        if sizes:
            got, expected = (
                (sizes.group(1), sizes.group(2))
                if sizes.group(1)
                else (sizes.group(3), sizes.group(4))
            )
        detectors = sorted(
            {f.rank for f in index.failures if f.rank is not None and f.signal == "SIGABRT"}
        )
        yield self.finding(
            severity="critical",
            title="the transport received a message of the wrong size: ranks called mismatched collectives"
            + (f" ({got} bytes where {expected} were expected)" if got else ""),
            detail=(
                "The communication library checked the size of an incoming message against the "
                "collective this rank had posted and they differ, so the ranks did not call the "
                "same collective with the same sizes."
                + (
                    f" The check failed on rank(s) {format_ranks(detectors)}, which then aborted;"
                    " the rank that sent the odd size is one of its peers and cannot be told from "
                    "this message."
                    if detectors
                    else " Which rank sent the odd size cannot be told from this message."
                )
            ),
            events=hits,
            confidence=0.75,
            next_steps=(
                "Re-run with TORCH_DISTRIBUTED_DEBUG=DETAIL: PyTorch then compares collective "
                "shapes across ranks before running them and names the rank that differs.",
                "Log the tensor shapes passed to the failing call (the quoted stack) on every rank; "
                "look for a last batch of another size or rank-dependent shapes.",
            ),
        )


def _order(seq: int | None) -> int:
    """A SeqNum to sort by; a timeout without one (torch before 1.10) sorts first."""
    return -1 if seq is None else seq
