"""Operations on several communicators issued in a different order by different processes."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from itertools import pairwise
from operator import itemgetter

from logsleuth.analysis.index import EvidenceIndex, OpRecord, Stream
from logsleuth.analysis.rules.base import Rule, culprits, describe
from logsleuth.model.diagnosis import Finding

_P2P = ("Send", "Recv")

Signature = tuple[str, int | None, int | None, int | None]
"""What makes two collectives of two processes the same call: op, count, datatype, nranks."""


def _sequences(index: EvidenceIndex) -> dict[Stream, list[tuple[Signature, OpRecord]]]:
    """Each process's collectives over all its communicators, in the order it logged them.

    Processes that logged one communicator only (by its pointer) are left out: the order
    within one communicator is LS102's question. Empty unless every process logged every
    one of its collectives (no window of the last ones) and as many on each communicator
    as the others: only then do two sequences differ by their order alone.
    """
    # (source, line, signature, record, comm pointer): sorted by line without a key function.
    found: dict[Stream, list[tuple[str, int, Signature, OpRecord, str]]] = defaultdict(list)
    per_comm: dict[Stream, dict[str, int]] = defaultdict(dict)
    for state in index.comms.values():
        for stream, ops in state.ops.items():
            if state.op_totals.get(stream, len(ops)) != len(ops):
                return {}  # only the last ops are kept: the windows need not line up
            per_comm[stream][state.key] = len(ops)
            items = found[stream]
            for record in ops:
                if record.op in _P2P:
                    continue
                event = record.event
                signature = (record.op, record.count, record.datatype, event.nranks or state.nranks)
                items.append((event.ref.source, event.ref.line, signature, record, event.comm))
    ordered: dict[Stream, list[tuple[Signature, OpRecord]]] = {}
    for stream, items in found.items():
        if len({item[4] for item in items}) < 2:
            continue
        if per_comm[stream] != next(iter(per_comm.values())):
            return {}  # a process behind on one communicator: not an order question
        items.sort(key=_BY_LINE)
        ordered[stream] = [(signature, record) for _, _, signature, record, _ in items]
    return ordered


_BY_LINE = itemgetter(0, 1)


class CrossCommunicatorOrder(Rule):
    """Processes issued the same collectives on their communicators in a different order.

    Symptom:
        Each process logs the same calls (the same operations, counts and data types, each on
        its own communicator) but not in the same order: one process launches the collective
        of communicator X before that of Y, its peer Y before X. Nothing fails; the job hangs
        in the first of them.

    Likely causes:
        Several communicators (or streams) used without one order across processes: threads
        that each issue on their own communicator, a runtime that schedules independent
        collectives in a different order per process, blocking launches
        (``CUDA_LAUNCH_BLOCKING=1``) or a full launch queue, so that each process waits in a
        collective its peer will only reach after the one it is blocked in.

    What to check:
        The code that issues the collectives of the named communicators: give them one order
        on every process (issue them from one thread, or order them explicitly), or group them
        (``ncclGroupStart/End``); check ``CUDA_LAUNCH_BLOCKING`` in the job's environment.
    """

    code = "LS113"
    name = "collectives.cross_comm_order"
    kind = "collective-mismatch"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        sequences = _sequences(index)
        if len(sequences) < 2:
            return
        lengths = {len(items) for items in sequences.values()}
        if len(lengths) != 1:
            return  # processes at different points: positions do not line up
        calls = {stream: [s for s, _ in items] for stream, items in sequences.items()}
        orders = Counter(tuple(c) for c in calls.values())
        if len(orders) < 2:
            return
        if len({tuple(sorted(order, key=repr)) for order in orders}) != 1:
            return  # not the same calls: another rule's question (size, missing op)
        streams = sorted(calls, key=lambda s: (str(s[0]), s[1] or 0))
        first = min(
            next(
                i
                for i, (a, b) in enumerate(zip(calls[streams[0]], calls[s], strict=True))
                if a != b
            )
            for s in streams[1:]
            if calls[s] != calls[streams[0]]
        )
        (common, top), *rest = orders.most_common()
        odd = [s for s in streams if tuple(calls[s]) != common] if top > rest[0][1] else []
        events = [sequences[s][first][1].event for s in streams]
        ranks, hosts, pids = culprits(index, odd) if odd else ([], [], [])

        def _call(stream: Stream) -> str:
            op, count, _, _ = calls[stream][first]
            return f"{op}(count {count}) on comm {sequences[stream][first][1].event.comm}"

        differing = ", ".join(f"{describe(index, [s])}: {_call(s)}" for s in streams[:4])
        title = (
            f"{len(streams)} processes issue the same {len(calls[streams[0]])} collectives on "
            f"different communicators in a different order (call {first + 1}: {differing})"
        )
        blame = (
            f"{describe(index, odd)} differ from the order the others share."
            if odd
            else "no majority says which order is intended; each process waits in a collective "
            "its peer reaches only after the one it is blocked in."
        )
        yield self.finding(
            severity="critical",
            title=title,
            detail=(
                "Every process logged the same calls, each on a communicator of its own, but "
                f"their order differs from call {first + 1} on. Launches that block (or a full "
                f"launch queue) then deadlock: {blame}"
            ),
            events=events,
            ranks=ranks,
            hosts=hosts,
            pids=pids,
            confidence=0.6 if odd else 0.5,
            next_steps=(
                "Issue the collectives of these communicators in one order on every process (one "
                "thread, or an explicit order), or group them with ncclGroupStart/ncclGroupEnd.",
                "Check CUDA_LAUNCH_BLOCKING and other settings that make launches block.",
            ),
        )


class CrossCommP2P(Rule):
    """One process interleaves point-to-point operations of several communicators.

    Symptom:
        The COLL lines of one process show ``Send``/``Recv`` on two or more communicators
        taking turns (``Send ... comm 0xA``, ``Recv ... comm 0xB``, ``Send ... comm 0xA``,
        often each on its own CUDA stream), and the log then stops without an error or a
        communicator teardown: the job hangs.

    Likely causes:
        A blocking send or receive waits until its peer posts the matching operation. When
        a process drives point-to-point traffic over several communicators (pipeline
        stages exchanging activations and gradients in both directions, one communicator
        per direction or per pair), the peers must issue those operations in one
        consistent order, or inside one group call: otherwise each side waits in one
        communicator for an operation its peer has queued behind a blocked one in the
        other (NCCL's documentation, "Using multiple NCCL communicators concurrently").

    What to check:
        The order in which each rank issues its sends and receives per communicator: the
        peer's COLL log (``NCCL_DEBUG_SUBSYS=COLL``) next to this one shows where the
        orders part. Issue each exchange as one group (``ncclGroupStart``/``ncclGroupEnd``;
        ``torch.distributed.batch_isend_irecv``), or a single order on every rank.
    """

    code = "LS114"
    name = "p2p.cross_communicator_order"
    kind = "concurrent-use"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        per_stream: dict[Stream, list[OpRecord]] = defaultdict(list)
        for key in sorted(index.comms):
            state = index.comms[key]
            for stream, ops in state.ops.items():
                if stream in state.ended:
                    continue  # this process tore the communicator down: it did not hang there
                per_stream[stream].extend(r for r in ops if r.op in _P2P)
        for stream in sorted(per_stream, key=str):
            records = sorted(per_stream[stream], key=_position)
            comms = sorted({r.event.comm for r in records})
            if len(comms) < 2 or _comm_switches(records) < 2:
                continue
            yield self._finding(index, stream, records, comms)

    def _finding(
        self, index: EvidenceIndex, stream: Stream, records: list[OpRecord], comms: list[str]
    ) -> Finding:
        ranks, hosts, pids = culprits(index, [stream])
        last = {r.event.comm: r for r in records}
        tail = "; ".join(
            f"comm {comm}: {last[comm].op} opCount {last[comm].op_count:x}"
            + (f" on stream {last[comm].event.stream}" if last[comm].event.stream else "")
            for comm in comms
        )
        who = describe(index, [stream])
        return self.finding(
            severity="warning",
            title=(
                f"{who} interleaved point-to-point sends and receives over {len(comms)} "
                "communicators, and its log stops there: an order its peer does not share "
                "deadlocks both"
            ),
            detail=(
                f"{who} issued Send/Recv operations on communicators {', '.join(comms)} in "
                f"turn, and the evidence ends with operations pending on each ({tail}), with "
                "no error and no teardown. Each blocking send or receive waits for its peer to "
                "post the match; if the peer issues the two communicators' operations in "
                "another order, each side waits for an operation the other has queued behind "
                "a blocked one. Only this side's order is in the evidence."
            ),
            events=[r.event for r in records[-6:]],
            ranks=ranks,
            hosts=hosts,
            pids=pids,
            confidence=0.45,
            next_steps=(
                "Collect the peer's COLL log (NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL) and compare "
                "the order of its sends and receives per communicator with this one.",
                "Issue each exchange as one group (ncclGroupStart/ncclGroupEnd, or "
                "torch.distributed.batch_isend_irecv), or in a single order on every rank.",
            ),
        )


def _position(record: OpRecord) -> tuple[str, int]:
    return record.event.ref.source, record.event.ref.line


def _comm_switches(records: list[OpRecord]) -> int:
    """Count the changes of communicator between consecutive operations (in line order) of
    one input."""
    return sum(
        1
        for a, b in pairwise(records)
        if a.event.ref.source == b.event.ref.source and a.event.comm != b.event.comm
    )
