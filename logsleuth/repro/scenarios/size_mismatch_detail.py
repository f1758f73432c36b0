"""Size mismatch under TORCH_DISTRIBUTED_DEBUG=DETAIL: PyTorch compares every rank's call.

With DETAIL, the process group checks each collective's fingerprint (op, shapes, dtypes)
across ranks before running it, and every rank whose call differs from another's raises
``Detected mismatch between collectives on ranks``. The culprit all_reduces twice as many
elements as the others at one step; three ranks agree, the odd one is the culprit.
"""

from __future__ import annotations

import os

# Read when the process group is created; set here so that a plain `repro run` shows it too.
os.environ["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"

import torch.distributed as dist

from logsleuth.repro.harness import (
    FAULT_STEP,
    NUMEL,
    STEPS,
    finish,
    start,
    tensor,
    train_step,
)


def main() -> None:
    """Run the scenario on this rank."""
    job = start()
    for step in range(STEPS):
        if step != FAULT_STEP:
            train_step(job, step)
            continue
        numel = 2 * NUMEL if job.is_culprit else NUMEL
        dist.all_reduce(tensor(job, step, numel=numel))
        job.log(f"step {step} done")
    finish(job)


if __name__ == "__main__":
    main()
