"""Order mismatch: the culprit issues broadcast, then all_reduce; the others the reverse."""

from __future__ import annotations

import torch.distributed as dist

from logsleuth.repro.harness import FAULT_STEP, STEPS, finish, start, tensor, train_step


def main() -> None:
    """Run the scenario on this rank."""
    job = start()
    for step in range(STEPS):
        if step != FAULT_STEP:
            train_step(job, step)
            continue
        grad, params = tensor(job, step), tensor(job, step, numel=64)
        if job.is_culprit:
            job.log(f"step {step}: broadcast before all_reduce")
            dist.broadcast(params, src=0)
            dist.all_reduce(grad)
        else:
            dist.all_reduce(grad)
            dist.broadcast(params, src=0)
        job.log(f"step {step} done")
    finish(job)


if __name__ == "__main__":
    main()
