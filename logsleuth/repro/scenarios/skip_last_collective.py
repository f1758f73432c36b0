"""Skip the last collective: the culprit leaves out the final barrier and exits 0.

The others wait in that barrier until the culprit's process is gone; gloo then tells them
``Connection closed by peer`` and they fail. torchrun lists only them (the culprit exited
cleanly), and its "Root Cause" names one of the victims.
"""

from __future__ import annotations

import sys

import torch.distributed as dist

from logsleuth.repro.harness import STEPS, finish, start, train_step


def main() -> None:
    """Run the scenario on this rank."""
    job = start()
    for step in range(STEPS):
        train_step(job, step)
    if job.is_culprit:
        # A rank-dependent `return` before the end-of-training barrier: nothing is wrong
        # on this rank as far as it knows, so it leaves with status 0.
        job.log("done training; leaves without the final barrier")
        dist.destroy_process_group()
        sys.exit(0)
    finish(job)


if __name__ == "__main__":
    main()
