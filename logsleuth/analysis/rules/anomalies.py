"""Problems that only INFO lines show: a topology file forced on NCCL, two machines with one name."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable

from logsleuth.analysis.index import EvidenceIndex
from logsleuth.analysis.rules.base import Rule
from logsleuth.model.base import Event
from logsleuth.model.diagnosis import Finding
from logsleuth.model.nccl import NcclEnv, NcclInterface

_TOPOLOGY_VARIABLES = ("NCCL_TOPO_FILE", "NCCL_GRAPH_FILE")
_LOCAL_ADDRESS = re.compile(r"^(?:127\.|169\.254\.|fe80:|::1$)", re.IGNORECASE)
_IP = re.compile(r"^\[?([0-9a-fA-F.:]+?)\]?(?:%\w+)?(?:<\d+>)?$")


def bootstrap_addresses(
    index: EvidenceIndex,
) -> dict[tuple[str, int | None], list[tuple[str, NcclInterface]]]:
    """Each process's bootstrap address(es) that name a machine (not loopback or link-local).

    Keyed by (host, pid); each address comes with the line that first showed it. Two
    processes of one host name with different addresses run on different machines.
    """
    found: dict[tuple[str, int | None], list[tuple[str, NcclInterface]]] = defaultdict(list)
    for iface in index.all_of(NcclInterface):
        host = iface.origin.host
        if not host or iface.role != "bootstrap":
            continue
        key = (host, iface.origin.pid)
        for _name, address in iface.interfaces:
            match = _IP.match(address.strip())
            if (
                match
                and not _LOCAL_ADDRESS.match(match.group(1))
                and all(a != match.group(1) for a, _ in found[key])
            ):
                found[key].append((match.group(1), iface))
    return found


class TopologyFileForced(Rule):
    """NCCL was given a topology or graph file instead of detecting the machine itself.

    Symptom:
        ``NCCL_TOPO_FILE set by environment to /opt/...xml`` or ``NCCL_GRAPH_FILE set by
        environment to ...`` in the INFO lines, often set by a cloud image or a container.

    Likely causes:
        A tuning file made for one instance type reused on another (fewer GPUs or NICs, other
        PCI ids); then rings and trees name devices this machine does not have (``XML Import
        Channel : dev 5 not found``), or NCCL uses a slower path than the hardware allows.

    What to check:
        That the file matches this machine type (``nvidia-smi topo -m``, the NICs); unset the
        variable to let NCCL detect the topology, or regenerate the file on this node type
        (``NCCL_TOPO_DUMP_FILE``).
    """

    code = "LS704"
    name = "config.topology_file"
    kind = "config-mismatch"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        found: dict[tuple[str, str], list[Event]] = defaultdict(list)
        for env in index.all_of(NcclEnv):
            if env.name in _TOPOLOGY_VARIABLES:
                found[(env.name, env.value)].append(env)
        for (variable, value), events in sorted(found.items()):
            hosts = sorted({e.origin.host for e in events if e.origin.host})
            yield self.finding(
                severity="warning",
                title=f"{variable} is set to {value}"
                + (f" on {', '.join(hosts)}" if hosts else "")
                + ": NCCL uses this file instead of detecting the machine",
                detail=(
                    f"{variable}={value} makes NCCL read the "
                    + ("topology" if variable == "NCCL_TOPO_FILE" else "rings and trees")
                    + " from a file. A file written for another machine type names devices "
                    "this one lacks or hides faster paths."
                ),
                events=events,
                hosts=hosts,
                confidence=0.5,
                next_steps=(
                    f"Check that {value} was made for this machine type (nvidia-smi topo -m, the NICs).",
                    f"Unset {variable} to let NCCL detect the topology, or regenerate the file "
                    "on this node type with NCCL_TOPO_DUMP_FILE.",
                ),
            )


class HostNameCollision(Rule):
    """Two machines report the same host name, so NCCL takes them for one node.

    Symptom:
        Processes that print one host name bootstrap from different addresses
        (``Bootstrap : Using eth0:10.0.0.1<0>`` and ``eth0:10.0.0.2<0>`` under ``node1``);
        NCCL then tries P2P/CUDA IPC or shared memory between machines (``failed to open CUDA
        IPC handle``, UDS or SHM errors) or miscounts local ranks.

    Likely causes:
        Containers or VMs cloned with one host name (``node1``, ``localhost``, a fixed pod
        host name), ``--hostname`` set to the same value on every node.

    What to check:
        ``hostname`` on every node: give each machine a unique name, or set ``NCCL_HOSTID``
        to a per-node value.
    """

    code = "LS705"
    name = "config.hostname_collision"
    kind = "config-mismatch"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        addresses: dict[str, set[str]] = defaultdict(set)
        events: dict[str, list[Event]] = defaultdict(list)
        for (host, _pid), found in bootstrap_addresses(index).items():
            for address, iface in found:
                if address not in addresses[host]:
                    events[host].append(iface)
                addresses[host].add(address)
        for host in sorted(h for h, a in addresses.items() if len(a) > 1):
            pids = sorted({e.origin.pid for e in events[host] if e.origin.pid is not None})
            seen = ", ".join(sorted(addresses[host]))
            yield self.finding(
                severity="error",
                title=f"{len(addresses[host])} machines call themselves {host} ({seen})",
                detail=(
                    f"Processes named {host} bootstrap from {seen}: these are different machines "
                    "with one host name. NCCL groups ranks into nodes by host name, so it takes "
                    "them for one node and tries intra-node paths (P2P, CUDA IPC, /dev/shm) "
                    "between machines."
                ),
                events=events[host],
                hosts=[host],
                pids=pids,
                confidence=0.6,
                next_steps=(
                    f"Give every machine a unique host name (hostname on each machine now named {host}).",
                    "Or set NCCL_HOSTID to a different value per machine.",
                ),
            )
