#!/usr/bin/env python3
"""Generate synthetic pipeline-parallel hangs seen through NCCL proxy-state dumps.

A generated incident is a logsleuth bundle of a job whose ranks form pipelines of
``--stages`` stages (rank r is stage ``r % stages`` of pipeline ``r // stages``; stage s
receives activations from s-1 and sends them to s+1 over the world communicator). When the
job hangs, every rank is sent ``NCCL_PROXY_DUMP_SIGNAL`` and prints its proxy state
(``docs/nccl-log-format.md`` section 3.2) on stdout, which torchrun writes to
``launcher.log`` with the prefix ``[rank<R>]:`` (``--log-line-prefix-template``). Each rank
also has its ``NCCL_DEBUG_FILE`` log under ``nccl/<host>.<pid>.log`` (version and init lines
of NCCL 2.21.5, which map pid to rank). The output depends only on the arguments.

Faults (``--culprit`` is the misbehaving stage's rank):

* ``dropped-send``: the culprit never posts its send to the next stage and goes on to a
  collective; the next stage waits in a Recv from it, later stages wait behind
  (``missing-collective``);
* ``wrong-peer``: the culprit posts its Recv from the next stage instead of the previous
  one; the previous stage waits in its Send, the next stage in its Recv from the culprit
  (``collective-mismatch``);
* ``stuck-link``: the culprit's Send to the next stage and that stage's Recv are both
  posted and stay in progress; every other rank has nothing active (``collective-timeout``).

Example:
    python benchmarks/synth_p2p.py --ranks 1024 --fault dropped-send --culprit 517 --out /tmp/pp
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

FAULTS = ("dropped-send", "wrong-peer", "stuck-link")
TRUTH_KIND = {
    "dropped-send": "missing-collective",
    "wrong-peer": "collective-mismatch",
    "stuck-link": "collective-timeout",
}
"""Fault -> the CONTRACT finding kind an analyzer should report."""
NCCL_VERSION = "2.21.5"
CUDA = "12.4"
CHANNELS = 4


def _host(rank: int, per_host: int) -> str:
    return f"gpu-node{rank // per_host + 1:03d}"


def _pid(rank: int, rng_base: int) -> int:
    return rng_base + 2 * rank


def _proxy_dump(rank: int, ops: Sequence[tuple[int, str, int, str, int]]) -> list[str]:
    """The dump's lines for ``ops`` = (opCount, Send/Recv/Coll, peer, status, channel)."""
    lines = ["ACTIVE OPS"]
    for n, (count, kind, peer, status, channel) in enumerate(ops):
        if n:
            lines += ["|", "v"]
        lines.append(f"[{n % 2}-{n}|{count}| {kind} {peer}{status}/{channel}]")
    lines.append("[X]")
    return [f"[rank{rank}]:{line}" for line in lines]


def _active_ops(
    fault: str, ranks: int, stages: int, culprit: int, channel: int, base: int
) -> dict[int, list[tuple[int, str, int, str, int]]]:
    """Each rank's active proxy ops at the moment of the dump."""
    ops: dict[int, list[tuple[int, str, int, str, int]]] = {r: [] for r in range(ranks)}
    first = culprit - culprit % stages
    last = first + stages - 1
    if fault == "stuck-link":
        ops[culprit].append((base + 2 * (culprit - first), "Send", culprit + 1, "S", channel))
        ops[culprit + 1].append(
            (base + 2 * (culprit + 1 - first) - 1, "Recv", culprit, "R", channel)
        )
        return ops
    if fault == "dropped-send":
        # The culprit went on to a collective (a ring of its pipeline, channel 0).
        ops[culprit].append((base + 2 * (culprit - first) + 1, "Coll", culprit + 1, "S", 0))
        for stage in range(culprit + 1, last + 1):
            ops[stage].append((base + 2 * (stage - first) - 1, "Recv", stage - 1, "R", channel))
        return ops
    # wrong-peer
    ops[culprit - 1].append((base + 2 * (culprit - 1 - first), "Send", culprit, "S", channel))
    ops[culprit].append((base + 2 * (culprit - first) - 1, "Recv", culprit + 1, "R", channel))
    for stage in range(culprit + 1, last + 1):
        ops[stage].append((base + 2 * (stage - first) - 1, "Recv", stage - 1, "R", channel))
    return ops


def _nccl_log(rank: int, ranks: int, per_host: int, pid: int, comm_id: str, ptr: str) -> str:
    host = _host(rank, per_host)
    dev = rank % per_host
    tid = pid + 317
    prefix = f"{host}:{pid}:{pid} [{dev}] NCCL INFO "
    init = f"{host}:{pid}:{tid} [{dev}] NCCL INFO "
    body = (
        f"ncclCommInitRank comm {ptr} rank {rank} nranks {ranks} cudaDev {dev} "
        f"nvmlDev {dev} busId {0x18000 + 0x11000 * dev:x} commId {comm_id}"
    )
    return "".join(
        line + "\n"
        for line in (
            f"{prefix}NCCL version {NCCL_VERSION}+cuda{CUDA}",
            f"{init}{body} - Init START",
            f"{init}{body} - Init COMPLETE",
        )
    )


def generate(
    out_dir: Path,
    *,
    ranks: int = 8,
    stages: int = 8,
    per_host: int = 8,
    fault: str = "dropped-send",
    culprit: int | None = None,
    channel: int | None = None,
    seed: int = 0,
) -> dict[str, object]:
    """Write the incident under ``out_dir`` (replaced) and return its ground truth.

    Raises:
        ValueError: arguments that describe no such job (the message says which).
    """
    if fault not in FAULTS:
        raise ValueError(f"fault must be one of {', '.join(FAULTS)}, not {fault!r}")
    if stages < 3 or ranks % stages:
        raise ValueError("stages must be at least 3 and divide ranks")
    rng = random.Random(seed)
    lowest = 1 if fault == "wrong-peer" else 0
    eligible = [r for r in range(ranks) if lowest <= r % stages < stages - 1]
    if culprit is None:
        culprit = rng.choice(eligible)
    if culprit not in eligible:
        raise ValueError(f"culprit {culprit} is not a stage that can be {fault}'s culprit")
    channel = rng.randrange(CHANNELS) if channel is None else channel
    base = 16 + rng.randrange(64)
    pid_base = 20000 + rng.randrange(20000)
    comm_id = f"0x{rng.getrandbits(64):016x}"
    if out_dir.exists():
        shutil.rmtree(out_dir)
    (out_dir / "nccl").mkdir(parents=True)
    for rank in range(ranks):
        pid = _pid(rank, pid_base)
        ptr = f"0x{0x55D000000000 + rng.getrandbits(28) * 16:x}"
        log = _nccl_log(rank, ranks, per_host, pid, comm_id, ptr)
        (out_dir / "nccl" / f"{_host(rank, per_host)}.{pid}.log").write_text(log, encoding="utf-8")
    active = _active_ops(fault, ranks, stages, culprit, channel, base)
    launcher: list[str] = []
    for rank in range(ranks):
        launcher += _proxy_dump(rank, active[rank])
    (out_dir / "launcher.log").write_text("\n".join(launcher) + "\n", encoding="utf-8")
    # The stuck pair as (the rank that waits, the rank it waits for).
    waiter, peer = {
        "dropped-send": (culprit + 1, culprit),
        "wrong-peer": (culprit - 1, culprit),
        "stuck-link": (culprit, culprit + 1),
    }[fault]
    culprits = [culprit, culprit + 1] if fault == "stuck-link" else [culprit]
    return {
        "fault": fault,
        "kind": TRUTH_KIND[fault],
        "culprit_ranks": culprits,
        "pair": [waiter, peer],
        "channel": channel,
        "ranks": ranks,
        "stages": stages,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line, write the incident, print its ground truth as JSON."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--stages", type=int, default=8)
    parser.add_argument("--per-host", type=int, default=8)
    parser.add_argument("--fault", choices=FAULTS, default="dropped-send")
    parser.add_argument("--culprit", type=int)
    parser.add_argument("--channel", type=int)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        truth = generate(
            args.out,
            ranks=args.ranks,
            stages=args.stages,
            per_host=args.per_host,
            fault=args.fault,
            culprit=args.culprit,
            channel=args.channel,
            seed=args.seed,
        )
    except ValueError as exc:
        parser.error(str(exc))
    print(json.dumps(truth, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
