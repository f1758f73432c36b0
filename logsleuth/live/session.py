"""Run a job with diagnostics on, watch it, capture every rank when it stalls, write the bundle.

The stall rule (docs/live.md): the job makes *progress* on any of these signals

* its NCCL debug files (``nccl/``) grow: a rank logged a new collective (a COLL line with
  the next ``opCount``) or any other NCCL line;
* its output (``launcher.log``) grows: torch's watchdog SeqNums, the job's own prints;
* the flight-recorder directory (``fr/``) grows;
* the rank processes or their children (DataLoader workers) read or write at least
  :data:`IO_PROGRESS_BYTES` per scan (``/proc/PID/io``): gloo collectives go through
  ``readv``/``writev`` on their sockets, checkpoints and data loading through files;
* a new process of the job appears;
* a rank's main-thread stack (sampled with py-spy) differs from the previous sample of the
  same quiet period;
* a process whose latest sample shows no Python code of its own (not sampled yet, starting
  the interpreter, importing modules, exiting) uses CPU: a loaded machine can take a minute
  to import torch in every rank without a line of output. CPU used by a process seen in its
  own code is no sign of progress, as NCCL spins while it waits.

Silence on stdout alone is never a stall. Stacks are sampled only once no signal but CPU use
came for a while (half the stall timeout, at most 5 s), then every quarter of the stall
timeout (1 to 5 s): the first sample is what tells a rank spinning in NCCL (its own code)
from one still starting, so CPU use must not put it off. When nothing progressed for ``stall_timeout`` seconds, the job has stalled: every rank
is dumped twice (with its DataLoader workers, ``py-spy dump --subprocesses``),
``snapshot_gap`` seconds apart; then the job is ended (SIGTERM, then SIGKILL, to its whole
process group), or left running with ``keep_running`` (``--capture-only``). Output the job
prints after live began to end it goes to ``teardown.log``, which analysis does not read:
the tracebacks of a launcher that live itself stopped are not evidence.

A node agent (``--node-agent``, one per node under srun/mpirun) watches only its node's
ranks and shares its stall through a beacon file beside the bundles: the agent that sees
the stall first writes it, and every other node's agent captures its ranks at once.
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
    dumped_pids,
    find_pyspy,
    remove_pipes,
    request_flight_records,
    request_proxy_dumps,
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
    proxy_dump_signal,
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
    parent_map,
)
from logsleuth.live.supervisor import RELEASE

BUNDLE_SCHEMA = "logsleuth.bundle/1"
POLL_S = 0.25
RANK_SCAN_S = 1.0
CPU_PROGRESS_S = 0.2
"""CPU seconds per scan, used by processes not seen in their own code, that count as progress."""
CPU_SIGNAL = "CPU while starting"
IO_PROGRESS_BYTES = 4096
"""Bytes read or written per scan by the ranks and their children that count as progress."""
TEARDOWN_LOG = "teardown.log"
"""The job's output after live began to end it (not evidence; analysis skips it)."""
TEARDOWN_SUFFIX = ".teardown"
"""What NCCL wrote to ``nccl/NAME`` after live began to end the job goes to ``NAME.teardown``
(the peers it lost to SIGTERM are not evidence; analysis skips the suffix)."""
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
    stall_beacon: Path | None = None
    """Node-agent mode: the file that says some node's agent saw a stall (module docstring)."""
    torch_version: tuple[int, int] | None = None
    """The job's torch (major, minor), when known: chooses the flight-recorder variables."""


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

    def __init__(
        self, path: Path, echo: BinaryIO | None, before_echo: Callable[[], None] | None = None
    ) -> None:
        self._handle = path.open("rb")
        self._echo = echo
        self._before_echo = before_echo
        self.size = 0

    def pump(self) -> int:
        """Echo what was written since the last call; return its size in bytes."""
        chunk = self._handle.read()
        if chunk and self._before_echo is not None:
            self._before_echo()
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
        self.started_wall = time.time()
        self.last_progress = now
        self.last_evidence = now
        """When a signal other than CPU use last showed progress: stacks are sampled after a
        quiet spell of these, since CPU use counts only for processes no sample has shown in
        their own code yet (NCCL's threads spin at full CPU while a rank waits)."""
        self.last_signal = "start"
        """The signal that last showed progress (for the status line and the manifest)."""
        self.last_sample = 0.0
        self.last_scan = 0.0
        self.sizes: dict[str, int] = {}
        self.cpu: dict[int, float] = {}
        self.io: dict[int, int] = {}
        self.beacon_seen: str | None = None
        self.proxy_signal: int | None = None
        """``NCCL_PROXY_DUMP_SIGNAL`` of the job: sent on a stall to ranks running NCCL."""

    def progressed(self, signal_name: str, now: float | None = None) -> None:
        """Note progress shown by ``signal_name``."""
        self.last_progress = time.monotonic() if now is None else now
        if signal_name != CPU_SIGNAL:
            self.last_evidence = self.last_progress
        self.last_signal = signal_name

    def grew(self, name: str, size: int) -> bool:
        """Return True when a watched file or directory changed size since the last call."""
        before = self.sizes.get(name, 0)
        self.sizes[name] = size
        return size != before

    def io_moved(self) -> bool:
        """Return True when the ranks and their children read or wrote enough since last time."""
        pids: set[int] = set()
        parents = parent_map() if self.ranks else {}
        for known in self.ranks.values():
            if is_alive(known.pid):
                pids.add(known.pid)
                pids.update(descendants(known.pid, parents))
        moved = 0
        for pid in pids:
            now = _io_bytes(pid)
            if now is None:
                continue
            before = self.io.get(pid)
            self.io[pid] = now
            if before is not None:
                moved += max(0, now - before)
        return moved >= IO_PROGRESS_BYTES

    def beacon(self) -> str | None:
        """Return what another node's agent wrote to the stall beacon since this run began."""
        path = self.options.stall_beacon
        if path is None:
            return None
        try:
            if path.stat().st_mtime < self.started_wall - 1.0:
                return None  # a stale beacon of an earlier job
            return path.read_text(encoding="utf-8", errors="replace").strip() or "another node"
        except OSError:
            return None

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
            self.progressed("new process")
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
        out = self.options.out_dir
        timeout = self.options.stall_timeout
        sampling = False
        while True:
            now = time.monotonic()
            if output.pump():
                self.progressed("output", now)
            if self.grew("nccl", _dir_size(out / "nccl")):
                self.progressed("NCCL debug files", now)
            if self.grew("fr", _dir_size(out / "fr")):
                self.progressed("flight recorder", now)
            if now - self.last_scan >= RANK_SCAN_S:
                self.last_scan = now
                self.scan(reporter)
                pids = self.job_pids()
                if self.proc.poll() is not None and not pids:
                    return "finished"
                if self.busy_elsewhere(pids):
                    self.progressed(CPU_SIGNAL, now)
                if self.io_moved():
                    self.progressed("rank I/O", now)
                other = self.beacon()
                if other is not None:
                    self.beacon_seen = other
                    return "stalled"
            quiet = now - self.last_progress
            if quiet >= timeout:
                return "stalled"
            if quiet >= 1.0:
                reporter.waiting(quiet, timeout, self.last_signal)
            silent = now - self.last_evidence
            if silent >= self.quiet_before_sampling:
                if not sampling:
                    # A new quiet period: stacks from an earlier one are no baseline.
                    sampling = True
                    self.stacks.clear()
                    reporter.note(f"no progress signal for {silent:.0f} s; sampling stacks")
                if now - self.last_sample >= self.sample_every:
                    self.last_sample = now
                    if self.sampled_progress():
                        self.progressed("stacks moved")
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
        if self.proxy_signal is not None and self.ranks:
            ranks = [(r, p.pid) for r, p in sorted(self.ranks.items())]
            dumped = request_proxy_dumps(
                ranks, self.proxy_signal, out / "launcher.log", out / "nccl"
            )
            if dumped:
                reporter.note(f"wrote the NCCL proxy-state dump of {dumped} rank(s)")
        labels = dict((pid, label) for label, pid in targets)
        for number in (1, 2):
            reporter.note(f"stack snapshot {number}/2 of {len(targets)} process(es)")
            # --subprocesses: a rank's DataLoader workers are where a data stall is. Without
            # known ranks every job process is a target, and a launcher's dump would repeat
            # its children's.
            # --locals: the peer of a rank blocked in send/recv is an argument of that frame.
            samples = sample_stacks(
                [pid for _, pid in targets],
                self.pyspy,
                subprocesses=bool(self.ranks),
                local_vars=True,
            )
            failed = 0
            children = 0
            for pid, sample in samples.items():
                write_sample(sample, out / "stacks", labels[pid], number)
                failed += sample.text is None
                children += len(set(dumped_pids(sample.text or "")) - {pid})
            if children and number == 1:
                reporter.note(f"dumped {children} child process(es) of the ranks too")
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


def _io_bytes(pid: int) -> int | None:
    """Return the bytes ``pid`` has read and written so far (``rchar + wchar``), or None."""
    try:
        text = Path(f"/proc/{pid}/io").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    total = 0
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name in ("rchar", "wchar") and value.strip().isdigit():
            total += int(value)
    return total


def _split_teardown(log_path: Path, offset: int, to: Path | None = None) -> bool:
    """Move what was written after ``offset`` (live began to end the job) to ``to``.

    ``to`` defaults to ``teardown.log`` beside ``log_path``.
    """
    try:
        with log_path.open("r+b") as log:
            log.seek(offset)
            tail = log.read()
            if not tail:
                return False
            (to or log_path.parent / TEARDOWN_LOG).write_bytes(tail)
            log.truncate(offset)
    except OSError:
        return False
    return True


def _file_sizes(directory: Path) -> dict[Path, int]:
    """Return the size of each file directly in ``directory`` (none when it is missing)."""
    try:
        return {p: p.stat().st_size for p in sorted(directory.iterdir()) if p.is_file()}
    except OSError:
        return {}


def write_beacon(path: Path, text: str) -> None:
    """Tell the other nodes' agents that this node stalled (node-agent mode)."""
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
        partial.write_text(text + "\n", encoding="utf-8")
        partial.replace(path)


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
    extra: dict[str, object] | None = None,
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
    the end; its supervisor then marks it ``orphaned`` after ending the job. ``extra``
    adds keys (``live``: the mode, the stall rule's numbers, the last progress signal);
    readers of ``logsleuth.bundle/1`` ignore keys they do not know.
    """
    status, signame = _exit_of(returncode)
    data: dict[str, object] = {
        **(extra or {}),
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
        out,
        nccl_subsys=options.nccl_subsys,
        distributed_debug=options.distributed_debug,
        torch_version=options.torch_version,
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
    mode = "capture-only" if options.keep_running else "end-on-stall"
    reporter.note(f"bundle: {out}; stall timeout {options.stall_timeout:g} s; {mode}")
    output = _Output(log_path, echo, lambda: reporter.waiting(0.0, options.stall_timeout, "output"))
    watcher = _Watcher(options, proc, run_id)
    watcher.proxy_signal = proxy_dump_signal(env)
    stalled_at: str | None = None
    outcome = "finished"
    survivors: tuple[int, ...] = ()
    returncode: int | None = None
    with _signals_interrupt():
        try:
            outcome = watcher.watch(output, reporter)
            if outcome == "stalled":
                stalled_at = _now_iso()
                if watcher.beacon_seen is not None:
                    reporter.note(f"stall seen by {watcher.beacon_seen}; capturing this node")
                else:
                    reporter.note(
                        f"stall: no progress signal for {options.stall_timeout:g} s "
                        f"(last: {watcher.last_signal}); capturing every rank"
                    )
                    if options.stall_beacon is not None:
                        write_beacon(options.stall_beacon, f"{watcher.host} at {stalled_at}")
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
            with contextlib.suppress(OSError, ValueError):
                output.pump()  # what the job printed before live ends it is the evidence
            end_offset = output.size
            nccl_offsets = _file_sizes(out / "nccl")
            teardown_output = False
            with _Teardown(reporter) as teardown:
                ended_by: str | None = "job"
                if options.keep_running and proc.poll() is None:
                    _quietly(reporter.note, f"leaving the job running (process group {proc.pid})")
                    _LEFT_RUNNING.append(proc)
                    ended_by = None
                    returncode = None
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
                    teardown_output = outcome != "finished"
                with contextlib.suppress(OSError, ValueError):
                    output.close()
                if teardown_output and _split_teardown(log_path, end_offset):
                    _quietly(
                        reporter.note, f"the job's output after live ended it is in {TEARDOWN_LOG}"
                    )
                if teardown_output:
                    for path, offset in nccl_offsets.items():
                        _split_teardown(path, offset, path.with_name(path.name + TEARDOWN_SUFFIX))
                for sub in ("fr", "nccl", "stacks"):
                    _prune(out / sub)
                live_info: dict[str, object] = {
                    "mode": mode,
                    "node_agent": options.stall_beacon is not None,
                    "stall_timeout_s": options.stall_timeout,
                    "last_progress_signal": watcher.last_signal,
                    "stall_seen_by": watcher.beacon_seen,
                    "teardown_log": TEARDOWN_LOG if (out / TEARDOWN_LOG).exists() else None,
                }
                write_manifest(
                    out,
                    options.command,
                    watcher.ranks,
                    started,
                    stalled_at,
                    recorded,
                    {"live": live_info},
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
