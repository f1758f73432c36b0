"""Live mode on small non-torch jobs: stall, finish, ranks, escapees, keep-running, Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from logsleuth.errors import CaptureError
from logsleuth.live.procs import is_alive
from logsleuth.live.session import LiveOptions, run_live
from tests.live.helpers import Recorder, job_survivors

pytestmark = pytest.mark.slow  # real processes and py-spy; a few seconds each

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
SLEEP = "import time\ndef stuck():\n    time.sleep(120)\nprint('started', flush=True)\nstuck()\n"
# Two ranks as a launcher starts them (environment set at exec), each sleeping for good.
TWO_RANKS = (
    "import os, subprocess, sys\n"
    "code = 'import time\\nprint(\"rank up\", flush=True)\\ntime.sleep(120)'\n"
    "kids = [subprocess.Popen([sys.executable, '-c', code],"
    " env={**os.environ, 'RANK': str(r), 'LOCAL_RANK': str(r), 'WORLD_SIZE': '2'})"
    " for r in range(2)]\n"
    "[k.wait() for k in kids]\n"
)


def _options(out: Path, *command: str, **kw: object) -> LiveOptions:
    return LiveOptions(
        command=command, out_dir=out, stall_timeout=2.0, snapshot_gap=0.5, grace=2.0, **kw
    )  # type: ignore[arg-type]


def _manifest(out: Path) -> dict[str, object]:
    data = json.loads((out / "manifest.json").read_text())
    assert isinstance(data, dict)
    return data


def test_a_quiet_job_is_captured_and_ended(tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    reporter = Recorder()
    started = time.monotonic()
    result = run_live(_options(out, PY, "-c", SLEEP), reporter, None)
    assert result.outcome == "stalled"
    assert time.monotonic() - started < 2.0 + 15
    assert (out / "launcher.log").read_text() == "started\n"
    pid = result.pgid
    dumps = sorted(p.name for p in (out / "stacks").iterdir())
    assert dumps == [f"pid{pid}.1.txt", f"pid{pid}.2.txt"]
    assert "stuck (<string>:3)" in (out / "stacks" / f"pid{pid}.2.txt").read_text()
    assert not is_alive(pid) and job_survivors(out) == []
    assert result.returncode == -signal.SIGTERM
    manifest = _manifest(out)
    assert set(manifest) == {
        *("schema", "command", "ranks", "started", "stalled_at", "env", "live"),
        *("outcome", "complete", "finished", "exit"),
    }
    assert (manifest["outcome"], manifest["complete"]) == ("stalled", True)
    assert manifest["exit"] == {"status": None, "signal": "SIGTERM", "ended_by": "logsleuth"}
    live = manifest["live"]
    assert isinstance(live, dict)
    assert live.pop("last_progress_signal") in ("output", "new process", "CPU while starting")
    assert live == {
        "mode": "end-on-stall",
        "node_agent": False,
        "stall_timeout_s": 2.0,
        "stall_seen_by": None,
        "teardown_log": None,
    }
    assert manifest["schema"] == "logsleuth.bundle/1"
    assert manifest["command"] == [PY, "-c", SLEEP]
    assert manifest["ranks"] == {}
    assert manifest["stalled_at"] == result.stalled_at is not None
    assert any(n.startswith("stall: no progress signal for 2 s") for n in reporter.notes)


# A rank that waits at full CPU in its own code, as one waits on a GPU stream that an NCCL
# collective never finishes (`.item()` after the all_reduce: CUDA spins, NCCL's proxy spins).
SPINNING_RANK = (
    "import os, subprocess, sys\n"
    'code = \'def wait_for_gpu():\\n    while True: pass\\nprint("rank up", flush=True)\\n'
    "wait_for_gpu()'\n"
    "env = {**os.environ, 'RANK': '0', 'LOCAL_RANK': '0', 'WORLD_SIZE': '1'}\n"
    "subprocess.Popen([sys.executable, '-c', code], env=env).wait()\n"
)


def test_a_rank_spinning_in_its_own_code_is_a_stall(tmp_path: Path) -> None:
    # CPU use counts as progress only for a process not yet seen in its own code; the first
    # stack sample must not wait for the CPU to go quiet, or a job spinning in NCCL never stalls.
    out = tmp_path / "bundle"
    started = time.monotonic()
    result = run_live(_options(out, PY, "-c", SPINNING_RANK), Recorder(), None)
    assert result.outcome == "stalled"
    assert time.monotonic() - started < 2.0 + 20
    assert "wait_for_gpu (<string>:2)" in (out / "stacks" / "rank0.2.txt").read_text()
    assert job_survivors(out) == []


# A rank that writes NCCL lines to NCCL_DEBUG_FILE, waits, and on SIGTERM logs what NCCL
# logs when its peers are ended: a closed connection.
NCCL_RANK = (
    "import os, signal, socket, sys, time\n"
    "path = os.environ['NCCL_DEBUG_FILE'].replace('%h', socket.gethostname())"
    ".replace('%p', str(os.getpid()))\n"
    "log = open(path, 'a', buffering=1)\n"
    "log.write('h:1:1 [0] NCCL INFO NCCL version 2.28.9+cuda13.0\\n')\n"
    "def ended(*_):\n"
    "    log.write('h:1:2 [0] misc/socket.cc:72 NCCL WARN socketProgress: Connection closed"
    " by remote peer\\n')\n"
    "    sys.exit(1)\n"
    "signal.signal(signal.SIGTERM, ended)\n"
    "def waits():\n"
    "    time.sleep(120)\n"
    "waits()\n"
)


def test_what_nccl_logs_after_live_ends_the_job_is_kept_apart(tmp_path: Path) -> None:
    # The peers a rank loses when live ends the job are not evidence (like teardown.log).
    out = tmp_path / "bundle"
    result = run_live(_options(out, PY, "-c", NCCL_RANK), Recorder(), None)
    assert result.outcome == "stalled"
    (log,) = sorted((out / "nccl").glob("*.log"))
    assert log.read_text() == "h:1:1 [0] NCCL INFO NCCL version 2.28.9+cuda13.0\n"
    teardown = log.with_name(log.name + ".teardown").read_text()
    assert "Connection closed by remote peer" in teardown
    from logsleuth.parse.discover import discover

    names = [s.name for s in discover([str(out)])[0]]
    assert not [n for n in names if n.endswith(".teardown")] and any("nccl" in n for n in names)


def test_a_job_that_ends_is_not_interrupted(tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    code = "import time\nfor i in range(6):\n    print(i, flush=True)\n    time.sleep(0.5)\nraise SystemExit(3)"
    result = run_live(_options(out, PY, "-c", code), Recorder(), None)
    assert (result.outcome, result.returncode, result.stalled_at) == ("finished", 3, None)
    assert (result.exit_status, result.exit_signal) == (3, None)
    assert (out / "launcher.log").read_text() == "0\n1\n2\n3\n4\n5\n"
    assert not (out / "stacks").exists()  # nothing captured, empty dirs pruned
    manifest = _manifest(out)
    assert manifest["stalled_at"] is None
    assert manifest["exit"] == {"status": 3, "signal": None, "ended_by": "job"}


def test_ranks_are_found_and_dumped_by_rank(tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    result = run_live(_options(out, PY, "-c", TWO_RANKS, expected_ranks=2), Recorder(), None)
    assert result.outcome == "stalled"
    ranks = _manifest(out)["ranks"]
    assert isinstance(ranks, dict) and sorted(ranks) == ["0", "1"]
    assert {r["local_rank"] for r in ranks.values()} == {0, 1}
    assert [p.rank for p in result.ranks] == [0, 1]
    names = sorted(p.name for p in (out / "stacks").iterdir())
    assert names == ["rank0.1.txt", "rank0.2.txt", "rank1.1.txt", "rank1.2.txt"]
    assert f"Process {ranks['1']['pid']}" in (out / "stacks" / "rank1.1.txt").read_text()
    assert all(not is_alive(r["pid"]) for r in ranks.values())
    assert job_survivors(out) == []


def test_a_process_that_left_the_group_is_ended_too(tmp_path: Path) -> None:
    # The launcher exits at once; its child started its own session (a daemonised helper).
    out = tmp_path / "bundle"
    code = (
        "import subprocess, sys\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'],"
        " start_new_session=True)\n"
    )
    result = run_live(_options(out, PY, "-c", code), Recorder(), None)
    assert result.returncode == 0
    assert result.outcome == "stalled"  # the orphan was watched, then captured
    assert len(list((out / "stacks").glob("pid*.1.txt"))) == 1
    assert job_survivors(out) == [] and result.survivors == ()


def test_keep_running_leaves_the_job_alive(tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    result = run_live(_options(out, PY, "-c", SLEEP, keep_running=True), Recorder(), None)
    try:
        assert result.outcome == "stalled" and result.returncode is None
        assert is_alive(result.pgid)
        assert (out / "stacks" / f"pid{result.pgid}.2.txt").exists()
    finally:
        os.killpg(result.pgid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while job_survivors(out) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert job_survivors(out) == []


def test_a_used_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "old.log").write_text("x")
    with pytest.raises(CaptureError, match="not empty; choose a new --out directory"):
        run_live(_options(tmp_path, PY, "-c", "pass"), Recorder(), None)


def test_a_missing_command_is_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [PY, "-m", "logsleuth", "live", "--out", str(tmp_path / "b"), "--", "no-such-cmd-x"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        "logsleuth: error: no-such-cmd-x: cannot run: No such file or directory"
    )
    nothing = subprocess.run(
        [PY, "-m", "logsleuth", "live"], capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert nothing.returncode == 2
    assert nothing.stderr == (
        "logsleuth: error: live needs the job's command after --, e.g. logsleuth live -- torchrun ...\n"
    )


def test_ctrl_c_captures_then_cleans_up(tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    live = subprocess.Popen(
        [
            PY,
            "-m",
            "logsleuth",
            "live",
            "--out",
            str(out),
            "--stall-timeout",
            "60",
            "--",
            PY,
            "-c",
            SLEEP,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "NO_COLOR": "1"},
    )
    deadline = time.monotonic() + 20
    log = out / "launcher.log"
    while time.monotonic() < deadline and not (log.exists() and log.read_text()):
        time.sleep(0.1)
    live.send_signal(signal.SIGINT)
    stdout, stderr = live.communicate(timeout=60)
    assert "interrupted: capturing every rank, then ending the job" in stderr
    assert stdout.startswith("started\n")
    assert "report: " in stdout
    manifest = _manifest(out)
    assert manifest["stalled_at"] is None
    assert len(list((out / "stacks").glob("pid*.2.txt"))) == 1
    assert (out / "diagnosis.json").exists() and (out / "report.html").exists()
    assert live.returncode in (0, 1)
    assert job_survivors(out) == []


def test_a_cut_short_dump_is_left_out_and_finished_ones_stay(tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    code = (
        "import os\n"
        "prefix = os.environ['TORCH_FR_DUMP_TEMP_FILE']\n"
        "open(prefix + '0', 'wb').write(b'dump')\n"
        "open(prefix + '1.partial', 'wb').write(b'du')\n"
    )
    result = run_live(_options(out, PY, "-c", code), Recorder(), None)
    assert result.outcome == "finished"
    assert sorted(p.name for p in (out / "fr").iterdir()) == ["rank_0"]
