"""Prefixes that are only trusted when a whole file carries them: numbering schemes.

A log viewer's or ``grep -n``'s line numbers, srun's ``--label``, pdsh's host labels, stern's
pod and container, a collector's time (ISO, POSIX or syslog's): on one line each is
ambiguous (``3: `` may begin a message), so :func:`detect_numbering` decides per file from a
sample, and :func:`strip_numbering` takes the chosen scheme's prefix off each physical line,
keeping what it says (a rank, a host, a time) as an :class:`~logsleuth.model.base.Origin`.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Sequence
from datetime import datetime, timezone
from itertools import pairwise
from typing import Any

from logsleuth.model.base import NO_ORIGIN, Origin, rank_in_file_name

_SYSLOG_TIME = r"([A-Z][a-z]{2}) +(\d\d?) (\d\d:\d\d:\d\d)(?:[.,]\d+)?"
"""Syslog's time: month, day and clock (no year)."""
_SYSLOG_WRITER = r" ([A-Za-z][\w.\-]{0,62}) (?:[\w.\-/]{1,64}?\[(\d{1,9})\]|kernel):"
"""Syslog's writer: the host, then program[pid], or the kernel (which has no pid)."""

_WIDEST_SEPARATOR = 8
"""The most blanks a viewer puts between a line's number and its text."""
_VIEWER_SEPARATOR = re.compile(r"\s*\d{1,9}( +)(?=\S)")
LOGGER_LEVEL = (
    r"(?:\| [A-Z]+ *\| (?:[\w.<>\-]+:[\w.<>\-]+:\d+ - )?"
    r"|(?:- [\w.\-]+ - )?(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL) (?:- )?)"
)
"""What a Python logger writes after its time: loguru's ``| ERROR    | pkg.mod:func:240 -
`` (or a format of its level column alone, ``| INFO | ``), logging's ``INFO `` or ``-
trainer - INFO - ``."""
LOKI_LABELS = r'\{[\w.]+="[^"]*"(?:, ?[\w.]+="[^"]*")*\}(?:\s|$)'
"""The stream labels Grafana/Loki writes after a line's time (``{container="x", pod="y"} ``)."""
NUMBERING_SCHEMES: dict[str, re.Pattern[str]] = {
    # An editor's or a code viewer's gutter: the number, a bar (``  12 | text``, bat's and
    # box-drawing ``12 │ text``), one blank; tried before the bare viewer numbers, which
    # it also begins like.
    "gutter": re.compile(r"\s*(\d{1,9}) ?[|\u2502\u2503] ?"),
    # A viewer puts blanks between the number and the text (``less -N`` one, vim's and
    # many web viewers' more); ``cat -n`` a tab. The text keeps its own indentation (a stack
    # frame's): a file's separator is its narrowest (see ``_viewer_scheme``).
    "viewer": re.compile(r"\s*(\d{1,9})(?:\t| |\s*$)"),
    **{
        f"viewer{width}": re.compile(f"\\s*(\\d{{1,9}})(?:\\t| {{{width}}}|\\s*$)")
        for width in range(2, _WIDEST_SEPARATOR + 1)
    },
    "bracket": re.compile(r"\[(\d{1,9})\]\s(?=\S)"),
    "srun": re.compile(r"\s*(\d{1,6}):\s"),
    "pdsh": re.compile(r"([A-Za-z][\w.\-]{0,62}): "),
    # stern (``stern -l job-name=train``): "<pod> <container> <line>", the pod a DNS name.
    "stern": re.compile(
        r"([a-z0-9][a-z0-9.\-]{0,62}-[a-z0-9.\-]*[a-z0-9]) ([a-z0-9][a-z0-9\-]{0,62}) "
    ),
    # A collector's time without brackets: ISO date and time (``ts``, log shippers), or a
    # Python logger's with the logger's name and level after it ...
    "stamp": re.compile(
        r"(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d)(?:[.,](\d+))?[ \t](?:"
        + LOGGER_LEVEL
        + "|"
        + LOKI_LABELS
        + ")?"
    ),
    # ... or syslog's (journalctl, /var/log/messages), with the host and program[pid].
    "syslog": re.compile(f"{_SYSLOG_TIME}(?:{_SYSLOG_WRITER})? "),
    # A collector's POSIX time in seconds (``1732527600.123 ``) or milliseconds.
    "epoch": re.compile(r"(1\d{9}|1\d{12})(?:\.(\d{1,9}))? "),
    # grep's line numbers (``grep -n``: ``1234:``, ``1236-`` for a context line), after the
    # file's name when several files were searched (``grep -rn``: ``logs/rank3.log:1234:``).
    "grep": re.compile(r"(?:((?:[\w.\-]+/)*[\w.\-]*\.[A-Za-z]\w{0,5})[:-])?(\d{1,9})[:-]"),
}
"""Prefixes that are only trusted when a whole file carries them."""
_SLURM_OWN = re.compile(r"\s*(?:srun|slurmstepd|salloc|sbatch)(?:\[\d+\])?: ")
"""A line Slurm wrote itself, beside the labelled lines of its tasks."""
SYSLOG_LINE = re.compile(f"{_SYSLOG_TIME}{_SYSLOG_WRITER} ")
"""A whole syslog prefix (time, host, program[pid], or the kernel, which has no pid):
unmistakable on any line, as when a ticket pastes ``journalctl -k`` lines (``kernel: NVRM:
Xid ...``) among others."""
NCCL_WRITER = re.compile(r"[^\s:\[\]]+:\d+:\d+ (?:\[-?\d+\] |NCCL )")
"""The ``host:pid:tid`` an NCCL line begins with (see ``_LINE_START``)."""
_NUMBERED = re.compile(
    r"\s*\d|\[\d|[A-Za-z][\w.\-]{0,62}: |[A-Z][a-z]{2} +\d|[a-z0-9][a-z0-9.\-]*-[a-z0-9.\-]* [a-z0-9]"
    r"|(?:[\w.\-/]*\.[A-Za-z]\w{0,5}[:-])?\d{1,9}[:-]"  # grep's (an NCCL writer's host:pid is not)
)
"""What every line a numbering scheme matches begins with."""


def detect_numbering(sample: Sequence[str]) -> str | None:
    """Return the numbering scheme most of ``sample`` (cleaned lines) carries, or None.

    ``viewer`` and ``bracket`` must also count upwards; ``srun`` labels need not.
    """
    lines = [line for line in sample if line.strip()]
    if len(lines) < 2:
        return None
    # Every file is sampled: one pass of the schemes' common start first (most files have
    # none), the schemes one by one only when enough lines could carry one.
    if sum(1 for line in lines if _NUMBERED.match(line)) * 10 < len(lines) * 6:
        return None
    # Slurm's own lines in an srun --label log (``srun: error: HOST: task 9: Exited ...``)
    # carry no label: they are not counted for or against it.
    unlabelled = sum(1 for line in lines if _SLURM_OWN.match(line))
    for name, pattern in NUMBERING_SCHEMES.items():
        if name.startswith("viewer") and name != "viewer":
            continue  # chosen by the "viewer" scheme's separator
        found = [m for line in lines if (m := pattern.match(line))]
        numbers = [m.group(1) for m in found]
        among = len(lines) - unlabelled if name == "srun" else len(lines)
        if len(numbers) < 2 or len(numbers) * 10 < among * 6:
            continue
        if name == "grep":
            # Line numbers of one file rise (with gaps: grep prints the lines that match);
            # a host's pid after its name (``node1.cluster:4411:``) repeats.
            rising = sum(
                1
                for a, b in pairwise(found)
                if a.group(1) != b.group(1) or int(b.group(2)) > int(a.group(2))
            )
            if rising * 10 >= (len(found) - 1) * 9 and len({m.group(2) for m in found}) > 1:
                return name
            continue
        if name == "srun" and _all_rising([int(n) for n in numbers]):
            continue  # an srun label repeats (a task writes many lines); line numbers do not
        if name == "epoch":
            values = [float(n) for n in numbers]
            steady = sum(1 for a, b in pairwise(values) if b >= a)
            if steady * 10 >= (len(values) - 1) * 8:
                return name
            continue
        if name in ("srun", "stamp", "syslog"):
            return name
        if name == "pdsh":
            # pdsh labels name a few hosts, and the NCCL lines behind them name the same
            # host; "RuntimeError: " or "Epoch: " lines do neither.
            labels = {m.group(1) for m in found}
            echoed = any(m.string.startswith(f"{m.group(1)}:", m.end()) for m in found)
            # Without an NCCL line to echo it (a stack dump, a launcher log run under
            # pdsh), a label must look like a host name: it holds a digit.
            hostlike = not any(NCCL_WRITER.search(m.string) for m in found) and all(
                any(c.isdigit() for c in label) for label in labels
            )
            if (echoed or hostlike) and len(labels) * 3 <= len(found):
                return name
            continue
        if name == "stern":
            # A few pods, each with one or two containers, on every line; a sentence's first
            # words ("loss-scale is ...") are not one name over and over.
            pods = {m.group(1) for m in found}
            containers = {m.group(2) for m in found}
            few = len(containers) <= max(2, len(pods) * 2) and len(pods) * 2 <= len(found)
            if few and all(any(c.isdigit() for c in pod) for pod in pods):
                return name
            continue
        values = [int(n) for n in numbers]
        # Line numbers count up by one; columns of numbers in a table (nccl-tests rows) do not.
        rising = sum(1 for a, b in pairwise(values) if b == a + 1)
        if rising * 10 >= (len(values) - 1) * 8:
            return _viewer_scheme(lines) if name == "viewer" else name
    return None


def _all_rising(values: Sequence[int]) -> bool:
    """Say whether ``values`` (more than two) rise from each to the next."""
    return len(values) > 2 and all(b > a for a, b in pairwise(values))


def _viewer_scheme(lines: Sequence[str]) -> str:
    """The viewer scheme of numbered ``lines``: the narrowest run of blanks between a number
    and its text is the viewer's separator; wider runs hold the text's own indentation."""
    widths = [len(m.group(1)) for line in lines if (m := _VIEWER_SEPARATOR.match(line))]
    width = min(widths, default=1)
    return "viewer" if width <= 1 else f"viewer{min(width, _WIDEST_SEPARATOR)}"


def epoch_seconds(text: str, fraction: str | None = None) -> float | None:
    try:
        stamp = datetime.fromisoformat(text.replace("T", " "))
    except ValueError:
        return None
    seconds = stamp.replace(tzinfo=timezone.utc).timestamp()
    if fraction:
        seconds += float("0." + fraction)
    return seconds


def label_fields(numbering: str | None, found: re.Match[str]) -> dict[str, Any]:
    """What a numbering prefix says about the writer: an srun label its rank, pdsh its host,
    a collector's stamp the time (syslog's also the host and pid)."""
    if numbering == "srun":
        return {"rank": int(found.group(1))}
    if numbering == "epoch":
        whole = found.group(1)
        seconds = float(f"{whole}.{found.group(2) or 0}")
        return {"time": seconds / 1000 if len(whole) == 13 else seconds}
    if numbering == "grep":
        # ``grep -rn`` names the file a line came from: a per-rank file's name its rank.
        named = rank_in_file_name(found.group(1)) if found.group(1) else None
        return {"rank": named} if named is not None else {}
    if numbering in ("pdsh", "stern"):
        return {"host": found.group(1)}
    if numbering == "stamp":
        return {"time": epoch_seconds(found.group(1), found.group(2))}
    if numbering == "syslog":
        month, day, clock, host, pid = found.groups()
        fields: dict[str, Any] = {"time": syslog_seconds(month, day, clock)}
        if host is not None:
            fields["host"] = host
        if pid is not None:
            fields["pid"] = int(pid)
        return fields
    return {}


MONTHS = {name: number for number, name in enumerate(calendar.month_abbr) if name}


def syslog_seconds(month: str, day: str, clock: str) -> float | None:
    """POSIX seconds of a syslog time, which has no year: 1970's, as the NCCL reader reads
    the same form in front of an NCCL prefix (only differences between times are used)."""
    number = MONTHS.get(month)
    if number is None or not 1 <= int(day) <= 31:
        return None
    hour, minute, second = (int(part) for part in clock.split(":"))
    return float(calendar.timegm((1970, number, int(day), hour, minute, second, 0, 0, 0)))


def strip_numbering(line: str, numbering: str) -> tuple[str, tuple[Origin, str] | None]:
    """Strip the numbering prefix of scheme ``numbering`` from the start of ``line``.

    Returns the rest, and what the prefix said with the prefix itself (None when the line
    does not begin with one). Each physical line carries its own, so it goes before wrapped
    pieces are joined.
    """
    found = NUMBERING_SCHEMES[numbering].match(line)
    if found is None:
        return line, None
    fields = label_fields(numbering, found)
    return line[found.end() :], (Origin(**fields) if fields else NO_ORIGIN, found.group())
