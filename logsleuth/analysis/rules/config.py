"""Rules about configuration that differs across ranks or hosts."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from logsleuth.analysis.index import EvidenceIndex, Proc, Stream
from logsleuth.analysis.rules.base import Rule, culprits
from logsleuth.model.base import Event
from logsleuth.model.diagnosis import Finding
from logsleuth.model.nccl import NcclCudaDriver, NcclEnv, NcclNetPlugin, NcclVersion


def _host(proc: Proc) -> str:
    return proc.host or (f"pid {proc.pid}" if proc.pid is not None else "?")


class NcclVersionMismatch(Rule):
    """NCCL (or its net plugin) differs across hosts or ranks.

    Symptom:
        ``NCCL version`` lines disagree between processes, or different net plugins are
        loaded (``NET/Plugin: Loaded net plugin FastSocket (v4)`` on one node, none on
        another). Bootstrap then fails in odd ways (``ncclSocketInit: connecting to
        address with family 0``), or collectives hang.

    Likely causes:
        Different container images or virtualenvs per node, a system NCCL in
        ``LD_LIBRARY_PATH`` shadowing the one torch ships (``nvidia-nccl-cu12``), a plugin
        installed on some nodes only.

    What to check:
        ``python -c "import torch; print(torch.cuda.nccl.version())"`` on every node,
        ``pip show nvidia-nccl-cu12``, ``ldd`` / ``LD_LIBRARY_PATH`` for libnccl, and
        ``NCCL_NET_PLUGIN``; use one image for every node.
    """

    code = "LS401"
    name = "config.nccl_version"
    kind = "config-mismatch"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        yield from self._differs(
            index, "NCCL version", lambda p: p.nccl_version, NcclVersion, "error"
        )
        yield from self._differs(
            index,
            "net plugin",
            lambda p: p.net_plugin or "none",
            NcclNetPlugin,
            "warning",
            only_if=lambda p: p.net_plugin is not None or p.network is not None,
        )
        yield from self._differs(
            index,
            "CUDA driver",
            lambda p: str(p.cuda_driver) if p.cuda_driver else None,
            NcclCudaDriver,
            "warning",
        )

    def _differs(
        self,
        index: EvidenceIndex,
        what: str,
        value_of: object,
        event_type: type[Event],
        severity: str,
        only_if: object = None,
    ) -> Iterable[Finding]:
        assert callable(value_of)
        by_value: dict[str, list[Proc]] = defaultdict(list)
        for proc in index.procs.values():
            if only_if is not None:
                assert callable(only_if)
                if not only_if(proc):
                    continue
            value = value_of(proc)
            if value:
                by_value[str(value)].append(proc)
        if len(by_value) < 2:
            return
        ordered = sorted(by_value.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        majority = ordered[0]
        tie = len(ordered[1][1]) == len(majority[1])
        odd = ordered if tie else ordered[1:]
        if tie and what == "net plugin" and "none" in by_value:
            # Nodes that load no plugin while others do are the ones set up differently.
            odd, tie = [("none", by_value["none"])], False
        odd_procs = [p for _, procs in odd for p in procs]
        hosts = sorted({_host(p) for p in odd_procs})
        ranks = sorted({p.rank for p in odd_procs if p.rank is not None})
        pids = sorted({p.pid for p in odd_procs if p.pid is not None})
        parts = "; ".join(
            f"{value} on {', '.join(sorted({_host(p) for p in procs}))}" for value, procs in ordered
        )
        streams = {(p.host, p.pid) for _, procs in ordered for p in procs}
        # A bare line (``NCCL version 2.14.3+cuda11.7`` has no host:pid prefix) belongs to the
        # process whose file it is in, when that file holds one process only.
        alone = {
            source: (p.host, p.pid)
            for source, group in _procs_by_source(index).items()
            if len(group) == 1
            for p in group
        }
        events: list[Event] = []
        for e in index.all_of(event_type):
            stream = (e.origin.host, e.origin.pid)
            if e.origin.host is None and e.origin.pid is None:
                stream = alone.get(e.ref.source, stream)
            if stream in streams:
                events.append(e)
        yield self.finding(
            severity=severity,
            title=f"{what} differs across the job: {parts}",
            detail=(
                f"Processes of one job run different {what}s ({parts}). "
                + (
                    "Mixed NCCL versions break the bootstrap and connection wire format, so ranks "
                    "fail to connect or hang."
                    if what == "NCCL version"
                    else "Ranks that load different network code may choose incompatible transports."
                )
                + (
                    " Which side is wrong cannot be told from the logs; both are named."
                    if tie
                    else ""
                )
            ),
            events=events,
            ranks=ranks,
            hosts=hosts,
            pids=pids,
            confidence=0.85 if what == "NCCL version" else 0.6,
            next_steps=(
                'Run python -c "import torch; print(torch.__version__, torch.cuda.nccl.version())" '
                "and pip show nvidia-nccl-cu12 on every node; check LD_LIBRARY_PATH for a system libnccl.",
                "Use one container image / environment for every node, with the same net plugin "
                "(or none: NCCL_NET_PLUGIN=none).",
            ),
        )


# Variables that are per process or only steer diagnostics: a difference is expected.
_ENV_PER_PROCESS = frozenset(
    {
        "NCCL_DEBUG",
        "NCCL_DEBUG_SUBSYS",
        "NCCL_DEBUG_FILE",
        "NCCL_DEBUG_TIMESTAMP_FORMAT",
        "NCCL_HOSTID",
        "NCCL_COMM_ID",
        "NCCL_TOPO_DUMP_FILE",
        "NCCL_GRAPH_DUMP_FILE",
        "NCCL_GRAPH_DUMP_FILE_RANK",
        "NCCL_TOPO_DUMP_FILE_RANK",
        "NCCL_PROFILER_PLUGIN",
        "NCCL_RAS_ENABLE",
        "NCCL_RAS_ADDR",
    }
)
# Variables whose values must agree across ranks or the protocol itself disagrees
# (buffer slicing, algorithm and protocol selection are computed independently per rank).
_ENV_WIRE = frozenset(
    {"NCCL_BUFFSIZE", "NCCL_PROTO", "NCCL_ALGO", "NCCL_NTHREADS", "NCCL_STEPS", "NCCL_LL128_ENABLE"}
)
_UNSET = "(not set)"


class NcclEnvMismatch(Rule):
    """An ``NCCL_*`` environment variable has different values across hosts or ranks.

    Symptom:
        ``NCCL_IB_DISABLE set by environment to 1`` on one node and not on the others,
        ``NCCL_SOCKET_IFNAME`` naming different interfaces, ``NCCL_BUFFSIZE`` or
        ``NCCL_PROTO`` differing between ranks. Ranks then pick different transports,
        networks or protocols: connections fail, run at a fraction of the bandwidth, or
        collectives hang because each side slices the data differently.

    Likely causes:
        A per-node launcher script or ``/etc/nccl.conf`` that differs between nodes, an
        environment exported in one job step but not propagated by the launcher (``srun
        --export``, ``mpirun -x``), container images with different defaults.

    What to check:
        ``env | grep ^NCCL_`` inside the job on every node, ``/etc/nccl.conf`` and
        ``~/.nccl.conf`` on every node, and how the launcher forwards the environment.
        Only processes that log ``ENV`` lines are compared; a process without any is
        not counted as unset.
    """

    code = "LS403"
    name = "config.nccl_env"
    kind = "config-mismatch"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        by_proc: dict[Stream, dict[str, NcclEnv]] = defaultdict(dict)
        for event in index.all_of(NcclEnv):
            if event.name.startswith("NCCL_") and event.name not in _ENV_PER_PROCESS:
                by_proc[(event.origin.host, event.origin.pid)].setdefault(event.name, event)
        if len(by_proc) < 2:
            return
        names = sorted({name for env in by_proc.values() for name in env})
        for name in names:
            groups: dict[str, list[Stream]] = defaultdict(list)
            for key, env in by_proc.items():
                groups[env[name].value.strip() if name in env else _UNSET].append(key)
            if len(groups) < 2:
                continue
            yield self._finding(index, name, groups, by_proc)

    def _finding(
        self,
        index: EvidenceIndex,
        name: str,
        groups: dict[str, list[Stream]],
        by_proc: dict[Stream, dict[str, NcclEnv]],
    ) -> Finding:
        ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        tie = len(ordered[1][1]) == len(ordered[0][1])
        odd = [key for _, keys in (ordered if tie else ordered[1:]) for key in keys]
        ranks, hosts, pids = culprits(index, odd)
        hosts = sorted(set(hosts))
        summary = "; ".join(f"{value} on {_where(keys)}" for value, keys in ordered)
        events = [env[name] for key, env in sorted(by_proc.items(), key=_key_order) if name in env]
        wire = name in _ENV_WIRE
        return self.finding(
            severity="error" if wire else "warning",
            title=f"{name} differs across the job: {summary}",
            detail=(
                f"{name} is not the same in every process ({summary}). "
                + (
                    "Each rank derives buffer slicing, algorithm and protocol from it on its own, "
                    "so ranks that disagree exchange data in different shapes and can hang."
                    if wire
                    else "Ranks configured differently can choose different interfaces, "
                    "transports or channel counts, which fails to connect or slows every "
                    "collective to the slowest choice."
                )
                + (
                    " Which side is intended cannot be told from the logs; both are named."
                    if tie
                    else ""
                )
            ),
            events=events[:64],
            ranks=ranks,
            hosts=hosts,
            pids=pids,
            confidence=0.7 if wire else 0.5,
            next_steps=(
                f"Compare `env | grep ^{name}` and /etc/nccl.conf on {', '.join(hosts[:4])}"
                + (" and the other hosts" if len(hosts) > 4 else "")
                + " with the majority of the job.",
                "Set NCCL_* variables in one place that the launcher forwards to every rank "
                "(srun --export=ALL, mpirun -x, the torchrun wrapper script).",
            ),
        )


def _where(keys: list[Stream]) -> str:
    hosts = sorted({host or "?" for host, _ in keys})
    procs = f"{len(keys)} process{'' if len(keys) == 1 else 'es'}"
    if len(hosts) <= 3:
        return f"{', '.join(hosts)} ({procs})"
    return f"{len(hosts)} hosts ({procs})"


def _key_order(item: tuple[Stream, object]) -> tuple[str, int]:
    (host, pid), _ = item
    return (host or "", pid if pid is not None else -1)


def _procs_by_source(index: EvidenceIndex) -> dict[str, list[Proc]]:
    """The processes each input file speaks for."""
    found: dict[str, list[Proc]] = defaultdict(list)
    for proc in index.procs.values():
        if proc.host is None and proc.pid is None:
            continue
        for source in proc.sources:
            found[source].append(proc)
    return found
