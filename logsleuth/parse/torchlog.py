"""Read PyTorch / torchrun output: c10 watchdog lines, agent lines, tracebacks, summaries.

Each line's shape comes from ``grammars/torch.lark`` (via :mod:`logsleuth.parse.torchshapes`);
the reader's state decides which entry rule to try (a line on its own, a traceback body, a
c10 continuation, a ChildFailedError summary) and assembles multi-line blocks into one
event each.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, cast

from logsleuth.model.base import Event, SourceRef
from logsleuth.model.messages import LogMessage
from logsleuth.model.torch import (
    ERROR_LEVELS,
    ChildFailure,
    DebugDump,
    LauncherEvent,
    PythonTraceback,
    PythonWarning,
    TorchUnrecognized,
    TorchVersion,
    WatchdogError,
)
from logsleuth.parse.base import Line, Reader, Sink
from logsleuth.parse.catalog import PREFIX, load_catalog
from logsleuth.parse.clean import begins_line, line_starts
from logsleuth.parse.messages import typed_message
from logsleuth.parse.nccl_blocks import opens_ras
from logsleuth.parse.torchshapes import (
    Payload,
    Prefix,
    Shape,
    error_payload,
    launcher_payload,
    parse_torch_line,
    parse_torch_message,
    parse_torch_record,
)


@dataclass(slots=True)
class _Record:
    """A c10 record (or warning, or launcher header) that continuation lines may extend.

    ``kind`` is ``"c10"`` (continuation: rule c10_more), ``"terminate"`` (waits for its
    ``what():`` line), ``"warning"`` or ``"launcher"`` (continuation: rule indented_line).
    """

    kind: str
    first: Line
    prefix: Prefix | None
    payload: Payload | None
    lines: list[int]
    data: dict[str, Any] = field(default_factory=dict)
    anchor: Line | None = None
    """The line that carried the message (the ``what():`` line of a terminate record)."""
    texts: list[str] = field(default_factory=list)
    cpp_type: str | None = None
    error_code: str | None = None
    detail: str | None = None
    awaiting_detail: bool = False
    raised_from: str | None = None
    cpp_frames: list[str] = field(default_factory=list)
    fr_frames: list[tuple[str, str, int]] = field(default_factory=list)


@dataclass(slots=True)
class _Traceback:
    """A Python traceback being read; ``state`` is ``frames``, ``after`` or ``chain``."""

    first: Line
    lines: list[int]
    state: str = "frames"
    frames: list[tuple[str, int, str]] = field(default_factory=list)
    exc_type: str | None = None
    exc_message: str | None = None
    exc_line: Line | None = None
    causes: list[tuple[str | None, str | None]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    derived: list[tuple[Line, Payload]] = field(default_factory=list)
    error_code: str | None = None
    detail: str | None = None
    awaiting_detail: bool = False
    process: int | None = None


@dataclass(slots=True)
class _Entry:
    """One ``[N]:`` entry of a ChildFailedError summary."""

    first: Line
    root: bool
    lines: list[int]
    values: dict[str, Any] = field(default_factory=dict)
    tb_lines: list[str] = field(default_factory=list)
    in_traceback: bool = False
    telling: Line | None = None
    """The line that says how the process ended (its exit code, or the signal it got): the
    evidence quoted for the entry, rather than its bare ``[0]:`` head."""


@dataclass(slots=True)
class _Summary:
    """A ChildFailedError summary: border, title, sections, entries, border."""

    first: Line
    char: str
    lines: list[int]
    name: str | None = None
    section: str | None = None
    entries: list[_Entry] = field(default_factory=list)


class TorchReader(Reader):
    """Read torch / torchrun lines: watchdog records, agent lines, tracebacks, summaries."""

    name = "torch"

    def __init__(self, source: str) -> None:
        super().__init__(source)
        self._tracebacks: dict[int | None, _Traceback] = {}
        self._record: _Record | None = None
        self._summary: _Summary | None = None
        # Blocks of different ranks may be open at once (interleaved `[rankN]:` output);
        # events wait here until no block is open so they leave in input order.
        self._out: list[tuple[Event, tuple[int, ...]]] = []

    def busy(self) -> bool:
        """Return True while a traceback, summary or c10 record is open."""
        return bool(self._tracebacks) or self._record is not None or self._summary is not None

    def feed(self, line: Line, sink: Sink) -> bool:
        """Offer ``line``; take it when it is torch/launcher output or continues a block."""
        taken = self._take(line)
        if not taken:
            self._close_all()
        if not self.busy():
            self._flush(sink)
        return taken

    def close(self, sink: Sink) -> None:
        """Emit every open block (a cut summary or traceback keeps what it has)."""
        self._close_all()
        self._flush(sink)

    # ---- dispatch

    def _take(self, line: Line) -> bool:
        if self._summary is not None:
            if self._continue_summary(self._summary, line):
                return True
            self._close_summary()
        if self._record is not None:
            if self._continue_record(self._record, line):
                return True
            self._close_record()
        key = line.hint.rank
        block = self._tracebacks.get(key)
        if block is None and key is None and len(self._tracebacks) == 1:
            # A logger prefixes only the first line of a multi-line record (sglang's
            # "[time TP5] Scheduler hit an exception: Traceback ..."): a bare line goes on
            # with the one traceback that is open.
            key, block = next(iter(self._tracebacks.items()))
        if block is not None:
            if self._continue_traceback(block, line):
                return True
            self._close_traceback(key)
        return self._start(line)

    def _start(self, line: Line) -> bool:
        shape = parse_torch_record(line.text)
        if shape is None:
            return False
        if shape.kind == "record" and shape.payload is not None:
            if not shape.payload.known and _wraps_a_line(shape.payload):
                return False  # a foreign prefix around a line of its own: read that line
            if _foreign_under_tag(shape.payload):
                return False  # another tag (``[stderr] ``, ``[c10d] ``), not a torchrun role
            if opens_ras(str(shape.payload.fields.get("message", "")).strip()):
                return False  # a logger's prefix around an ncclras report: the report's line
            self._start_record(line, shape.prefix, shape.payload)
        elif shape.kind == "traceback-head":
            self._tracebacks[line.hint.rank] = _Traceback(line, [line.no])
        elif shape.kind == "warning":
            self._record = _Record("warning", line, None, None, [line.no], data=shape.data)
        elif shape.kind == "rule":
            self._summary = _Summary(line, shape.data["char"], [line.no])
        elif shape.kind == "terminate":
            self._record = _Record(
                "terminate", line, None, None, [line.no], cpp_type=shape.data["type"]
            )
        elif shape.kind == "what" and shape.payload is not None:
            self._record = _Record("c10", line, None, shape.payload, [line.no])
        elif shape.kind == "version":
            self._queue(
                TorchVersion(**self._where(line, None, None), version=shape.data["version"]), line
            )
        else:
            return False
        return True

    def _start_record(self, line: Line, prefix: Prefix | None, payload: Payload) -> None:
        if payload.cls is LauncherEvent:
            if payload.fields["message"].endswith(":") and prefix is None:
                self._record = _Record("launcher", line, prefix, payload, [line.no])
            else:
                self._queue(self._build(payload, line, prefix), line)
            return
        self._record = _Record("c10", line, prefix, payload, [line.no])

    # ---- c10 records, warnings, launcher headers

    def _continue_record(self, record: _Record, line: Line) -> bool:
        owner = record.first.hint.rank
        if line.hint.rank is not None and line.hint.rank != owner:
            return False
        if record.kind in ("warning", "launcher"):
            shape = parse_torch_line(line.text, "indented_line")
            if shape is None:
                return False
            record.texts.append(shape.data["text"])
            record.lines.append(line.no)
            if record.kind == "warning":  # one source line at most
                self._close_record()
            return True
        if record.kind == "terminate" and record.payload is None:
            shape = parse_torch_line(line.text)
            if shape is None or shape.kind != "what" or shape.payload is None:
                return False
            record.payload, record.anchor = shape.payload, line
            record.lines.append(line.no)
            return True
        shape = parse_torch_line(line.text, "c10_more")
        if shape is None:
            if not record.awaiting_detail:
                return False
            record.detail = line.text.strip()
            record.awaiting_detail = False
        else:
            self._add_c10_shape(record, shape)
        record.lines.append(line.no)
        return True

    @staticmethod
    def _add_c10_shape(record: _Record | _Traceback, shape: Shape) -> None:
        """Fold one continuation line (rule c10_shape) into ``record``."""
        record.awaiting_detail = False
        if shape.kind == "nccl-code":
            record.error_code = shape.data["code"]
        elif shape.kind == "last-error":
            record.detail = shape.data["detail"]
            record.awaiting_detail = record.detail is None
        elif isinstance(record, _Record):
            if shape.kind == "raised-from" and record.raised_from is None:
                record.raised_from = shape.data["text"]
            elif shape.kind == "cpp-frame":
                record.cpp_frames.append(shape.data["text"])
            elif shape.kind == "fr-frame":
                record.fr_frames.append(shape.data["frame"])
        if isinstance(record, _Traceback) and shape.kind in ("nccl-code", "note"):
            record.notes.append(shape.data["text"])

    def _close_record(self) -> None:
        record, self._record = self._record, None
        if record is None:
            return
        first, lines = record.anchor or record.first, tuple(record.lines)
        if record.kind == "warning":
            data = record.data
            source = record.texts[0] if record.texts else None
            self._queue(
                PythonWarning(**self._where(first, None, None), **data, source=source), *lines
            )
            return
        payload = record.payload
        if payload is None:  # `terminate called ...` whose `what():` never came
            payload = error_payload("terminate", f"uncaught {record.cpp_type}")
        if record.kind == "launcher":
            message = "\n".join([payload.fields["message"], *record.texts])
            payload = Payload(LauncherEvent, {**payload.fields, "message": message})
        extra: dict[str, Any] = {}
        if payload.cls is WatchdogError:
            reason = (
                payload.fields["reason"] or first.text.partition("terminated with exception: ")[2]
            )
            extra = {
                "reason": reason.strip(),
                "detail": record.detail or payload.fields.get("detail"),
                "error_code": record.error_code or payload.fields.get("error_code"),
                "raised_from": payload.fields.get("raised_from") or record.raised_from,
                "cpp_frames": tuple(record.cpp_frames),
            }
        elif payload.cls is DebugDump and record.fr_frames:
            extra = {"frames": tuple(record.fr_frames)}
        elif (record.detail or record.error_code) and isinstance(
            payload.fields.get("message"), str
        ):
            # A record no shape knows (cut at a terminal's width, a newer torch's wording)
            # keeps what its continuation says: the NCCL result and its ``Last error:``.
            tail = [
                record.error_code or "",
                f"Last error: {record.detail}" if record.detail else "",
            ]
            message = " ".join([payload.fields["message"], *filter(None, tail)])
            payload = replace(payload, fields={**payload.fields, "message": message})
        elif record.kind == "terminate" and not payload.known:
            reason = payload.fields["message"] or f"uncaught {record.cpp_type}"
            # Keep the rank the ``what():`` text's own ``[Rank N]`` tag names.
            payload = error_payload("terminate", reason).tagged(payload.rank, payload.pg)
            extra = {"detail": record.detail, "error_code": record.error_code}
        self._queue(self._build(payload, first, record.prefix, **extra), *lines)
        if payload.inner is not None and payload.inner.known:
            self._queue(self._build(payload.inner, first, record.prefix), first)

    # ---- Python tracebacks

    def _continue_traceback(self, block: _Traceback, line: Line) -> bool:
        if block.state == "after":
            shape = parse_torch_line(line.text, "tb_after")
            if shape is None:
                if not block.awaiting_detail:
                    return False
                block.detail = line.text.strip()
                block.awaiting_detail = False
            elif shape.payload is not None and block.notes[-1:] != ["Original exception:"]:
                # A gloo error continues a message only under `Original exception:`.
                return False
            elif shape.kind == "chain":
                if shape.data.get("process") is not None:
                    block.process = shape.data["process"]
                block.causes.append((block.exc_type, block.exc_message))
                block.frames, block.exc_type, block.exc_message = [], None, None
                block.state = "chain"
            else:
                self._add_c10_shape(block, shape)
                if shape.payload is not None:
                    block.derived.append((line, shape.payload))
            block.lines.append(line.no)
            return True
        shape = parse_torch_line(line.text, "tb_body")
        if shape is None:
            return False
        # After a chain separator only a new `Traceback` head continues the block; before
        # the exception line a new head means this traceback was cut off.
        if (shape.kind == "traceback-head") != (block.state == "chain"):
            return False
        if shape.kind == "frame":
            block.frames.append(shape.data["frame"])
        elif shape.kind == "exception":
            block.exc_type, block.exc_message = shape.data["type"], shape.data["message"]
            block.exc_line = line
            block.state = "after"
        elif shape.kind == "traceback-head":
            block.state = "frames"
        block.lines.append(line.no)
        return True

    def _close_traceback(self, key: int | None) -> None:
        block = self._tracebacks.pop(key)
        first = block.first
        event = PythonTraceback(
            **self._where(first, None, None),
            rank=first.hint.rank,
            frames=tuple(block.frames),
            exc_type=block.exc_type,
            exc_message=block.exc_message,
            last_line=block.lines[-1],
            detail=block.detail,
            notes=tuple(block.notes),
            causes=tuple(block.causes),
            process=block.process,
        )
        self._queue(event, *block.lines)
        derived = list(block.derived)
        if block.exc_line is not None and block.exc_message:
            payload = parse_torch_message(block.exc_message)
            if payload is not None:
                derived.insert(0, (block.exc_line, payload))
        for line, payload in derived:
            for part in (payload, payload.inner):
                if part is None or not part.known:
                    continue
                extra: dict[str, Any] = {}
                if part.cls is WatchdogError:
                    extra = {"detail": block.detail, "error_code": block.error_code}
                    if not part.fields["reason"]:
                        extra["reason"] = block.exc_message or ""
                self._queue(self._build(part, line, None, **extra), line)

    # ---- ChildFailedError summary

    def _continue_summary(self, summary: _Summary, line: Line) -> bool:
        shape = parse_torch_line(line.text, "summary_line")
        if summary.name is None:
            if shape is None or shape.kind != "s-title":
                return False
            summary.name = shape.data["name"]
            summary.lines.append(line.no)
            return True
        if shape is None:
            return False
        entry = summary.entries[-1] if summary.entries else None
        if entry is not None and entry.in_traceback and shape.kind in ("s-more", "s-title"):
            entry.tb_lines.append(line.text[2:] if line.text.startswith("  ") else line.text)
            entry.lines.append(line.no)
            return True
        if shape.kind == "s-entry":
            summary.entries.append(_Entry(line, summary.section == "root", [line.no]))
            return True
        if entry is not None and shape.kind in ("s-field", "s-rank", "s-exit", "s-more"):
            entry.in_traceback = shape.data.get("name") == "traceback"
            if shape.kind == "s-field":
                entry.values[shape.data["name"]] = shape.data["value"]
                if entry.in_traceback:
                    entry.tb_lines = [shape.data["value"]]
                if "signal" in shape.data:
                    entry.values.setdefault("signal", shape.data["signal"])
                    entry.telling = line
            elif shape.kind != "s-more":
                entry.values.update({k: v for k, v in shape.data.items() if v is not None})
                if shape.kind == "s-exit" and entry.telling is None:
                    entry.telling = line
            entry.lines.append(line.no)
            return True
        if shape.kind == "s-failures":
            summary.section = "failures"
        elif shape.kind == "s-root":
            summary.section = "root"
        elif shape.kind == "s-rule" and shape.data["char"] == summary.char:
            summary.lines.append(line.no)
            self._close_summary()
            return True
        elif shape.kind not in ("s-rule", "s-none"):
            return False
        summary.lines.append(line.no)
        return True

    def _close_summary(self) -> None:
        summary, self._summary = self._summary, None
        if summary is None:
            return
        first = summary.first
        if summary.name is None:  # a lone rule line: the OMP banner of an unprefixed agent
            banner = launcher_payload("banner", first.text.strip())
            self._queue(self._build(banner, first, None), first.no)
            return
        header = launcher_payload("failure-summary", summary.name)
        self._queue(self._build(header, first, None), *summary.lines)
        for entry in summary.entries:
            self._queue(self._child_failure(entry), *entry.lines)

    def _child_failure(self, entry: _Entry) -> ChildFailure:
        values = entry.values
        tb_text = "\n".join(entry.tb_lines).rstrip() or None
        frames: list[tuple[str, int, str]] = []
        exc_type = exc_message = None
        if entry.tb_lines and entry.tb_lines[0].startswith("Traceback"):
            for text in entry.tb_lines[1:]:
                shape = parse_torch_line(text, "tb_body")
                if shape is None:
                    continue
                if shape.kind == "frame":
                    frames.append(shape.data["frame"])
                elif shape.kind == "exception" and exc_type is None:
                    exc_type, exc_message = shape.data["type"], shape.data["message"]
        return ChildFailure(
            **self._where(entry.telling or entry.first, None, None),
            root_cause=entry.root,
            rank=values.get("rank"),
            local_rank=values.get("local_rank"),
            host=values.get("host") or None,
            pid=values.get("pid"),
            exitcode=values.get("exitcode"),
            signal=values.get("signal"),
            error_file=values.get("error_file") or None,
            traceback=tb_text,
            time=values.get("time") or None,
            exc_type=exc_type,
            exc_message=exc_message,
            frames=tuple(frames),
        )

    # ---- events out

    def _close_all(self) -> None:
        self._close_summary()
        self._close_record()
        for key in list(self._tracebacks):
            self._close_traceback(key)

    def _queue(self, event: Event, *lines: int | Line) -> None:
        numbers = tuple(n.no if isinstance(n, Line) else n for n in lines)
        self._out.append((event, numbers))

    def _flush(self, sink: Sink) -> None:
        # Stable sort: events of one block keep their order (a header before its entries).
        for event, lines in sorted(self._out, key=lambda item: item[0].ref.line):
            if isinstance(event, TorchUnrecognized):
                event = _catalog_message(event) or _level_record(event) or event
            sink.emit(event, lines)
        self._out.clear()

    def _where(self, line: Line, prefix: Prefix | None, rank: int | None) -> dict[str, Any]:
        """Return ref, text and origin for an event that starts at ``line``."""
        hint = line.hint
        # The launcher's prefix (hint) knows best who wrote the line; the line's own
        # prefix and message fill what it does not say.
        pid = hint.pid if hint.pid is not None else (prefix.pid if prefix else None)
        rank = hint.rank if hint.rank is not None else rank
        time = hint.time if hint.time is not None else (prefix.time() if prefix else None)
        origin = hint
        if (pid, rank, time) != (hint.pid, hint.rank, hint.time):  # dataclasses.replace is slow
            origin = replace(hint, pid=pid, rank=rank, time=time)
        return {"ref": SourceRef(self.source, line.no), "text": line.raw, "origin": origin}

    def _build(self, payload: Payload, line: Line, prefix: Prefix | None, **extra: Any) -> Event:
        """Turn a message payload into its event: fields, tag rank/pg, continuation extras."""
        names = payload.cls.__dataclass_fields__
        values = {k: v for k, v in payload.fields.items() if k in names}
        rank = payload.rank if payload.rank is not None else line.hint.rank
        if "rank" in names and values.get("rank") is None:
            values["rank"] = rank
        if "pg" in names:
            values["pg"] = payload.pg
        if "level" in names and prefix is not None:
            values["level"] = prefix.level
        values.update(extra)
        make = cast(Callable[..., Event], payload.cls)
        return make(**self._where(line, prefix, payload.rank), **values)


def _catalog_message(event: TorchUnrecognized) -> LogMessage | None:
    """Type a torch-prefixed message the grammar has no rule for by the catalogs, or None.

    A catalog row of a bare string (level ``STR``: a constant whose level is the logging
    call's) takes the level the record's prefix states (``[F1128 ...]``: FATAL).
    """
    typed = typed_message(event.message, event.ref, event.text, event.origin)
    if typed is not None and typed.level == "STR":
        level = _RECORD_LEVELS.get(event.level or "")
        if level is not None:
            typed = replace(typed, level=level)
    return typed


_RECORD_LEVELS = {**ERROR_LEVELS, "W": "WARNING", "I": "INFO"}


def _level_record(event: TorchUnrecognized) -> LogMessage | None:
    """Keep a c10 or glog record whose message no catalog knows, typed by its level, or None.

    The prefix alone is evidence (XLA's ``E0502 ... rendezvous.cc:38] ...``, a c10 warning
    of a newer torch): the line is a log record of its writer at that level, typed by its
    prefix, not its text. Only error levels report a failure.
    """
    level = _RECORD_LEVELS.get(event.level or "")
    if level is None or not event.message.strip():
        return None
    return LogMessage(
        ref=event.ref,
        text=event.text,
        origin=event.origin,
        family="log",
        level=level,
        catalog=None,
        message=event.message.strip(),
    )


_EXCEPTION_LINE = re.compile(r"(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception)\b: ")
"""A Python exception line (``torch.distributed.DistBackendError: ...``): a line of its own."""


_ROLE_TAG = re.compile(r"\[[A-Za-z_][\w-]*\] ")


def _foreign_under_tag(payload: Payload) -> bool:
    """Return True when a role tag's message that no rule reads is another writer's line.

    torchrun prefixes its agent's messages with the worker role (``[default] Starting worker
    group``); a collector's stream tag looks the same (``[stderr] 2024-06-01 10:00:00,001
    [rank4]: torch.OutOfMemoryError: ...``), and so does a component's behind a logger's
    prefix (``[W socket.cpp:663] [c10d] The client socket has failed to connect ...``). A
    message behind it that begins a line of its own or holds a known message is that line,
    read without the tag.
    """
    if payload.cls is not LauncherEvent or payload.fields.get("action") != "agent":
        return False
    message = str(payload.fields.get("message", ""))
    tag = _ROLE_TAG.match(message)
    if tag is None:
        return False
    rest = message[tag.end() :]
    if begins_line(rest) or _is_a_line(rest):
        return True
    found = load_catalog().match(rest)
    return found is not None and found.entry.level != PREFIX


def _wraps_a_line(payload: Payload) -> bool:
    """Return True when an unknown message is itself a line (``[E ...]``, a summary rule)."""
    return _is_a_line(str(payload.fields.get("message", "")))


def _is_a_line(text: str) -> bool:
    """Return True when ``text`` is a line of its own (``[E ...]``, an exception, a record)."""
    # Quote markers and backticks a paste left are not the message (as at a line start).
    message = text.strip().lstrip("`>~ ")
    if message.startswith("[Rank "):
        return False  # the c10 record's own message tag, not another line
    if next(line_starts(" " + message), -1) == 1 or _EXCEPTION_LINE.match(message):
        return True
    inner = parse_torch_record(message)
    return inner is not None and (inner.payload is None or inner.payload.known)
