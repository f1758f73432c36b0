"""live never loses a job (issue 19): real 4-rank gloo jobs under ``logsleuth live``.

The job's exit status is recorded and enters the verdict; SIGHUP or SIGKILL of logsleuth
(a closed terminal, a dropped SSH session, the OOM killer) leaves no process of the job
behind; a double Ctrl-C ends even a job that ignores SIGTERM, and the manifest is written.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.live.helpers import job_survivors

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("torch") is None,
        reason="torch is not installed (pip install 'logsleuth[live]')",
    ),
]

ROOT = Path(__file__).resolve().parents[2]
NPROC = 4
JOB = """
import os, signal, sys, time
import torch
import torch.distributed as dist

if os.environ.get("IGNORE_SIGTERM"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
dist.init_process_group("gloo")
t = torch.ones(4)
dist.all_reduce(t)
print(f"rank {dist.get_rank()} up", flush=True)
if os.environ.get("EXIT_WITH"):
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(int(os.environ["EXIT_WITH"]))
while True:
    time.sleep(1)
"""


def _live(
    tmp_path: Path, *options: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    script = tmp_path / "job.py"
    script.write_text(JOB)
    command = [
        sys.executable,
        "-m",
        "logsleuth",
        "live",
        "--out",
        str(tmp_path / "bundle"),
        *options,
        "--",
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={NPROC}",
        str(script),
    ]
    return subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "NO_COLOR": "1", **(env or {})},
        start_new_session=True,  # signals in these tests go to logsleuth alone
    )


def _wait_for_ranks(out: Path, live: subprocess.Popen[str], timeout: float = 180) -> None:
    log = out / "launcher.log"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and live.poll() is None:
        text = log.read_text(errors="replace") if log.exists() else ""
        if len(set(re.findall(r"rank (\d+) up", text))) >= NPROC:
            return
        time.sleep(0.2)
    live.kill()
    raise AssertionError(f"the ranks did not come up: {live.communicate()}")


def _gone_within(out: Path, seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while job_survivors(out) and time.monotonic() < deadline:
        time.sleep(0.2)
    return job_survivors(out)


def _manifest(out: Path) -> dict[str, object]:
    data = json.loads((out / "manifest.json").read_text())
    assert isinstance(data, dict)
    return data


def test_a_job_that_exits_1_is_recorded_and_not_healthy(tmp_path: Path) -> None:
    live = _live(tmp_path, "--stall-timeout", "120", env={"EXIT_WITH": "1"})
    _stdout, stderr = live.communicate(timeout=300)
    out = tmp_path / "bundle"
    manifest = _manifest(out)
    assert (manifest["outcome"], manifest["complete"]) == ("finished", True)
    assert manifest["exit"] == {"status": 1, "signal": None, "ended_by": "job"}
    diagnosis = json.loads((out / "diagnosis.json").read_text())
    assert diagnosis["verdict"]["kind"] != "healthy"
    assert "LS207" in {f["code"] for f in diagnosis["findings"]}
    assert live.returncode == 1, stderr[-2000:]
    assert job_survivors(out) == []


def test_a_job_killed_by_sigsegv_is_recorded_and_not_healthy(tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    crash = "import os, signal; print('up', flush=True); os.kill(os.getpid(), signal.SIGSEGV)"
    live = [sys.executable, "-m", "logsleuth", "live", "--out", str(out), "--"]
    done = subprocess.run(
        [*live, sys.executable, "-c", crash],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert _manifest(out)["exit"] == {"status": None, "signal": "SIGSEGV", "ended_by": "job"}
    diagnosis = json.loads((out / "diagnosis.json").read_text())
    assert diagnosis["verdict"]["kind"] == "process-died"
    # The manifest's exit signal, or faulthandler's report of it in the job's output (live
    # turns faulthandler on): either way the verdict names the crash.
    summary = diagnosis["verdict"]["summary"]
    assert "SIGSEGV" in summary or "Fatal Python error: Segmentation fault" in summary, summary
    assert done.returncode == 1, done.stderr


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGHUP])
def test_logsleuth_dying_takes_the_job_with_it(tmp_path: Path, signum: int) -> None:
    live = _live(tmp_path, "--stall-timeout", "300")
    out = tmp_path / "bundle"
    _wait_for_ranks(out, live)
    assert len(job_survivors(out)) > NPROC  # the launcher and its 4 ranks
    assert _manifest(out)["complete"] is False  # written at start
    os.kill(live.pid, signum)
    assert _gone_within(out, 10) == []
    live.communicate(timeout=60)
    deadline = time.monotonic() + 10
    while not _manifest(out)["complete"] and time.monotonic() < deadline:
        time.sleep(0.2)  # the supervisor writes it after the job is gone (SIGKILL)
    manifest = _manifest(out)
    assert manifest["complete"] is True
    expected = "orphaned" if signum == signal.SIGKILL else "interrupted"
    assert manifest["outcome"] == expected


def test_a_double_ctrl_c_ends_a_job_that_ignores_sigterm(tmp_path: Path) -> None:
    live = _live(tmp_path, "--stall-timeout", "300", env={"IGNORE_SIGTERM": "1"})
    out = tmp_path / "bundle"
    _wait_for_ranks(out, live)
    live.send_signal(signal.SIGINT)
    time.sleep(1.0)
    live.send_signal(signal.SIGINT)
    _stdout, stderr = live.communicate(timeout=120)
    assert live.returncode in (0, 1), stderr[-3000:]
    assert job_survivors(out) == []
    manifest = _manifest(out)
    assert (manifest["outcome"], manifest["complete"]) == ("interrupted", True)
    exit_info = manifest["exit"]
    assert isinstance(exit_info, dict) and exit_info["ended_by"] == "logsleuth"
    assert (out / "diagnosis.json").exists()
