"""The stacks path alone on real hung jobs: 4-rank torch gloo jobs, dumped by the real py-spy.

Each built-in repro scenario that hangs runs once under ``torch.distributed.run --standalone``
(module cache). While it hangs, every rank is dumped in several ways: py-spy text, py-spy
``--json``, py-spy ``--native`` and gdb ``thread apply all bt`` for one rank; then the process
group is killed. Only the dumps (and, where the file names carry pids, a bundle manifest made
from each rank's ``RANK``) are analysed: the culprit must come out of the stacks alone.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from logsleuth.api import analyze
from logsleuth.live.capture import find_pyspy
from logsleuth.live.procs import find_ranks, is_alive, marked_processes
from logsleuth.model.diagnosis import Diagnosis
from logsleuth.repro import BACKEND_ENV, CULPRIT_ENV, TIMEOUT_ENV

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed"),
    pytest.mark.skipif(find_pyspy() is None, reason="py-spy is not installed"),
]

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "logsleuth" / "repro" / "scenarios"
NPROC = 4
QUIET_S = 4.0
"""A job whose ranks printed nothing for this long (after they all started) is hung."""
START_LIMIT_S = 120.0


@dataclass(frozen=True)
class Case:
    scenario: str
    culprit: int
    kind: str
    """The verdict kind the stacks must give."""
    call_site: str
    """What the verdict summary must name: the culprit's call site."""
    marker: str
    """A line the job prints on its way into the hang: the quiet time counts from it."""


CASES = (
    Case("dataloader_stall", 2, "non-collective-stall", "dataloader_stall.py:37", "step 2 done"),
    Case("skip_collective", 1, "missing-collective", "finish", "skips the all_reduce"),
    Case("order_mismatch", 1, "collective-mismatch", "order_mismatch.py:20", "broadcast before"),
    Case("init_never", 3, "init-stall", "init_never.py", "preparing data"),
)


@dataclass(frozen=True)
class Dumps:
    """Where the dumps of one hung job are: one directory per way of dumping."""

    root: Path
    ranks: dict[int, int]
    """pid -> rank, read from each rank's environment."""


MARKER = "LOGSLEUTH_STACK_JOB"
"""Set in the job's environment (inherited by every process it starts) to find and end them."""


def _rank_pids(marker: str) -> dict[int, int]:
    """Return pid -> rank of the job's rank processes (not the agent, not loader workers)."""
    ranks = find_ranks(marked_processes(MARKER, marker), "vm")
    return {r.pid: r.rank for r in ranks.values()}


def _wait_for_hang(proc: subprocess.Popen[bytes], log: Path, case: Case, marker: str) -> None:
    """Wait until the job printed its way into the hang and then nothing for QUIET_S.

    Importing torch prints nothing for seconds on a loaded machine, so silence alone is not
    a hang: the quiet time counts only once the scenario's own marker line is out.
    """
    started = time.monotonic()
    size, quiet_since = -1, time.monotonic()
    while time.monotonic() - started < START_LIMIT_S:
        assert proc.poll() is None, log.read_text(errors="replace")
        now_size = log.stat().st_size
        if now_size != size:
            size, quiet_since = now_size, time.monotonic()
        ready = case.marker in log.read_text(errors="replace")
        quiet = time.monotonic() - quiet_since >= QUIET_S
        if ready and quiet and len(_rank_pids(marker)) == NPROC:
            return
        time.sleep(0.5)
    pytest.fail(f"the job did not hang within {START_LIMIT_S:g} s:\n{log.read_text()}")


def _pyspy(pid: int, *flags: str) -> str:
    pyspy = find_pyspy()
    assert pyspy is not None
    done = subprocess.run(
        [pyspy, "dump", "--pid", str(pid), *flags],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _gdb(pid: int) -> str:
    done = subprocess.run(
        ["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # as `gdb ... > file 2>&1` interleaves its warnings
        text=True,
        timeout=120,
        check=False,
    )
    return done.stdout


def _manifest(out: Path, ranks: dict[int, int]) -> None:
    entries = {str(rank): {"pid": pid, "host": "vm"} for pid, rank in ranks.items()}
    manifest = {"schema": "logsleuth.bundle/1", "command": [], "ranks": entries}
    (out / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")


def _dump_all(out: Path, ranks: dict[int, int]) -> None:
    """Dump every rank in every way while the job hangs."""
    for way in ("text", "json", "native", "gdb"):
        (out / way).mkdir()
    for pid, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        # Rank from the file name only: no manifest in text/.
        (out / "text" / f"rank{rank}.txt").write_text(_pyspy(pid), encoding="utf-8")
        (out / "json" / f"pid{pid}.json").write_text(_pyspy(pid, "--json"), encoding="utf-8")
        native = _pyspy(pid, "--native")
        (out / "native" / f"pid{pid}.txt").write_text(native, encoding="utf-8")
        # gdb's native view of rank 0 beside py-spy's Python view of the others.
        if rank == 0 and shutil.which("gdb"):
            (out / "gdb" / f"pid{pid}.gdb.txt").write_text(_gdb(pid), encoding="utf-8")
        else:
            (out / "gdb" / f"pid{pid}.txt").write_text(_pyspy(pid), encoding="utf-8")
    for way in ("json", "native", "gdb"):
        _manifest(out / way, ranks)


_DUMPS: dict[str, Dumps] = {}


def _hung_job(case: Case, tmp_root: Path) -> Dumps:
    """Run the scenario until it hangs, dump it, kill it; cached per scenario."""
    if case.scenario in _DUMPS:
        return _DUMPS[case.scenario]
    out = tmp_root / case.scenario
    out.mkdir()
    script = SCENARIOS / f"{case.scenario}.py"
    log = out / "job.log"
    marker = f"{os.getpid()}-{case.scenario}"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_root),
        "PYTHONPATH": str(ROOT),
        "PYTHONUNBUFFERED": "1",
        BACKEND_ENV: "gloo",
        CULPRIT_ENV: str(case.culprit),
        TIMEOUT_ENV: "600",
        "OMP_NUM_THREADS": "1",
        MARKER: marker,
    }
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        f"--nproc-per-node={NPROC}", str(script),
    ]  # fmt: skip
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            command, stdout=sink, stderr=subprocess.STDOUT, env=env, cwd=out,
            start_new_session=True,
        )  # fmt: skip
    try:
        _wait_for_hang(proc, log, case, marker)
        ranks = _rank_pids(marker)
        assert sorted(ranks.values()) == list(range(NPROC))
        _dump_all(out, ranks)
    finally:
        _end_job(proc, marker)
    _DUMPS[case.scenario] = Dumps(out, ranks)
    return _DUMPS[case.scenario]


def _end_job(proc: subprocess.Popen[bytes], marker: str) -> None:
    """Kill every process of the job, by pid: torchrun starts each rank in a session of its own."""
    deadline = time.monotonic() + 30
    while True:
        members = [proc.pid, *marked_processes(MARKER, marker)]
        alive = [pid for pid in members if is_alive(pid)]
        if not alive:
            break
        assert time.monotonic() < deadline, f"job processes survive: {alive}"
        for pid in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
    proc.wait(timeout=30)


@pytest.fixture(scope="module")
def tmp_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield tmp_path_factory.mktemp("stack-jobs")


def _diagnose(directory: Path) -> Diagnosis:
    return analyze([str(directory)]).diagnosis


@pytest.mark.parametrize("way", ["text", "json", "native", "gdb"])
@pytest.mark.parametrize("case", CASES, ids=[c.scenario for c in CASES])
def test_stacks_alone_name_the_culprit(case: Case, way: str, tmp_root: Path) -> None:
    dumps = _hung_job(case, tmp_root)
    d = _diagnose(dumps.root / way)
    culprit_pid = next(pid for pid, rank in dumps.ranks.items() if rank == case.culprit)
    assert (d.verdict.kind, d.verdict.culprit_ranks) == (case.kind, (case.culprit,)), (
        d.verdict.summary
    )
    assert culprit_pid in d.verdict.culprit_pids or not d.verdict.culprit_pids
    assert f"rank {case.culprit} " in d.verdict.summary
    assert case.call_site in d.verdict.summary
    assert len(d.stack_classes) <= 3, [c.ranks for c in d.stack_classes]
