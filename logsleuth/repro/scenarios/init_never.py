"""Init never reached: the culprit never calls init_process_group; the others wait in it."""

from __future__ import annotations

import time

from logsleuth.repro.harness import describe, finish, init, train_step


def prepare_data() -> None:
    """Stand in for a set-up step that never ends (a lock, a download, a stuck mount)."""
    while True:
        time.sleep(1.0)


def main() -> None:
    """Run the scenario on this rank."""
    job = describe()
    if job.is_culprit:
        job.log("preparing data before joining the process group")
        prepare_data()
    init(job)
    train_step(job, 0)
    finish(job)


if __name__ == "__main__":
    main()
