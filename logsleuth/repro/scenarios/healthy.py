"""Healthy: every rank runs the same all_reduce steps, meets in a barrier and exits 0."""

from __future__ import annotations

from logsleuth.repro.harness import STEPS, finish, start, train_step


def main() -> None:
    """Run the scenario on this rank."""
    job = start()
    for step in range(STEPS):
        train_step(job, step)
    finish(job)


if __name__ == "__main__":
    main()
