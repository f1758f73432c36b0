"""Open the envelopes log collectors put lines in: JSON objects, JSON exports and CSV exports.

Docker's ``json-file`` driver writes ``{"log": "...\\n", "stream": "stderr", "time": "..."}``;
fluent-bit, Vector, ``journalctl -o json``, Loki and Elasticsearch exports write one JSON
object per line with the line in ``log``, ``message``, ``MESSAGE``, ``_raw`` ...;
``gcloud logging read --format json`` pretty-prints an array of entries with the line in
``"textPayload": "..."``; Datadog, Splunk and Kibana export CSV with a header row that names a
message column; Go services (Kubernetes operators, Docker's daemon) and structlog write
logfmt, ``time="..." level=error msg="..." key=value``. A line inside such an envelope is
quoted (``\\"``, ``""``) and followed by the collector's fields, which breaks every reader;
the envelope is taken off before anything else (prefixes, wraps), and what it says of the
writer (time, host, pid, rank) is kept as an :class:`~logsleuth.model.base.Origin` hint.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from logsleuth.model.base import NO_ORIGIN, Origin

MESSAGE_KEYS = (
    "log", "message", "msg", "textpayload", "_raw", "line", "body", "text", "content", "event",
)  # fmt: skip
"""Names of the field that holds the line, in order of preference (compared folded, see :func:`_fold`);
structlog's JSON renderer calls it ``event``."""
_EXCEPTION_KEYS = (
    "exception", "exc_info", "stack_trace", "stacktrace", "traceback", "py_callstack",
)  # fmt: skip
"""Where a structured logger puts the traceback of the exception it logged (structlog's
``format_exc_info``, python-json-logger's ``exc_info``, torchelastic's ``error.json``
``py_callstack``): its lines follow the message."""
_LINE_KEYS = frozenset(MESSAGE_KEYS + _EXCEPTION_KEYS)
"""The fields of a pretty-printed export whose values are log lines."""
_RANK_KEYS = ("rank", "global_rank", "world_rank")
_NESTED_KEYS = ("jsonpayload", "_source", "fields", "result", "payload", "event")
"""Objects a collector nests the record in (GCP ``jsonPayload``, Elasticsearch ``_source``,
Splunk's ``result``)."""
_TIME_KEYS = ("time", "timestamp", "ts", "date", "datetime", "__realtime_timestamp")
_HOST_KEYS = ("host", "hostname", "_hostname", "host.name", "node", "nodename", "node_name")
_PID_KEYS = ("_pid", "pid")
_FIELD_LINE = re.compile(r'\s*"([\w@.$-]{1,40})"\s*:\s*("(?:[^"\\]|\\.)*")\s*,?\s*$')
"""One field of a pretty-printed JSON object: ``  "textPayload": "...",``."""
_STRING_LINE = re.compile(r'\s*("(?:[^"\\]|\\.)*")\s*,?\s*$')
"""One string of a pretty-printed JSON array of lines: ``    "Traceback ...\\n",`` (a notebook's
``"text"`` output, a script's ``json.dumps(lines, indent=1)``)."""
_LOGFMT_PAIR = re.compile(r'\s*([\w.@/-]{1,40})=("(?:[^"\\]|\\.)*"|[^\s"]*)')
"""One ``key=value`` pair of a logfmt line (the value quoted Go-style or bare)."""
_SHARE = 0.6
"""The share of a sample's non-blank lines that must be in the envelope."""


@dataclass(frozen=True, slots=True)
class Envelope:
    """How the lines of one input are wrapped.

    Attributes:
        form: ``json-lines`` (one object per line), ``json-fields`` (a pretty-printed
            export: only the message fields' lines hold log lines, or the strings of an
            array of lines), ``logfmt`` or ``csv``.
        columns: The CSV header's names, folded (``csv`` only).
        delimiter: The CSV delimiter (``csv`` only).
        header: The CSV header row as it stands in the input (``csv`` only).
    """

    form: str
    columns: tuple[str, ...] = ()
    delimiter: str = ","
    header: str = ""

    def is_header(self, line: str) -> bool:
        """True for a CSV export's header row (an export pasted twice repeats it)."""
        return bool(self.header) and line.strip() == self.header

    def open(self, line: str) -> tuple[list[str], Origin] | None:
        """Return the log lines inside ``line`` and what the envelope says of their writer.

        None when ``line`` is not an envelope (the CSV header, a JSON export's structure,
        a line a collector left bare): it is read as it stands.
        """
        if self.form in ("json-lines", "logfmt"):
            record = _json_object(line) if self.form == "json-lines" else _logfmt(line)
            if record is None:
                return None
            text = _message(record)
            return None if text is None else (_pieces(text), _origin(record))
        if self.form == "json-fields":
            field = _FIELD_LINE.match(line)
            if field is not None:
                if _fold(field.group(1)) not in _LINE_KEYS:
                    return None
                return _pieces(json.loads(field.group(2))), NO_ORIGIN
            # An array of lines (a notebook's output, a list dumped as JSON): one per string.
            string = _STRING_LINE.match(line)
            if string is None:
                return None
            try:
                return _pieces(json.loads(string.group(1))), NO_ORIGIN
            except ValueError:
                return None
        row = _csv_row(line, self.delimiter)
        if (
            row is None
            or len(row) != len(self.columns)
            or tuple(_fold(name.strip()) for name in row) == self.columns  # the header row
        ):
            return None
        record = dict(zip(self.columns, row, strict=True))
        text = _message(record)
        return None if text is None else (_pieces(text), _origin(record))


def detect_envelope(sample: Sequence[str]) -> Envelope | None:
    """Return the envelope most of ``sample`` (an input's first cleaned lines) is in, or None."""
    lines = [line for line in sample if line.strip()]
    if len(lines) < 1:
        return None
    first = lines[0].lstrip()[:1]
    if sum(1 for line in lines if line.lstrip()[:1] == "{") >= _SHARE * len(lines):
        records = [_json_object(line) for line in lines]
        found = sum(1 for r in records if r is not None and _message(r) is not None)
        if found >= _SHARE * len(lines):
            return Envelope("json-lines")
    records = [_logfmt(line) for line in lines]
    if sum(1 for r in records if r is not None and _message(r) is not None) >= _SHARE * len(lines):
        return Envelope("logfmt")
    if first in '[{"':
        # A pretty-printed export: its structure is most of its lines; one message field
        # among them is enough, as the excerpt may hold a single entry. An array of lines
        # (a notebook's outputs) is mostly strings, one per line.
        if any(
            (m := _FIELD_LINE.match(line)) and _fold(m.group(1)) in _LINE_KEYS for line in lines
        ) or sum(1 for line in lines if _STRING_LINE.match(line)) >= _SHARE * len(lines):
            return Envelope("json-fields")
        if first != '"':  # a CSV export may quote its first field
            return None
    # "," (most), tab (a spreadsheet copy), ";" (an export made where "," is the decimal mark).
    for delimiter in (",", "\t", ";"):
        header = _csv_row(lines[0], delimiter)
        if header is None or len(header) < 2:
            continue
        columns = tuple(_fold(name.strip()) for name in header)
        if not any(name in MESSAGE_KEYS for name in columns) or not all(
            name and len(name) <= 40 and not name[:1].isdigit() for name in columns
        ):
            continue
        rows = [_csv_row(line, delimiter) for line in lines[1:]]
        fitting = sum(1 for row in rows if row is not None and len(row) == len(columns))
        if rows and fitting >= _SHARE * len(rows):
            return Envelope("csv", columns, delimiter, lines[0].strip())
    return None


def _json_object(line: str) -> dict[str, Any] | None:
    text = line.strip()
    if not (text.startswith("{") and text.endswith("}")):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _logfmt(line: str) -> dict[str, Any] | None:
    """The pairs of a logfmt line, or None when the line is not all pairs (two at least)."""
    record: dict[str, Any] = {}
    at, end = 0, len(line.rstrip())
    while at < end:
        pair = _LOGFMT_PAIR.match(line, at)
        if pair is None or pair.end() == at:
            return None
        key, value = pair.groups()
        if value.startswith('"'):
            try:
                value = json.loads(value)
            except ValueError:
                value = value[1:-1].replace('\\"', '"')
        record[key] = value
        at = pair.end()
    return record if len(record) >= 2 else None


def _csv_row(line: str, delimiter: str) -> list[str] | None:
    if delimiter not in line:
        return None
    try:
        return next(csv.reader([line], delimiter=delimiter, strict=True), None)
    except csv.Error:
        return None  # a field that goes on past this line: not a row of its own


def _fold(key: str) -> str:
    """A field's name as it is compared: casefolded, without the ``@`` some collectors put
    in front of their own fields (CloudWatch Logs Insights' ``@message``, ``@timestamp``)."""
    return key.casefold().lstrip("@")


def _field(record: dict[str, Any], names: Sequence[str]) -> Any:
    """The value of the first of ``names`` that ``record`` has (keys compared folded)."""
    folded = {_fold(key): value for key, value in record.items() if isinstance(key, str)}
    for name in names:
        if name in folded:
            return folded[name]
    return None


def _message(record: dict[str, Any]) -> str | None:
    """The log line a record holds, looking one level into the objects collectors nest."""
    text = _field(record, MESSAGE_KEYS)
    if isinstance(text, str):
        trace = _field(record, _EXCEPTION_KEYS)
        if isinstance(trace, str) and trace.strip() and trace.strip() not in text:
            return f"{text.rstrip()}\n{trace}"
        return text
    for key in _NESTED_KEYS:
        inner = _field(record, (key,))
        if isinstance(inner, dict):
            text = _field(inner, MESSAGE_KEYS)
            if isinstance(text, str):
                return text
    return None


def _pieces(text: str) -> list[str]:
    """The lines of a message: a record may hold several (a traceback a collector joined)."""
    return text.rstrip("\r\n").replace("\r\n", "\n").split("\n")


def _origin(record: dict[str, Any]) -> Origin:
    """What a record's own fields say of the writer: time, host, pid, rank."""
    fields: dict[str, Any] = {}
    time = _seconds(_field(record, _TIME_KEYS))
    if time is not None:
        fields["time"] = time
    host = _field(record, _HOST_KEYS)
    if host is None and isinstance(kube := _field(record, ("kubernetes",)), dict):
        host = _field(kube, ("host",))
    if isinstance(host, str) and host.strip() and " " not in host.strip():
        fields["host"] = host.strip()
    for key, names in (("pid", _PID_KEYS), ("rank", _RANK_KEYS)):
        value = _field(record, names)
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 31:
            fields[key] = value
        elif isinstance(value, str) and value.isdigit() and len(value) < 10:
            fields[key] = int(value)
    return Origin(**fields) if fields else NO_ORIGIN


def _seconds(value: Any) -> float | None:
    """POSIX seconds of a record's time: ISO text, or a number of s, ms or us since 1970."""
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        for scale in (1, 1e3, 1e6, 1e9):
            if value / scale < 1e10:
                return float(value / scale)
        return None
    if not isinstance(value, str):
        return None
    try:
        stamp = datetime.fromisoformat(value.strip())
    except ValueError:
        return None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=timezone.utc)
    return stamp.timestamp()
