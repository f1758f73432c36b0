"""The diagnostics environment a live job runs with (CONTRACT section 2)."""

from __future__ import annotations

import importlib.metadata
import itertools
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

DEFAULT_NCCL_SUBSYS = "INIT,COLL,NET"
FR_BUFFER_ENTRIES = "2000"
"""Flight-recorder ring size: enough collectives to see where ranks diverged."""
FR_NAMES_SINCE = (2, 8)
"""The torch release that reads ``TORCH_FR_BUFFER_SIZE``/``TORCH_FR_DUMP_TEMP_FILE``
(docs/torch-distributed-messages.md, the renames table)."""
RUN_MARKER = "LOGSLEUTH_LIVE_RUN"
"""Set in every job process; finds the ones that left the process group at clean-up."""
BOOTSTRAP_DIR = Path(__file__).parent / "bootstrap"
"""Put first on the job's ``PYTHONPATH``: its ``sitecustomize`` dumps the flight recorder of a
rank that dies of an uncaught exception (see that module)."""

PROXY_DUMP_SIGNAL = signal.SIGUSR2
"""``NCCL_PROXY_DUMP_SIGNAL``: SIGUSR2, as SIGUSR1 (NCCL's example) is taken by some
launchers and frameworks (SLURM requeue, Lightning)."""

RECORDED = (
    "NCCL_DEBUG",
    "NCCL_DEBUG_SUBSYS",
    "NCCL_DEBUG_FILE",
    "NCCL_HOSTID",
    "NCCL_SOCKET_IFNAME",
    "NCCL_PROXY_DUMP_SIGNAL",
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


def installed_torch_version() -> tuple[int, int] | None:
    """Return (major, minor) of the torch this Python has installed, without importing it.

    The job usually runs in the same environment; when it does not, the answer only
    chooses which names of the flight-recorder variables to set.
    """
    try:
        return _major_minor(importlib.metadata.version("torch"))
    except importlib.metadata.PackageNotFoundError:
        return None


_VERSION_PROBE = (
    "import importlib.metadata as m\n"
    "try:\n    print(m.version('torch'))\n"
    "except m.PackageNotFoundError:\n    pass\n"
)
PROBE_TIMEOUT_S = 10.0


def _job_python(command: Sequence[str], path: str | None) -> str | None:
    """Return the Python that runs ``command``: itself, or a launcher script's shebang."""
    if not command:
        return None
    program = shutil.which(command[0], path=path) or command[0]
    if re.search(r"(?:^|/)python[\d.]*$", program):
        return program
    try:
        with open(program, "rb") as handle:
            first = handle.readline(512).decode("utf-8", errors="replace").strip()
    except OSError:
        return None
    if not first.startswith("#!"):
        return None
    words = first[2:].split()
    if words and words[0].endswith("/env") and len(words) > 1:
        words = [shutil.which(words[1], path=path) or words[1]]
    return words[0] if words and re.search(r"python[\d.]*$", words[0]) else None


def job_torch_version(
    command: Sequence[str], env: Mapping[str, str] | None = None
) -> tuple[int, int] | None:
    """Return (major, minor) of the torch the job's Python has, else this Python's.

    The job's Python is ``command[0]`` when it is a Python, or the interpreter of a launcher
    script's shebang (``torchrun``); it is asked with a short timeout, without importing torch.
    """
    python = _job_python(command, (env or os.environ).get("PATH"))
    if python is not None:
        try:
            done = subprocess.run(
                [python, "-c", _VERSION_PROBE],
                capture_output=True,
                text=True,
                timeout=PROBE_TIMEOUT_S,
                check=False,
                env=dict(env) if env is not None else None,
            )
            parsed = _major_minor(done.stdout.strip())
            if parsed is not None:
                return parsed
        except (OSError, subprocess.TimeoutExpired):
            pass
    return installed_torch_version()


def _major_minor(text: str) -> tuple[int, int] | None:
    parts = text.split(".")
    if len(parts) < 2 or not parts[0].isdigit():
        return None
    minor = "".join(itertools.takewhile(str.isdigit, parts[1]))
    return (int(parts[0]), int(minor)) if minor else None


def diagnostics_env(
    out_dir: Path,
    *,
    nccl_subsys: str = DEFAULT_NCCL_SUBSYS,
    distributed_debug: bool = False,
    torch_version: tuple[int, int] | None = None,
) -> dict[str, str]:
    """Return the diagnostics variables for a job whose bundle goes to ``out_dir``.

    Args:
        out_dir: The bundle directory.
        nccl_subsys: ``NCCL_DEBUG_SUBSYS``.
        distributed_debug: Also ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` and torch's INFO log lines.
        torch_version: The job's torch (major, minor) when known. From 2.8 on only the
            ``TORCH_FR_*`` names are set: 2.8+ warns once per rank about each older name it
            finds, noise in the job's log that logsleuth would have caused. Unknown: both.
    """
    out = out_dir.resolve()
    new_names = torch_version is not None and torch_version >= FR_NAMES_SINCE
    old_names = torch_version is None or not new_names
    env = {
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": nccl_subsys,
        # %h and %p: one file per process, named by host and pid (NCCL expands them).
        "NCCL_DEBUG_FILE": str(out / "nccl" / "%h.%p.log"),
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        # NCCL's proxy thread prints its active sends and receives (peer, channel, opCount)
        # on this signal; live sends it on a stall to ranks whose NCCL init completed.
        "NCCL_PROXY_DUMP_SIGNAL": str(int(PROXY_DUMP_SIGNAL)),
        "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": str(out / "fr" / "pipe_"),
        # WARNING keeps the watchdog's errors and drops c10d's per-socket INFO chatter.
        "TORCH_CPP_LOG_LEVEL": "INFO" if distributed_debug else "WARNING",
        "PYTHONUNBUFFERED": "1",
        "PYTHONFAULTHANDLER": "1",
    }
    if new_names or torch_version is None:
        env["TORCH_FR_BUFFER_SIZE"] = FR_BUFFER_ENTRIES
        # The bootstrap's exception dumps read this prefix first.
        env["TORCH_FR_DUMP_TEMP_FILE"] = str(out / "fr" / "rank_")
    if old_names:
        env["TORCH_NCCL_TRACE_BUFFER_SIZE"] = FR_BUFFER_ENTRIES
        env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] = str(out / "fr" / "rank_")
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


def proxy_dump_signal(env: Mapping[str, str]) -> int | None:
    """Return the signal the job's NCCL dumps its proxy state on, or None when not set."""
    value = env.get("NCCL_PROXY_DUMP_SIGNAL", "").strip()
    return int(value) if value.isdigit() and 0 < int(value) < signal.NSIG else None


def recorded_env(env: Mapping[str, str]) -> dict[str, str]:
    """Return the variables of :data:`RECORDED` that ``env`` sets, for the manifest."""
    return {name: env[name] for name in RECORDED if name in env}
