"""The reader of last resort: a known message anywhere in a line becomes a typed event.

Family readers parse whole lines of shapes they know (an NCCL prefix, a c10 record, a
traceback). What they decline is offered here: the message catalogs
(:mod:`logsleuth.parse.catalog`) are searched for the most specific known message in the
line, wherever it stands; what precedes it is the line's prefix, read for a rank, host or
pid where it has a known shape and otherwise kept as an opaque label.
"""

from __future__ import annotations

import re
from dataclasses import replace

from logsleuth.model.base import Origin, SourceRef
from logsleuth.model.messages import LogMessage
from logsleuth.model.torch import ERROR_LEVELS, PythonTraceback, exception_line
from logsleuth.parse.base import Line, Reader, Sink
from logsleuth.parse.catalog import PREFIX, CatalogMatch, load_catalog
from logsleuth.parse.clean import WRITER_RANK

# Rank named in a prefix or in the message itself: "[Rank 3]", "[rank3]:", "rank 3:",
# "[PG ID 0 PG GUID 0(default_pg) Rank 3]" (a process-group rank when the PG is not 0).
_RANK = re.compile(r"\[(?:R|r)ank ?(\d{1,6})\]|^\s*(?:R|r)ank ?(\d{1,6}):")
_PG_RANK = re.compile(r"\[PG ID (\d+) PG GUID [^\]]*? Rank (\d{1,6})\]")
# "host:pid:tid" or "host:pid" left of a message (an NCCL-like prefix whose level is gone).
_HOST_PID = re.compile(r"(?:^|\s|\[)([A-Za-z][\w.\-]{0,62}):(\d{1,9})(?::(\d{1,9}))?(?=\s|$|\])")
# A source file and line (``ib_mlx5_log.c:177``, UCX's and glog's prefixes) is no host:pid.
_SOURCE_FILE = re.compile(r"\.(?:c|cc|cpp|cxx|cu|h|hpp|py|go|rs|java)$")
# Nor is a logger's ``module:lineno`` at the end of its bracketed header that holds a time
# (NeMo's ``[NeMo E 2026-11-23 10:20:00 nemo_logging:405]``, ``[I 10:20:00 trainer:88]``).
_HEADER_TIME = re.compile(r"\[[^\[\]]*\d\d?:\d\d:\d\d[^\[\]]*$")
_PID = re.compile(r"\bpid[=: ]\s*(\d{1,9})\b", re.IGNORECASE)
# Syslog's writer left of a message (``gpu-h12 kernel:``, ``node7 sshd[812]:``), as kern.log
# and ``journalctl -o short-monotonic`` print it, with or without the time before it.
_SYSLOG_WRITER = re.compile(
    r"(?:^|\s)([A-Za-z][\w.\-]{0,62}) (?:kernel|[\w.\-/]{1,64}?\[(\d{1,9})\]):(?=\s|$)"
)
# A host label first in the line (``gpu-h12: [1893022.1] NVRM: ...``: pdsh, clush), ...
_HOST_LABEL = re.compile(r"^([A-Za-z][\w.\-]{0,62}):(?=\s|$)")
# ... when it holds a digit (``gpu-a01``) or is a lowercase name of dash-joined parts
# (``node-b``, ``worker-a``): a sentence's first word (``Error:``, ``Epoch:``) is neither.
_HOSTLIKE = re.compile(r"\d|^[a-z]+(?:-[a-z]+)+$")


def _origin(label: str, message: str, hint: Origin) -> tuple[Origin, int | None]:
    """Read what the prefix (and the message's own framework prefix) say about the writer."""
    rank = hint.rank
    if rank is None:
        found = _RANK.search(label) or WRITER_RANK.search(label) or _RANK.search(message[:80])
        if found is not None:
            rank = int(next(g for g in found.groups() if g))
        else:
            pg = _PG_RANK.search(label) or _PG_RANK.search(message[:120])
            if pg is not None and pg.group(1) == "0":
                rank = int(pg.group(2))  # PG 0 is the default group: its ranks are global
    host, pid = hint.host, hint.pid
    if host is None and pid is None and label:
        found = next(
            (
                m
                for m in _HOST_PID.finditer(label)
                if not _SOURCE_FILE.search(m.group(1))
                and not (m.group(3) is None and _HEADER_TIME.search(label, 0, m.start(1)))
            ),
            None,
        )
        writer = _SYSLOG_WRITER.search(label) if found is None else None
        named = _HOST_LABEL.match(label) if found is None and writer is None else None
        if found is not None:
            host, pid = found.group(1), int(found.group(2))
        elif writer is not None:
            host = writer.group(1)
            pid = int(writer.group(2)) if writer.group(2) else None
        elif named is not None and _HOSTLIKE.search(named.group(1)):
            host = named.group(1)
        elif (pid_found := _PID.search(label)) is not None:
            pid = int(pid_found.group(1))
    return replace(hint, rank=rank, host=host, pid=pid), rank


_PREFIX_LEVEL = re.compile(
    r"(?:^|[\s\[(:|])(?:(ERROR|ERR|FATAL|CRITICAL|CRIT|WARNING|WARN|INFO|DEBUG|TRACE)\b"
    r"|([EFWID])(?=\d{4} |\s+[\w./\-]+:\d+\]))"
)
"""A level in a log line's prefix: a level word (``[ERROR]``, ``ERROR 05-02``, ``UCX  ERROR``,
DeepSpeed's ``[WARNING]``) or glog's and TensorFlow's letter (``E0502 11:03:12``, ``: E
file.cc:741]``). A prefix with one is a logger's record header, not a collector's tag."""
_SEVERITY_WORDS = {
    **ERROR_LEVELS,
    **{v: v for v in ERROR_LEVELS.values()},
    "ERR": "ERROR",
    "CRIT": "CRITICAL",
}
"""The error levels among them, as the event's level."""


def prefix_level(prefix: str) -> str:
    """The level a line prefix gives its message: ``ERROR``, ``FATAL``, ``CRITICAL`` or
    ``INFO`` (any other level, or none: no failure by its prefix alone)."""
    for found in _PREFIX_LEVEL.finditer(prefix):
        level = _SEVERITY_WORDS.get(found.group(1) or found.group(2))
        if level is not None:
            return level
    return "INFO"


def message_event(
    match: CatalogMatch, text: str, ref: SourceRef, raw: str, hint: Origin
) -> LogMessage:
    """Build the event of a catalog match in ``text`` (the line without known prefixes)."""
    label = text[: match.start].strip()
    message = match.restored or text[match.start :].strip()
    # A format that begins with a value (``{cmd} exits with return code = {code}``) takes the
    # writer's prefix into that value: the writer is read from it as from a label.
    leading = match.fields[0] if not label and match.fields and match.entry.fmt[:1] in "{%" else ""
    origin, rank = _origin(label or (leading or "").strip(), message, hint)
    named = match.entry.names
    names = [
        named[i] if i < len(named) and named[i] else f"arg{i}" for i in range(len(match.fields))
    ]
    return LogMessage(
        ref=ref,
        text=raw,
        origin=origin,
        family=match.entry.family,
        level=(
            prefix_level(text[: match.end or load_catalog().prefix_end(text)])
            if match.entry.level == PREFIX
            else match.entry.level
        ),
        catalog=match.entry.id,
        message=message,
        label=label,
        fields=tuple((n, v.strip()) for n, v in zip(names, match.fields, strict=True) if v),
        rank=rank,
        subsystems=match.entry.subsystems,
    )


def typed_message(
    text: str,
    ref: SourceRef,
    raw: str,
    hint: Origin,
    *,
    family: str | None = None,
    level: str | None = None,
) -> LogMessage | None:
    """Type a message no grammar rule reads by the catalogs; None when none knows it.

    The family readers call it for the messages of lines they read the prefix of (an NCCL
    ``INFO`` line, a c10 record) but have no rule for; ``family`` and ``level`` are what the
    prefix already says.
    """
    match = load_catalog().match(text)
    if match is None:
        return None
    event = message_event(match, text, ref, raw, hint)
    if family is None and level is None:
        return event
    return replace(event, family=family or event.family, level=level or event.level)


class MessageReader(Reader):
    """Take any line holding a known message (catalog match), wherever it stands."""

    name = "messages"

    def __init__(self, source: str) -> None:
        super().__init__(source)
        self._after_frame = False
        self.first_line: int | None = None
        """The input's first non-blank line: the one an excerpt may have cut mid-message."""

    def feed(self, line: Line, sink: Sink, *, bare_prefix: bool = True) -> bool:
        """Offer ``line``; take it when a catalog message is found in it.

        ``bare_prefix=False``: a line prefix shape with no message after it is not enough
        (the line is looked at again with the prefixes it was read without), unless the
        prefix is a logger's record header with its level (``[WARNING] [stage3.py:12:step]``,
        glog's ``E0502``): the line is that logger's record.

        The source line a traceback prints under each ``File "...", line N`` frame is
        taken too when it follows one (an excerpt that begins inside a traceback). The
        input's first line may be the end of a message whose start the excerpt cut off.
        """
        text = line.text
        if len(text) > 8192:
            text = text[:8192]  # a message is found near the start; bound the search
        after_frame, self._after_frame = self._after_frame, False
        match = load_catalog().match(text)
        if match is None and line.no == self.first_line:
            # The cut may have taken the backtick that opened the line's inline code.
            unquoted = text.rstrip()
            if unquoted.endswith("`") and unquoted.count("`") % 2:
                unquoted = unquoted[:-1]
            match = load_catalog().match_cut(unquoted)
        if (
            match is not None
            and not bare_prefix
            and match.entry.level == PREFIX
            and _PREFIX_LEVEL.search(text, 0, match.end) is None
        ):
            # A collector's prefix alone says nothing; a logger's record header (its level)
            # says the line is that framework's record, whatever its message.
            match = None
        ref = SourceRef(self.source, line.no)
        if match is None:
            if after_frame and text[:1].isspace() and text.strip():
                sink.emit(_code_line(text, ref, line))
                return True
            return False
        event = message_event(match, text, ref, line.raw, line.hint)
        self._after_frame = match.entry.family == "python" and match.entry.fmt.startswith(
            _FRAME_FORMAT
        )
        sink.emit(_raised(event) if match.entry.family == "python" else event)
        return True


_EXCEPTION_LINE = re.compile(
    r"(?P<type>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Failure|Timeout))"
    r"(?::[ \t]*(?P<message>.*?))?\s*"
)
"""A Python exception line: ``FileNotFoundError: [Errno 2] ...``, ``pkg.mod.SomeError``."""


def _raised(event: LogMessage) -> LogMessage | PythonTraceback:
    """A Python exception line on its own is the end of a traceback whose frames the
    excerpt cut (a ticket quotes the last line): the exception its process raised."""
    found = _EXCEPTION_LINE.fullmatch(event.message) if not event.label else None
    if found is None or event.message.endswith(":"):
        return event  # a message that goes on below (``Graph execution error:``) is not all said
    rank = event.rank if event.rank is not None else event.origin.rank
    return exception_line(event, rank, found.group("type"), found.group("message") or None)


_FRAME_FORMAT = 're:^\\s*File "'
"""How the catalog's traceback-frame pattern (``File "x.py", line 3, in f``) begins."""


def _code_line(text: str, ref: SourceRef, line: Line) -> LogMessage:
    return LogMessage(
        ref=ref,
        text=line.raw,
        origin=line.hint,
        family="python",
        level="INFO",
        catalog="python:frame-source",
        message=text.strip(),
        rank=line.hint.rank,
    )
