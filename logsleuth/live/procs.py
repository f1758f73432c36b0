"""Find a job's processes and their ranks, and end them (psutil)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import psutil

_GONE = (psutil.NoSuchProcess, psutil.ZombieProcess)
_UNREADABLE = (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied)
_DEAD = frozenset({psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD})


@dataclass(frozen=True, slots=True)
class RankProcess:
    """One rank process of the job, as its environment describes it."""

    rank: int
    pid: int
    local_rank: int | None
    host: str


def _process(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except (*_UNREADABLE, ValueError):
        return None


def is_alive(pid: int) -> bool:
    """Return True while ``pid`` exists and is not a zombie."""
    proc = _process(pid)
    if proc is None:
        return False
    try:
        return proc.status() not in _DEAD
    except _UNREADABLE:
        return False


def cpu_seconds(pid: int) -> float | None:
    """Return the CPU time (user + system) ``pid`` has used so far, or None when it is gone."""
    proc = _process(pid)
    if proc is None:
        return None
    try:
        times = proc.cpu_times()
    except _UNREADABLE:
        return None
    return float(times.user + times.system)


def parent_map() -> dict[int, int]:
    """Return pid -> parent pid for every process on the machine."""
    parents: dict[int, int] = {}
    for proc in psutil.process_iter(["ppid"]):
        ppid = proc.info.get("ppid")
        if isinstance(ppid, int):
            parents[proc.pid] = ppid
    return parents


def descendants(root: int, parents: dict[int, int] | None = None) -> list[int]:
    """Return the living descendants of ``root``, parents before children."""
    parents = parent_map() if parents is None else parents
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    found: list[int] = []
    queue = sorted(children.get(root, []))
    while queue:
        pid = queue.pop(0)
        found.append(pid)
        queue.extend(sorted(children.get(pid, [])))
    return [pid for pid in found if is_alive(pid)]


def read_environ(pid: int) -> dict[str, str] | None:
    """Return the environment ``pid`` was started with, or None when it cannot be read."""
    proc = _process(pid)
    if proc is None:
        return None
    try:
        return dict(proc.environ())
    except (*_UNREADABLE, OSError):
        return None


def _identity(env: dict[str, str] | None) -> tuple[str, str] | None:
    if env is None or not env.get("RANK", "").isdigit():
        return None
    return env["RANK"], env.get("LOCAL_RANK", "")


def find_ranks(pids: Iterable[int], host: str) -> dict[int, RankProcess]:
    """Return the rank processes among ``pids`` (the job's processes), by global rank.

    A rank process is one whose environment has ``RANK`` (torchrun, ``torch.distributed.run``,
    srun/mpirun wrappers) that its parent's does not have with the same ``LOCAL_RANK``:
    data-loader workers and other children inherit their rank's environment and are not
    ranks. When two candidates claim one rank (a launcher that itself had ``RANK`` set),
    the deeper one, the process that runs the training code, wins.
    """
    parents = parent_map()
    members = [pid for pid in pids if is_alive(pid)]
    environs = {pid: read_environ(pid) for pid in members}

    def depth(pid: int) -> int:
        steps = 0
        while pid in parents and parents[pid] in environs and steps < 64:
            pid, steps = parents[pid], steps + 1
        return steps

    ranks: dict[int, RankProcess] = {}
    chosen_depth: dict[int, int] = {}
    for pid in sorted(members):
        identity = _identity(environs[pid])
        if identity is None:
            continue
        parent = parents.get(pid)
        if parent in environs and _identity(environs[parent]) == identity:
            continue
        rank, level = int(identity[0]), depth(pid)
        if rank in ranks and chosen_depth[rank] >= level:
            continue
        local = identity[1]
        ranks[rank] = RankProcess(rank, pid, int(local) if local.isdigit() else None, host)
        chosen_depth[rank] = level
    return ranks


def marked_processes(marker: str, value: str, exclude: Iterable[int] = ()) -> list[int]:
    """Return living processes whose environment has ``marker=value`` (the job's, wherever)."""
    skip = set(exclude)
    found = []
    for proc in psutil.process_iter():
        if proc.pid in skip or proc.pid == os.getpid():
            continue
        try:
            if proc.status() in _DEAD or proc.environ().get(marker) != value:
                continue
        except (*_UNREADABLE, OSError):
            continue
        found.append(proc.pid)
    return sorted(found)


def group_members(pgid: int) -> list[int]:
    """Return the living processes of process group ``pgid``."""
    members = []
    for proc in psutil.process_iter():
        with contextlib.suppress(OSError, *_UNREADABLE):
            if os.getpgid(proc.pid) == pgid and proc.status() not in _DEAD:
                members.append(proc.pid)
    return sorted(members)


def job_processes(pgid: int, marker: str, value: str) -> list[psutil.Process]:
    """Return the living processes of a job: its process group and every marked process."""
    pids = set(group_members(pgid)) | set(marked_processes(marker, value))
    return [p for p in map(_process, sorted(pids)) if p is not None]


def end_processes(
    find: Callable[[], list[psutil.Process]],
    grace: float,
    hurry: Callable[[], bool] = lambda: False,
    on_kill: Callable[[int], None] | None = None,
    child: subprocess.Popen[bytes] | None = None,
) -> list[int]:
    """SIGTERM the processes ``find`` returns, then SIGKILL what is left after ``grace``.

    ``find`` is asked again before each signal, so processes started in between (a
    launcher restarting a worker) are ended too. ``hurry`` cuts the grace period short
    (a second Ctrl-C). ``child``, a process this one started, is signalled and reaped
    through its Popen so that its exit status is kept (psutil would reap it unseen).
    Returns the pids still alive at the end.
    """

    def living() -> list[psutil.Process]:
        skip = child.pid if child is not None else None
        return [p for p in _living(find()) if p.pid != skip]

    def child_alive() -> bool:
        return child is not None and child.poll() is None

    def send(procs: list[psutil.Process], signum: int) -> None:
        _send(procs, signum)
        if child_alive():
            assert child is not None
            with contextlib.suppress(OSError):
                child.send_signal(signum)

    procs = living()
    if not procs and not child_alive():
        return []
    send(procs, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and not hurry():
        procs = living()
        if not procs and not child_alive():
            return []
        if procs:
            psutil.wait_procs(procs, timeout=0.2)
        else:
            time.sleep(0.2)
    for _ in range(3):
        procs = living()
        if not procs and not child_alive():
            return []
        if on_kill is not None:
            on_kill(len(procs) + child_alive())
        send(procs, signal.SIGKILL)
        psutil.wait_procs(procs, timeout=2.0)
        if child is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=2.0)
    left = [p.pid for p in living()] + ([child.pid] if child_alive() and child else [])
    return sorted(left)


def _living(procs: list[psutil.Process]) -> list[psutil.Process]:
    seen: dict[int, psutil.Process] = {}
    for proc in procs:
        try:
            if proc.is_running() and proc.status() not in _DEAD:
                seen.setdefault(proc.pid, proc)
        except _UNREADABLE:
            continue
    return list(seen.values())


def _send(procs: list[psutil.Process], signum: int) -> None:
    for proc in procs:
        with contextlib.suppress(*_UNREADABLE):
            proc.send_signal(signum)
