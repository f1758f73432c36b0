"""Run a job with diagnostics on, watch it, capture every rank when it stalls, write the bundle.

The stall rule: the job makes *progress* when its output (``launcher.log``) or its NCCL debug
files (``nccl/``) grow, when a new process of the job appears, when a rank's main-thread
stack (sampled with py-spy) differs from the previous sample of the same quiet period, or,
when a process whose latest sample shows no Python code of its own (not sampled yet,
starting the interpreter, importing modules, exiting) uses CPU: a loaded machine can take
a minute to import torch in every rank without a line of output. CPU used by a process
seen in its own code is no sign of progress, as NCCL spins while it waits.
Stacks are sampled only once the output has been quiet for a while (half the stall timeout,
at most 5 s), then every quarter of the stall timeout (1 to 5 s). When nothing progressed
for ``stall_timeout`` seconds, the job has stalled: every rank is dumped twice,
``snapshot_gap`` seconds apart, and the job is ended (SIGTERM, then SIGKILL, to its whole
process group).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from types import FrameType
from typing import Any, BinaryIO

from logsleuth.errors import CaptureError
from logsleuth.live.capture import (
    find_pyspy,
    remove_pipes,
    request_flight_records,
    run_ncclras,
    sample_stacks,
    write_sample,
)
from logsleuth.live.display import Reporter
from logsleuth.live.environment import (
    DEFAULT_NCCL_SUBSYS,
    RUN_MARKER,
    diagnostics_env,
    job_env,
    recorded_env,
)
from logsleuth.live.procs import (
    RankProcess,
    cpu_seconds,
    descendants,
    end_processes,
    find_ranks,
    is_alive,
    job_processes,
    marked_processes,
)
from logsleuth.live.supervisor import RELEASE

BUNDLE_SCHEMA = "logsleuth.bundle/1"
POLL_S = 0.25
RANK_SCAN_S = 1.0
CPU_PROGRESS_S = 0.2
"""CPU seconds per scan, used by processes not seen in their own code, that count as progress."""
_LEFT_RUNNING: list[subprocess.Popen[bytes]] = []
"""Jobs left running (``keep_running``): kept referenced, as Popen warns when dropped alive."""


@dataclass(frozen=True, slots=True)
class LiveOptions:
    """What to run and how to watch it."""

    command: tuple[str, ...]
    out_dir: Path
    stall_timeout: float = 60.0
    keep_running: bool = False
    nccl_subsys: str = DEFAULT_NCCL_SUBSYS
    distributed_debug: bool = False
    expected_ranks: int | None = None
    extra_env: tuple[tuple[str, str], ...] = ()
    """Variables the caller sets for the job on top of the user's environment."""
    exception_dumps: bool = True
    """Make a rank that dies of an uncaught Python exception or of SIGTERM dump its flight
    recorder into ``fr/`` (:data:`logsleuth.live.environment.BOOTSTRAP_DIR`)."""
    snapshot_gap: float = 2.0
    """Seconds between the two stack snapshots of the capture."""
    grace: float = 5.0
    """Seconds between SIGTERM and SIGKILL when the job is ended."""


@dataclass(frozen=True, slots=True)
class LiveResult:
    """What happened to the job, and where its bundle is."""

    out_dir: Path
    outcome: str
    """``finished`` (it ended by itself), ``stalled`` or ``interrupted`` (Ctrl-C / SIGTERM)."""
    returncode: int | None
    """The command's exit status when it ended by itself or was ended; None when left running."""
    ranks: tuple[RankProcess, ...]
    stalled_at: str | None
    pgid: int
    survivors: tuple[int, ...] = field(default=())
    """Job processes still alive after clean-up (empty unless ``keep_running``)."""
    exit_status: int | None = None
    """The launcher's exit status when it exited (None when a signal ended it)."""
    exit_signal: str | None = None
    """The signal that ended the launcher (``SIGSEGV``, ``SIGTERM`` ...), if one did."""


def _now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class _Interrupted(Exception):
    """SIGTERM reached live mode: capture what is there, then clean up, as for Ctrl-C."""


class _HungUp(_Interrupted):
    """SIGHUP reached live mode (a closed terminal, a dropped SSH session): nobody is
    there to wait for a capture, so the job is ended at once and the manifest written."""


_STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def _signals_interrupt() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise _HungUp if signum == signal.SIGHUP else _Interrupted

    previous = {s: signal.signal(s, handler) for s in _STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, action in previous.items():
            signal.signal(signum, action)


class _Teardown:
    """While the job is being ended, Ctrl-C (and SIGTERM/SIGHUP) escalates instead of
    aborting: the first one during teardown skips the rest of the grace period and kills
    the job (SIGKILL); the manifest is still written."""

    def __init__(self, reporter: Reporter) -> None:
        self.reporter = reporter
        self.hurry = False
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> _Teardown:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, *_STOP_SIGNALS):
                self.previous[signum] = signal.signal(signum, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, action in self.previous.items():
            signal.signal(signum, action)

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        if not self.hurry:
            self.hurry = True
            _quietly(self.reporter.warn, "interrupted again: killing the job now (SIGKILL)")


def _quietly(say: Callable[[str], None], message: str) -> None:
    """Report ``message``; a terminal that is gone (SIGHUP) must not stop the teardown."""
    with contextlib.suppress(OSError, ValueError):
        say(message)


class _Output:
    """Follows ``launcher.log`` and echoes new bytes to the terminal."""

    def __init__(self, path: Path, echo: BinaryIO | None) -> None:
        self._handle = path.open("rb")
        self._echo = echo
        self.size = 0

    def pump(self) -> int:
        """Echo what was written since the last call; return its size in bytes."""
        chunk = self._handle.read()
        if chunk and self._echo is not None:
            with contextlib.suppress(OSError, ValueError):
                self._echo.write(chunk)
                self._echo.flush()
        self.size += len(chunk)
        return len(chunk)

    def close(self) -> None:
        """Echo the rest and stop following."""
        self.pump()
        self._handle.close()


def _dir_size(directory: Path) -> int:
    total = 0
    with contextlib.suppress(OSError):
        for entry in os.scandir(directory):
            with contextlib.suppress(OSError):
                if entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
    return total


class _Watcher:
    """Applies the stall rule (module docstring) to one running job."""

    def __init__(self, options: LiveOptions, proc: subprocess.Popen[bytes], run_id: str) -> None:
        self.options = options
        self.proc = proc
        self.run_id = run_id
        self.host = socket.gethostname()
        self.ranks: dict[int, RankProcess] = {}
        self.seen_pids: set[int] = set()
        self.stacks: dict[int, tuple[str, ...] | None] = {}
        self.running: set[int] = set()
        """Processes whose latest sample shows their own code (not starting, importing, exiting)."""
        self.pyspy = find_pyspy()
        stall = options.stall_timeout
        self.quiet_before_sampling = min(5.0, stall / 2)
        self.sample_every = max(1.0, min(5.0, stall / 4))
        now = time.monotonic()
        self.last_progress = now
        self.last_sample = 0.0
        self.last_scan = 0.0
        self.nccl_size = 0
        self.cpu: dict[int, float] = {}

    def job_pids(self) -> list[int]:
        """Return the job's living processes: the launcher's tree, or its orphans when it is gone."""
        if self.proc.poll() is None:
            return [self.proc.pid, *descendants(self.proc.pid)]
        return marked_processes(RUN_MARKER, self.run_id)

    def scan(self, reporter: Reporter) -> None:
        """Find new processes and ranks; note ranks that are gone."""
        pids = self.job_pids()
        new_pids = set(pids) - self.seen_pids
        if new_pids:
            self.seen_pids |= new_pids
            self.last_progress = time.monotonic()
        for rank, found in sorted(find_ranks(pids, self.host).items()):
            known = self.ranks.get(rank)
            if known is None or known.pid != found.pid:
                self.ranks[rank] = found
                reporter.note(f"rank {rank} is pid {found.pid} (local rank {found.local_rank})")
                if len(self.ranks) == self.options.expected_ranks:
                    reporter.note(f"all {len(self.ranks)} ranks found")
        for rank, known in sorted(self.ranks.items()):
            if known.pid in self.seen_pids and not is_alive(known.pid):
                reporter.note(f"rank {rank} (pid {known.pid}) has exited")
                self.seen_pids.discard(known.pid)

    def busy_elsewhere(self, pids: list[int]) -> bool:
        """Return True when processes not seen in their own code used CPU since the last scan."""
        used = 0.0
        for pid in pids:
            now = cpu_seconds(pid)
            if now is None:
                continue
            before = self.cpu.get(pid)
            self.cpu[pid] = now
            if before is not None and pid not in self.running:
                used += now - before
        return used >= CPU_PROGRESS_S

    def stack_targets(self) -> list[tuple[str, int]]:
        """Return (label, pid) of what to dump: living ranks, else every living job process."""
        living = [(f"rank{r}", p.pid) for r, p in sorted(self.ranks.items()) if is_alive(p.pid)]
        if living:
            return living
        return [(f"pid{pid}", pid) for pid in self.job_pids()]

    def sampled_progress(self) -> bool:
        """Sample stacks; return True when any process's main thread moved since last time."""
        targets = self.stack_targets()
        samples = sample_stacks([pid for _, pid in targets], self.pyspy)
        moved = False
        for pid, sample in samples.items():
            current = sample.main_thread()
            if sample.is_starting():
                self.running.discard(pid)
            else:
                self.running.add(pid)
            if current is None:
                continue
            previous = self.stacks.get(pid)
            if previous is not None and previous != current:
                moved = True
            self.stacks[pid] = current
        return moved

    def watch(self, output: _Output, reporter: Reporter) -> str:
        """Watch until the job ends or stalls; return ``finished`` or ``stalled``."""
        nccl_dir = self.options.out_dir / "nccl"
        sampling = False
        while True:
            now = time.monotonic()
            if output.pump():
                self.last_progress = now
            size = _dir_size(nccl_dir)
            if size != self.nccl_size:
                self.nccl_size = size
                self.last_progress = now
            if now - self.last_scan >= RANK_SCAN_S:
                self.last_scan = now
                self.scan(reporter)
                pids = self.job_pids()
                if self.proc.poll() is not None and not pids:
                    return "finished"
                if self.busy_elsewhere(pids):
                    self.last_progress = now
            quiet = now - self.last_progress
            if quiet >= self.options.stall_timeout:
                return "stalled"
            if quiet >= self.quiet_before_sampling:
                if not sampling:
                    # A new quiet period: stacks from an earlier one are no baseline.
                    sampling = True
                    self.stacks.clear()
                    reporter.note(f"no output for {quiet:.0f} s; sampling stacks")
                if now - self.last_sample >= self.sample_every:
                    self.last_sample = now
                    if self.sampled_progress():
                        self.last_progress = time.monotonic()
                        sampling = False
            else:
                sampling = False
            time.sleep(POLL_S)

    def capture(self, reporter: Reporter) -> None:
        """Dump every rank twice, ask for flight-recorder dumps and ncclras output."""
        out = self.options.out_dir
        targets = self.stack_targets()
        if not targets:
            reporter.warn("no process of the job is left to capture")
            return
        if self.pyspy is None:
            reporter.warn("py-spy not found: no stack dumps (pip install py-spy)")
        asked = request_flight_records(out / "fr")
        if asked:
            reporter.note(f"asked {asked} rank(s) for their flight-recorder dump")
        labels = dict((pid, label) for label, pid in targets)
        for number in (1, 2):
            reporter.note(f"stack snapshot {number}/2 of {len(targets)} process(es)")
            samples = sample_stacks([pid for _, pid in targets], self.pyspy)
            failed = 0
            for pid, sample in samples.items():
                write_sample(sample, out / "stacks", labels[pid], number)
                failed += sample.text is None
            if failed:
                reporter.warn(f"{failed} stack dump(s) failed; see stacks/*.error.txt")
            if number == 1:
                time.sleep(self.options.snapshot_gap)
        if run_ncclras(out / "ncclras.txt"):
            reporter.note("wrote ncclras.txt")


def _end_job(
    proc: subprocess.Popen[bytes],
    run_id: str,
    grace: float,
    teardown: _Teardown | None = None,
) -> tuple[int, ...]:
    """SIGTERM, then SIGKILL, the job's process group and any job process outside it."""

    def find() -> list[Any]:
        return job_processes(proc.pid, RUN_MARKER, run_id)

    def hurry() -> bool:
        return teardown is not None and teardown.hurry

    def killing(count: int) -> None:
        if teardown is not None:
            _quietly(teardown.reporter.note, f"{count} process(es) still alive: SIGKILL")

    survivors = end_processes(find, grace, hurry, killing, child=proc)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5.0)
    return tuple(survivors)


def _exit_of(returncode: int | None) -> tuple[int | None, str | None]:
    """Split a Popen return code into (exit status, signal name)."""
    if returncode is None:
        return None, None
    if returncode < 0:
        try:
            return None, signal.Signals(-returncode).name
        except ValueError:
            return None, f"signal {-returncode}"
    return returncode, None


def _prune(directory: Path) -> None:
    remove_pipes(directory)
    # A dump whose writer was killed mid-way (SIGKILL) is no evidence.
    for partial in directory.glob("*.partial") if directory.is_dir() else ():
        with contextlib.suppress(OSError):
            partial.unlink()
    with contextlib.suppress(OSError):
        if directory.is_dir() and not any(directory.iterdir()):
            directory.rmdir()


def write_manifest(
    out_dir: Path,
    command: tuple[str, ...],
    ranks: dict[int, RankProcess],
    started: str,
    stalled_at: str | None,
    env: dict[str, str],
    *,
    outcome: str = "running",
    returncode: int | None = None,
    ended_by: str | None = None,
    finished: str | None = None,
    survivors: tuple[int, ...] = (),
) -> Path:
    """Write ``manifest.json`` (schema ``logsleuth.bundle/1``, CONTRACT section 4).

    It is written when the job starts (``outcome: running``, ``complete: false``) and
    again, complete, when live mode is done with the job: then ``exit`` records how the
    job ended (its exit status or the signal that ended it, and who ended it: the ``job``
    itself or ``logsleuth``). A manifest left incomplete means logsleuth did not get to
    the end; its supervisor then marks it ``orphaned`` after ending the job.
    """
    status, signame = _exit_of(returncode)
    data: dict[str, object] = {
        "schema": BUNDLE_SCHEMA,
        "command": list(command),
        "ranks": {
            str(r): {"pid": p.pid, "host": p.host, "local_rank": p.local_rank}
            for r, p in sorted(ranks.items())
        },
        "started": started,
        "stalled_at": stalled_at,
        "env": env,
        "outcome": outcome,
        "complete": outcome != "running",
    }
    if outcome != "running":
        data["finished"] = finished
        data["exit"] = {"status": status, "signal": signame, "ended_by": ended_by}
        if survivors:
            data["survivors"] = list(survivors)
    target = out_dir / "manifest.json"
    partial = out_dir / ".manifest.json.partial"
    partial.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    partial.replace(target)
    return target


def prepare_out_dir(out_dir: Path) -> None:
    """Create the bundle directory; refuse one that already holds files.

    Raises:
        CaptureError: the directory is not empty or cannot be created.
    """
    try:
        if out_dir.exists() and any(out_dir.iterdir()):
            raise CaptureError(f"{out_dir}: not empty; choose a new --out directory")
        for sub in ("nccl", "fr", "stacks"):
            (out_dir / sub).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CaptureError(f"{out_dir}: cannot create: {exc.strerror or exc}") from exc


def _check_command(command: tuple[str, ...], env: dict[str, str]) -> None:
    """Refuse a command that cannot be run before anything is written.

    Raises:
        CaptureError: the program is not found or not executable.
    """
    program = command[0]
    if os.sep in program:
        if not os.path.isfile(program):
            raise CaptureError(f"{program}: cannot run: No such file or directory")
        if not os.access(program, os.X_OK):
            raise CaptureError(f"{program}: cannot run: Permission denied")
    elif shutil.which(program, path=env.get("PATH", os.defpath)) is None:
        raise CaptureError(f"{program}: cannot run: No such file or directory")


def _remove_new(out: Path, existed: bool) -> None:
    """Take back what :func:`prepare_out_dir` made, so a failed start leaves nothing half-built."""
    if not existed:
        shutil.rmtree(out, ignore_errors=True)
        return
    for sub in ("nccl", "fr", "stacks"):
        shutil.rmtree(out / sub, ignore_errors=True)
    for name in ("launcher.log", "manifest.json"):
        with contextlib.suppress(OSError):
            (out / name).unlink()


def _start_supervisor(
    proc: subprocess.Popen[bytes], run_id: str, grace: float, manifest: Path
) -> subprocess.Popen[bytes] | None:
    """Start the process that ends the job if logsleuth dies (:mod:`logsleuth.live.supervisor`)."""
    command = [
        sys.executable,
        "-m",
        "logsleuth.live.supervisor",
        str(proc.pid),
        RUN_MARKER,
        run_id,
        f"{grace:g}",
        str(manifest.resolve()),
    ]
    try:
        return subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError:
        return None


def _release(supervisor: subprocess.Popen[bytes] | None) -> None:
    """Tell the supervisor that logsleuth is done with the job; it exits without acting."""
    if supervisor is None or supervisor.stdin is None:
        return
    with contextlib.suppress(OSError, ValueError):
        supervisor.stdin.write(RELEASE)
        supervisor.stdin.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        supervisor.wait(timeout=5.0)


def run_live(options: LiveOptions, reporter: Reporter, echo: BinaryIO | None) -> LiveResult:
    """Run the job, watch it, capture it when it stalls or is interrupted, and write the bundle.

    The bundle is complete on disk when this returns; the job is ended (unless
    ``keep_running``) and no process of it is left. Ctrl-C, SIGTERM or SIGHUP while the
    job runs capture it and end it; another one while it is being ended kills it at once.
    If logsleuth itself dies, a supervisor process ends the job.

    Raises:
        CaptureError: the output directory or the command cannot be used.
    """
    if not options.command:
        raise CaptureError("no command to run: give it after --")
    out = options.out_dir
    run_id = uuid.uuid4().hex
    diagnostics = diagnostics_env(
        out, nccl_subsys=options.nccl_subsys, distributed_debug=options.distributed_debug
    )
    env = job_env(
        {**os.environ, **dict(options.extra_env)},
        diagnostics,
        run_id,
        exception_dumps=options.exception_dumps,
    )
    _check_command(options.command, env)
    existed = out.exists()
    prepare_out_dir(out)
    log_path = out / "launcher.log"
    started = _now_iso()
    recorded = recorded_env(env)
    with log_path.open("ab") as log:
        try:
            proc = subprocess.Popen(
                list(options.command),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            _remove_new(out, existed)
            raise CaptureError(f"{options.command[0]}: cannot run: {exc.strerror or exc}") from exc
    manifest = write_manifest(out, options.command, {}, started, None, recorded)
    supervisor = _start_supervisor(proc, run_id, options.grace, manifest)
    reporter.note(f"started pid {proc.pid}: {' '.join(options.command)}")
    reporter.note(f"bundle: {out}; stall timeout {options.stall_timeout:g} s")
    output = _Output(log_path, echo)
    watcher = _Watcher(options, proc, run_id)
    stalled_at: str | None = None
    outcome = "finished"
    survivors: tuple[int, ...] = ()
    returncode: int | None = None
    with _signals_interrupt():
        try:
            outcome = watcher.watch(output, reporter)
            if outcome == "stalled":
                stalled_at = _now_iso()
                reporter.note(
                    f"stall: no progress for {options.stall_timeout:g} s; capturing every rank"
                )
                watcher.capture(reporter)
        except _HungUp:
            outcome = "interrupted"
            _quietly(reporter.note, "hangup: ending the job")
        except (KeyboardInterrupt, _Interrupted):
            outcome = "interrupted"
            _quietly(reporter.note, "interrupted: capturing every rank, then ending the job")
            with contextlib.suppress(KeyboardInterrupt, _Interrupted, OSError):
                watcher.capture(reporter)
        finally:
            with _Teardown(reporter) as teardown:
                ended_by: str | None = "job"
                if options.keep_running and proc.poll() is None:
                    _quietly(reporter.note, f"leaving the job running (process group {proc.pid})")
                    _LEFT_RUNNING.append(proc)
                    ended_by = None
                else:
                    if proc.poll() is None or outcome != "finished":
                        ended_by = "logsleuth" if proc.poll() is None else "job"
                        _quietly(reporter.note, "ending the job (SIGTERM, then SIGKILL)")
                    survivors = _end_job(proc, run_id, options.grace, teardown)
                    returncode = proc.returncode
                    if survivors:
                        _quietly(
                            reporter.warn,
                            f"could not end pid(s) {', '.join(map(str, survivors))}",
                        )
                with contextlib.suppress(OSError, ValueError):
                    output.close()
                for sub in ("fr", "nccl", "stacks"):
                    _prune(out / sub)
                write_manifest(
                    out,
                    options.command,
                    watcher.ranks,
                    started,
                    stalled_at,
                    recorded,
                    outcome=outcome,
                    returncode=returncode,
                    ended_by=ended_by,
                    finished=_now_iso(),
                    survivors=survivors,
                )
                _release(supervisor)
    status, signame = _exit_of(returncode)
    if outcome == "finished":
        how = f"status {status}" if signame is None else f"signal {signame}"
        _quietly(reporter.note, f"the job exited with {how}")
    return LiveResult(
        out_dir=out,
        outcome=outcome,
        returncode=returncode,
        ranks=tuple(p for _, p in sorted(watcher.ranks.items())),
        stalled_at=stalled_at,
        pgid=proc.pid,
        survivors=survivors,
        exit_status=status,
        exit_signal=signame,
    )
