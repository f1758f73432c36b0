"""Ring, one hop skipped: the culprit sends its block two ranks on instead of to its neighbour.

Every step passes a block around a ring (rank r sends to r+1 and receives from r-1, even
ranks send first and odd ranks receive first, so blocking gloo calls never deadlock),
then all_reduces. At one step the culprit sends to r+2: that rank has already received
from its own neighbour and gone on to the all_reduce, so the culprit waits in ``send``
forever, and the culprit's neighbour waits to receive a block that never comes.
"""

from __future__ import annotations

import time

import torch.distributed as dist

from logsleuth.repro.harness import FAULT_STEP, STEP_PAUSE_S, STEPS, finish, start, tensor


def main() -> None:
    """Run the scenario on this rank."""
    job = start()
    size = job.world_size
    for step in range(STEPS):
        block = tensor(job, step)
        incoming = tensor(job, step)
        target = (job.rank + 1) % size
        if job.is_culprit and step == FAULT_STEP:
            target = (job.rank + 2) % size
            job.log(f"step {step}: sends to rank {target}, skipping rank {(job.rank + 1) % size}")
        if job.rank % 2 == 0:
            dist.send(block, dst=target)
            dist.recv(incoming, src=(job.rank - 1) % size)
        else:
            dist.recv(incoming, src=(job.rank - 1) % size)
            dist.send(block, dst=target)
        dist.all_reduce(incoming)
        job.log(f"step {step} done")
        time.sleep(STEP_PAUSE_S)
    finish(job)


if __name__ == "__main__":
    main()
