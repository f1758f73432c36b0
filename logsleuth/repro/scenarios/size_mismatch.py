"""Size mismatch: at one step the culprit all_reduces a tensor twice as large as the others'."""

from __future__ import annotations

import torch.distributed as dist

from logsleuth.repro.harness import FAULT_STEP, NUMEL, STEPS, finish, start, tensor, train_step


def main() -> None:
    """Run the scenario on this rank."""
    job = start()
    for step in range(STEPS):
        if step != FAULT_STEP:
            train_step(job, step)
            continue
        numel = 2 * NUMEL if job.is_culprit else NUMEL
        if job.is_culprit:
            job.log(f"step {step}: all_reduce of {numel} elements")
        dist.all_reduce(tensor(job, step, numel=numel))
        job.log(f"step {step} done")
    finish(job)


if __name__ == "__main__":
    main()
