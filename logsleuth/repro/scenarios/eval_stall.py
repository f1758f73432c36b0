"""Evaluation on one rank: the culprit (rank 0 in real jobs) evaluates while the others wait.

After a step the culprit runs a long evaluation loop outside any collective (a validation
pass done only on the logging rank); the others go on to the next step's all_reduce and
wait there for it. Nothing is wrong with communication: the culprit is busy elsewhere.
"""

from __future__ import annotations

import time

import torch

from logsleuth.repro.harness import FAULT_STEP, STEPS, finish, start, train_step


def evaluate(model: torch.Tensor, batches: int) -> float:
    """Score ``batches`` of random inputs; slow on purpose (a big validation set)."""
    total = 0.0
    for _ in range(batches):
        inputs = torch.randn(64, model.shape[0])
        total += float((inputs @ model).relu().sum())
        time.sleep(0.05)
    return total


def main() -> None:
    """Run the scenario on this rank."""
    job = start()
    model = torch.randn(128, 128)
    for step in range(STEPS):
        train_step(job, step)
        if job.is_culprit and step == FAULT_STEP:
            job.log(f"step {step}: evaluating")
            evaluate(model, batches=1_000_000)
    finish(job)


if __name__ == "__main__":
    main()
