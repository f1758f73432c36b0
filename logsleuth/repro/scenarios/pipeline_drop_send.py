"""Pipeline, dropped send: a stage leaves out its last send and waits in the final barrier.

Every step sends one activation down a pipeline of stages 0 -> 1 -> ... -> N-1 with
blocking ``send``/``recv``. At the last step the culprit receives its activation but never
sends it on (the off-by-one of a micro-batch loop): it goes on to the final barrier, where
the stages before it join it, while the stage after it waits to receive and every later
stage waits behind that one. The timeout fires far from the culprit.
"""

from __future__ import annotations

import time

import torch.distributed as dist

from logsleuth.repro.harness import STEP_PAUSE_S, STEPS, finish, start, tensor


def main() -> None:
    """Run the scenario on this rank."""
    job = start()
    last = job.world_size - 1
    for step in range(STEPS):
        activation = tensor(job, step)
        if job.rank > 0:
            dist.recv(activation, src=job.rank - 1)
        if job.rank < last:
            if job.is_culprit and step == STEPS - 1:
                job.log(f"step {step}: drops its send to stage {job.rank + 1}")
            else:
                dist.send(activation, dst=job.rank + 1)
        job.log(f"step {step} done")
        time.sleep(STEP_PAUSE_S)
    finish(job)


if __name__ == "__main__":
    main()
