"""Rules about the GPU and host resources: duplicate GPUs, /dev/shm, CUDA failures."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from logsleuth.analysis.index import EvidenceIndex
from logsleuth.analysis.rules.anomalies import bootstrap_addresses
from logsleuth.analysis.rules.base import Rule, culprits, describe
from logsleuth.analysis.rules.streams import first_by_time, stream_of, traces_of
from logsleuth.model.base import Event
from logsleuth.model.diagnosis import Finding
from logsleuth.model.nccl import NcclCommInit, NcclErrorTrace
from logsleuth.model.ranks import format_ranks


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
        # Two *processes* initialising one communicator on the same host and busId share a
        # GPU. Comparing processes, not rank numbers, keeps split communicators that print
        # one commId (and so share an index key) from looking like duplicates.
        machines: dict[tuple[str | None, int | None], set[str]] = {
            k: {a for a, _ in v} for k, v in bootstrap_addresses(index).items()
        }
        # NCCL's check fails the init at once with 'invalid usage' (-> 5); it never makes an
        # init wait. Init START lines alone (an init stuck in bootstrap, a lazily created
        # send/recv communicator) say nothing about a shared GPU, so a host needs a failed init.
        failed = {_init_failure_host(index, t) for t in index.traces} - {None}
        for state in index.comms.values():
            seen: dict[tuple[str | None, str], dict[tuple[str | None, int | None], NcclCommInit]]
            seen = defaultdict(dict)
            for init in state.started.values():
                if init.bus_id:
                    seen[(init.origin.host, init.bus_id)][(init.origin.host, init.origin.pid)] = (
                        init
                    )
            completed = {(i.origin.host, i.origin.pid) for i in state.completed.values()}
            for key, by_process in seen.items():
                # One host name, different bootstrap addresses: different machines that share
                # a name (LS705), each with its own GPU of that busId.
                if len({frozenset(machines.get(p, ())) for p in by_process} - {frozenset()}) > 1:
                    continue
                # NCCL checks for a shared GPU before Init COMPLETE and fails the init with
                # 'invalid usage': processes that completed it were not on one GPU as NCCL
                # sees hosts (NCCL_HOSTID, or containers that share a host name).
                if set(by_process) <= completed or key[0] not in failed:
                    continue
                if len(by_process) > 1 and key not in groups:
                    for stream, init in by_process.items():
                        rank = index.rank_of(*stream)
                        groups[key].add(rank if rank is not None else init.rank)
                        events[key].append(init)
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
                proc = index.procs.get(stream_of(trace))
                if (
                    _init_failure_host(index, trace) == host
                    and proc is not None
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


def _init_failure_host(index: EvidenceIndex, trace: NcclErrorTrace) -> str | None:
    """Return the host of a process whose communicator init failed with 'invalid usage'."""
    if trace.code != 5 or "init" not in trace.file:
        return None
    proc = index.procs.get(stream_of(trace))
    return proc.host if proc is not None else None


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
        streams = sorted({stream_of(w) for w in warns}, key=str)
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
            events=[*warns, *[t for s in streams for t in traces_of(index, s)][:4]],
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
        first = first_by_time(warns)[0]
        streams = sorted({stream_of(w) for w in warns}, key=str)
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


def _ranges(values: Iterable[int]) -> str:
    return format_ranks(values) or "?"
