"""Data-loader stall: one batch of the culprit's DataLoader worker never arrives.

The worker sleeps forever in ``__getitem__`` (a hung NFS read); the culprit's main thread
waits in the DataLoader while the others wait for it in all_reduce.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from logsleuth.repro.harness import FAULT_STEP, STEP_PAUSE_S, STEPS, finish, start


class Samples:
    """A tiny map-style dataset whose item FAULT_STEP never loads on the culprit."""

    def __init__(self, stall: bool) -> None:
        self.stall = stall

    def __len__(self) -> int:
        return STEPS

    def __getitem__(self, index: int) -> torch.Tensor:
        while self.stall and index == FAULT_STEP:
            time.sleep(1.0)
        return torch.full((256,), float(index + 1))


def main() -> None:
    """Run the scenario on this rank."""
    job = start()
    loader = DataLoader(Samples(job.is_culprit), batch_size=1, num_workers=1)
    for step, batch in enumerate(loader):
        grad = batch.to(job.device)
        dist.all_reduce(grad)
        job.log(f"step {step} done")
        time.sleep(STEP_PAUSE_S)
    finish(job)


if __name__ == "__main__":
    main()
