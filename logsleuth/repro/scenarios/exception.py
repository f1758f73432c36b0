"""Exception: the culprit raises RuntimeError in the middle of the loop; the others then fail."""

from __future__ import annotations

from logsleuth.repro.harness import FAULT_STEP, STEPS, finish, start, train_step


def main() -> None:
    """Run the scenario on this rank."""
    job = start()
    for step in range(STEPS):
        if job.is_culprit and step == FAULT_STEP:
            raise RuntimeError(f"logsleuth repro: rank {job.rank} fails at step {step}")
        train_step(job, step)
    finish(job)


if __name__ == "__main__":
    main()
