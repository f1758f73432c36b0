"""Capture steps: py-spy dumps with a timeout, error files, flight-recorder pipes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from logsleuth.live.capture import (
    StackSample,
    find_pyspy,
    remove_pipes,
    request_flight_records,
    sample_stack,
    sample_stacks,
    write_sample,
)

SLEEPER = "import time\ndef wait_here():\n    time.sleep(60)\nwait_here()\n"

# The head of a real py-spy 0.4 dump of a gloo rank (the lines the watcher compares).
DUMP = """Process 3160: /usr/bin/python3 -u skip_collective.py
Python v3.11.7 (/usr/bin/python3.11)

Thread 3160 (idle): "MainThread"
    barrier (torch/distributed/distributed_c10d.py:5356)
    finish (logsleuth/repro/harness.py:105)
    <module> (skip_collective.py:24)
Thread 3170 (idle): "pt_autograd_0"
    wait (threading.py:320)
"""


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", SLEEPER])
    time.sleep(0.5)
    yield proc
    proc.kill()
    proc.wait()


def test_main_thread_frames_leave_out_line_numbers() -> None:
    sample = StackSample(3160, DUMP, None)
    assert sample.main_thread() == (
        "barrier (torch/distributed/distributed_c10d.py)",
        "finish (logsleuth/repro/harness.py)",
        "<module> (skip_collective.py)",
    )
    assert StackSample(1, None, "gone").main_thread() is None


@pytest.mark.slow
def test_pyspy_dumps_a_live_process(sleeper: subprocess.Popen[bytes]) -> None:
    pyspy = find_pyspy()
    assert pyspy is not None
    sample = sample_stack(sleeper.pid, pyspy)
    assert sample.error is None, sample.error
    assert sample.text is not None and f"Process {sleeper.pid}" in sample.text
    assert sample.main_thread() == ("wait_here (<string>)", "<module> (<string>)")


def test_a_failed_dump_leaves_an_error_file(tmp_path: Path) -> None:
    proc = subprocess.Popen(["true"])
    proc.wait()
    samples = sample_stacks([proc.pid], find_pyspy())
    assert samples[proc.pid].text is None and samples[proc.pid].error
    written = write_sample(samples[proc.pid], tmp_path / "stacks", "rank3", 2)
    assert written == tmp_path / "stacks" / "rank3.2.error.txt"
    assert written.read_text().strip() == samples[proc.pid].error
    missing = sample_stack(proc.pid, None)
    assert missing.error == "py-spy not found (pip install py-spy)"


def test_flight_recorder_pipes_are_asked_then_removed(tmp_path: Path) -> None:
    pipe = tmp_path / "pipe_0.pipe"
    os.mkfifo(pipe)
    (tmp_path / "rank_0").write_text("dump")
    reader = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)
    try:
        assert request_flight_records(tmp_path) == 1
        assert os.read(reader, 16) == b"1\n"
    finally:
        os.close(reader)
    assert request_flight_records(tmp_path) == 0  # nobody reads: skipped, no hang
    remove_pipes(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank_0"]
