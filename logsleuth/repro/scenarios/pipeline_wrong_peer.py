"""Pipeline, wrong peer: a middle stage posts its recv from the next stage, not the previous.

Every step sends one activation down a pipeline of stages 0 -> 1 -> ... -> N-1 with
blocking ``send``/``recv`` (gloo's ``send`` returns once the peer has received). At one
step the culprit receives from the stage after it instead of the one before: the next stage
waits to receive from the culprit, the culprit from it (a deadlock of two ``recv``), and the
stage before the culprit waits in ``send`` for a receiver that is listening to someone else.
"""

from __future__ import annotations

import time

import torch.distributed as dist

from logsleuth.repro.harness import FAULT_STEP, STEP_PAUSE_S, STEPS, finish, start, tensor


def main() -> None:
    """Run the scenario on this rank."""
    job = start()
    last = job.world_size - 1
    for step in range(STEPS):
        activation = tensor(job, step)
        if job.rank > 0:
            source = job.rank - 1
            if job.is_culprit and step == FAULT_STEP and job.rank < last:
                source = job.rank + 1
                job.log(f"step {step}: receives from stage {source} instead of {job.rank - 1}")
            dist.recv(activation, src=source)
        if job.rank < last:
            dist.send(activation, dst=job.rank + 1)
        job.log(f"step {step} done")
        time.sleep(STEP_PAUSE_S)
    finish(job)


if __name__ == "__main__":
    main()
