"""What every scenario script shares: rank set-up from env://, a device, a step, a clean end.

Imported only by the scenario scripts (it imports torch).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from logsleuth.repro import BACKEND_ENV, CULPRIT_ENV, TIMEOUT_ENV

STEPS = 6
"""Training steps of a scenario; the fault happens at :data:`FAULT_STEP`."""
FAULT_STEP = 3
NUMEL = 1024
STEP_PAUSE_S = 0.2
"""A pause per step so that a healthy run prints for a while, as training does."""


@dataclass(frozen=True, slots=True)
class Job:
    """This process's place in the job."""

    rank: int
    world_size: int
    local_rank: int
    culprit: int
    backend: str
    device: torch.device

    @property
    def is_culprit(self) -> bool:
        """Return True on the rank that misbehaves."""
        return self.rank == self.culprit

    def log(self, message: str) -> None:
        """Print one progress line for this rank."""
        # One write per line: unbuffered print() writes the newline separately, and lines of
        # ranks sharing one output file would interleave.
        sys.stdout.write(f"repro: rank {self.rank}: {message} (t={time.time():.3f})\n")
        sys.stdout.flush()


def describe() -> Job:
    """Read the rank from torchrun's environment and choose the device, without any init."""
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    chosen = os.environ.get(BACKEND_ENV, "")
    backend = chosen if chosen in ("gloo", "nccl") else "gloo"
    if not chosen and torch.cuda.is_available():
        backend = "nccl"
    device = torch.device("cpu")
    if backend == "nccl":
        count = torch.cuda.device_count()
        device = torch.device("cuda", local_rank % count)
        torch.cuda.set_device(device)
        if world_size > count:
            # Several ranks per GPU: NCCL refuses a shared GPU within one host, so every rank
            # poses as its own host and talks over the network transport.
            os.environ.setdefault("NCCL_HOSTID", f"logsleuth-repro-{rank}")
    culprit = int(os.environ.get(CULPRIT_ENV, "1")) % world_size
    return Job(rank, world_size, local_rank, culprit, backend, device)


def init(job: Job) -> None:
    """Join the process group (env:// rendezvous)."""
    timeout = timedelta(seconds=int(os.environ.get(TIMEOUT_ENV, "300")))
    dist.init_process_group(job.backend, timeout=timeout)
    job.log(f"joined the {job.backend} process group of {job.world_size} ranks")


def start() -> Job:
    """Describe this rank and join the process group."""
    job = describe()
    init(job)
    return job


def tensor(job: Job, step: int, numel: int = NUMEL) -> torch.Tensor:
    """Return the step's gradient stand-in."""
    return torch.full((numel,), float(step + 1), device=job.device)


def train_step(job: Job, step: int) -> None:
    """Run one step: all_reduce the gradient stand-in and check the sum."""
    grad = tensor(job, step)
    dist.all_reduce(grad)
    expected = float((step + 1) * job.world_size)
    if float(grad[0].item()) != expected:
        raise RuntimeError(f"step {step}: all_reduce gave {grad[0].item()}, expected {expected}")
    job.log(f"step {step} done")
    time.sleep(STEP_PAUSE_S)


def finish(job: Job) -> None:
    """Wait for every rank, leave the process group and exit 0."""
    dist.barrier()
    dist.destroy_process_group()
    job.log("finished")
    sys.stdout.flush()
