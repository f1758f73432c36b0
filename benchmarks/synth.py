#!/usr/bin/env python3
"""Generate synthetic multi-rank distributed-training incidents, format-faithful to NCCL.

A generated incident is a logsleuth bundle (CONTRACT section 4): one NCCL_DEBUG_FILE log
per rank process under ``nccl/<host>.<pid>.log``, optionally the job's combined launcher
output ``launcher.log`` (torchrun agent lines, PyTorch watchdog lines, the
``ChildFailedError`` summary) and py-spy 0.4.3 text dumps ``stacks/rank<R>.0.txt``, plus
``manifest.json``. Every line copies a format string of the chosen NCCL version from
``docs/nccl-log-formats.tsv``; the launcher and stack lines copy the captured samples.
The output depends only on the arguments: the same seed gives the same bytes.

Example:
    python benchmarks/synth.py --ranks 64 --hosts 8 --ops 20000 \\
        --fault missing-collective --culprit 37 --out /tmp/incident
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

FAULTS = (
    "healthy",
    "missing-collective",
    "collective-mismatch",
    "size-mismatch",
    "dataloader-stall",
    "socket-fallback",
    "process-died",
    "exception",
    "early-exit",
    "init-never",
    "concurrent-use",
)
TRUTH_KIND = {
    "healthy": "healthy",
    "missing-collective": "missing-collective",
    "collective-mismatch": "collective-mismatch",
    "size-mismatch": "collective-mismatch",
    "dataloader-stall": "non-collective-stall",
    "socket-fallback": "transport-degraded",
    "process-died": "process-died",
    "exception": "process-died",
    "early-exit": "process-died",
    "init-never": "init-stall",
    "concurrent-use": "concurrent-use",
}
"""Generator fault -> the CONTRACT finding kind an analyzer should report."""
HANGS = frozenset(
    {
        "missing-collective",
        "collective-mismatch",
        "size-mismatch",
        "dataloader-stall",
        "exception",
        "early-exit",
        "concurrent-use",
    }
)
"""Faults where the waiting ranks hang in one collective until their watchdog fires."""
SKIPS_OP = frozenset({"missing-collective", "dataloader-stall", "exception", "early-exit"})
"""Faults where the culprit never enqueues the collective its peers hang in."""
GONE = frozenset({"process-died", "exception", "early-exit"})
"""Faults where the culprit process is gone when the others are found hanging."""
EXCEPTION = ("ValueError", "non-finite loss (nan) at step {step}")
"""What the culprit of ``exception`` raises (type, message)."""

CHANNELS = 32
"""Ring/tree channels of an H100 communicator (``Channel 00/32``)."""
NICS = 8
BUS_IDS = ("18000", "2a000", "3a000", "5d000", "9a000", "ab000", "ba000", "db000")
PYTHON = "/opt/venv/bin/python3"
SCRIPT = "train.py"
SCRIPT_ARGS = ("--config", "configs/gpt-1.3b.yaml")
TIMEOUT_MS = 600_000
SITE = "/opt/venv/lib/python3.11/site-packages"
EPOCH = datetime(2026, 3, 21, 1, 0, 0)

# Line numbers of the (fictional) training script, fixed so every rank agrees.
L_MODULE, L_MAIN, L_NEXT_BATCH, L_STEP_CALL, L_EVAL_CALL = 214, 209, 173, 176, 180
L_STEP_REDUCE, L_LOG_CALL, L_LOG_GATHER, L_EVAL_BARRIER = 128, 126, 112, 96
L_CHECK_LOSS, L_PREPARE, L_PREPARE_CALL, L_SETUP_CALL, L_INIT_PG = 124, 41, 202, 203, 68

_DATALOADER_WAIT = (
    "_PollLikeSelector.select (selectors.py:415)",
    "wait (multiprocessing/connection.py:947)",
    "Connection._poll (multiprocessing/connection.py:440)",
    "_ConnectionBase.poll (multiprocessing/connection.py:257)",
    "Queue.get (multiprocessing/queues.py:113)",
    "_MultiProcessingDataLoaderIter._try_get_data (torch/utils/data/dataloader.py:1291)",
    "_MultiProcessingDataLoaderIter._get_data (torch/utils/data/dataloader.py:1464)",
    "_MultiProcessingDataLoaderIter._next_data (torch/utils/data/dataloader.py:1505)",
    "_BaseDataLoaderIter.__next__ (torch/utils/data/dataloader.py:725)",
)
_FEEDER_THREAD = (
    "Condition.wait (threading.py:327)",
    "Queue._feed (multiprocessing/queues.py:231)",
    "Thread.run (threading.py:982)",
    "Thread._bootstrap_inner (threading.py:1045)",
    "Thread._bootstrap (threading.py:1002)",
)
_C10D_WRAPPER = "_exception_logger.<locals>.wrapper (torch/distributed/c10d_logger.py:83)"
_AGENT_TRACEBACK = f"""Traceback (most recent call last):
  File "/opt/venv/bin/torchrun", line 8, in <module>
    sys.exit(main())
             ^^^^^^
  File "{SITE}/torch/distributed/elastic/multiprocessing/errors/__init__.py", line 367, in wrapper
    return f(*args, **kwargs)
           ^^^^^^^^^^^^^^^^^^
  File "{SITE}/torch/distributed/run.py", line 1028, in main
    run(args)
  File "{SITE}/torch/distributed/run.py", line 1019, in run
    elastic_launch(
  File "{SITE}/torch/distributed/launcher/api.py", line 194, in __call__
    return launch_agent(
           ^^^^^^^^^^^^^
  File "{SITE}/torch/distributed/launcher/api.py", line 383, in launch_agent
    raise ChildFailedError(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError: 
"""  # noqa: W291 - the trailing space after "ChildFailedError:" is what torch prints
_SIGNALS = {6: "SIGABRT", 9: "SIGKILL", 15: "SIGTERM"}
METRICS_TID = 97
"""tid - pid of the metrics thread of ``concurrent-use`` (threads start right after the process)."""


@dataclass(frozen=True, slots=True, order=True)
class NcclVersion:
    """An NCCL release ``2.minor.patch``; decides which format strings are used."""

    minor: int
    patch: int

    @classmethod
    def parse(cls, text: str) -> NcclVersion:
        """Parse ``2.21.5`` and check that the generator knows that release's formats."""
        parts = text.strip().split(".")
        if len(parts) != 3 or parts[0] != "2" or not all(p.isdigit() for p in parts):
            raise ValueError(f"NCCL version must look like 2.21.5, not {text!r}")
        version = cls(int(parts[1]), int(parts[2]))
        if not ((4, 2) <= version.key <= (4, 8) or (18, 1) <= version.key <= (21, 5)):
            raise ValueError(f"NCCL {text}: supported are 2.4.2-2.4.8 and 2.18.1-2.21.5")
        return version

    @property
    def key(self) -> tuple[int, int]:
        """Return ``(minor, patch)`` for range checks."""
        return (self.minor, self.patch)

    @property
    def old(self) -> bool:
        """Return True for the 2.4 generation (``Ring`` lines, no Init START)."""
        return self.minor < 5

    @property
    def cuda(self) -> str:
        """Return the CUDA toolkit NCCL was built with (the ``+cuda`` suffix)."""
        return {4: "10.1", 18: "12.2", 19: "12.3"}.get(self.minor, "12.4")

    def __str__(self) -> str:
        return f"2.{self.minor}.{self.patch}"


@dataclass(frozen=True, slots=True)
class Proc:
    """One rank process: where it runs and the ids its log lines carry."""

    rank: int
    host_index: int
    host: str
    ip: str
    local_rank: int
    pid: int
    main: str
    """``host:pid:tid [dev] NCCL INFO `` of the calling (main) thread."""
    proxy: str
    """Line prefix up to ``[dev]`` of the proxy progress thread."""
    service: str
    """Line prefix up to ``[dev]`` of the proxy service thread."""

    @property
    def bus_id(self) -> str:
        """Return the GPU's PCI bus id as NCCL prints it (``%lx``)."""
        if self.local_rank < len(BUS_IDS):
            return BUS_IDS[self.local_rank]
        return f"{0xC0 + self.local_rank:x}000"


@dataclass(frozen=True, slots=True)
class Comm:
    """One NCCL communicator: its members (global ranks, in communicator-rank order)."""

    layer: int
    """0: the world communicator; 1: per-host split (color = host); 2: cross-host split."""
    color: int
    members: tuple[int, ...]
    comm_id: str
    rings: tuple[tuple[int, ...], ...]
    """Per channel, ``next[r]`` in communicator ranks."""
    prevs: tuple[tuple[int, ...], ...]
    ups: tuple[tuple[int, ...], ...]
    downs: tuple[tuple[tuple[int, ...], ...], ...]
    ring_dumps: tuple[tuple[int, ...], ...]
    """Per channel, the ring as communicator rank 0 prints it (starting at itself)."""
    nnodes: int

    def rank_of(self, rank: int) -> int:
        """Return the communicator rank of global rank ``rank``."""
        if self.layer == 0:
            return rank
        return self.members.index(rank)


@dataclass(frozen=True, slots=True)
class Template:
    """The two halves of a COLL line around its opCount, for one rank."""

    head: str
    tail: str


@dataclass(frozen=True, slots=True)
class Exit:
    """How a rank process ended: exit code and when (None for a healthy job)."""

    code: int
    time: datetime


def _ip(host_index: int) -> str:
    return f"10.42.{host_index // 200}.{host_index % 200 + 11}"


def _ptr(rng: random.Random, high: int) -> str:
    """Return a pointer as glibc ``%p`` prints it: heap (0x55...) or mmap (0x7f...) style."""
    return f"0x{high:x}{rng.getrandbits(40) & ~0xF:010x}"


def _buf(rng: random.Random) -> str:
    return f"0x7f{rng.randrange(0x10, 0x100):02x}{rng.getrandbits(32) & ~0x1FF:08x}"


def _cpu_mask(local_rank: int, local_ranks: int) -> str:
    """Return the NUMA-local CPU mask of a GPU as ``Setting affinity`` prints it (hex words)."""
    cores, sockets = 48, 2
    socket = min(local_rank * sockets // max(local_ranks, 1), sockets - 1)
    mask = 0
    for base in (socket * cores, sockets * cores + socket * cores):
        mask |= ((1 << cores) - 1) << base
    words: list[int] = []
    while mask:
        words.append(mask & 0xFFFFFFFF)
        mask >>= 32
    words.reverse()
    return ",".join([f"{words[0]:x}"] + [f"{w:08x}" for w in words[1:]])


def _node_groups(members: Sequence[int], procs: Sequence[Proc]) -> list[list[int]]:
    """Group communicator ranks by host, hosts in order."""
    groups: dict[int, list[int]] = {}
    for crank, rank in enumerate(members):
        groups.setdefault(procs[rank].host_index, []).append(crank)
    return [groups[h] for h in sorted(groups)]


def _build_comm(
    layer: int,
    color: int,
    members: tuple[int, ...],
    comm_id: str,
    procs: Sequence[Proc],
    channels: int,
) -> Comm:
    """Lay out rings and trees the way NCCL's search tends to: node by node, varied per channel."""
    nodes = _node_groups(members, procs)
    n = len(members)
    nexts, prevs, ups, downs, dumps = [], [], [], [], []
    for c in range(channels):
        chains = []
        for group in nodes:
            size = len(group)
            order = group[c % size :] + group[: c % size]
            if (c // size) % 2:
                order = order[::-1]
            chains.append(order)
        cycle = [r for chain in chains for r in chain]
        nxt, prv = [0] * n, [0] * n
        for i, r in enumerate(cycle):
            nxt[r] = cycle[(i + 1) % n]
            prv[r] = cycle[i - 1]
        start = cycle.index(0)
        dumps.append(tuple(cycle[start:] + cycle[:start]))
        # Double binary tree over the node heads: even channels use one tree, odd the mirror.
        k = len(chains)
        label = [m if c % 2 == 0 else k - 1 - m for m in range(k)]
        node_of_label = {lab: m for m, lab in enumerate(label)}
        up: list[int] = [-1] * n
        down: list[tuple[int, ...]] = [()] * n
        for m, chain in enumerate(chains):
            lab = label[m]
            for j, r in enumerate(chain):
                kids: list[int] = [chain[j + 1]] if j + 1 < len(chain) else []
                if j == 0:
                    parent = node_of_label.get((lab - 1) // 2) if lab > 0 else None
                    up[r] = chains[parent][0] if parent is not None else -1
                    kids += [
                        chains[node_of_label[ch]][0] for ch in (2 * lab + 1, 2 * lab + 2) if ch < k
                    ]
                else:
                    up[r] = chain[j - 1]
                down[r] = tuple(kids)
        nexts.append(tuple(nxt))
        prevs.append(tuple(prv))
        ups.append(tuple(up))
        downs.append(tuple(down))
    return Comm(
        layer,
        color,
        members,
        comm_id,
        tuple(nexts),
        tuple(prevs),
        tuple(ups),
        tuple(downs),
        tuple(dumps),
        len(nodes),
    )


class Incident:
    """One synthetic job: its processes, communicators, collective schedule and fault."""

    def __init__(
        self,
        *,
        ranks: int,
        hosts: int,
        ops: int,
        fault: str,
        culprit: int | None,
        nccl_version: str,
        seed: int,
        comms: int,
    ) -> None:
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; choose from {', '.join(FAULTS)}")
        if ranks < 2 or hosts < 1 or ranks % hosts:
            raise ValueError(f"{ranks} ranks cannot be spread evenly over {hosts} hosts")
        if fault == "socket-fallback" and hosts < 2:
            raise ValueError("socket-fallback needs at least 2 hosts")
        if not 1 <= comms <= 3:
            raise ValueError("comms is 1 (world), 2 (+ per-host split) or 3 (+ cross-host split)")
        self.version = NcclVersion.parse(nccl_version)
        if comms > 1 and self.version.old:
            raise ValueError("ncclCommSplit needs NCCL >= 2.18")
        self.rng = random.Random(f"logsleuth-synth:{seed}")
        self.ranks, self.hosts, self.fault, self.seed = ranks, hosts, fault, seed
        self.local_ranks = ranks // hosts
        if culprit is None:
            culprit = self.rng.randrange(ranks)
        if not 0 <= culprit < ranks:
            raise ValueError(f"culprit rank {culprit} is outside 0..{ranks - 1}")
        self.culprit = culprit
        self.channels = 4 if self.version.old else CHANNELS
        self.procs = self._build_procs()
        self.socket_hosts = (
            {self.procs[culprit].host_index} if fault == "socket-fallback" else set()
        )
        self.comms = self._build_comms(comms)
        self.buckets = self._bucket_counts()
        steplen = len(self.buckets) + 1
        if ops <= steplen:
            raise ValueError(f"ops must be more than one training step ({steplen} collectives)")
        # A short preamble (barriers) puts the last logged op at the start of a training
        # step, where a rank that is stuck fetching its batch would leave its peers waiting.
        self.preamble = (ops - 1) % steplen
        self.ops = ops
        self.hang_op = ops - 1
        self.start = EPOCH + timedelta(seconds=self.rng.randrange(86_400))
        self.step_seconds = round(self.rng.uniform(0.6, 1.4), 3)
        self.hang_time = self.start + timedelta(
            seconds=45 + self._world_step(self.hang_op) * self.step_seconds
        )
        self.fired: dict[int, datetime] = {}
        """Ranks whose watchdog reported the failure, and when."""
        self.exits = self._timeline()

    # -- layout ------------------------------------------------------------------------

    def _build_procs(self) -> list[Proc]:
        procs = []
        for h in range(self.hosts):
            host = f"gpu-node{h + 1:03d}"
            base = self.rng.randrange(20_000, 90_000)
            for lr in range(self.local_ranks):
                # torchrun forks the workers one after another: increasing, nearly adjacent pids.
                pid = base + lr + self.rng.randrange(0, 3)
                base = pid - lr
                init_tid = pid + self.rng.randrange(80, 400)
                dev = f" [{lr}]"
                procs.append(
                    Proc(
                        rank=h * self.local_ranks + lr,
                        host_index=h,
                        host=host,
                        ip=_ip(h),
                        local_rank=lr,
                        pid=pid,
                        main=f"{host}:{pid}:{pid}{dev} NCCL INFO ",
                        proxy=f"{host}:{pid}:{init_tid + self.rng.randrange(5, 40)}{dev}",
                        service=f"{host}:{pid}:{init_tid + self.rng.randrange(1, 5)}{dev}",
                    )
                )
        return procs

    def _build_comms(self, count: int) -> list[dict[int, Comm]]:
        """Return per layer a map global rank -> its communicator in that layer."""
        layers: list[dict[int, Comm]] = []
        split_id = f"0x{self.rng.getrandbits(64):x}"
        for layer in range(count):
            groups: dict[int, list[int]] = {}
            for p in self.procs:
                color = 0 if layer == 0 else (p.host_index if layer == 1 else p.local_rank)
                groups.setdefault(color, []).append(p.rank)
            by_rank: dict[int, Comm] = {}
            for color, members in sorted(groups.items()):
                # Split children hash a zeroed unique id, so every split child prints one commId.
                comm_id = f"0x{self.rng.getrandbits(64):x}" if layer == 0 else split_id
                comm = _build_comm(layer, color, tuple(members), comm_id, self.procs, self.channels)
                for rank in members:
                    by_rank[rank] = comm
            layers.append(by_rank)
        return layers

    def _bucket_counts(self) -> list[int]:
        """Return DDP gradient-bucket sizes (float32 elements): 1 MiB first, then 25 MiB caps."""
        n = self.rng.randrange(6, 11)
        first = self.rng.randrange(200_000, 262_144)
        middle = [self.rng.randrange(6_000_000, 6_553_600) for _ in range(n - 2)]
        return [first, *middle, self.rng.randrange(1_000_000, 6_000_000)]

    def _world_step(self, op: int) -> int:
        return max(0, op - self.preamble) // (len(self.buckets) + 1)

    def world_template(self, op: int) -> str:
        """Return the template name of world op ``op`` (preamble, step start or bucket)."""
        if op < self.preamble:
            return "barrier"
        j = (op - self.preamble) % (len(self.buckets) + 1)
        return "step" if j == 0 else f"bucket{j - 1}"

    def schedule(self, rank: int) -> list[tuple[int, str, int]]:
        """Return ``(layer, template, opCount)`` in the order ``rank`` enqueued them."""
        last = self.ops
        if self.fault == "init-never":
            return []  # nobody gets past communicator init: no collective is ever logged
        if self.fault in SKIPS_OP and rank == self.culprit:
            last = self.hang_op
        sub_counts = [0] * len(self.comms)
        steplen = len(self.buckets) + 1
        out: list[tuple[int, str, int]] = []
        for op in range(last):
            name = self.world_template(op)
            if op == self.hang_op and rank == self.culprit:
                name = {
                    "collective-mismatch": "gather",
                    "size-mismatch": "step_alt",
                    # The culprit's main thread got to its first gradient bucket before
                    # its metrics thread issued the step's loss all-reduce.
                    "concurrent-use": "bucket0",
                }.get(self.fault, name)
            out.append((0, name, op))
            if op >= self.preamble and (op - self.preamble) % steplen == steplen - 1:
                for layer in range(1, len(self.comms)):
                    out.append((layer, f"sub{layer}", sub_counts[layer]))
                    sub_counts[layer] += 1
        return out

    # -- what happened when --------------------------------------------------------------

    def waiting(self) -> list[int]:
        """Return the ranks blocked in the hung collective (none for non-hang faults)."""
        if self.fault in SKIPS_OP:
            return [r for r in range(self.ranks) if r != self.culprit]
        if self.fault in HANGS:
            return list(range(self.ranks))
        if self.fault in ("process-died", "init-never"):
            return [r for r in range(self.ranks) if r != self.culprit]
        return []

    def net_peers(self, rank: int) -> list[int]:
        """Return the ranks on other hosts that share a network connection with ``rank``."""
        comm = self.comms[0][rank]
        me = comm.rank_of(rank)
        peers: set[int] = set()
        for c in range(self.channels):
            near = [comm.rings[c][me], comm.prevs[c][me], comm.ups[c][me], *comm.downs[c][me]]
            peers.update(comm.members[x] for x in near if x >= 0)
        host = self.procs[rank].host_index
        return sorted(p for p in peers if self.procs[p].host_index != host)

    def _timeline(self) -> dict[int, Exit]:
        """Decide each rank's exit (code, time) the way torchrun and the watchdog would."""
        rng = random.Random(f"logsleuth-synth:{self.seed}:timeline")
        failed: dict[int, datetime] = {}
        culprit_host = self.procs[self.culprit].host_index
        if self.fault in HANGS:
            raised = None
            if self.fault == "exception":
                # The culprit dies with its traceback; its torchrun agent then stops the
                # culprit's siblings at once, long before any watchdog would fire.
                raised = self.hang_time + timedelta(milliseconds=rng.randrange(50, 400))
                failed[self.culprit] = raised
            for r in self.waiting():
                fire = self.hang_time + timedelta(
                    microseconds=TIMEOUT_MS * 1000 + rng.randrange(20_000, 140_000)
                )
                if raised is not None and self.procs[r].host_index == culprit_host:
                    continue
                self.fired[r] = fire
                failed[r] = fire + timedelta(milliseconds=rng.randrange(250, 700))
        elif self.fault == "process-died":
            failed[self.culprit] = self.hang_time + timedelta(milliseconds=rng.randrange(50, 400))
            for r in self.net_peers(self.culprit):
                # The IB retry budget (NCCL_IB_TIMEOUT=20, 7 retries) runs out after ~30 s.
                fire = failed[self.culprit] + timedelta(
                    microseconds=rng.randrange(30_000_000, 31_000_000)
                )
                self.fired[r] = fire
                failed[r] = fire + timedelta(milliseconds=rng.randrange(100, 300))
        else:
            return {}
        exits: dict[int, Exit] = {}
        for h in range(self.hosts):
            local = [p.rank for p in self.procs if p.host_index == h]
            first = min((failed[r] for r in local if r in failed), default=None)
            if first is None:
                continue
            # torchrun polls its workers; at the first failure it SIGTERMs the rest.
            agent = first + timedelta(milliseconds=rng.randrange(60, 200))
            for r in local:
                if r in failed and failed[r] <= agent:
                    code = -6
                    if r == self.culprit:
                        code = {"process-died": -9, "exception": 1}.get(self.fault, -6)
                    exits[r] = Exit(code, failed[r])
                else:
                    exits[r] = Exit(-15, agent)
        for h in range(self.hosts):
            local = [p.rank for p in self.procs if p.host_index == h]
            if local[0] in exits:
                continue
            # A host with no failure of its own is stopped when the rendezvous closes.
            last = max(e.time for e in exits.values()) + timedelta(
                milliseconds=rng.randrange(500, 2000)
            )
            for r in local:
                exits[r] = Exit(-15, last)
        if self.fault == "early-exit":
            # The culprit ran out of batches, destroyed its process group and exited 0 just
            # before the collective its peers then wait in; torchrun only lists failures.
            exits[self.culprit] = Exit(0, self.hang_time - timedelta(milliseconds=200))
        return exits

    def truth(self) -> dict[str, Any]:
        """Return the ground truth in the CONTRACT vocabulary."""
        kind = TRUTH_KIND[self.fault]
        proc = self.procs[self.culprit]
        if self.fault == "healthy":
            ranks: list[int] = []
        elif self.fault == "socket-fallback":
            ranks = [p.rank for p in self.procs if p.host_index == proc.host_index]
        else:
            ranks = [self.culprit]
        world = self.comms[0][0]
        return {
            "kind": kind,
            "fault": self.fault,
            "culprit_ranks": ranks,
            "culprit_hosts": sorted({self.procs[r].host for r in ranks}),
            "culprit_pids": [self.procs[r].pid for r in ranks],
            "world_size": self.ranks,
            "hosts": [f"gpu-node{h + 1:03d}" for h in range(self.hosts)],
            "nccl_version": str(self.version),
            "communicator": world.comm_id,
            "hang": None
            if self.fault not in HANGS and self.fault != "process-died"
            else {"op": "AllReduce", "opCount": f"{self.hang_op:x}", "seq": self.hang_op + 1},
        }


# -- NCCL log ----------------------------------------------------------------------------


class RankLog:
    """Writes one rank's NCCL_DEBUG_FILE log."""

    def __init__(self, inc: Incident, proc: Proc) -> None:
        self.inc, self.proc, self.v = inc, proc, inc.version
        self.rng = random.Random(f"logsleuth-synth:{inc.seed}:rank{proc.rank}")
        # One async init thread per communicator, created one after another.
        first = proc.pid + self.rng.randrange(80, 400)
        self.init_tids = [
            first + layer * self.rng.randrange(40, 120) for layer in range(len(inc.comms))
        ]
        self.ptrs = [_ptr(self.rng, 0x55) for _ in inc.comms]
        self.streams = [_ptr(self.rng, 0x55) for _ in inc.comms]
        self.socket = proc.host_index in inc.socket_hosts
        self.last_error = ""
        """The last NCCL WARN text, which PyTorch quotes after ``Last error:``."""

    def info(self, layer: int) -> str:
        p = self.proc
        return f"{p.host}:{p.pid}:{self.init_tids[layer]} [{p.local_rank}] NCCL INFO "

    def dev_tag(self, comm: Comm, crank: int) -> str:
        """Return ``R[dev]`` for a connection line: nvmlDev from 2.18.3, busId before."""
        proc = self.inc.procs[comm.members[crank]]
        if self.v.old or self.v.key >= (18, 3):
            return f"{crank}[{proc.local_rank}]"
        return f"{crank}[{proc.bus_id}]"

    def preamble(self) -> list[str]:
        v, p, m = self.v, self.proc, self.proc.main
        lines = []
        if v.old:
            # 2.4 initialises the network on the calling thread, before the version line.
            lines.append(f"{m}Bootstrap : Using [0]eth0:{p.ip}<0>")
            lines.append(f"{m}NET/Plugin : No plugin found (libnccl-net.so).")
            lines += self.net_lines(m)
        else:
            lines.append(f"{m}Bootstrap : Using eth0:{p.ip}<0>")
        if p.rank == 0:
            lines.append(f"{m}NCCL version {v}+cuda{v.cuda}")
        if v.old:
            return lines
        lines.append(f"{m}cudaDriverVersion {12020 if v.minor == 18 else 12040}")
        err = "libnccl-net.so: cannot open shared object file: No such file or directory"
        if v.minor == 18:
            lines.append(f"{m}NET/Plugin : Plugin load (libnccl-net.so) returned 2 : {err}")
            lines.append(f"{m}NET/Plugin : No plugin found, using internal implementation")
        elif v.minor in (19, 20):
            lines.append(
                f"{m}NET/Plugin : dlerror={err} No plugin found (libnccl-net.so), "
                "using internal implementation"
            )
        else:
            lines.append(
                f"{m}NET/Plugin: Plugin load returned 2 : {err} : when loading libnccl-net.so"
            )
            lines.append(f"{m}NET/Plugin: Using internal network plugin.")
        return lines

    def net_lines(self, i: str) -> list[str]:
        p, v = self.proc, self.v
        if self.socket:
            lines = [f"{i}NET/IB : No device found.", f"{i}NET/Socket : Using [0]eth0:{p.ip}<0>"]
            net = "Socket"
        else:
            devs = "".join(f" [{n}]mlx5_{n}:1/IB" for n in range(NICS))
            ro = " [RO]" if v.key >= (12, 7) else " "
            lines = [f"{i}NET/IB : Using{devs}{ro}; OOB eth0:{p.ip}<0>"]
            net = "IB"
        if (19, 1) <= v.key <= (21, 5):
            lines.append(f"{i}Using non-device net plugin version 0")
        if not v.old:
            lines.append(f"{i}Using network {net}")
        return lines

    def init_block(self, layer: int) -> list[str]:
        """Return the lines one communicator's init prints on this rank."""
        v, p, inc = self.v, self.proc, self.inc
        comm = inc.comms[layer][p.rank]
        me = comm.rank_of(p.rank)
        n = len(comm.members)
        i = self.info(layer)
        ptr = self.ptrs[layer]
        parent = self.ptrs[0]
        key, color = me, comm.color
        lines: list[str] = []
        if layer == 0:
            if not v.old:
                lines += self.net_lines(i)
        else:
            prev = comm.members[(me - 1) % n]
            nxt = comm.members[(me + 1) % n]
            who = f"comm {ptr} parent {parent} " if v.key >= (20, 3) else ""
            lines.append(
                f"{i}bootstrapSplit: {who}rank {me} nranks {n} color {color} key {key} "
                f"prev {prev} next {nxt} - DONE"
            )
            if v.key >= (19, 1):
                lines.append(f"{i}Using non-device net plugin version 0")
            lines.append(f"{i}Using network {'Socket' if self.socket else 'IB'}")
        dev = p.local_rank
        nvml = f" nvmlDev {dev}" if v.key >= (18, 3) else ""
        ident = f"comm {ptr} rank {me} nranks {n} cudaDev {dev}{nvml} busId {p.bus_id}"
        if v.key >= (21, 0):
            if layer == 0:
                start = f"ncclCommInitRank {ident} commId {comm.comm_id}"
            else:
                split = f"parent {parent} color {color} key {key}"
                start = f"ncclCommSplit {ident} {split} commId {comm.comm_id}"
        else:
            start = f"{ident} commId {comm.comm_id}"
        if v.key >= (18, 3):
            lines.append(f"{i}{start} - Init START")
        lines.append(f"{i}Setting affinity for GPU {dev} to {_cpu_mask(dev, inc.local_ranks)}")
        if not v.old:
            lines.append(f"{i}NVLS multicast support is not available on dev {p.local_rank}")
        if v.key >= (20, 3):
            lines.append(
                f"{i}comm {ptr} rank {me} nRanks {n} nNodes {comm.nnodes} "
                f"localRanks {inc.local_ranks} localRank {dev} MNNVL 0"
            )
        nch = inc.channels
        if me == 0:
            # rings.cc dumpLine: prefix, then " %3d" for at most 20 ranks (rank 0 only).
            for c in range(nch):
                label = f"Channel {c:02d} : " if v.old else f"Channel {c:02d}/{nch:02d} : "
                lines.append(f"{i}{label}" + "".join(f" {r:3d}" for r in comm.ring_dumps[c][:20]))
        if not v.old:
            # Trees: " [c] down0/down1/down2->me->up" per channel, -1 for none.
            downs = [
                "/".join(str(d) for d in (*comm.downs[c][me], -1, -1, -1)[:3]) for c in range(nch)
            ]
            trees = "".join(f" [{c}] {downs[c]}->{me}->{comm.ups[c][me]}" for c in range(nch))
            lines.append(f"{i}Trees{trees}")
            lines.append(f"{i}P2P Chunksize set to 131072")
        ring = {(c, comm.rings[c][me], 1) for c in range(nch)} | {
            (c, comm.prevs[c][me], 0) for c in range(nch)
        }
        lines += self.connections(comm, me, ring, i)
        if not v.old:
            lines.append(f"{i}Connected all rings")
            tree: set[tuple[int, int, int]] = set()
            for c in range(nch):
                for peer in (comm.ups[c][me], *comm.downs[c][me]):
                    if peer >= 0:
                        tree |= {(c, peer, 0), (c, peer, 1)}
            lines += self.connections(comm, me, tree - ring, i)
            lines.append(f"{i}Connected all trees")
            lines.append(f"{i}threadThresholds 8/8/64 | {8 * n}/8/64 | 512 | 512")
            collnet = f"{nch} collnet channels, " if v.key >= (20, 3) else ""
            lines.append(
                f"{i}{nch} coll channels, {collnet}0 nvls channels, {nch} p2p channels, "
                f"{nch} p2p channels per peer"
            )
            lines.append(f"{i}{start} - Init COMPLETE")
        else:
            lines.append(f"{i}Using 256 threads, Min Comp Cap 7, Trees disabled")
            lines.append(
                f"{i}comm {ptr} rank {me} nranks {n} cudaDev {dev} nvmlDev {dev} - Init COMPLETE"
            )
        return lines

    def connections(
        self, comm: Comm, me: int, conns: set[tuple[int, int, int]], i: str
    ) -> list[str]:
        """Print connections in ncclTransportP2pSetup's order: by peer distance, recv then send."""
        n = len(comm.members)
        procs = self.inc.procs
        my_host = self.proc.host_index
        order = sorted(
            conns, key=lambda t: ((t[1] - me) % n if t[2] else (me - t[1]) % n, t[2], t[0])
        )
        lines = []
        said_socket = False
        for c, peer, send in order:
            peer_proc = procs[comm.members[peer]]
            net = peer_proc.host_index != my_host
            if not net and not send:
                continue  # P2P receive setup logs only at TRACE
            src, dst = (me, peer) if send else (peer, me)
            side = "send" if send else "receive"
            edge = f"{self.dev_tag(comm, src)} -> {self.dev_tag(comm, dst)}"
            if self.v.old:
                if net:
                    via = f"NET/IB/{self.nic()}/GDRDMA"
                    lines.append(f"{i}Ring {c:02d} : {src} -> {dst} [{side}] via {via}")
                else:
                    lines.append(f"{i}Ring {c:02d} : {edge} via P2P/IPC")
                continue
            head = f"{i}Channel {c:02d}/0 : {edge}"
            if not net:
                lines.append(f"{head} via P2P/{'CUMEM' if self.v.key >= (19, 1) else 'IPC'}")
                continue
            if self.socket and not said_socket:
                lines.append(f"{i}NET/Socket: Using 2 threads and 8 sockets per thread")
                said_socket = True
            via = "NET/Socket/0" if self.socket else f"NET/IB/{self.nic()}/GDRDMA"
            lines.append(f"{head} [{side}] via {via}")
        return lines

    def nic(self) -> int:
        return self.proc.local_rank % NICS

    def templates(self) -> dict[str, Template]:
        """Return this rank's COLL line halves for every operation the schedule names."""
        inc, p = self.inc, self.proc
        rng = self.rng
        out: dict[str, Template] = {}

        def make(
            layer: int, name: str, op: str, count: int, redop: int, inplace: bool = True
        ) -> None:
            comm = inc.comms[layer][p.rank]
            send = _buf(rng)
            recv = send if inplace else _buf(rng)
            where = f"comm {self.ptrs[layer]} [nranks={len(comm.members)}]"
            out[name] = Template(
                f"{p.main}{op}: opCount ",
                f" sendbuff {send} recvbuff {recv} count {count} datatype 7 op {redop} root 0 "
                f"{where} stream {self.streams[layer]}\n",
            )

        make(0, "barrier", "AllReduce", 1, 0)
        make(0, "step", "AllReduce", 2, 0)
        if inc.fault == "concurrent-use":
            # A metrics thread all-reduces the loss on the world communicator while the main
            # thread all-reduces gradients on it: two threads, one communicator, no ordering.
            metrics = f"{p.host}:{p.pid}:{p.pid + METRICS_TID} [{p.local_rank}] NCCL INFO "
            out["step"] = Template(metrics + out["step"].head[len(p.main) :], out["step"].tail)
        make(0, "step_alt", "AllReduce", 3, 0)
        make(0, "gather", "AllGather", 2, 0, inplace=False)
        for b, count in enumerate(inc.buckets):
            make(0, f"bucket{b}", "AllReduce", count, 0)
        for layer in range(1, len(inc.comms)):
            make(layer, f"sub{layer}", "AllReduce", 1, 2 if layer == 1 else 0)
        return out

    def tail(self) -> list[str]:
        """Return what the rank logs after its last collective: errors and teardown."""
        inc, p, v = self.inc, self.proc, self.v
        fault = inc.fault
        lines: list[str] = []
        if fault in ("healthy", "socket-fallback") or (
            fault == "early-exit" and p.rank == inc.culprit
        ):
            if v.old:
                return lines
            return [self.teardown(layer, "Destroy") for layer in reversed(range(len(inc.comms)))]
        if fault == "process-died" and p.rank != inc.culprit:
            dead = inc.procs[inc.culprit]
            if dead.host_index == p.host_index and not v.old:
                closed = f"Connection closed by localRank {dead.local_rank}"
                lines.append(f"{p.service} NCCL INFO [Service thread] {closed}")
            if p.rank in inc.fired:
                lines += self.remote_error(dead)
        ex = inc.exits.get(p.rank)
        if ex is not None and ex.code == -6 and not v.old:
            # The watchdog aborts every communicator of the process before taking it down.
            lines += [self.teardown(layer, "Abort") for layer in range(len(inc.comms))]
        return lines

    def teardown(self, layer: int, what: str) -> str:
        """Return the ``- Destroy COMPLETE`` / ``- Abort COMPLETE`` line of one communicator."""
        p = self.proc
        comm = self.inc.comms[layer][p.rank]
        me = comm.rank_of(p.rank)
        return (
            f"{self.info(layer)}comm {self.ptrs[layer]} rank {me} nranks {len(comm.members)} "
            f"cudaDev {p.local_rank} busId {p.bus_id} - {what} COMPLETE"
        )

    def remote_error(self, dead: Proc) -> list[str]:
        """Return the IB completion error a peer of a dead process logs, and its back-trace."""
        v, x = self.v, self.proc.proxy
        port = self.rng.randrange(40_000, 60_000)
        peer = f"{dead.ip}<{port}>"
        if v.old:
            msg = "NET/IB : Got completion with error 12, opcode 0, len 0, vendor err 129"
            where = "transport/net_ib.cc:788"
        elif v.key >= (20, 3):
            wc = "status=12 opcode=0 len=0 vendor err 129 (Send)"
            msg = f"NET/IB : Got completion from peer {peer} with {wc}"
            where = "transport/net_ib.cc:1696"
        else:
            wc = "error 12, opcode 0, len 0, vendor err 129 (Send)"
            msg = f"NET/IB : Got completion from peer {peer} with {wc}"
            where = "transport/net_ib.cc:1575"
        thread = "[Progress Thread]" if v.key >= (19, 1) else "[Proxy Thread]"
        self.last_error = msg
        return [
            "",
            f"{x} {where} NCCL WARN {msg}",
            f"{x} NCCL INFO transport/net.cc:1293 -> 6",
            f"{x} NCCL INFO proxy.cc:694 -> 6",
            f"{x} NCCL INFO proxy.cc:878 -> 6 {thread}",
        ]

    def write(self, path: Path) -> None:
        """Write the whole log; COLL lines are joined from precomputed halves for speed."""
        inc = self.inc
        head = self.preamble()
        head += self.init_block(0)
        if inc.fault == "init-never":
            # Bootstrap waits for the rank that never called init: nothing after Init START.
            started = [n for n, line in enumerate(head) if line.endswith(" - Init START")]
            head = head[: started[0] + 1] if started else head
        else:
            for layer in range(1, len(inc.comms)):
                head += self.init_block(layer)
        tpl = self.templates()
        sched = inc.schedule(self.proc.rank)
        hexes = _HEX
        while len(hexes) < inc.ops + 1:
            hexes.extend(f"{k:x}" for k in range(len(hexes), 2 * len(hexes) + 1))
        with path.open("w", encoding="utf-8", newline="\n", buffering=1 << 20) as f:
            f.write("\n".join(head) + "\n")
            for chunk in range(0, len(sched), 8192):
                part = sched[chunk : chunk + 8192]
                f.write(
                    "".join([tpl[name].head + hexes[oc] + tpl[name].tail for _, name, oc in part])
                )
            tail = self.tail()
            if tail:
                f.write("\n".join(tail) + "\n")


_HEX: list[str] = [f"{k:x}" for k in range(1024)]


# -- launcher log ---------------------------------------------------------------------------


_API = "torch/distributed/elastic/multiprocessing/api.py"
_TIMEOUT = (
    "[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, "
    "OpType={optype}, NumelIn={numel_in}, NumelOut={numel_out}, Timeout(ms)={timeout}) ran for "
    "{ran} milliseconds before timing out."
)
_DETECTED = (
    "{pg} Exception (either an error or timeout) detected by watchdog at work: {seq}, "
    "last enqueued NCCL work: {seq}, last completed NCCL work: {done}."
)
_FAILED = (
    "[Rank {r}] Some NCCL operations have failed or timed out. Due to the asynchronous nature of "
    "CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data."
)
_TAKE_DOWN = "[Rank {r}] To avoid data inconsistency, we are taking the entire process down."
_TERMINATED = (
    "{pg} Process group watchdog thread terminated with exception: NCCL error: remote process "
    "exited or there was a network error, NCCL version {version}"
)
_REMOTE = (
    "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting "
    "prematurely."
)
_OMP = (
    "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid "
    "your system being overloaded, please further tune the variable for optimal performance in "
    "your application as needed. "
)


def _glog(rank: int, t: datetime, ns: int, line: int) -> str:
    """Return ``[rankN]:`` and the c10 glog header ``[E321 02:07:08.408271257 File.cpp:607]``."""
    stamp = f"{t.month}{t.day:02d} {t:%H:%M:%S}.{t.microsecond:06d}{ns:03d}"
    return f"[rank{rank}]:[E{stamp} ProcessGroupNCCL.cpp:{line}] "


def _agent(level: str, t: datetime, pid: int, where: str) -> str:
    """Return the torchelastic logging prefix ``W0321 02:07:08.408000 12345 file.py:874] ``."""
    return f"{level}{t:%m%d %H:%M:%S}.{t.microsecond // 1000:03d}000 {pid} {where}] "


def _summary(inc: Incident, host: int) -> list[str]:
    """Return the ChildFailedError summary torchrun prints for the workers of ``host``."""
    # torchrun lists failed workers only: a worker that exited 0 does not appear.
    local = [p for p in inc.procs if p.host_index == host and inc.exits[p.rank].code != 0]
    order = sorted(local, key=lambda p: (inc.exits[p.rank].time, p.local_rank))
    root = order[0]
    rest = [root, *sorted((p for p in local if p is not root), key=lambda p: p.local_rank)]
    blocks: list[list[str]] = []
    for idx, p in enumerate(rest):
        ex = inc.exits[p.rank]
        sig = -ex.code
        if ex.code > 0:
            code = f"  exitcode  : {ex.code} (pid: {p.pid}) "
            trace = "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
        else:
            code = f"  exitcode  : {ex.code} (pid: {p.pid})  ({_SIGNALS[sig]})"
            trace = f"  traceback : Signal {sig} ({_SIGNALS[sig]}) received by PID {p.pid}"
        blocks.append(
            [
                f"[{idx}]:",
                f"  time      : {ex.time:%Y-%m-%d_%H:%M:%S}",
                f"  host      : {p.host}",
                f"  rank      : {p.rank} (local_rank: {p.local_rank})",
                code,
                "  error_file: <N/A>",
                trace,
            ]
        )
    title = f"{SCRIPT} FAILED"
    width = min(max(len(title), *(len(x) for b in blocks for x in b)), 60)
    others = [x for b in blocks[1:] for x in b] or ["  <NO_OTHER_FAILURES>"]
    return [
        "=" * width,
        title,
        "-" * width,
        "Failures:",
        *others,
        "-" * width,
        "Root Cause (first observed failure):",
        *blocks[0],
        "=" * width,
    ]


def _watchdog_lines(inc: Incident, logs: dict[int, RankLog], r: int, fire: datetime) -> list[str]:
    """Return what rank ``r``'s ProcessGroupNCCL watchdog prints when it gives up."""
    rng = random.Random(f"logsleuth-synth:{inc.seed}:watchdog{r}")
    pg = f"[PG ID 0 PG GUID 0(default_pg) Rank {r}]"
    seq = inc.hang_op + 1
    lines = []
    if inc.fault in HANGS:
        mine = r == inc.culprit
        gather = mine and inc.fault == "collective-mismatch"
        numel = 3 if mine and inc.fault == "size-mismatch" else 2
        if mine and inc.fault == "concurrent-use":
            numel = inc.buckets[0]
        text = _TIMEOUT.format(
            r=r,
            seq=seq,
            optype="_ALLGATHER_BASE" if gather else "ALLREDUCE",
            numel_in=numel,
            numel_out=numel * inc.ranks if gather else numel,
            timeout=TIMEOUT_MS,
            ran=(fire - inc.hang_time) // timedelta(milliseconds=1),
        )
        lines.append(_glog(r, fire, rng.randrange(1000), 607) + text)
        t = fire + timedelta(microseconds=rng.randrange(30, 90))
        lines.append(
            _glog(r, t, rng.randrange(1000), 1664) + _DETECTED.format(pg=pg, seq=seq, done=seq - 1)
        )
    t = fire + timedelta(microseconds=rng.randrange(100, 200))
    lines.append(_glog(r, t, rng.randrange(1000), 681) + _FAILED.format(r=r))
    lines.append(_glog(r, t, rng.randrange(1000), 695) + _TAKE_DOWN.format(r=r))
    if inc.fault == "process-died":
        t += timedelta(microseconds=rng.randrange(20, 60))
        text = _TERMINATED.format(pg=pg, version=inc.version)
        lines += [_glog(r, t, rng.randrange(1000), 1895) + text, _REMOTE, "Last error:"]
        lines.append(logs[r].last_error)
    return lines


def _agent_lines(inc: Incident, host: int, agent_pid: int) -> tuple[datetime, list[str]]:
    """Return when and what host ``host``'s torchrun agent prints as its workers fail."""
    local = [p for p in inc.procs if p.host_index == host and inc.exits[p.rank].code != 0]
    failed = sorted(
        (p for p in local if inc.exits[p.rank].code != -15), key=lambda p: inc.exits[p.rank].time
    )
    stop = max(inc.exits[p.rank].time for p in local) + timedelta(milliseconds=40)
    lines = [
        _agent("W", inc.exits[p.rank].time, agent_pid, f"{_API}:1028")
        + f"Sending process {p.pid} closing signal SIGTERM"
        for p in local
        if inc.exits[p.rank].code == -15
    ]
    first = failed[0] if failed else local[0]
    code = inc.exits[first.rank].code
    lines.append(
        _agent("E", stop, agent_pid, f"{_API}:1002")
        + f"failed (exitcode: {code}) local_rank: {first.local_rank} (pid: {first.pid}) "
        + f"of binary: {PYTHON}"
    )
    lines += _AGENT_TRACEBACK.rstrip("\n").split("\n")
    lines += _summary(inc, host)
    return stop, lines


def _traceback_lines(inc: Incident, rank: int) -> list[str]:
    """Return the Python traceback the culprit of ``exception`` prints, with torchrun's prefix."""
    step = inc._world_step(inc.hang_op)
    exc_type, message = EXCEPTION
    script = f"/workspace/{SCRIPT}"
    body = [
        "Traceback (most recent call last):",
        f'  File "{script}", line {L_MODULE}, in <module>',
        "    main()",
        f'  File "{script}", line {L_MAIN}, in main',
        "    train(model, loader, optimizer, args)",
        f'  File "{script}", line {L_STEP_CALL}, in train',
        "    loss = train_step(model, batch, optimizer, step)",
        f'  File "{script}", line {L_CHECK_LOSS}, in train_step',
        '    raise ValueError(f"non-finite loss ({loss.item()}) at step {step}")',
        f"{exc_type}: {message.format(step=step)}",
    ]
    return [f"[rank{rank}]: {line}" for line in body]


def render_launcher(inc: Incident, logs: dict[int, RankLog]) -> str:
    """Return ``launcher.log``: torchrun agents, rank 0's stdout, watchdog lines, summaries."""
    rng = random.Random(f"logsleuth-synth:{inc.seed}:launcher")
    events: list[tuple[datetime, int, list[str]]] = []
    agent_pid = {h: rng.randrange(10_000, 20_000) for h in range(inc.hosts)}
    for h in range(inc.hosts):
        t = inc.start + timedelta(milliseconds=rng.randrange(0, 900))
        w = _agent("W", t, agent_pid[h], "torch/distributed/run.py:874")
        stars = "*" * 41
        events.append((t, h, [w, w + stars, w + _OMP, w + stars]))
    # NCCL <= 2.21 prints the bare version line on rank 0's stdout.
    version = f"NCCL version {inc.version}+cuda{inc.version.cuda}"
    if not (inc.fault == "init-never" and inc.culprit == 0):
        events.append((inc.start + timedelta(seconds=20), 0, [version]))
    for r, fire in sorted(inc.fired.items()):
        events.append((fire, inc.procs[r].host_index, _watchdog_lines(inc, logs, r, fire)))
    if inc.fault == "exception":
        p = inc.procs[inc.culprit]
        events.append((inc.exits[p.rank].time, p.host_index, _traceback_lines(inc, p.rank)))
    for h in range(inc.hosts):
        local = [p.rank for p in inc.procs if p.host_index == h]
        if any(r in inc.exits and inc.exits[r].code != 0 for r in local):
            stop, lines = _agent_lines(inc, h, agent_pid[h])
            events.append((stop, h, lines))
    events.sort(key=lambda e: (e[0], e[1]))
    return "".join(line + "\n" for _, _, lines in events for line in lines)


# -- py-spy dumps ---------------------------------------------------------------------------


def render_stack(inc: Incident, proc: Proc) -> str:
    """Return a py-spy 0.4.3 ``dump`` of ``proc``'s training process at the hang."""
    rank = proc.rank
    loop = [
        f"train (train.py:{L_STEP_CALL})",
        f"main (train.py:{L_MAIN})",
        f"<module> (train.py:{L_MODULE})",
    ]
    culprit = rank == inc.culprit
    if inc.fault == "init-never":
        loop = [f"<module> (train.py:{L_MODULE})"]
        if culprit:
            frames = [f"prepare_data (train.py:{L_PREPARE})", f"main (train.py:{L_PREPARE_CALL})"]
        else:
            frames = [
                "_new_process_group_helper (torch/distributed/distributed_c10d.py:2169)",
                "init_process_group (torch/distributed/distributed_c10d.py:1899)",
                "_time_logger.<locals>.wrapper (torch/distributed/c10d_logger.py:97)",
                _C10D_WRAPPER,
                f"setup_distributed (train.py:{L_INIT_PG})",
                f"main (train.py:{L_SETUP_CALL})",
            ]
        frames += loop
    elif culprit and inc.fault == "dataloader-stall":
        frames = [*_DATALOADER_WAIT, f"train (train.py:{L_NEXT_BATCH})", *loop[1:]]
    elif culprit and inc.fault == "missing-collective":
        frames = [
            "barrier (torch/distributed/distributed_c10d.py:4165)",
            _C10D_WRAPPER,
            f"evaluate (train.py:{L_EVAL_BARRIER})",
            f"train (train.py:{L_EVAL_CALL})",
            *loop[1:],
        ]
    elif culprit and inc.fault == "collective-mismatch":
        frames = [
            "all_gather_into_tensor (torch/distributed/distributed_c10d.py:3459)",
            _C10D_WRAPPER,
            f"log_metrics (train.py:{L_LOG_GATHER})",
            f"train_step (train.py:{L_LOG_CALL})",
            *loop,
        ]
    else:
        frames = [
            "all_reduce (torch/distributed/distributed_c10d.py:2501)",
            _C10D_WRAPPER,
            f"train_step (train.py:{L_STEP_REDUCE})",
            *loop,
        ]
    out = [
        f"Process {proc.pid}: {PYTHON} -u {SCRIPT} {' '.join(SCRIPT_ARGS)}",
        "Python v3.11.7 (/usr/local/bin/python3.11)",
        "",
        f'Thread {proc.pid} (idle): "MainThread"',
        *(f"    {f}" for f in frames),
    ]
    for w in range(4):
        out.append(f'Thread {proc.pid + 61 + w} (idle): "QueueFeederThread"')
        out += [f"    {f}" for f in _FEEDER_THREAD]
    return "\n".join(out) + "\n"


# -- bundle ---------------------------------------------------------------------------------

_OUTPUTS = ("nccl", "stacks", "launcher.log", "manifest.json", "truth.json")


def _clear(out_dir: Path) -> None:
    for name in _OUTPUTS:
        path = out_dir / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


def generate(
    out_dir: Path,
    *,
    ranks: int = 16,
    hosts: int = 2,
    ops: int = 300,
    fault: str = "healthy",
    culprit: int | None = None,
    nccl_version: str = "2.21.5",
    seed: int = 0,
    comms: int = 1,
    launcher: bool = False,
    stacks: bool = False,
    truth_file: bool = False,
) -> dict[str, Any]:
    """Write a synthetic incident bundle into ``out_dir`` and return its ground truth.

    Earlier generator outputs in ``out_dir`` (``nccl/``, ``stacks/``, ``launcher.log``,
    ``manifest.json``, ``truth.json``) are replaced; other files are left alone.

    Args:
        out_dir: Bundle directory (created if missing).
        ranks: World size; spread evenly over ``hosts``.
        hosts: Number of hosts ``gpu-node001`` ...
        ops: Collectives on the world communicator that the waiting ranks log.
        fault: One of :data:`FAULTS`.
        culprit: Culprit rank (for ``socket-fallback``: a rank on the degraded host);
            None picks one from the seed.
        nccl_version: NCCL release whose formats are written (2.4.2-2.4.8, 2.18.1-2.21.5).
        seed: Everything random derives from it.
        comms: 1 = world only; 2 adds a per-host ncclCommSplit; 3 also a cross-host split.
        launcher: Also write ``launcher.log``.
        stacks: Also write py-spy dumps of the processes still alive a minute after the
            hang began (none for ``healthy`` and ``socket-fallback``; a process that
            died or was stopped by torchrun by then has none).
        truth_file: Also write ``truth.json``.

    Returns:
        ``kind`` (CONTRACT vocabulary), ``fault``, ``culprit_ranks``, ``culprit_hosts``,
        ``culprit_pids``, ``communicator``, ``hang`` (op, hex opCount, torch SeqNum) and more.
    """
    inc = Incident(
        ranks=ranks,
        hosts=hosts,
        ops=ops,
        fault=fault,
        culprit=culprit,
        nccl_version=nccl_version,
        seed=seed,
        comms=comms,
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    _clear(out_dir)
    (out_dir / "nccl").mkdir()
    logs: dict[int, RankLog] = {}
    for proc in inc.procs:
        log = RankLog(inc, proc)
        logs[proc.rank] = log
        if fault == "init-never" and proc.rank == inc.culprit:
            continue  # no NCCL call, so NCCL never opened its debug file
        log.write(out_dir / "nccl" / f"{proc.host}.{proc.pid}.log")
    if launcher:
        (out_dir / "launcher.log").write_text(
            render_launcher(inc, logs), encoding="utf-8", newline="\n"
        )
    if stacks and fault not in ("healthy", "socket-fallback"):
        (out_dir / "stacks").mkdir()
        for proc in inc.procs:
            gone = inc.exits.get(proc.rank)
            if gone is not None and gone.time <= inc.hang_time + timedelta(seconds=60):
                continue  # dead (or stopped by torchrun) before the stacks were taken
            text = render_stack(inc, proc)
            (out_dir / "stacks" / f"rank{proc.rank}.0.txt").write_text(
                text, encoding="utf-8", newline="\n"
            )
    truth = inc.truth()
    command = [
        "torchrun",
        f"--nnodes={hosts}",
        f"--nproc_per_node={inc.local_ranks}",
        "--rdzv_backend=c10d",
        "--rdzv_endpoint=gpu-node001:29500",
        SCRIPT,
        *SCRIPT_ARGS,
    ]
    manifest = {
        "schema": "logsleuth.bundle/1",
        "command": command,
        "ranks": {
            str(p.rank): {"pid": p.pid, "host": p.host, "local_rank": p.local_rank}
            for p in inc.procs
        },
        "started": inc.start.isoformat(),
        "stalled_at": inc.hang_time.isoformat(timespec="seconds")
        if fault in HANGS or fault == "init-never"
        else None,
        "env": {
            "NCCL_DEBUG": "INFO",
            "NCCL_DEBUG_SUBSYS": "INIT,COLL,NET",
            "NCCL_DEBUG_FILE": "/shared/logs/nccl/%h.%p.log",
            "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        },
    }
    _write_json(out_dir / "manifest.json", manifest)
    if truth_file:
        _write_json(
            out_dir / "truth.json",
            {
                k: truth[k]
                for k in ("kind", "fault", "culprit_ranks", "culprit_hosts", "culprit_pids")
            },
        )
    return truth


def _write_json(path: Path, data: object) -> None:
    path.write_text(
        json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8", newline="\n"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line: generate one incident and print its ground truth as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="bundle directory to write")
    parser.add_argument("--ranks", type=int, default=16)
    parser.add_argument("--hosts", type=int, default=2)
    parser.add_argument(
        "--ops", type=int, default=300, help="world collectives the waiting ranks log"
    )
    parser.add_argument("--fault", choices=FAULTS, default="healthy")
    parser.add_argument(
        "--culprit", type=int, default=None, help="culprit rank (default: from the seed)"
    )
    parser.add_argument("--nccl-version", default="2.21.5")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--comms", type=int, default=1, choices=(1, 2, 3))
    parser.add_argument("--launcher", action="store_true", help="also write launcher.log")
    parser.add_argument("--stacks", action="store_true", help="also write py-spy dumps")
    parser.add_argument("--truth", action="store_true", help="also write truth.json")
    args = parser.parse_args(argv)
    try:
        truth = generate(
            args.out,
            ranks=args.ranks,
            hosts=args.hosts,
            ops=args.ops,
            fault=args.fault,
            culprit=args.culprit,
            nccl_version=args.nccl_version,
            seed=args.seed,
            comms=args.comms,
            launcher=args.launcher,
            stacks=args.stacks,
            truth_file=args.truth,
        )
    except ValueError as exc:
        parser.error(str(exc))
    json.dump(truth, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
