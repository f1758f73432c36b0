"""Transport choices one process's own log shows to be a downgrade."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from logsleuth.analysis.index import EvidenceIndex, Stream
from logsleuth.analysis.rules.base import Rule
from logsleuth.model.base import Event
from logsleuth.model.diagnosis import Finding
from logsleuth.model.nccl import NcclEnv, NcclNetDevices, NcclNetwork

_IB_ASKED = ("NCCL_IB_HCA", "NCCL_IB_GID_INDEX", "NCCL_IB_TC", "NCCL_IB_SL")


class IbExpectedSocketUsed(Rule):
    """NCCL was set up for InfiniBand/RoCE but found no usable device and uses sockets.

    Symptom:
        ``NET/IB : No device found.`` and ``Using network Socket`` in a process whose
        environment selects IB devices (``NCCL_IB_HCA``, ``NCCL_IB_GID_INDEX`` ...) or
        enables IB explicitly (``NCCL_IB_DISABLE=0``). Training runs, but inter-node traffic
        goes over TCP sockets: many times slower.

    Likely causes:
        The container does not see the IB devices (no ``--device=/dev/infiniband``, missing
        ``rdma`` capabilities, ``--privileged`` or a device plugin in Kubernetes); the RDMA
        user-space libraries (libibverbs, the mlx5 provider) are missing in the image;
        ``NCCL_IB_HCA`` names devices this host does not have.

    What to check:
        ``ibv_devinfo`` inside the container; that ``/dev/infiniband`` is mounted; that the
        names in ``NCCL_IB_HCA`` exist (``ls /sys/class/infiniband``); rerun with
        ``NCCL_DEBUG_SUBSYS=INIT,NET`` to see why each device was skipped.
    """

    code = "LS610"
    name = "transport.ib_expected"
    kind = "transport-degraded"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        by_stream: dict[Stream, list[Event]] = defaultdict(list)
        socket: set[Stream] = set()
        for net in index.all_of(NcclNetwork):
            if net.name.lower().startswith("socket"):
                stream = (net.origin.host, net.origin.pid)
                socket.add(stream)
                by_stream[stream].append(net)
        if not socket:
            return
        if any(
            p.network and not p.network.lower().startswith("socket") for p in index.procs.values()
        ):
            return  # other hosts use IB: LS402 compares them and names the odd ones
        asked: dict[Stream, list[Event]] = defaultdict(list)
        for env in index.all_of(NcclEnv):
            if env.name in _IB_ASKED or (env.name == "NCCL_IB_DISABLE" and env.value == "0"):
                asked[(env.origin.host, env.origin.pid)].append(env)
        for devices in index.all_of(NcclNetDevices):
            if devices.transport == "IB" and not devices.devices:
                asked[(devices.origin.host, devices.origin.pid)].append(devices)
        hit = sorted((s for s in socket if asked.get(s)), key=str)
        if not hit:
            return
        events = [e for s in hit for e in (*asked[s], *by_stream[s])]
        hosts = sorted({h for h, _ in hit if h})
        where = ", ".join(hosts) if hosts else "this process"
        yield self.finding(
            severity="warning",
            title=f"InfiniBand/RoCE was expected on {where}, but NCCL found no usable IB device "
            "and uses TCP sockets",
            detail=(
                "The environment selects IB devices or enables IB, and NCCL reports no IB device "
                "(or none it could use) and falls back to its socket transport. Collectives that "
                "cross hosts then run over TCP, typically many times slower."
            ),
            events=events,
            hosts=hosts,
            pids=[p for _, p in hit if p is not None],
            confidence=0.6,
            next_steps=(
                "Run ibv_devinfo where the job runs (inside the container): no device means "
                "/dev/infiniband or the RDMA libraries are missing there.",
                "Check that the names in NCCL_IB_HCA exist on this host (ls /sys/class/infiniband).",
                "Rerun with NCCL_DEBUG_SUBSYS=INIT,NET to see why each IB device was skipped.",
            ),
        )
