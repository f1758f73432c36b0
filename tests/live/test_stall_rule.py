"""The stall rule on real jobs: progress signals, not silence; --capture-only; DataLoader workers.

The torch jobs are 2-rank gloo jobs on the CPU, each well under a minute. Their stall
timeout leaves room for a loaded machine, as in test_torch_jobs.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from logsleuth.cli import main
from logsleuth.live.procs import is_alive
from logsleuth.live.session import LiveOptions, run_live
from logsleuth.report.schema import build_schema
from tests.live.helpers import Recorder, job_survivors

pytestmark = pytest.mark.slow

PY = sys.executable
STALL_TIMEOUT = 8.0
needs_torch = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None,
    reason="torch is not installed (pip install 'nccl-logsleuth[live]')",
)

# A "rank" (RANK set, as a launcher sets it) that prints nothing and writes a file for 6 s:
# its stack never changes, so only the I/O signal tells that it works.
WRITER = (
    "import os, subprocess, sys\n"
    "code = '''import time\n"
    "end = time.monotonic() + 6\n"
    "with open('data.bin', 'wb') as f:\n"
    "    while time.monotonic() < end:\n"
    "        f.write(bytes(65536))\n"
    "        f.flush()\n"
    "        time.sleep(0.01)\n"
    "'''\n"
    "kid = subprocess.Popen([sys.executable, '-c', code], env={**os.environ, 'RANK': '0'})\n"
    "raise SystemExit(kid.wait())\n"
)

# Two gloo ranks that all-reduce without a word for QUIET_S seconds, then say so and end.
QUIET_TRAINING = """
import os, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
grads = torch.ones(4096)
end = time.monotonic() + float(os.environ["QUIET_S"])
steps = 0
while True:
    going = torch.tensor([1 if time.monotonic() < end else 0])
    dist.all_reduce(going, op=dist.ReduceOp.MIN)  # every rank stops at the same step
    if not going.item():
        break
    dist.all_reduce(grads)
    steps += 1
print(f"rank {dist.get_rank()}: {steps} quiet steps done", flush=True)
dist.destroy_process_group()
"""

# Rank 1 never reaches the second all_reduce: rank 0 waits in it (gloo's default timeout
# is 30 minutes).
HANG = """
import time, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(8)
dist.all_reduce(t)
print(f"rank {dist.get_rank()}: step 0 done", flush=True)
if dist.get_rank() == 1:
    while True:
        time.sleep(1)
dist.all_reduce(t)
"""


def _torchrun(script: Path, nproc: int = 2) -> list[str]:
    return [
        PY, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
        str(script),
    ]  # fmt: skip


def test_a_silent_job_that_does_io_is_not_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "bundle"
    reporter = Recorder()
    options = LiveOptions(command=(PY, "-c", WRITER), out_dir=out, stall_timeout=2.0, grace=2.0)
    result = run_live(options, reporter, None)
    assert (result.outcome, result.returncode) == ("finished", 0), reporter.notes
    assert not any(n.startswith("stall:") for n in reporter.notes)
    assert (tmp_path / "data.bin").stat().st_size > 1024**2


@needs_torch
def test_a_quiet_but_progressing_gloo_job_runs_to_its_end(tmp_path: Path) -> None:
    """Silent for twice the stall timeout while it all-reduces: not a stall."""
    script = tmp_path / "quiet.py"
    script.write_text(QUIET_TRAINING, encoding="utf-8")
    out = tmp_path / "bundle"
    reporter = Recorder()
    timeout = STALL_TIMEOUT
    options = LiveOptions(
        command=tuple(_torchrun(script)),
        out_dir=out,
        stall_timeout=timeout,
        grace=2.0,
        extra_env=(("QUIET_S", str(2 * timeout + 1)),),
    )
    echo = _TimedEcho()
    result = run_live(options, reporter, echo)  # type: ignore[arg-type]
    assert (result.outcome, result.returncode) == ("finished", 0), reporter.notes
    assert not any(n.startswith("stall:") for n in reporter.notes)
    log = (out / "launcher.log").read_text()
    assert "rank 0: " in log and "quiet steps done" in log
    assert not (out / "stacks").exists()
    # The job really was silent for twice the stall timeout between its start-up and its end.
    gaps = [b - a for a, b in zip(echo.times, echo.times[1:], strict=False)]
    assert max(gaps) >= 2 * timeout, echo.times


class _TimedEcho:
    """Stands for the terminal: notes when each piece of the job's output arrived."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def write(self, data: bytes) -> int:
        self.times.append(time.monotonic())
        return len(data)

    def flush(self) -> None:
        pass


@needs_torch
def test_capture_only_leaves_the_job_running_and_writes_the_bundle(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "hang.py"
    script.write_text(HANG, encoding="utf-8")
    out = tmp_path / "bundle"
    try:
        code = main(
            ["live", "--capture-only", "--stall-timeout", str(STALL_TIMEOUT), "--out", str(out), "--",
             *_torchrun(script)]
        )  # fmt: skip
        captured = capsys.readouterr()
        assert code == 1, captured.err[-2000:]
        alive = job_survivors(out)
        assert alive, "the job was ended"
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["stalled_at"] is not None
        assert manifest["live"]["mode"] == "capture-only"
        ranks = manifest["ranks"]
        assert sorted(ranks) == ["0", "1"]
        assert all(is_alive(r["pid"]) for r in ranks.values())
        stacks = sorted(p.name for p in (out / "stacks").iterdir())
        assert stacks == ["rank0.1.txt", "rank0.2.txt", "rank1.1.txt", "rank1.2.txt"]
        assert "all_reduce" in (out / "stacks" / "rank0.2.txt").read_text()
        assert (out / "diagnosis.json").is_file() and (out / "report.html").is_file()
        assert not (out / "teardown.log").exists()
        assert "the job is still running (--capture-only)" in captured.err
    finally:
        for pid in job_survivors(out):
            os.kill(pid, signal.SIGKILL)
        from logsleuth.live.session import _LEFT_RUNNING

        while _LEFT_RUNNING:
            _LEFT_RUNNING.pop().wait(timeout=10)
    assert job_survivors(out) == []


@needs_torch
def test_dataloader_workers_are_dumped_with_their_rank(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bundle"
    code = main(
        ["repro", "run", "dataloader-stall", "--live", "--nproc", "2", "--backend", "gloo",
         "--culprit", "1", "--stall-timeout", str(STALL_TIMEOUT), "--out", str(out)]
    )  # fmt: skip
    captured = capsys.readouterr()
    assert code == 1, captured.err[-2000:]
    manifest = json.loads((out / "manifest.json").read_text())
    culprit_pid = manifest["ranks"]["1"]["pid"]
    dump = (out / "stacks" / "rank1.1.txt").read_text()
    processes = [line for line in dump.splitlines() if line.startswith("Process ")]
    assert processes[0].startswith(f"Process {culprit_pid}: ")
    assert len(processes) >= 2, dump  # the rank and its DataLoader worker
    assert "torch/utils/data/_utils/worker.py" in dump
    assert "__getitem__ (logsleuth/repro/scenarios/dataloader_stall.py" in dump
    diagnosis = json.loads((out / "diagnosis.json").read_text())
    assert list(Draft202012Validator(build_schema()).iter_errors(diagnosis)) == []
    verdict = diagnosis["verdict"]
    assert verdict["kind"] == "non-collective-stall" and verdict["culprit_ranks"] == [1]
    assert job_survivors(out) == []
    # What torchrun printed once live had ended the job is kept apart from the evidence.
    teardown = out / "teardown.log"
    assert manifest["live"]["teardown_log"] == ("teardown.log" if teardown.exists() else None)
    log = (out / "launcher.log").read_text()
    assert "SignalException" not in log
    # No noise live itself caused: deprecation warnings about the variables it set, c10d's
    # per-socket INFO lines.
    assert "is deprecated; use TORCH_FR" not in log
    assert "The client socket has connected" not in log
