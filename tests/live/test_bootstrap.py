"""The job-side bootstrap: a rank ended by an uncaught exception or SIGTERM dumps its flight recorder."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from logsleuth.live.environment import BOOTSTRAP_DIR
from logsleuth.live.procs import is_alive
from logsleuth.parse.flight_recorder import load_fr_pickle, parse_fr_dump

SIGTERM_GRACE_S = 3.0
"""The bootstrap's own constant; importing it here would install the hooks in pytest."""

needs_torch = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None,
    reason="torch is not installed (pip install 'nccl-logsleuth[live]')",
)

_RANK = textwrap.dedent(
    """
    import os, sys, torch, torch.distributed as dist
    dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
    dist.all_reduce(torch.ones(3))
    dist.broadcast(torch.ones(5), 0)
    if sys.argv[2] == "raise":
        raise RuntimeError("the step failed")
    dist.destroy_process_group()
    """
)


def _run(tmp_path: Path, mode: str, pythonpath: str = str(BOOTSTRAP_DIR)) -> str:
    script = tmp_path / "rank.py"
    script.write_text(_RANK)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": pythonpath,
        "TORCH_FR_BUFFER_SIZE": "100",
        "TORCH_FR_DUMP_TEMP_FILE": str(tmp_path / "fr" / "rank_"),
    }
    (tmp_path / "fr").mkdir(exist_ok=True)
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "store"), mode],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    return done.stderr


@needs_torch
@pytest.mark.slow
def test_an_uncaught_exception_writes_the_dump_then_the_traceback(tmp_path: Path) -> None:
    err = _run(tmp_path, "raise")
    target = tmp_path / "fr" / "rank_0"
    assert f"logsleuth: wrote the flight-recorder dump {target}\n" in err
    assert err.rstrip().endswith("RuntimeError: the step failed")
    assert sorted(p.name for p in (tmp_path / "fr").iterdir()) == ["rank_0"]
    dump = parse_fr_dump(load_fr_pickle(target.read_bytes(), target.name), target.name)
    assert dump.rank == 0
    assert [(e.op, e.input_sizes) for e in dump.entries] == [
        ("all_reduce", ((3,),)),
        ("broadcast", ((5,),)),
    ]


@needs_torch
@pytest.mark.slow
def test_a_clean_exit_writes_nothing_and_the_users_sitecustomize_still_runs(
    tmp_path: Path,
) -> None:
    own = tmp_path / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import sys; sys.stderr.write('own sitecustomize\\n')\n")
    err = _run(tmp_path, "exit", pythonpath=f"{BOOTSTRAP_DIR}{os.pathsep}{own}")
    assert "own sitecustomize\n" in err
    assert list((tmp_path / "fr").iterdir()) == []


def test_a_process_without_torch_keeps_its_usual_exception(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", "raise KeyError('k')"],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(BOOTSTRAP_DIR), "TORCH_FR_DUMP_TEMP_FILE": str(tmp_path / "r_")},
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == "KeyError: 'k'"
    assert "logsleuth" not in done.stderr
    assert list(tmp_path.iterdir()) == []


_SLEEPER = textwrap.dedent(
    """
    import os, sys, time, torch, torch.distributed as dist
    dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
    dist.all_reduce(torch.ones(2))
    if os.fork() == 0:
        # A forked helper (a DataLoader worker) inherits the handler, not the right to dump.
        print("child", os.getpid(), flush=True)
        time.sleep(60)
        os._exit(0)
    print("parent", flush=True)
    time.sleep(60)
    """
)


@needs_torch
@pytest.mark.slow
def test_sigterm_writes_the_dump_and_still_ends_the_process(tmp_path: Path) -> None:
    script = tmp_path / "rank.py"
    script.write_text(_SLEEPER)
    (tmp_path / "fr").mkdir()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(BOOTSTRAP_DIR),
        "TORCH_FR_BUFFER_SIZE": "100",
        "TORCH_FR_DUMP_TEMP_FILE": str(tmp_path / "fr" / "rank_"),
    }
    with subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "store")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    ) as proc:
        assert proc.stdout is not None
        said = [proc.stdout.readline().split() for _ in range(2)]
        child = next(int(words[1]) for words in said if words[0] == "child")
        os.kill(child, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while is_alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not is_alive(child)
        assert list((tmp_path / "fr").iterdir()) == []  # the child wrote nothing
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGTERM
    assert f"logsleuth: wrote the flight-recorder dump {tmp_path / 'fr' / 'rank_0'}\n" in err
    assert sorted(p.name for p in (tmp_path / "fr").iterdir()) == ["rank_0"]


_BLOCKED = textwrap.dedent(
    """
    import ctypes
    libc = ctypes.CDLL(None)
    mutex = ctypes.create_string_buffer(64)  # zeroed: a default pthread mutex
    libc.pthread_mutex_lock(mutex)
    print("blocked", flush=True)
    libc.pthread_mutex_lock(mutex)  # waits for good, in C, where no Python handler runs
    """
)


@pytest.mark.slow
def test_a_process_blocked_in_c_still_ends_on_sigterm(tmp_path: Path) -> None:
    with subprocess.Popen(
        [sys.executable, "-c", _BLOCKED],
        stdout=subprocess.PIPE,
        text=True,
        env={"PYTHONPATH": str(BOOTSTRAP_DIR)},
    ) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "blocked\n"
        time.sleep(1.0)  # into the second lock: a signal before it finds the handler in Python
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            status = proc.wait(timeout=20)
        finally:
            proc.kill()
    assert status == -signal.SIGTERM
    assert SIGTERM_GRACE_S <= time.monotonic() - started < SIGTERM_GRACE_S + 5
