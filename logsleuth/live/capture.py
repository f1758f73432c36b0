"""Capture what a human would collect from a stuck job: stacks, flight-recorder dumps, ncclras.

Every step runs with a timeout, so one stuck process cannot stop the capture; a failed step
leaves an error file in the bundle instead of the output.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

PYSPY_TIMEOUT_S = 10.0
NCCLRAS_TIMEOUT_S = 15.0
_PROCESS_LINE = re.compile(r"^Process (\d+): ", re.MULTILINE)
_FRAME_LINE = re.compile(r":\d+\)\s*$")
_THREAD_LINE = re.compile(
    r"^Thread (?P<tid>0x[0-9A-Fa-f]+|\d+) \((?:idle|active)[^)]*\)(?:: \"(?P<name>[^\"]*)\")?"
)


@dataclass(frozen=True, slots=True)
class StackSample:
    """One ``py-spy dump`` of one process: its text, or why there is none."""

    pid: int
    text: str | None
    error: str | None

    def main_thread(self) -> tuple[str, ...] | None:
        """Return the main thread's frames without line numbers: what 'has it moved' compares.

        The main thread is the one py-spy names ``MainThread``, else the one whose thread id
        is the process id, else the first. Line numbers are left out so that a rank polling
        in one function (a DataLoader waiting on its queue) does not count as progress.
        """
        if self.text is None:
            return None
        threads: list[tuple[str, str, list[str]]] = []
        for line in self.text.splitlines():
            header = _THREAD_LINE.match(line)
            if header:
                threads.append((header.group("tid"), header.group("name") or "", []))
            elif threads and line.startswith(" ") and line.strip():
                threads[-1][2].append(_FRAME_LINE.sub(")", line.strip()))
        if not threads:
            return None
        by_name = [t for t in threads if t[1] == "MainThread"]
        by_tid = [t for t in threads if t[0] == str(self.pid)]
        frames = tuple((by_name or by_tid or threads)[0][2])
        # No Python frame at all: the interpreter is starting or inside C code; unknown.
        return frames or None

    def is_starting(self) -> bool:
        """Return True while the process shows no stack yet or is importing modules."""
        frames = self.main_thread()
        return frames is None or any("importlib" in frame for frame in frames)


def find_pyspy() -> str | None:
    """Return the py-spy executable: on PATH, or beside this Python (a venv's bin/)."""
    found = shutil.which("py-spy")
    if found:
        return found
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else None


def sample_stack(
    pid: int,
    pyspy: str | None,
    timeout_s: float = PYSPY_TIMEOUT_S,
    *,
    subprocesses: bool = False,
    local_vars: bool = False,
) -> StackSample:
    """Run ``py-spy dump --pid PID`` (all threads) with a timeout.

    With ``subprocesses`` the dump holds the process's children too (``--subprocesses``):
    a rank's DataLoader workers, each under its own ``Process PID:`` header. With
    ``local_vars`` every frame lists its local variables (``--locals``): the peer, tag and
    group of a rank blocked in ``send``/``recv`` are arguments of that frame.
    """
    if pyspy is None:
        return StackSample(pid, None, "py-spy not found (pip install py-spy)")
    command = [pyspy, "dump", "--pid", str(pid)]
    if subprocesses:
        command.append("--subprocesses")
    if local_vars:
        command.append("--locals")
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return StackSample(pid, None, f"py-spy dump --pid {pid} timed out after {timeout_s:g} s")
    except OSError as exc:
        return StackSample(pid, None, f"py-spy dump --pid {pid} could not run: {exc}")
    out = done.stdout.decode(errors="replace")
    if done.returncode != 0 or not out.strip():
        err = done.stderr.decode(errors="replace").strip() or out.strip()
        return StackSample(pid, None, err or f"py-spy exited with status {done.returncode}")
    return StackSample(pid, out, None)


def sample_stacks(
    pids: Sequence[int],
    pyspy: str | None,
    timeout_s: float = PYSPY_TIMEOUT_S,
    *,
    subprocesses: bool = False,
    local_vars: bool = False,
) -> dict[int, StackSample]:
    """Sample every pid in parallel; return pid -> sample (see :func:`sample_stack`)."""
    if not pids:
        return {}
    with ThreadPoolExecutor(max_workers=min(16, len(pids))) as pool:
        samples = pool.map(
            lambda p: sample_stack(
                p, pyspy, timeout_s, subprocesses=subprocesses, local_vars=local_vars
            ),
            pids,
        )
        return {s.pid: s for s in samples}


def dumped_pids(text: str) -> tuple[int, ...]:
    """Return the pids of the ``Process PID:`` headers of a py-spy dump, in order."""
    return tuple(int(m.group(1)) for m in _PROCESS_LINE.finditer(text))


def write_sample(sample: StackSample, stacks_dir: Path, label: str, number: int) -> Path:
    """Write a sample as ``stacks/<label>.<n>.txt``, or its error as ``<label>.<n>.error.txt``."""
    stacks_dir.mkdir(parents=True, exist_ok=True)
    if sample.text is not None:
        target = stacks_dir / f"{label}.{number}.txt"
        target.write_text(sample.text, encoding="utf-8")
    else:
        target = stacks_dir / f"{label}.{number}.error.txt"
        target.write_text(f"{sample.error}\n", encoding="utf-8")
    return target


def request_flight_records(fr_dir: Path) -> int:
    """Ask every rank for its flight-recorder dump through its debug pipe; return how many.

    torch creates one FIFO per rank (``TORCH_NCCL_DEBUG_INFO_PIPE_FILE<rank>.pipe``); writing
    to it makes the rank dump to ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE<rank>``. A pipe nobody
    reads any more is skipped (non-blocking open).
    """
    asked = 0
    if not fr_dir.is_dir():
        return 0
    for path in sorted(fr_dir.iterdir()):
        with contextlib.suppress(OSError):
            if not stat.S_ISFIFO(path.stat().st_mode):
                continue
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            try:
                os.write(fd, b"1\n")
                asked += 1
            finally:
                os.close(fd)
    return asked


def remove_pipes(directory: Path) -> None:
    """Remove FIFOs left in the bundle: it holds plain files only."""
    if not directory.is_dir():
        return
    for path in directory.iterdir():
        with contextlib.suppress(OSError):
            if stat.S_ISFIFO(path.lstat().st_mode):
                path.unlink()


def run_ncclras(target: Path, timeout_s: float = NCCLRAS_TIMEOUT_S) -> bool:
    """Write ``ncclras`` output (NCCL's RAS status of every rank) when the binary is there."""
    binary = shutil.which("ncclras")
    if binary is None:
        return False
    try:
        done = subprocess.run([binary], capture_output=True, timeout=timeout_s, check=False)
        text = done.stdout.decode(errors="replace") + done.stderr.decode(errors="replace")
    except (subprocess.TimeoutExpired, OSError) as exc:
        text = f"ncclras failed: {exc}\n"
    target.write_text(text, encoding="utf-8")
    return True


PROXY_DUMP_WAIT_S = 2.0
"""How long to wait for one rank's proxy-state dump to appear in the job's output."""
_NCCL_FILE = re.compile(r"\.(\d+)\.log$")
_INIT_DONE = b"Init COMPLETE"


def nccl_ready_pids(nccl_dir: Path) -> set[int]:
    """Return the pids whose NCCL debug file (``<host>.<pid>.log``) shows an init completed.

    Only those processes run NCCL's proxy thread, which installs the dump handler: any
    other process would die of the signal (its default action ends the process).
    """
    ready: set[int] = set()
    if not nccl_dir.is_dir():
        return ready
    for path in sorted(nccl_dir.iterdir()):
        named = _NCCL_FILE.search(path.name)
        if named is None:
            continue
        with contextlib.suppress(OSError):
            if _INIT_DONE in path.read_bytes():
                ready.add(int(named.group(1)))
    return ready


def proxy_dump_lines(text: str) -> list[str] | None:
    """Return the last complete proxy-state dump in ``text``: ``ACTIVE OPS`` through ``[X]``."""
    lines = text.splitlines()
    starts = [n for n, line in enumerate(lines) if line.strip() == "ACTIVE OPS"]
    for start in reversed(starts):
        for end in range(start + 1, len(lines)):
            if lines[end].strip() == "[X]":
                return [line.rstrip() for line in lines[start : end + 1]]
            if lines[end].strip() == "ACTIVE OPS":
                break
    return None


def request_proxy_dumps(
    targets: Sequence[tuple[int, int]],
    signum: int,
    log_path: Path,
    nccl_dir: Path,
    wait_s: float = PROXY_DUMP_WAIT_S,
) -> int:
    """Ask each NCCL rank for its proxy-state dump; write it as ``nccl/proxy.rank<R>.txt``.

    NCCL prints the dump on the process's stdout, which the job shares with every rank
    (``launcher.log``), so ranks are asked one at a time and the dump is cut from what the
    output gained after the signal. The file's lines carry the ``[rank<R>]:`` prefix
    torchrun's ``--log-line-prefix-template`` gives, which tells the reader whose dump it
    is. Return how many dumps were written.
    """
    ready = nccl_ready_pids(nccl_dir)
    written = 0
    for rank, pid in targets:
        if pid not in ready:
            continue
        try:
            offset = log_path.stat().st_size
            os.kill(pid, signum)
        except OSError:
            continue
        lines: list[str] | None = None
        deadline = time.monotonic() + wait_s
        while lines is None and time.monotonic() < deadline:
            time.sleep(0.05)
            with contextlib.suppress(OSError), log_path.open("rb") as handle:
                handle.seek(offset)
                lines = proxy_dump_lines(handle.read().decode(errors="replace"))
        if lines is None:
            continue
        target = nccl_dir / f"proxy.rank{rank}.txt"
        target.write_text("".join(f"[rank{rank}]:{line}\n" for line in lines), encoding="utf-8")
        written += 1
    return written
