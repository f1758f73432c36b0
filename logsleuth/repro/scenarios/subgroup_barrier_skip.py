"""Subgroup barrier skipped: the culprit leaves out a barrier of its own process group.

The world is split into pairs with ``new_group`` (ranks 0-1, 2-3, ...). At one step every
pair meets in a barrier of its group before the step's all_reduce; the culprit skips it
and goes on to the all_reduce. Its partner waits in the pair's barrier for the culprit,
and the culprit and everybody else wait in the all_reduce for the partner: a cycle that
only the order of the calls resolves.
"""

from __future__ import annotations

import time

import torch.distributed as dist

from logsleuth.repro.harness import FAULT_STEP, STEP_PAUSE_S, STEPS, finish, start, tensor


def main() -> None:
    """Run the scenario on this rank."""
    job = start()
    # Every rank creates every group, in the same order (new_group is collective).
    pairs = [dist.new_group([r, r + 1]) for r in range(0, job.world_size - 1, 2)]
    mine = pairs[min(job.rank // 2, len(pairs) - 1)]
    for step in range(STEPS):
        if job.is_culprit and step == FAULT_STEP:
            job.log(f"step {step}: skips the barrier of its pair")
        else:
            dist.barrier(group=mine)
        grad = tensor(job, step)
        dist.all_reduce(grad)
        job.log(f"step {step} done")
        time.sleep(STEP_PAUSE_S)
    finish(job)


if __name__ == "__main__":
    main()
