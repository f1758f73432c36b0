"""Early exit: the culprit leaves its loop early and exits 0 without a word of error."""

from __future__ import annotations

import os
import sys

from logsleuth.repro.harness import FAULT_STEP, STEPS, finish, start, train_step


def main() -> None:
    """Run the scenario on this rank."""
    job = start()
    for step in range(STEPS):
        if job.is_culprit and step == FAULT_STEP:
            # A `return` from a worker function, a sys.exit(0) in a callback: the process
            # ends with status 0 and never reaches the collectives that the others wait in.
            sys.stdout.flush()
            os._exit(0)
        train_step(job, step)
    finish(job)


if __name__ == "__main__":
    main()
