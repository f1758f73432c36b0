"""Values every event carries: where the line came from and who wrote it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True, slots=True)
class SourceRef:
    """A physical line in an input: the path as shown to the user and its 1-based number."""

    source: str
    line: int


_RANK_IN_NAME = re.compile(
    r"(?:^|[^a-z])(?<!local[_-])(?:rank|std_log_process)[_.-]?(\d+)(?!\d)", re.IGNORECASE
)
_STREAM_NAME = re.compile(r"(?:std)?(?:out|err)(?:put)?(?:\.(?:log|txt))?", re.IGNORECASE)
"""A file named for its stream only (Open MPI's ``--output-filename DIR`` writes
``DIR/1/rank.3/stderr``): the directory above it names the process."""
_PID_IN_NAME = re.compile(r"(?:^|[^a-z])pid[_-]?(\d+)", re.IGNORECASE)


def _last_parts(source: str) -> list[str]:
    """The file's name and the directory above it (Windows separators too), last two last."""
    return source.replace("\\", "/").rsplit("/", 2)[-2:]


def rank_in_file_name(source: str) -> int | None:
    """The global rank a per-process file's name gives, or None.

    ``nccl_rank3.log``, ``rank_3.txt``, ``rank3.2.txt`` (the second snapshot of rank 3 in a
    ``logsleuth live`` bundle), Azure ML's ``std_log_process_03.txt``, Open MPI's
    ``rank.3/stderr`` (a file named for its stream takes its directory's name). A name that
    also names a pid (``rank3_pid4242.txt``), or a local rank (``local_rank3``), gives none.
    """
    parts = _last_parts(source)
    base = parts[-2] if len(parts) > 1 and _STREAM_NAME.fullmatch(parts[-1]) else parts[-1]
    match = _RANK_IN_NAME.search(base)
    return int(match.group(1)) if match and not _PID_IN_NAME.search(base) else None


_KERNEL_LOG_NAME = re.compile(
    r"(?:^|(?<=[-_.]))(?:dmesg|kern(?:el)?|syslog|messages|journal(?:ctl)?"
    r"|nvidia[-_]smi|ibstat(?:us)?|ibv[-_]devinfo|dcgmi?)(?=[-_.]|$)",
    re.IGNORECASE,
)
"""The word that names a host's kernel or system log, or a host tool's output (nvidia-smi,
ibstat, ibv_devinfo, dcgmi), in a file name (``node03-dmesg.txt``, ``ibstat-gpu-12.txt``)."""
_LOG_EXTENSIONS = re.compile(r"(?:\.(?:log|txt|out|json))+$", re.IGNORECASE)
_HOST_NAME = re.compile(r"[A-Za-z][A-Za-z0-9-]*\d[A-Za-z0-9.-]*")
"""A cluster host's name: a letter first and a number in it (``node03``, ``gpu-a100-07``)."""


def host_in_file_name(source: str) -> str | None:
    """The host a kernel or system log's file name gives, or None.

    ``dmesg -T > node03-dmesg.txt``, ``syslog_gpu-a100-07.log`` or ``node03/dmesg.txt``
    (the directory names the host when the file's name is the log's alone). A date or a
    word without a number is not a host.
    """
    parts = _last_parts(source)
    base = _LOG_EXTENSIONS.sub("", parts[-1])
    if not _KERNEL_LOG_NAME.search(base):
        return None
    rest = _KERNEL_LOG_NAME.sub("", base).strip("-_.")
    if not rest and len(parts) > 1:
        rest = parts[-2]
    return rest if _HOST_NAME.fullmatch(rest) else None


@dataclass(frozen=True, slots=True, kw_only=True)
class Origin:
    """Who wrote a line, as far as the line itself (and its prefixes) says.

    Attributes:
        host: Short host name from the NCCL prefix, a launcher label or a summary block.
        pid: Process id (namespace-local in containers).
        tid: Thread id (NCCL prefix); equals ``pid`` for the main thread.
        dev: CUDA device ordinal from the NCCL ``[dev]`` field. Never a rank.
        rank: Global rank named by a launcher prefix (``[rank3]:``, ``[1,3]<stdout>:``,
            ``3: ``) or by the line's own framework prefix (``[Rank 3]``).
        local_rank: Local rank named by torchrun's ``--tee`` prefix (``[default3]:``).
        time: Wall-clock seconds (POSIX epoch, naive local time of the writer) when the
            line carries a timestamp; lines without a year assume 1970 so that they still
            order within a file.
    """

    host: str | None = None
    pid: int | None = None
    tid: int | None = None
    dev: int | None = None
    rank: int | None = None
    local_rank: int | None = None
    time: float | None = None


NO_ORIGIN = Origin()


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """Base of every typed event a parser produces.

    ``ref`` points at the first physical line of the event; ``text`` is that line as it
    was read (decoded, prefixes kept) so a finding can quote it.
    """

    RECOGNIZED: ClassVar[bool] = True
    ref: SourceRef
    text: str
    origin: Origin = NO_ORIGIN


@dataclass(frozen=True, slots=True, kw_only=True)
class InputSummary:
    """Accounting for one input: ``recognized + unrecognized + blank == lines``."""

    source: str
    kind: str
    lines: int
    recognized: int
    unrecognized: int
    blank: int
    error: str | None = None
    """A one-line reason when the input could not be read at all."""
    truncated: bool = False
    """The input ends in the middle of a line: it was cut while being written or copied."""
