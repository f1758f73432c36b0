"""Slow rank at init: the others time out in the store-based barrier of init_process_group.

``TORCH_DIST_INIT_BARRIER=1`` makes init_process_group end in a barrier on the rendezvous
store (every rank adds itself to a key and waits until all have). The culprit spends its
set-up far longer than the process-group timeout (a slow download, a cold cache), so the
others raise ``Timed out initializing process group in store based barrier`` (which says
how many joined, not who is missing) and torchrun ends the job, the culprit included.
"""

from __future__ import annotations

import os
import time

from logsleuth.repro import TIMEOUT_ENV

# Read by init_process_group; gloo then connects its pairs at the first collective, so the
# store-based barrier is where the ranks wait for each other.
os.environ["TORCH_DIST_INIT_BARRIER"] = "1"
os.environ["TORCH_GLOO_LAZY_INIT"] = "1"
os.environ.setdefault(TIMEOUT_ENV, "10")

from logsleuth.repro.harness import describe, finish, init, train_step

SETUP_S = 120.0
"""How long the culprit's set-up takes: far beyond the process-group timeout."""


def prepare_data(seconds: float) -> None:
    """Stand in for a set-up step that takes too long (a download, a cold cache)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.5)


def main() -> None:
    """Run the scenario on this rank."""
    job = describe()
    if job.is_culprit:
        job.log("preparing data before joining the process group")
        prepare_data(SETUP_S)
    init(job)
    train_step(job, 0)
    finish(job)


if __name__ == "__main__":
    main()
