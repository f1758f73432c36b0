"""NCCL logs that end inside communicator set-up: where set-up stopped, and who it left
waiting."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from logsleuth.analysis.health import health_proofs
from logsleuth.analysis.index import EvidenceIndex, Stream
from logsleuth.analysis.rules.base import Rule, describe
from logsleuth.model.base import Event
from logsleuth.model.diagnosis import Finding
from logsleuth.model.messages import LogMessage
from logsleuth.model.nccl import (
    NcclChannelConnect,
    NcclCommConfig,
    NcclCommInit,
    NcclConnected,
    NcclCudaDriver,
    NcclEnv,
    NcclGraphTree,
    NcclInfoNote,
    NcclInterface,
    NcclNetDevices,
    NcclNetPlugin,
    NcclNetwork,
    NcclRing,
    NcclTree,
    NcclVersion,
)

SETUP_EVENTS = (
    NcclChannelConnect,
    NcclCommConfig,
    NcclConnected,
    NcclCudaDriver,
    NcclEnv,
    NcclGraphTree,
    NcclInterface,
    NcclNetDevices,
    NcclNetPlugin,
    NcclNetwork,
    NcclRing,
    NcclTree,
    NcclVersion,
)
"""Lines NCCL prints only while it creates a communicator."""

_RUNTIME_NOTES = frozenset({"proxy-progress", "service-thread-closed", "proxy", "connect-retry"})
"""INFO notes NCCL prints after set-up too (the others are set-up lines)."""

_SETUP_SUBSYSTEMS = frozenset(
    {"INIT", "NET", "GRAPH", "ENV", "NVLS", "BOOTSTRAP", "P2P", "SHM", "TUNING"}
)
"""Debug subsystems whose INFO lines (catalog) belong to communicator set-up."""

_STEPS: tuple[tuple[frozenset[str], str, str], ...] = (
    (
        frozenset({"NVLS"}),
        "NVLS (NVLink SHARP multicast) set-up",
        "Retry with NCCL_NVLS_ENABLE=0; if that works, check that nvidia-fabricmanager (and IMEX "
        "on multi-node NVLink) runs and matches the driver version on every node.",
    ),
    (
        frozenset({"P2P"}),
        "intra-node transport set-up (P2P / shared memory)",
        "Retry with NCCL_P2P_DISABLE=1 (then NCCL_SHM_DISABLE=1) to find the transport; check "
        "PCIe ACS and the IOMMU (nvidia-smi topo -m; p2pBandwidthLatencyTest) and /dev/shm.",
    ),
    (
        frozenset({"NET"}),
        "network connection set-up",
        "Check that every host reaches the others on the interface NCCL chose "
        "(NCCL_SOCKET_IFNAME), firewalls, and the IB/RoCE devices (ibv_devinfo); NCCL_IB_DISABLE=1 "
        "tells whether the IB path is the one that hangs.",
    ),
)


def _setup_step(event: Event) -> tuple[bool, frozenset[str]]:
    """Say whether ``event`` is a set-up line, and under which subsystems."""
    if isinstance(event, NcclCommInit):
        return event.phase == "START", frozenset({"INIT"})
    if isinstance(event, SETUP_EVENTS):
        return True, frozenset({"INIT"})
    if isinstance(event, NcclInfoNote):
        return event.topic not in _RUNTIME_NOTES, frozenset({"INIT"})
    if isinstance(event, LogMessage) and event.family == "nccl" and event.level == "INFO":
        subsystems = frozenset(event.subsystems)
        return bool(subsystems & _SETUP_SUBSYSTEMS), subsystems
    return False, frozenset()


class SetupNeverFinished(Rule):
    """Every NCCL log ends inside communicator set-up, and nothing shows it finished.

    Symptom:
        The last NCCL line of every process is a set-up line (interfaces, rings, channel
        connections, NVLS buffer binding, ...); no process logged ``Init COMPLETE``, a
        collective or a communicator's end, and no error was found. With no error either, the
        best reading is that set-up hangs at that step (or that the excerpt was cut there).

    Likely causes:
        A step of set-up that waits for something that never comes: NVLS multicast binding
        without a working fabric manager, a P2P/IPC mapping blocked by ACS or the IOMMU, a
        network connection to a peer that is unreachable, a peer that never started.

    What to check:
        The step named; the stacks of every rank while it hangs (``py-spy dump --native``);
        the same run with the transport of that step disabled. An excerpt that stops early
        looks the same: include the whole log of each rank.
    """

    code = "LS124"
    name = "init.setup_unfinished"
    kind = "init-stall"
    fallback = True

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        if any(c.completed or c.ops or c.ended for c in index.comms.values()):
            return  # set-up finished somewhere
        if health_proofs(index):
            return  # the run is shown to have worked: the log is only an excerpt of set-up
        last: dict[Stream, Event] = {
            stream: proc.last_event
            for stream, proc in index.procs.items()
            if proc.last_event is not None and ("nccl" in proc.families or _nccl(proc.last_event))
        }
        ended = {s: e for s, e in last.items() if _setup_step(e)[0]}
        if not ended or len(ended) != len(last):
            return
        waiting = {_waiting_step(e) for e in ended.values()}
        threads = _creating_threads(index, ended)
        if threads is None and None in waiting:
            # A line NCCL prints before any step that waits (affinity, version, interfaces):
            # as likely an excerpt cut there as a hang; LS002 says what is missing.
            return
        if _goes_on(index, ended.values()):
            return  # the file has more after set-up (test results, the program's output)
        streams = sorted(ended, key=lambda s: (str(s[0]), s[1] or 0))
        step, advice = "communicator set-up", ""
        for names, what, steps in _STEPS:
            if names & waiting:
                step, advice = what, steps
                break
        example = ended[streams[0]]
        if threads:
            stream, tids, creating = threads
            yield replace(
                self.finding(
                    severity="warning",
                    title=(
                        f"{len(tids)} threads of {describe(index, [stream])} create communicators "
                        "at the same time and none finishes set-up"
                    ),
                    detail=(
                        f"Threads {', '.join(str(t) for t in tids[:8])} of one process each start "
                        "a communicator; no process logged Init COMPLETE or a collective. Creating "
                        "(or using) NCCL communicators of one GPU from several threads at once can "
                        "deadlock: a communicator's set-up allocates CUDA memory, which waits for "
                        "kernels of the others."
                    ),
                    events=creating,
                    confidence=0.4,
                    next_steps=(
                        "Create the communicators (process groups) from one thread, in one order "
                        "on every rank, before the threads use them; or serialise the threads' "
                        "collectives.",
                        "Dump every rank's stacks while it hangs (py-spy dump --native --pid PID).",
                    ),
                ),
                kind="concurrent-use",
            )
            return
        yield self.finding(
            severity="warning",
            title=(
                f"the NCCL log of {describe(index, streams)} ends inside {step}: {_quote(example)}"
            ),
            detail=(
                f"No process logged Init COMPLETE, a collective or the end of a communicator; "
                f"the last line of each of the {len(streams)} process(es) with NCCL lines is a "
                f"set-up line. Set-up seems to hang at {step} (or the excerpt was cut there)."
            ),
            # Every process stopped in set-up: they wait together, none is named the culprit.
            events=[ended[s] for s in streams],
            confidence=0.35,
            next_steps=tuple(
                x
                for x in (
                    advice,
                    "Dump every rank's stacks while it hangs (py-spy dump --native --pid PID) to "
                    "see what set-up waits for; include each rank's whole log.",
                )
                if x
            ),
        )


class SetupBehind(Rule):
    """Some ranks finished set-up and wait in a collective; others' logs end inside set-up.

    Symptom:
        Ranks of a communicator logged ``Init COMPLETE`` and went on to its collectives,
        while the NCCL log of another process of the job ends at a set-up line that waits
        for something outside the process (a channel connection, NVLS binding), with no
        ``Init COMPLETE`` and no error. The communicator's count of completed ranks is short.

    Likely causes:
        That process's set-up hangs at the step named (a connection to an unreachable peer,
        a blocked P2P mapping, a fabric manager that does not answer), so the ranks that
        finished wait for it in their first collective. It is behind: the wait ends there.

    What to check:
        That process's stacks while it hangs (``py-spy dump --native``), the transport of the
        step named (disable it to confirm), and its whole log: an excerpt cut there looks
        the same.
    """

    code = "LS127"
    name = "init.setup_behind"
    kind = "init-stall"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        short = [
            c
            for c in index.comms.values()
            if c.completed and c.ops and c.nranks and len(c.completed) < c.nranks
        ]
        if not short or health_proofs(index):
            return
        done = {
            (e.origin.host, e.origin.pid)
            for c in index.comms.values()
            for e in c.completed.values()
        }
        warned = {(w.origin.host, w.origin.pid) for w in index.warns}
        behind: dict[Stream, Event] = {}
        for stream, proc in index.procs.items():
            last = proc.last_event
            if stream in done or stream in warned or last is None or "nccl" not in proc.families:
                continue
            if not _setup_step(last)[0] or _waiting_step(last) is None:
                continue
            # A rank that completed the init of a short communicator is not behind in it.
            rank = index.rank_of(*stream)
            if rank is None or any(rank not in c.completed for c in short):
                behind[stream] = last
        if not behind or _goes_on(index, behind.values()):
            return
        comm = min(short, key=lambda c: c.key)
        waiting = sorted(comm.ops, key=lambda s: (str(s[0]), s[1] or 0))
        streams = sorted(behind, key=lambda s: (str(s[0]), s[1] or 0))
        names = {_waiting_step(e) for e in behind.values()}
        step, advice = "communicator set-up", ""
        for keys, what, steps in _STEPS:
            if keys & names:
                step, advice = what, steps
                break
        first_op = comm.ops[waiting[0]][0] if comm.ops[waiting[0]] else None
        at = f" and wait in {first_op.op} #{first_op.op_count}" if first_op is not None else ""
        ranks = [r for s in streams if (r := index.rank_of(*s)) is not None]
        hosts = sorted({h for h, _ in streams if h})
        pids = [p for _, p in streams if p is not None]
        yield self.finding(
            severity="error",
            title=(
                f"the NCCL log of {describe(index, streams)} ends inside {step}; "
                f"{len(comm.completed)} of {comm.nranks} rank(s) of comm {comm.key} finished "
                f"init{at}"
            ),
            detail=(
                f"{describe(index, waiting)} completed the init of communicator {comm.key} "
                "and entered its collectives"
                + (f" ({first_op.op} #{first_op.op_count} first)" if first_op is not None else "")
                + "; the last NCCL line of "
                f"{describe(index, streams)} is a set-up line ({_quote(behind[streams[0]])}), "
                "with no Init COMPLETE and no error after it. The collective cannot finish "
                f"without it: set-up is stuck at {step} there (or its log was cut there)."
            ),
            events=[behind[s] for s in streams]
            + [comm.completed[r] for r in sorted(comm.completed)[:2]],
            ranks=ranks,
            hosts=hosts,
            pids=pids,
            communicator=comm.key,
            confidence=0.55,
            next_steps=tuple(
                x
                for x in (
                    f"Dump the stacks of {describe(index, streams)} while it hangs "
                    "(py-spy dump --native --pid PID): which set-up call does it wait in?",
                    advice,
                    "Include that process's whole NCCL log: an excerpt that stops at set-up "
                    "looks the same.",
                )
                if x
            ),
        )


def _waiting_step(event: Event) -> str | None:
    """The kind of set-up step ``event`` shows that waits on something outside the process.

    ``NVLS``: multicast memory binding (the fabric); ``P2P``: an intra-node connection (CUDA
    IPC, shared memory); ``NET``: a connection over the network. None for the lines NCCL
    prints before it waits for anything (version, affinity, interfaces, ``Init START``).
    """
    if isinstance(event, NcclChannelConnect | NcclConnected):
        transport = getattr(event, "transport", "") or ""
        return "NET" if transport.startswith("NET") or not transport else "P2P"
    if isinstance(event, LogMessage) and event.family == "nccl":
        subsystems = set(event.subsystems)
        for name in ("NVLS", "P2P", "SHM"):
            if name in subsystems:
                return "P2P" if name == "SHM" else name
    return None


def _creating_threads(
    index: EvidenceIndex, streams: Iterable[Stream]
) -> tuple[Stream, list[int], list[Event]] | None:
    """The process whose threads (3 or more) each started creating a communicator, if any."""
    for stream in streams:
        tids: dict[int, str] = {}
        lines: dict[int, Event] = {}
        for event in index.all_of(NcclCommInit) + index.all_of(NcclInfoNote):
            if (event.origin.host, event.origin.pid) != stream or event.origin.tid is None:
                continue
            comm = event.comm if isinstance(event, NcclCommInit) else event.field("comm")
            if comm and (not isinstance(event, NcclInfoNote) or event.topic == "comm-truncated"):
                tids.setdefault(event.origin.tid, comm)
                lines.setdefault(event.origin.tid, event)
        if len(tids) >= 3 and len(set(tids.values())) == len(tids):
            return stream, sorted(tids), sorted(lines.values(), key=lambda e: e.ref.line)
    return None


def _goes_on(index: EvidenceIndex, ends: Iterable[Event]) -> bool:
    """Say whether any file has evidence after the set-up line a process ended with."""
    end_of: dict[str, int] = {}
    for event in ends:
        end_of[event.ref.source] = max(end_of.get(event.ref.source, 0), event.ref.line)
    return any(
        e.ref.line > end_of.get(e.ref.source, e.ref.line)
        for events in index.by_type.values()
        for e in events
    )


def _nccl(event: Event) -> bool:
    return isinstance(event, LogMessage) and event.family == "nccl"


def _quote(event: Event) -> str:
    text = event.message if isinstance(event, LogMessage) else event.text
    return text if len(text) <= 80 else text[:79] + "…"
