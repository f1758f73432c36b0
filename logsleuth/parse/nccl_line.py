"""Parse one NCCL debug-log line by ``grammars/nccl.lark`` into a model event.

The language is the grammar's rule ``line``; :mod:`logsleuth.parse.nccl_transform` turns
its reductions into event fields. Two shortcuts stand before the LALR parser, both built
from the grammar's own terminals: a pre-filter (:func:`_maybe_nccl`) that turns away text
that cannot hold an NCCL prefix, and a fast path (:func:`_parse_frequent`) for the two
most frequent line kinds. ``tests/parse/test_nccl_shortcuts.py`` keeps them in agreement
with the full parser.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import replace
from functools import cache, lru_cache
from typing import Any, cast

from lark import Lark, Token
from lark.exceptions import LarkError, UnexpectedInput

from logsleuth.model.base import NO_ORIGIN, Event, Origin, SourceRef
from logsleuth.model.messages import LogMessage
from logsleuth.model.nccl import NcclUnrecognized, NcclWarn
from logsleuth.parse.grammar import load_parser, terminal_pattern, terminal_regex
from logsleuth.parse.hostnames import note_alias
from logsleuth.parse.messages import typed_message
from logsleuth.parse.nccl_transform import (
    Head,
    Message,
    Parsed,
    ToEvents,
    coll_message,
    comm_config_message,
    comm_state_message,
    connect_message,
    connect_row,
    head_of,
    trees_message,
)

_STAMP = re.compile(
    r"(?:(\d{4})-(\d\d)-(\d\d)[T ]|([A-Z][a-z]{2}) +(\d\d?) )?(\d\d):(\d\d):(\d\d)(?:[.,](\d+))?"
)
_MONTHS = {m: i for i, m in enumerate(calendar.month_abbr) if m}
_STARTS = ("line", "envelope", "proxy_line", "ras_line", "prefix_pieces")
"""Start symbols of ``nccl.lark``; ``prefix_pieces`` is never parsed (see the grammar)."""


@cache
def _parser() -> Lark:
    """Build the LALR parser of ``grammars/nccl.lark`` once per process."""
    return load_parser("nccl.lark", start=_STARTS, transformer=ToEvents)


_BODIES: dict[str, Message | None] = {}
"""INFO message text -> its parsed message: init lines that every process writes alike
("Using network IB", "Connected all rings", ...) go through the LALR parser once."""
_BODIES_MAX = 8192


_HEADS: dict[str, Head] = {}
_HEADS_MAX = 8192


def info_head(prefix: str) -> Head:
    """Take apart an ``INFO_HEAD`` prefix at the start of a line, once per distinct prefix.

    A process writes its lines under a few prefixes (one per thread and device), so most
    lines find theirs taken apart already.
    """
    head = _HEADS.get(prefix)
    if head is None:
        if len(_HEADS) >= _HEADS_MAX:
            _HEADS.clear()
        head = _HEADS[prefix] = head_of(Token("INFO_HEAD", prefix, 0, end_pos=len(prefix)))
    return head


def _parse(text: str) -> Parsed | None:
    """Parse ``text`` by rule ``line``, falling back to rule ``envelope``; None if not NCCL."""
    frequent = _parse_frequent(text)
    if frequent is not None:
        return frequent
    # After INFO_HEAD the parser state is fixed: the message depends on its own text only
    # (rule info_line), so a message seen before needs only its head taken apart.
    head = _terminals()[0].match(text)
    body = text[head.end() :] if head is not None else ""
    if head is not None and body in _BODIES:
        return None, info_head(head.group()), _BODIES[body]
    parser = _parser()
    try:
        parsed = cast(Parsed, parser.parse(text, start="line"))
    except UnexpectedInput as exc:
        # An error at the first character means there is no NCCL prefix at all.
        if exc.pos_in_stream in (0, None):
            return None
    except LarkError:
        return None
    else:
        if head is not None and parsed[0] is None:
            token = Token("INFO_HEAD", head.group(), start_pos=0, end_pos=head.end())
            if parsed[1] == head_of(token):
                if len(_BODIES) >= _BODIES_MAX:
                    _BODIES.clear()
                _BODIES[body] = parsed[2]
        return parsed
    try:
        return cast(Parsed, parser.parse(text, start="envelope"))
    except LarkError:
        return None


@lru_cache(maxsize=4096)
def _stamp_seconds(stamp: str) -> float | None:
    """Return POSIX seconds of an NCCL timestamp (``[2026-04-22 21:34:20]``), naive local time."""
    found = _STAMP.search(stamp)
    if found is None:
        return None
    year, month, day, mon_name, mon_day, hour, minute, second, fraction = found.groups()
    if year is not None:
        date = (int(year), int(month), int(day))
    elif mon_name is not None and mon_name in _MONTHS:
        date = (1970, _MONTHS[mon_name], int(mon_day))
    else:
        date = (1970, 1, 1)
    seconds = calendar.timegm((*date, int(hour), int(minute), int(second), 0, 0, 0))
    return seconds + (float(f"0.{fraction}") if fraction else 0.0)


@lru_cache(maxsize=1024)
def _origin(
    host: str | None,
    pid: int | None,
    tid: int | None,
    dev: int | None,
    rank: int | None,
    local_rank: int | None,
    time: float | None,
) -> Origin:
    """One (immutable) Origin per writer: the lines of a process share it, so it is built,
    pickled to the parent and unpickled once per file, not once per event."""
    return Origin(host=host, pid=pid, tid=tid, dev=dev, rank=rank, local_rank=local_rank, time=time)


def _build(text: str, parsed: Parsed, ref: SourceRef, raw: str, hint: Origin) -> Event:
    """Make the event of a parsed line; the NCCL prefix names the writer, the hint the rank."""
    stamp, head, message = parsed
    time = _stamp_seconds(stamp) if stamp else None
    if time is None:
        time = hint.time
    if head is None:
        # A bare version line: only the launcher prefix can say who wrote it.
        assert message is not None
        return message.cls(ref=ref, text=raw, origin=replace(hint, time=time), **message.fields)
    origin = _origin(head.host, head.pid, head.tid, head.dev, hint.rank, hint.local_rank, time)
    if hint.host is not None and head.host is not None and hint.host != head.host:
        note_alias(hint.host, head.host)
    body = text[head.message_at :].strip()
    if head.level in ("WARN", "ABORT") or (message is not None and message.cls is NcclWarn):
        fields: dict[str, Any] = {"family": "other"} if message is None else message.fields
        return NcclWarn(
            ref=ref,
            text=raw,
            origin=origin,
            file=head.file,
            line_no=head.line_no,
            func=head.func,
            message=body,
            **fields,
        )
    if message is None:
        unknown = NcclUnrecognized(ref=ref, text=raw, origin=origin, level=head.level, message=body)
        return _catalog_message(unknown) or unknown
    event: Event = message.cls(ref=ref, text=raw, origin=origin, **message.fields)
    return event


def _catalog_message(event: NcclUnrecognized) -> LogMessage | None:
    """Type an NCCL message the grammar has no rule for by the format catalog, or None."""
    return typed_message(
        event.message, event.ref, event.text, event.origin, family="nccl", level=event.level
    )


@cache
def _terminals() -> tuple[re.Pattern[str], ...]:
    """Return the grammar's own INFO_HEAD, COLL_MSG, CHANNEL_CONNECT, COMM_STATE, COMM_CONFIG
    and TREE_ITEM regexes, compiled."""
    parser = _parser()
    names = ("INFO_HEAD", "COLL_MSG", "CHANNEL_CONNECT", "COMM_STATE", "COMM_CONFIG", "TREE_ITEM")
    return tuple(terminal_regex(parser, n) for n in names)


def info_head_re() -> re.Pattern[str]:
    """The grammar's own INFO_HEAD regex (``host:pid:tid [dev] NCCL INFO ``), compiled."""
    return _terminals()[0]


@cache
def _trees_line() -> re.Pattern[str]:
    """Rule ``"Trees" TREE_ITEM*`` as one regex: the keyword, then items between blanks (WS)."""
    blank, item = _term("WS"), _term("TREE_ITEM")
    return re.compile(f"Trees(?:(?:{blank})?(?:{item}))*(?:{blank})?")


def warm_up() -> None:
    """Build the parser and the terminal regexes now (before forking workers that share them)."""
    _terminals()
    _prefilter()
    head_at()
    level_marker()
    partial_prefix()


# ---------------------------------------------------------------- shortcuts from the grammar
# The regexes below are composed of the grammar's own terminals (the heads and the prefix
# pieces NCCL_WRITER, NCCL_DEV, ...); tests/parse/test_nccl_shortcuts.py checks each one
# against the full parser.


def _term(name: str) -> str:
    return terminal_pattern(_parser(), name)


@cache
def _prefilter() -> re.Pattern[str]:
    """The pre-filter of :func:`_maybe_nccl`: a looser superset of the parser's language.

    Every prefix begins with ``NCCL_WRITER`` and a blank, then ``NCCL_DEV`` or the word
    NCCL (CALL); it stands at the line's start or after a blank (the end of a TIMESTAMP).
    A bare version line holds ``VERSION_KW VERSION_STR``. Only that much is looked for:
    a search anchored at a blank scans a long run without ':' once.
    """
    writer, dev = _term("NCCL_WRITER"), _term("NCCL_DEV")
    version = f"{_term('VERSION_KW')}(?:{_term('WS')})?{_term('VERSION_STR')}"
    return re.compile(f"(?:^|\\s){writer} (?:{dev} |NCCL )|{version}")


@cache
def head_at() -> re.Pattern[str]:
    """A complete NCCL prefix (terminal ``HEAD``) anywhere in a line (spec 4.3).

    Where a torn line's next line begins; exactly the grammar's head terminals.
    """
    return terminal_regex(_parser(), "HEAD")


@cache
def level_marker() -> re.Pattern[str]:
    """The level word of an NCCL line wherever it stands (spec 1.3; before 2.5 without NCCL).

    The anchor of a line whose prefix is partial, redacted or foreign: a heuristic for
    lines the full parser turned away, so not the grammar's language. Groups 1-3 hold the
    level word: ``NCCL <LEVEL>``; ``INFO``/``WARN`` after ``NCCL_DEV`` (pre-2.3); ``WARN``
    after a source file's ``:line`` (pre-2.3, a source suffix asked for, since foreign
    text is full of ``word:12``).
    """
    dev = _term("NCCL_DEV")
    return re.compile(
        r"\b(NCCL (?:INFO|WARN|TRACE|ABORT|CALL))\b"
        f"|{dev} (INFO|WARN)\\b"
        r"|\.(?:cc|cu|cpp|h|hpp|c):\d+ (WARN)\b"
    )


@cache
def partial_prefix() -> re.Pattern[str]:
    """What is left of an NCCL prefix right before its level word (see :func:`partial_fields`).

    The prefix pieces of the grammar, each optional; a pid or tid may be redacted
    (``XXXXXX``), so they are any word here (a looser superset of ``NCCL_WRITER``).
    """
    return re.compile(
        f"(?:(?P<host>{_term('NCCL_HOST')}):(?P<pid>\\w+):(?P<tid>\\w+) )?"
        f"(?:(?P<dev>{_term('NCCL_DEV')}) )?"
        f"(?:(?P<trace>{_term('NCCL_TRACE_AT')}) )?"
        f"(?:(?P<file>{_term('NCCL_FILE_AT')})(?: (?P<fn>{_term('NCCL_FUNC_AT')}))? )?$"
    )


def partial_fields(found: re.Match[str] | None) -> dict[str, str | None]:
    """Return the fields of a :func:`partial_prefix` match, each None when missing.

    host, pid, tid, dev (the number), ms and func (TRACE), file, line and fn (WARN).
    """
    if found is None:
        return {}
    host, pid, tid, dev, trace, file_at, fn = found.group(
        "host", "pid", "tid", "dev", "trace", "file", "fn"
    )
    fields: dict[str, str | None] = {"host": host, "pid": pid, "tid": tid}
    fields["dev"] = dev[1:-1] if dev is not None else None
    ms = func = file = line = None
    if trace is not None:
        ms, func = trace.split(" ", 1)
    if file_at is not None:
        file, line = file_at.rsplit(":", 1)
    fields |= {"ms": ms, "func": func, "file": file, "line": line}
    fields["fn"] = fn[1:-1] if fn is not None else None
    return fields


def _parse_frequent(text: str) -> Parsed | None:
    """Parse the most frequent line kinds by their grammar terminals alone, or None.

    ``INFO_HEAD COLL_MSG`` (every collective), ``INFO_HEAD CHANNEL_CONNECT REST`` (one per
    channel, peer and direction), ``INFO_HEAD COMM_STATE`` / ``COMM_CONFIG`` (several per
    rank and communicator) and ``INFO_HEAD "Trees" TREE_ITEM*`` (one per rank) are made of
    single terminals in ``grammars/nccl.lark``, and in the state after ``INFO_HEAD`` no
    terminal of higher priority matches their text; so a line whose parts match those
    terminals is read by what the Transformer's callbacks call (``connect_row`` /
    ``connect_message``, ``coll_message``, ``comm_state_message``, ``comm_config_message``,
    ``trees_message``), without the parser. Anything else, a timestamped line included, goes
    to the parser.
    """
    head_re, coll_re, connect_re, state_re, config_re, tree_re = _terminals()
    head = head_re.match(text)
    if head is None:
        return None
    body = text[head.end() :]
    message = None
    if body.startswith(("Channel ", "Ring ")):
        found = connect_re.match(body)
        rest = body[found.end() :] if found is not None else ""
        if found is not None and rest.strip():
            message = connect_message(connect_row(found.group(), rest))
    elif "opCount " in body:
        if coll_re.fullmatch(body) is not None:
            message = coll_message(body)
    elif body.startswith(("comm ", "nccl", "[Rank ")):
        if state_re.fullmatch(body) is not None:
            message = comm_state_message(body)
        elif config_re.fullmatch(body) is not None:
            message = comm_config_message(body)
    elif body.startswith("Trees") and _trees_line().fullmatch(body) is not None:
        message = trees_message(tree_re.findall(body))
    if message is None:
        return None
    return None, info_head(head.group()), message


def _maybe_nccl(text: str) -> bool:
    """Cheap pre-check: could ``text`` hold an NCCL prefix or version line at all?

    Saves the parser's error path on the many foreign lines that mention NCCL.
    """
    # NCCL before 2.3 wrote "[0] INFO" / "file:line WARN" without the word NCCL.
    # A looser superset again: every prefix holds "NCCL " or " INFO"/" WARN" (before 2.3).
    if "NCCL " not in text and " INFO" not in text and " WARN" not in text:
        return False
    return _prefilter().search(text) is not None


def parse_nccl_line(text: str, *, source: str = "<line>", line_no: int = 1) -> Event | None:
    """Parse one NCCL log line by grammar rule ``line``; None when it has no NCCL prefix.

    The prefix alone gives the origin (no launcher hint); for WARNs that NCCL continues on
    further lines only the first line is read.
    """
    parsed = _parse(text) if _maybe_nccl(text) else None
    if parsed is None:
        return None
    return _build(text, parsed, SourceRef(source, line_no), text, NO_ORIGIN)


def nccl_message(text: str) -> str | None:
    """Return the message after the NCCL prefix of ``text``; None if it has no NCCL prefix."""
    parsed = _parse(text) if _maybe_nccl(text) else None
    if parsed is None:
        return None
    head = parsed[1]
    return text[head.message_at :].strip() if head is not None else text.strip()
