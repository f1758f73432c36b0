"""Rules about things that broke: sockets, IB, CUDA, /dev/shm, duplicate GPUs, dead processes."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable

from logsleuth.analysis.index import EvidenceIndex, Stream
from logsleuth.analysis.rules.base import Rule, culprits, describe
from logsleuth.model.base import Event
from logsleuth.model.diagnosis import Finding
from logsleuth.model.nccl import NcclErrorTrace, NcclWarn
from logsleuth.model.ranks import format_ranks
from logsleuth.model.torch import PythonTraceback, WatchdogError, WatchdogTimeout

_ADDRESS = re.compile(r"(\d{1,3}(?:\.\d{1,3}){3}|\[?[0-9a-fA-F:]+:[0-9a-fA-F:%\w]*\]?)<(\d+)>")
_REMOTE = re.compile(
    r"remote process exited|Broken pipe|Connection reset by peer|Connection closed by remote"
    r"|peer closed|socketProgress|Call to recv from",
    re.IGNORECASE,
)


def _stream(event: Event) -> Stream:
    return (event.origin.host, event.origin.pid)


def _first_by_time(events: Iterable[NcclWarn]) -> list[NcclWarn]:
    """Order WARNs by timestamp when every one has one, else keep input order."""
    items = list(events)
    if items and all(e.origin.time is not None for e in items):
        return sorted(items, key=lambda e: (e.origin.time or 0.0, e.ref.source, e.ref.line))
    return items


def _traces_of(index: EvidenceIndex, stream: Stream) -> list[NcclErrorTrace]:
    return [t for t in index.traces if _stream(t) == stream]


class DuplicateGpu(Rule):
    """Two or more ranks run on the same GPU.

    Symptom:
        ``NCCL WARN Duplicate GPU detected : rank 2 and rank 0 both on CUDA device 1000``
        and ``ncclCommInitRank`` fails with ``invalid usage`` (``-> 5``), or two ranks of one
        communicator report the same host and ``busId`` in their Init lines.

    Likely causes:
        The process never selects its GPU (no ``torch.cuda.set_device(local_rank)``), a
        wrong ``CUDA_VISIBLE_DEVICES`` per process, or more processes per node than GPUs.

    What to check:
        That each process calls ``torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))``
        before creating the process group; ``nproc_per_node`` against ``nvidia-smi -L``.
    """

    code = "LS301"
    name = "gpu.duplicate"
    kind = "duplicate-gpu"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        groups: dict[tuple[str | None, str], set[int]] = defaultdict(set)
        seen: dict[tuple[str | None, str], list[int]]
        events: dict[tuple[str | None, str], list[Event]] = defaultdict(list)
        for warn in index.warns:
            if warn.family != "duplicate-gpu":
                continue
            bus = warn.field("bus_id") or "?"
            key = (warn.origin.host, bus)
            for name in ("rank", "other_rank"):
                value = warn.field(name)
                if value is not None and value.lstrip("-").isdigit():
                    groups[key].add(int(value))
            events[key].append(warn)
        for state in index.comms.values():
            seen = defaultdict(list)
            for rank, init in state.started.items():
                if init.bus_id:
                    seen[(init.origin.host, init.bus_id)].append(rank)
            for key, sharing in seen.items():
                if len(set(sharing)) > 1 and key not in groups:
                    groups[key].update(sharing)
                    events[key].extend(state.started[r] for r in sharing)
        # Excerpts often miss some ranks' WARN; a process on the same host and CUDA device whose
        # init failed with "invalid usage" (-> 5) is in the same situation.
        for (host, _bus), ranks in groups.items():
            devices = {
                d
                for p in index.procs.values()
                if p.host == host and p.rank in ranks
                for d in p.devices
            }
            for trace in index.traces:
                proc = index.procs.get(_stream(trace))
                if (
                    trace.code == 5
                    and "init" in trace.file
                    and proc is not None
                    and proc.host == host
                    and proc.rank is not None
                    and proc.devices <= devices
                ):
                    ranks.add(proc.rank)
        for (host, bus), ranks in sorted(groups.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
            pids = sorted(
                {e.origin.pid for e in events[(host, bus)] if e.origin.pid is not None}
                | {
                    p.pid
                    for p in index.procs.values()
                    if p.host == host and p.rank in ranks and p.pid is not None
                }
            )
            yield self.finding(
                severity="critical",
                title=f"ranks {_ranges(ranks)} share one GPU (busId {bus}) on {host or 'one host'}",
                detail=(
                    f"NCCL found ranks {_ranges(ranks)} on the same CUDA device (busId {bus})"
                    + (f" on host {host}" if host else "")
                    + "; communicator initialization fails with 'invalid usage'. Each process must "
                    "select its own GPU."
                ),
                events=events[(host, bus)],
                ranks=ranks,
                hosts=[host] if host else [],
                pids=pids,
                confidence=0.95,
                next_steps=(
                    "Call torch.cuda.set_device(int(os.environ['LOCAL_RANK'])) (or hvd.local_rank()) "
                    "before init_process_group / the first CUDA call.",
                    "Check CUDA_VISIBLE_DEVICES per process and that processes per node <= GPUs per node.",
                ),
            )


class ShmExhausted(Rule):
    """NCCL could not create its shared-memory segment: /dev/shm is full or too small.

    Symptom:
        ``NCCL WARN Error: failed to extend /dev/shm/nccl-XXXX to N bytes`` or ``Error while
        creating shared memory segment /dev/shm/...`` with ``No space left on device (28)``;
        socket and proxy errors follow as the setup is torn down.

    Likely causes:
        Containers get a 64 MB /dev/shm by default (docker, Kubernetes pods); many ranks per
        node or many communicators need more.

    What to check:
        ``df -h /dev/shm`` inside the container; docker ``--shm-size=16g`` or ``--ipc=host``;
        Kubernetes: mount an ``emptyDir`` with ``medium: Memory`` at /dev/shm; as a
        workaround ``NCCL_SHM_DISABLE=1`` (slower intra-node path).
    """

    code = "LS302"
    name = "resource.shm"
    kind = "resource-exhausted"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        warns = [w for w in index.warns if w.family == "shm"]
        if not warns:
            return
        streams = sorted({_stream(w) for w in warns}, key=str)
        ranks, hosts, pids = culprits(index, streams)
        size = next((w.field("size") for w in warns if w.field("size")), None)
        yield self.finding(
            severity="critical",
            title=f"/dev/shm is full on {', '.join(sorted(set(hosts))) or 'the host'}: NCCL's shared-memory segment could not be created",
            detail=(
                "NCCL's SHM transport could not allocate its segment"
                + (f" ({size} bytes)" if size else "")
                + f" in /dev/shm on {describe(index, streams)}: {warns[0].message.strip()}. "
                "The socket and proxy errors that follow are the teardown of that failed setup."
            ),
            events=[*warns, *[t for s in streams for t in _traces_of(index, s)][:4]],
            ranks=ranks,
            hosts=hosts,
            pids=pids,
            confidence=0.9,
            next_steps=(
                "Give the container a larger /dev/shm: docker --shm-size=16g (or --ipc=host); on "
                "Kubernetes mount an emptyDir with medium: Memory at /dev/shm.",
                "Check with df -h /dev/shm inside the container while the job starts.",
                "Workaround: NCCL_SHM_DISABLE=1 (intra-node traffic then goes over P2P or the network).",
            ),
        )


class CudaError(Rule):
    """A CUDA call failed inside NCCL.

    Symptom:
        ``NCCL WARN Cuda failure 'out of memory'``, ``CUDA error: an illegal memory access``,
        ``Cuda failure 700`` or NVLS/fabric CUDA errors, followed by ``-> 1`` back-traces.

    Likely causes:
        GPU memory exhausted by the model plus NCCL buffers, an earlier kernel that
        corrupted memory (illegal address), a bad GPU (Xid errors), NVLS without a working
        fabric manager.

    What to check:
        ``nvidia-smi`` and ``dmesg | grep -i xid`` on the host; rerun with
        ``CUDA_LAUNCH_BLOCKING=1`` to find the faulting kernel; reduce ``NCCL_BUFFSIZE`` or
        batch size for OOM; ``NCCL_NVLS_ENABLE=0`` for NVLS errors.
    """

    code = "LS303"
    name = "cuda.error"
    kind = "cuda-error"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        warns = [w for w in index.warns if w.family == "cuda"]
        if not warns:
            return
        first = _first_by_time(warns)[0]
        streams = sorted({_stream(w) for w in warns}, key=str)
        ranks, hosts, pids = culprits(index, streams)
        yield self.finding(
            severity="critical",
            title=f"CUDA failure inside NCCL on {describe(index, streams)}: {first.message.strip()[:120]}",
            detail=f"The first CUDA error was: {first.message.strip()}",
            events=warns,
            ranks=ranks,
            hosts=hosts,
            pids=pids,
            confidence=0.8,
            next_steps=(
                "Check dmesg | grep -i xid and nvidia-smi on the host(s) named.",
                "Re-run with CUDA_LAUNCH_BLOCKING=1 to find the kernel that failed first.",
                "For out-of-memory, lower the batch size or NCCL_BUFFSIZE; for NVLS errors try NCCL_NVLS_ENABLE=0.",
            ),
        )


class BootstrapFailure(Rule):
    """Ranks cannot reach each other or the bootstrap root while creating a communicator.

    Symptom:
        ``NCCL WARN ... Connect to 10.0.0.1<1234> failed : Connection refused`` (or timed
        out, no route) with back-traces through ``bootstrap.cc`` and ``init.cc``; ``Call to
        connect returned Connection refused, retrying`` lines before it.

    Likely causes:
        The root's address is wrong or stale (a reused ``file://`` rendezvous file, wrong
        ``MASTER_ADDR``), a firewall between nodes, NCCL choosing an interface other ranks
        cannot reach (docker0, a second NIC), the root process already gone.

    What to check:
        That the address named is one of the job's hosts (``ip addr`` on each node); pin
        the interface with ``NCCL_SOCKET_IFNAME``; delete stale rendezvous files; test
        connectivity (``nc -zv ADDR PORT``) between the nodes.
    """

    code = "LS201"
    name = "bootstrap.connect"
    kind = "bootstrap-failure"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        completed = {
            (i.origin.host, i.origin.pid)
            for c in index.comms.values()
            for i in c.completed.values()
        }
        failing: dict[Stream, list[Event]] = defaultdict(list)
        targets: dict[Stream, set[str]] = defaultdict(set)
        for warn in index.warns:
            if warn.family != "socket":
                continue
            text = warn.message
            if not re.search(r"connect", text, re.IGNORECASE):
                continue
            stream = _stream(warn)
            traces = _traces_of(index, stream)
            in_bootstrap = any("bootstrap" in t.file for t in traces) or stream not in completed
            if not in_bootstrap:
                continue
            failing[stream].append(warn)
            failing[stream].extend(t for t in traces if "bootstrap" in t.file or "init" in t.file)
            for m in _ADDRESS.finditer(text):
                targets[stream].add(f"{m.group(1)}:{m.group(2)}")
        retries: dict[Stream, list[Event]] = defaultdict(list)
        for note in (e for e in index.notes if e.topic == "connect-retry"):
            retries[_stream(note)].append(note)
        for stream, notes in retries.items():
            if stream not in failing:
                failing[stream].extend(notes)
        if not failing:
            return
        streams = sorted(failing, key=str)
        ranks, hosts, pids = culprits(index, streams)
        addresses = sorted({a for s in streams for a in targets[s]})
        events = [e for s in streams for e in failing[s]]
        yield self.finding(
            severity="critical",
            title=(
                f"{describe(index, streams)} cannot reach "
                + (", ".join(addresses) if addresses else "its peers")
                + " during communicator bootstrap"
            ),
            detail=(
                f"Connecting to {', '.join(addresses) or 'the bootstrap root'} failed on "
                f"{describe(index, streams)} while creating the communicator (bootstrap); init "
                "never completes. Check that the address belongs to a live rank 0 of this job."
            ),
            events=events,
            ranks=ranks,
            hosts=hosts,
            pids=pids,
            confidence=0.85,
            next_steps=(
                f"Check that {addresses[0] if addresses else 'the address'} is one of this job's "
                "hosts (ip addr on each node); a stale file:// rendezvous file or a wrong "
                "MASTER_ADDR points ranks at a machine that is not in the job.",
                "Pin the interface with NCCL_SOCKET_IFNAME (e.g. =eth0 or =^lo,docker) and test "
                "connectivity with nc -zv ADDR PORT between the nodes; look for firewalls.",
                "Make sure rank 0 is still alive when the others connect (its log and exit code).",
            ),
        )


class IbCompletionError(Rule):
    """An InfiniBand/RoCE work completion failed; later errors on that connection are its cascade.

    Symptom:
        ``NET/IB : Got completion from peer X with status=12 ... vendor err 129`` (retry
        exceeded) or other non-zero status, usually followed by many ``status=5`` (work
        request flushed) completions and ``-> 6`` back-traces.

    Likely causes:
        status 12 (transport retry exceeded): the peer's port went down or is unreachable
        (cable, switch, link flap, RoCE misconfiguration such as a wrong GID index or
        missing PFC/ECN); status 5 is only the queue pair being flushed after the first error.

    What to check:
        ``ibstat``/``ibv_devinfo`` port state and counters on both hosts, switch logs, the
        GID index (``NCCL_IB_GID_INDEX``) and that RoCE traffic class/PFC is consistent;
        ``ibping``/``ib_write_bw`` between the two GIDs named.
    """

    code = "LS202"
    name = "network.ib_completion"
    kind = "network-error"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        warns = _first_by_time(w for w in index.warns if w.family == "ib-completion")
        if not warns:
            return
        primary = next((w for w in warns if w.field("status") not in ("5", None)), warns[0])
        cascade = [w for w in warns if w is not primary]
        flushes = sum(1 for w in cascade if w.field("status") == "5")
        stream = _stream(primary)
        ranks, hosts, pids = culprits(index, [stream])
        status = primary.field("status") or "?"
        peer = primary.field("peer")
        meaning = {
            "12": "transport retry counter exceeded: the peer stopped answering",
            "13": "RNR retry counter exceeded",
            "5": "work request flushed (the queue pair was already in error)",
            "4": "local protection error",
            "10": "remote access error",
        }.get(status, "a verbs completion error")
        yield self.finding(
            severity="critical",
            title=f"IB/RoCE completion error status={status} on {describe(index, [stream])}"
            + (f" talking to {peer}" if peer else ""),
            detail=(
                f"The first failed completion was status={status} ({meaning})"
                + (
                    f", vendor err {primary.field('vendor_err')}"
                    if primary.field("vendor_err")
                    else ""
                )
                + (
                    f", local GID {primary.field('local_gid')} -> remote GID {primary.field('remote_gid')}"
                    if primary.field("local_gid")
                    else ""
                )
                + f". {len(cascade)} later completion error(s)"
                + (f", {flushes} of them status=5 flushes," if flushes else "")
                + " are the cascade of this one, not separate faults."
            ),
            events=[primary, *cascade],
            ranks=ranks,
            hosts=hosts,
            pids=pids,
            confidence=0.75,
            next_steps=(
                f"Check the port state and error counters on both ends (ibstat, ibv_devinfo -v, "
                f"perfquery) for the NIC used by {describe(index, [stream])} and for peer {peer or 'named'}.",
                "Test the path between the two GIDs (ib_write_bw / ibping); check switch logs for link flaps.",
                "For RoCE: verify NCCL_IB_GID_INDEX, the traffic class and PFC/ECN settings are the same everywhere.",
            ),
        )


class RemoteClosed(Rule):
    """A rank lost its connection to a peer: the peer process exited or the network dropped.

    Symptom:
        ``NCCL error: remote process exited or there was a network error`` from the
        ProcessGroupNCCL watchdog, ``Call to recv from ADDR failed : Broken pipe`` or
        ``Connection reset by peer``, then ``Abort COMPLETE`` and the process being taken down.

    Likely causes:
        The peer at the named address died first (exception, OOM kill, segfault, node
        failure) and this rank is collateral; less often a network failure between them.

    What to check:
        The logs and exit code of the rank(s) on the peer address first (``dmesg`` for the
        OOM killer, its traceback), then the network between the two hosts.
    """

    code = "LS203"
    name = "network.remote_closed"
    kind = "process-died"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        events: list[Event] = []
        peers: set[str] = set()
        reporters: set[Stream] = set()
        report_ranks: set[int] = set()
        for e in index.torch:
            if isinstance(e, WatchdogError):
                text = f"{e.reason} {e.detail or ''}"
                if _REMOTE.search(text):
                    events.append(e)
                    if e.rank is not None:
                        report_ranks.add(e.rank)
                    peers.update(f"{m.group(1)}" for m in _ADDRESS.finditer(text))
        for warn in index.warns:
            if warn.family in ("socket", "proxy") and _REMOTE.search(warn.message):
                events.append(warn)
                reporters.add(_stream(warn))
                peers.update(m.group(1) for m in _ADDRESS.finditer(warn.message))
        if not events:
            return
        ranks = culprits(index, sorted(reporters, key=str))[0]
        ranks = sorted(set(ranks) | report_ranks)
        peer_text = ", ".join(sorted(peers)) or "a peer"
        yield self.finding(
            severity="error",
            title=f"connection to {peer_text} was closed: the peer process exited or the network dropped",
            detail=(
                f"Rank(s) {', '.join(map(str, ranks)) or '?'} lost the connection to {peer_text} "
                "(broken pipe / connection reset / remote error). The process at that address most "
                "likely died first; the aborts and watchdog teardown that follow are consequences."
            ),
            events=events,
            ranks=[],
            hosts=sorted(peers),
            pids=[],
            confidence=0.5,
            next_steps=(
                f"Read the logs of the rank(s) running on {peer_text} first: a traceback, an OOM "
                "kill (dmesg | grep -i kill) or a segfault there is the real cause.",
                "If that process was healthy, check the network between the two hosts.",
            ),
        )


class ProcessDied(Rule):
    """A rank raised an exception, crashed or was killed; the others failed or hung after it.

    Symptom:
        A Python traceback on one rank, torchrun's failure summary with a non-zero exit
        code or a signal (``exitcode: -9 (pid: N)``, ``Signal 9 (SIGKILL)``), and peers
        that then time out or lose connections.

    Likely causes:
        An exception in user code on one rank, host OOM killer (SIGKILL), a segfault in an
        extension, a node failure. torchrun's "Root Cause" is the first failure it
        *observed*, which after a hang is often the process it killed, not the cause.

    What to check:
        The traceback of the first failing rank; ``dmesg`` for the OOM killer; whether the
        signal came from torchrun itself (SIGTERM to the survivors) or from outside.
    """

    code = "LS204"
    name = "process.died"
    kind = "process-died"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        tracebacks = [
            e for e in index.torch if isinstance(e, PythonTraceback) and e.rank is not None
        ]
        tracebacks = [t for t in tracebacks if not _benign_exception(t.exc_type, t.exc_message)]
        failures = [f for f in index.failures if f.exitcode not in (None, 0)]
        if not tracebacks and not failures:
            return
        if tracebacks:
            first = tracebacks[0]
            if all(t.origin.time is not None for t in tracebacks):
                first = min(tracebacks, key=lambda t: (t.origin.time or 0.0, t.ref.line))
            rank = first.rank
            assert rank is not None
            proc = index.proc_of_rank(rank)
            where = first.frames[-1] if first.frames else None
            yield self.finding(
                severity="critical",
                title=f"rank {rank} raised {first.exc_type or 'an exception'}"
                + (f" at {where[2]} ({where[0]}:{where[1]})" if where else ""),
                detail=(
                    f"rank {rank} died with {first.exc_type}: {first.exc_message or ''}".rstrip(
                        ": "
                    )
                    + ". Other ranks' timeouts and connection errors after it are consequences."
                ),
                events=[first, *[f for f in failures if f.rank == rank]],
                ranks=[rank],
                hosts=[proc.host] if proc and proc.host else [],
                pids=[proc.pid] if proc and proc.pid is not None else [],
                confidence=0.8,
                next_steps=(
                    f"Fix the exception on rank {rank} (the traceback is quoted as evidence).",
                    "Wrap the training entry point with torch.distributed.elastic's @record to get "
                    "the error file in torchrun's summary.",
                ),
            )
            return
        # A rank whose own watchdog timed out and that then died of SIGABRT/SIGTERM was taken
        # down by the watchdog or by torchrun: that is the aftermath, not the cause.
        reported = {
            e.origin.rank if e.origin.rank is not None else e.rank
            for e in index.torch
            if isinstance(e, WatchdogTimeout | WatchdogError)
        }
        aftermath = [f for f in failures if f.rank in reported or f.signal == "SIGTERM"]
        failures = [f for f in failures if f not in aftermath]
        if not failures:
            yield self.finding(
                severity="info",
                title=f"{len(aftermath)} rank(s) were taken down after the failure "
                "(watchdog abort or torchrun's SIGTERM)",
                detail="torchrun's summary lists these processes, but each of them had already "
                "reported a timeout or error, or was stopped by torchrun itself: they are the "
                "aftermath. torchrun's 'Root Cause' names the first exit it observed, not the cause.",
                events=aftermath,
                ranks=[f.rank for f in aftermath if f.rank is not None],
                confidence=0.8,
            )
            return
        roots = [f for f in failures if f.root_cause] or failures
        signal_only = [f for f in roots if f.signal]
        root = roots[0]
        killed_by = f"signal {root.signal}" if root.signal else f"exit code {root.exitcode}"
        yield self.finding(
            severity="error",
            title=f"rank {root.rank} (pid {root.pid}) ended with {killed_by}",
            detail=(
                f"torchrun reports rank {root.rank} (local rank {root.local_rank}, pid "
                f"{root.pid}, host {root.host}) as the first failure, with {killed_by}. "
                + (
                    "A signal from outside (SIGKILL by a user, the OOM killer, a scheduler) "
                    "can follow a hang rather than cause it."
                    if signal_only
                    else ""
                )
            ),
            events=roots,
            ranks=[root.rank] if root.rank is not None else [],
            hosts=[root.host] if root.host else [],
            pids=[root.pid] if root.pid is not None else [],
            confidence=0.45 if signal_only else 0.7,
            next_steps=(
                "Check dmesg on that host for the OOM killer, and the scheduler's log for a kill.",
                "Read the rank's own output before the failure (the lines with its [rankN]: prefix).",
            ),
        )


_CONSEQUENCE_TYPES = frozenset(
    {"ChildFailedError", "KeyboardInterrupt", "SignalException", "DistBackendError"}
)
_CONSEQUENCE_TEXT = re.compile(
    r"communicator was aborted|Watchdog caught|timed out|NCCL error|remote process exited"
    r"|Connection reset|Broken pipe|Connection closed by peer",
    re.IGNORECASE,
)


def _benign_exception(exc_type: str | None, message: str | None = None) -> bool:
    """Return True for exceptions that report a failure elsewhere rather than cause one."""
    if not exc_type:
        return False
    if exc_type.rsplit(".", 1)[-1] in _CONSEQUENCE_TYPES:
        return True
    return bool(message and _CONSEQUENCE_TEXT.search(message))


def _ranges(values: Iterable[int]) -> str:
    return format_ranks(values) or "?"
