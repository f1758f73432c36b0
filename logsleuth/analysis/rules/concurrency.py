"""Rules about work issued without ordering: unwaited collectives, one communicator, many threads."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from itertools import pairwise

from logsleuth.analysis.index import CommState, EvidenceIndex, OpRecord, Stream
from logsleuth.analysis.rules.base import Rule, culprits, describe
from logsleuth.model.base import Event
from logsleuth.model.diagnosis import Finding
from logsleuth.model.messages import LogMessage
from logsleuth.model.ranks import format_ranks
from logsleuth.model.torch import TorchUnrecognized

_UNWAITED = re.compile(
    r"At the time of process termination, there are still (\d+) unwaited collective calls"
)
_MIXED_STREAMS = re.compile(r"mixing different streams within a group call", re.IGNORECASE)


class UnwaitedCollective(Rule):
    """Asynchronous collectives were issued and never waited for.

    Symptom:
        ``Warning: At the time of process termination, there are still N unwaited
        collective calls. Please review your program to ensure that: 1.
        c10d_functional.wait_tensor() is invoked on all tensors returned from
        c10d_functional collective, ...`` (``ProcessGroup.cpp``, ``~WorkRegistry``) when a
        rank exits.

    Likely causes:
        A functional collective (``torch.distributed._functional_collectives``) or an
        ``async_op=True`` collective whose result is read without ``wait()``/
        ``wait_tensor()``; work handles dropped on the floor. The output may be used before
        the collective finished (silently wrong values), and a rank can leave while its
        peers still need the collective.

    What to check:
        The call sites of ``async_op=True`` and functional collectives on the named ranks:
        every returned ``Work`` needs ``work.wait()`` and every ``AsyncCollectiveTensor``
        needs ``wait_tensor()`` (or a use that waits) before its output is read.
    """

    code = "LS111"
    name = "collective.unwaited"
    kind = "concurrent-use"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        hits: list[tuple[TorchUnrecognized | LogMessage, int]] = []
        events: list[TorchUnrecognized | LogMessage] = [
            *index.all_of(TorchUnrecognized),
            *index.all_of(LogMessage),
        ]
        for event in events:
            if match := _UNWAITED.search(event.message):
                hits.append((event, int(match.group(1))))
        if not hits:
            return
        ranks = sorted({e.origin.rank for e, _ in hits if e.origin.rank is not None})
        most = max(n for _, n in hits)
        who = f"rank(s) {format_ranks(ranks)}" if ranks else "a process"
        yield self.finding(
            severity="warning",
            title=f"{who} exited with up to {most} collective call(s) never waited for",
            detail=(
                f"When they terminated, {who} still held {most} asynchronous collective(s) "
                "that nobody waited for (torch's WorkRegistry warning). Their outputs may have "
                "been read before the collectives finished, and a rank that leaves with work "
                "in flight can leave its peers waiting."
            ),
            events=[e for e, _ in hits],
            ranks=ranks,
            confidence=0.9,
            next_steps=(
                "Call work.wait() on every Work returned by an async_op=True collective, and "
                "wait_tensor() on every functional-collective output, before using the output.",
                "Search the named ranks' code for async_op=True and _functional_collectives calls.",
            ),
        )


class ConcurrentCommUse(Rule):
    """One communicator is driven by several threads of a process without ordering.

    Symptom:
        The COLL lines of one process on one communicator come from two or more threads
        (the ``tid`` of ``host:pid:tid``) that take turns, for example the main thread's
        gradient all-reduces interleaved with a metrics thread's loss all-reduce; or NCCL
        warns ``mixing different streams within a group call is not supported``. When the
        interleaving differs on one rank, ranks disagree on what the collective at one
        opCount is, and the job hangs or exchanges the wrong data.

    Likely causes:
        A background thread (metrics, logging, checkpointing, a data pipeline) calling
        collectives on the default process group while the training loop does; NCCL
        orders collectives per communicator by the order of the calls, so two threads
        without a lock issue them in a different order on different ranks.

    What to check:
        Which threads call ``torch.distributed`` on the named process group (py-spy dump
        of all threads); give the background work its own process group
        (``dist.new_group``), or serialise the calls (a lock, or do them on the main thread).
    """

    code = "LS112"
    name = "collective.concurrent_use"
    kind = "concurrent-use"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        for key in sorted(index.comms):
            state = index.comms[key]
            threaded = sorted((s for s, ops in state.ops.items() if _interleaved(ops)), key=str)
            if not threaded:
                continue  # nobody took turns: no disagreement can be one
            # Threads taking turns are normal when something orders them (DDP's gradient
            # all-reduces run on autograd's thread while backward() blocks the main one);
            # only a rank where the turns came out differently shows an unordered race.
            lost = [s for s in _disagreeing(state) if s in threaded]
            if lost:
                yield self._threads(index, state, threaded, lost)
        mixed = [w for w in index.warns if _MIXED_STREAMS.search(w.message)]
        if mixed:
            streams = sorted({(w.origin.host, w.origin.pid) for w in mixed}, key=str)
            ranks, hosts, pids = culprits(index, streams)
            yield self.finding(
                severity="error",
                title=f"{describe(index, streams)} mixed CUDA streams within one NCCL group call",
                detail=(
                    "NCCL refused a group call whose operations were issued on different CUDA "
                    "streams: work on one communicator came from unordered streams."
                ),
                events=mixed,
                ranks=ranks,
                hosts=hosts,
                pids=pids,
                confidence=0.8,
                next_steps=(
                    "Issue all operations of one ncclGroupStart/End on the same stream, or "
                    "order the streams with CUDA events before the group.",
                ),
            )

    def _threads(
        self, index: EvidenceIndex, state: CommState, threaded: list[Stream], lost: list[Stream]
    ) -> Finding:
        tids = {
            s: sorted({t for r in state.ops[s] if (t := r.event.origin.tid) is not None})
            for s in threaded
        }
        ranks, hosts, pids = culprits(index, lost)
        sample = lost[0]
        threads = ", ".join(str(t) for t in tids.get(sample, ()))
        detail = (
            f"{describe(index, threaded)} issued collectives on communicator {state.key} from "
            f"more than one thread (on {index.stream_label(sample)}: threads {threads}), "
            "taking turns. NCCL orders a communicator's collectives by call order, so the "
            "ranks agree only while every thread happens to call in the same order."
            f" On {describe(index, lost)} the order came out differently: at the same "
            "opCount it issued another collective than its peers, and the job hangs there."
        )
        events: list[Event] = []
        for stream in lost[:2]:
            seen: set[int | None] = set()
            for record in reversed(state.ops[stream]):
                if record.event.origin.tid not in seen:
                    seen.add(record.event.origin.tid)
                    events.append(record.event)
        return self.finding(
            severity="critical",
            title=(
                f"{describe(index, lost)} drove comm {state.key} from several threads and "
                "issued its collectives in another order than its peers"
            ),
            detail=detail,
            events=events,
            ranks=ranks,
            hosts=hosts,
            pids=pids,
            communicator=state.key,
            confidence=0.85,
            next_steps=(
                "Dump all threads of the named process (py-spy dump --pid PID) to see which "
                "threads call torch.distributed.",
                "Give the background thread its own process group (dist.new_group) or "
                "serialise the collectives with a lock.",
            ),
        )


def _interleaved(ops: Iterable[OpRecord]) -> bool:
    """Return True when two or more threads take turns (at least twice) in ``ops``."""
    tids = [r.event.origin.tid for r in ops if r.event.origin.tid is not None]
    if len(set(tids)) < 2:
        return False
    switches = sum(1 for a, b in pairwise(tids) if a != b)
    return switches >= 2


def _disagreeing(state: CommState) -> list[Stream]:
    """Return the minority streams at the first opCount where members' collectives differ."""
    positions: dict[int, dict[Stream, OpRecord]] = defaultdict(dict)
    for stream, ops in state.ops.items():
        for record in ops:
            positions[record.op_count][stream] = record
    for op_count in sorted(positions):
        groups: dict[object, list[Stream]] = defaultdict(list)
        for stream, r in positions[op_count].items():
            groups[(r.op, r.count, r.datatype, r.root)].append(stream)
        if len(groups) > 1:
            ordered = sorted(groups.values(), key=lambda g: (-len(g), min(map(str, g))))
            if len(ordered[0]) > len(ordered[1]):
                return sorted((s for g in ordered[1:] for s in g), key=str)
            return []
    return []
