"""Collectives on several communicators issued in a different order by different processes."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
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
