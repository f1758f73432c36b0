"""Find a job's processes and their ranks from ``/proc`` (Linux)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

_PROC = Path("/proc")
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class RankProcess:
    """One rank process of the job, as its environment describes it."""

    rank: int
    pid: int
    local_rank: int | None
    host: str


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = (_PROC / str(pid) / "stat").read_text(errors="replace")
    except OSError:
        return None
    # The command name in parentheses may hold spaces and ')': split after the last one.
    _, _, rest = text.rpartition(")")
    return rest.split()


def state_of(pid: int) -> str | None:
    """Return the process state letter (``R``, ``S``, ``Z`` ...), or None when it is gone."""
    fields = _stat_fields(pid)
    return fields[0] if fields else None


def cpu_seconds(pid: int) -> float | None:
    """Return the CPU time (user + system) ``pid`` has used so far, or None when it is gone."""
    fields = _stat_fields(pid)
    # utime and stime are fields 14 and 15 of stat; fields[0] here is field 3.
    if fields and len(fields) > 12 and fields[11].isdigit() and fields[12].isdigit():
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS
    return None


def is_alive(pid: int) -> bool:
    """Return True while ``pid`` exists and is not a zombie."""
    return state_of(pid) not in (None, "Z", "X")


def _all_pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir(_PROC) if name.isdigit()]
    except OSError:
        return []


def parent_map() -> dict[int, int]:
    """Return pid -> parent pid for every process on the machine."""
    parents: dict[int, int] = {}
    for pid in _all_pids():
        fields = _stat_fields(pid)
        if fields and len(fields) > 2 and fields[1].isdigit():
            parents[pid] = int(fields[1])
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
    try:
        raw = (_PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        name, sep, value = item.partition(b"=")
        if sep:
            env[name.decode(errors="replace")] = value.decode(errors="replace")
    return env


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
    for pid in _all_pids():
        if pid in skip or not is_alive(pid):
            continue
        env = read_environ(pid)
        if env is not None and env.get(marker) == value:
            found.append(pid)
    return sorted(found)


def group_members(pgid: int) -> list[int]:
    """Return the living processes of process group ``pgid``."""
    members = []
    for pid in _all_pids():
        fields = _stat_fields(pid)
        if fields and len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            members.append(pid)
    return sorted(members)
