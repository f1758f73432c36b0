"""A small process that ends the job when logsleuth itself dies.

``logsleuth live`` starts it beside the job, in a session of its own (a closed terminal's
SIGHUP does not reach it), with a pipe from logsleuth on its standard input. logsleuth
writes ``release`` when it has ended the job itself (or leaves it running on purpose);
end of input without it means logsleuth died (SIGKILL, a crash, a dropped SSH session):
the supervisor then ends the job (SIGTERM, then SIGKILL after the grace period) and marks
the bundle's manifest as orphaned, so no process of the job is left running and the bundle
says what happened.

Run as ``python -m logsleuth.live.supervisor PGID MARKER RUN_ID GRACE MANIFEST``.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

from logsleuth.live.procs import end_processes, job_processes

RELEASE = b"release\n"


def _mark_orphaned(manifest: Path, survivors: list[int]) -> None:
    with contextlib.suppress(OSError, ValueError):
        data = json.loads(manifest.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("complete"):
            return
        data.update(
            outcome="orphaned",
            complete=True,
            finished=datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
            exit={"status": None, "signal": None, "ended_by": "supervisor"},
            survivors=survivors,
        )
        partial = manifest.with_name(".manifest.json.supervisor")
        partial.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        partial.replace(manifest)


def main(argv: Sequence[str]) -> int:
    """Wait for logsleuth to release the job or to die; in the second case end the job."""
    pgid, marker, run_id, grace, manifest = argv
    for signum in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    message = b""
    with contextlib.suppress(OSError):
        message = sys.stdin.buffer.read()
    if message.endswith(RELEASE):
        return 0
    survivors = end_processes(lambda: job_processes(int(pgid), marker, run_id), float(grace))
    _mark_orphaned(Path(manifest), survivors)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
