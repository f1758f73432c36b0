"""Run ``logsleuth analyze`` the way an attacker's input would meet it: in a child process
under a memory limit and a time limit, and look at what it says."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

MEMORY_LIMIT = 1 << 30
"""RLIMIT_AS of the child: a hostile input must not need more than this."""
TIME_LIMIT = 60.0
"""Seconds a case may take before the test fails (they take one or two on a quiet machine)."""

GOOD_LOG = "".join(
    f"node1:100:100 [0] NCCL INFO AllReduce: opCount {i:x} sendbuff 0x7f00 recvbuff 0x7f00 "
    f"count 1 datatype 7 op 0 root 0 comm 0x55e9 [nranks=2] stream 0x5500\n"
    for i in range(5)
)
"""A small NCCL log every case puts beside its hostile input: it must still be analysed."""

_PRELUDE = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
{patch}
from logsleuth.cli import main
sys.exit(main(sys.argv[1:]))
"""


@dataclass(frozen=True)
class Outcome:
    """What one run of ``analyze`` did."""

    code: int
    stdout: str
    stderr: str
    seconds: float

    def error_lines(self) -> list[str]:
        """Lines of stderr that are messages of logsleuth (not the text report)."""
        return [line for line in self.stderr.splitlines() if line.startswith("logsleuth:")]


def run_analyze(
    args: list[str],
    *,
    cwd: Path | None = None,
    patch: str = "",
    stdin: bytes | None = None,
    stdin_fd: int | None = None,
    without_dac: bool = False,
    shell: str | None = None,
) -> Outcome:
    """Run ``logsleuth`` with ``args`` in a child under the memory and time limits.

    ``patch`` is Python run before the CLI (to shrink a budget so that a test stays small);
    ``shell`` runs a bash command line instead, with ``LOGSLEUTH`` naming the command.
    ``without_dac`` drops the capabilities that let root read any file and search any
    directory (the tests run as root), so that permissions apply to the child.
    """
    code = _PRELUDE.format(limit=MEMORY_LIMIT, patch=patch)
    command = [sys.executable, "-c", code, *args]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "NO_COLOR": "1"}
    if shell is not None:
        env["LS_PYTHON"], env["LS_CODE"] = sys.executable, code
        command = ["bash", "-c", shell.replace("$LOGSLEUTH", '"$LS_PYTHON" -c "$LS_CODE"')]
    start = time.monotonic()
    proc = subprocess.run(
        command,
        input=stdin,
        stdin=stdin_fd if stdin is None else None,
        capture_output=True,
        cwd=cwd,
        env=env,
        timeout=TIME_LIMIT,
        preexec_fn=_drop_dac if without_dac else None,
        check=False,
    )
    return Outcome(
        proc.returncode,
        proc.stdout.decode(errors="replace"),
        proc.stderr.decode(errors="replace"),
        time.monotonic() - start,
    )


_PR_CAPBSET_DROP = 24
_CAP_DAC_OVERRIDE = 1
_CAP_DAC_READ_SEARCH = 2


def _drop_dac() -> None:
    """In the child before exec: take DAC_OVERRIDE and DAC_READ_SEARCH out of the bounding set."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")
