"""The diagnostics environment a live job runs with (CONTRACT section 2)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

DEFAULT_NCCL_SUBSYS = "INIT,COLL,NET"
FR_BUFFER_ENTRIES = "2000"
"""Flight-recorder ring size: enough collectives to see where ranks diverged."""
RUN_MARKER = "LOGSLEUTH_LIVE_RUN"
"""Set in every job process; finds the ones that left the process group at clean-up."""
BOOTSTRAP_DIR = Path(__file__).parent / "bootstrap"
"""Put first on the job's ``PYTHONPATH``: its ``sitecustomize`` dumps the flight recorder of a
rank that dies of an uncaught exception (see that module)."""

RECORDED = (
    "NCCL_DEBUG",
    "NCCL_DEBUG_SUBSYS",
    "NCCL_DEBUG_FILE",
    "NCCL_HOSTID",
    "NCCL_SOCKET_IFNAME",
    "TORCH_NCCL_TRACE_BUFFER_SIZE",
    "TORCH_FR_BUFFER_SIZE",
    "TORCH_FR_DUMP_TEMP_FILE",
    "TORCH_NCCL_DUMP_ON_TIMEOUT",
    "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
    "TORCH_NCCL_DEBUG_INFO_PIPE_FILE",
    "TORCH_CPP_LOG_LEVEL",
    "TORCH_DISTRIBUTED_DEBUG",
    "PYTHONUNBUFFERED",
    "PYTHONFAULTHANDLER",
    "PYTHONPATH",
)
"""Variables the manifest records, whoever set them."""


def diagnostics_env(
    out_dir: Path,
    *,
    nccl_subsys: str = DEFAULT_NCCL_SUBSYS,
    distributed_debug: bool = False,
) -> dict[str, str]:
    """Return the diagnostics variables for a job whose bundle goes to ``out_dir``."""
    out = out_dir.resolve()
    env = {
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": nccl_subsys,
        # %h and %p: one file per process, named by host and pid (NCCL expands them).
        "NCCL_DEBUG_FILE": str(out / "nccl" / "%h.%p.log"),
        "TORCH_NCCL_TRACE_BUFFER_SIZE": FR_BUFFER_ENTRIES,
        "TORCH_FR_BUFFER_SIZE": FR_BUFFER_ENTRIES,
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": str(out / "fr" / "rank_"),
        # torch 2.13's name for the same prefix; the bootstrap's exception dumps use it too.
        "TORCH_FR_DUMP_TEMP_FILE": str(out / "fr" / "rank_"),
        "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": str(out / "fr" / "pipe_"),
        "TORCH_CPP_LOG_LEVEL": "INFO",
        "PYTHONUNBUFFERED": "1",
        "PYTHONFAULTHANDLER": "1",
    }
    if distributed_debug:
        env["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
    return env


def job_env(
    base: Mapping[str, str],
    diagnostics: Mapping[str, str],
    run_id: str,
    *,
    exception_dumps: bool = True,
) -> dict[str, str]:
    """Return ``base`` with every diagnostics variable the user did not set, and the run marker.

    With ``exception_dumps``, :data:`BOOTSTRAP_DIR` goes first on ``PYTHONPATH`` (the user's
    entries follow).
    """
    env = dict(base)
    for name, value in diagnostics.items():
        env.setdefault(name, value)
    env[RUN_MARKER] = run_id
    if exception_dumps:
        env["PYTHONPATH"] = os.pathsep.join(
            [str(BOOTSTRAP_DIR), *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)]
        )
    return env


def recorded_env(env: Mapping[str, str]) -> dict[str, str]:
    """Return the variables of :data:`RECORDED` that ``env`` sets, for the manifest."""
    return {name: env[name] for name in RECORDED if name in env}
