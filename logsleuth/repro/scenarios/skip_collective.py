"""Skip a collective: the culprit skips the last step's all_reduce and waits in the barrier.

The others wait in that all_reduce forever: the rank-divergent ``if`` of a real job (an
uneven last batch, a rank-dependent metric) that leaves one rank a collective short.
"""

from __future__ import annotations

from logsleuth.repro.harness import STEPS, finish, start, train_step


def main() -> None:
    """Run the scenario on this rank."""
    job = start()
    for step in range(STEPS):
        if job.is_culprit and step == STEPS - 1:
            job.log(f"skips the all_reduce of step {step}")
            continue
        train_step(job, step)
    finish(job)


if __name__ == "__main__":
    main()
