"""Rules about configuration that differs across ranks or hosts."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from logsleuth.analysis.index import EvidenceIndex, Proc
from logsleuth.analysis.rules.base import Rule
from logsleuth.model.base import Event
from logsleuth.model.diagnosis import Finding
from logsleuth.model.nccl import NcclCudaDriver, NcclNetPlugin, NcclVersion


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
        odd_procs = [p for _, procs in odd for p in procs]
        hosts = sorted({_host(p) for p in odd_procs})
        ranks = sorted({p.rank for p in odd_procs if p.rank is not None})
        pids = sorted({p.pid for p in odd_procs if p.pid is not None})
        parts = "; ".join(
            f"{value} on {', '.join(sorted({_host(p) for p in procs}))}" for value, procs in ordered
        )
        streams = {(p.host, p.pid) for _, procs in ordered for p in procs}
        events: list[Event] = []
        for e in index.all_of(event_type):
            if (e.origin.host, e.origin.pid) in streams:
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
