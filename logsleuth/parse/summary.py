"""torchrun's failure summary as pasted: fields reordered, flattened or split by a copy.

The torch grammar reads the ``ChildFailedError`` summary as torchrun prints it (a rule, the
title, ``Failures:``, ``Root Cause``, one ``[N]:`` block of ``key : value`` lines each). A
summary copied from a screenshot (OCR), a chat or a narrow terminal loses that layout: the
labels end up on lines of their own with the values after them (``time`` / ``host`` /
``2023-09-14 01:45:50`` / ``node-a7``), or several fields run together on one line
(``rank2 (local rank: 2)exitcode: -9 (pid: 36071)error file: <N/A>``). This reader takes
the lines the torch grammar declined inside such a summary and reads its fields wherever
they stand; each entry becomes a :class:`ChildFailure`.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass, field

from logsleuth.model.base import SourceRef
from logsleuth.model.torch import ChildFailure
from logsleuth.parse.base import Line, Reader, Sink

_START = re.compile(
    r"ChildFailedError\b|^Root Cause \(first observed failure\)\s*:?\s*$|^Failures:\s*$"
)
_ENTRY = re.compile(r"^\[(\d+)\]:\s*(.*)$")
_ENTRY_IN = re.compile(r"\[(\d+)\]:\s*(.*?)(?=\s\[\d+\]:|$)")
"""An entry inside a line (a flattened summary), up to the next entry."""
_RANK = re.compile(r"\brank\s*:?\s*(\d+)\s*\(local[_ ]rank:\s*(\d+)\)", re.IGNORECASE)
_EXIT = re.compile(r"\bexitcode\s*:?\s*(-?\d+)\s*\(pid:\s*(\d+)\)", re.IGNORECASE)
_HOST = re.compile(r"\bhost\s*:\s*(\S+)")
_TIME = re.compile(r"\btime\s*:\s*(\S+(?: \d\d:\d\d:\d\d)?)")
_ERROR_FILE = re.compile(r"\berror[_ ]file\s*:\s*(\S+)")
_TRACEBACK = re.compile(r"\btraceback\s*:\s*(.+)$")
_SIGNAL = re.compile(r"[Ss]ignal (\d+) \((SIG[A-Z]+)\) received by PID (\d+)")
_LABEL = re.compile(r"^(time|host|rank|exitcode|error[_ ]file|traceback)\s*:?\s*$")
_DATE = re.compile(r"^\d{4}-\d\d-\d\d[ _]\d\d:\d\d:\d\d$")
_HOSTNAME = re.compile(r"^[A-Za-z][\w.\-]{0,62}$")
_NONE = "<NO OTHER FAILURES>"
_TITLE = re.compile(r"^\S.{0,200} FAILED$")
_SPAN = 40
"""Lines after the start within which the summary's fields are looked for."""


@dataclass(slots=True)
class _Entry:
    first: int
    root: bool
    lines: list[int] = field(default_factory=list)
    values: dict[str, str] = field(default_factory=dict)
    labels: list[str] = field(default_factory=list)


class SummaryReader(Reader):
    """Read the fields of a torchrun failure summary whose layout a copy broke."""

    name = "torch"

    def __init__(self, source: str) -> None:
        super().__init__(source)
        self._until = 0
        self._root = False
        self._entry: _Entry | None = None
        self._flattened: list[_Entry] = []
        """Entries read from a summary flattened onto one line (emitted at the end)."""
        self._pending: list[int] = []
        """Lines taken before an entry began (the title, section heads): they join it."""

    def watch(self, line: Line) -> None:
        """See every line (taken by another reader or not) for where a summary begins."""
        text = line.text
        # Every line passes here: a substring test first, the pattern only where it can match.
        if "ChildFailedError" not in text and not text.lstrip().startswith(("Root", "Fail")):
            return
        text = text.strip()
        if found := _START.search(text):
            self._root = "Root Cause" in text
            self._until = line.no + _SPAN
            # A whole summary flattened onto its first line (a paste that lost its line
            # breaks): its entries follow on that line, whoever takes the line.
            for entry in _ENTRY_IN.finditer(text, found.end()):
                one = _Entry(line.no, self._root or "Root Cause" in text[: entry.start()])
                if self._read(one, entry.group(2)) and one.values.keys() & {"exitcode", "rank"}:
                    self._flattened.append(one)

    def feed(self, line: Line, sink: Sink) -> bool:
        """Offer a line no other reader took; take it when it belongs to a broken summary."""
        text = line.text.strip()
        if _START.search(text):
            if text.startswith(("Root Cause", "Failures")):
                self._pending.append(line.no)
                return True
            return False
        if line.no > self._until:
            return False
        if text == _NONE or _TITLE.match(text):
            self._pending.append(line.no)
            return True
        if found := _ENTRY.match(text):
            self._close(sink)
            self._entry = _Entry(line.no, self._root, [*self._pending, line.no])
            self._pending = []
            if found.group(2):
                self._read(self._entry, found.group(2))
            return True
        entry = self._entry
        if entry is None or not self._read(entry, text):
            return False
        entry.lines.append(line.no)
        return True

    def close(self, sink: Sink) -> None:
        """Emit the entries read."""
        self._close(sink)
        for entry in self._flattened:
            self._entry = entry
            self._close(sink)
        self._flattened = []

    def _read(self, entry: _Entry, text: str) -> bool:
        found_any = False
        if label := _LABEL.match(text):
            entry.labels.append(label.group(1).replace(" ", "_"))
            return True
        for key, pattern in (
            ("host", _HOST),
            ("time", _TIME),
            ("error_file", _ERROR_FILE),
            ("traceback", _TRACEBACK),
        ):
            if found := pattern.search(text):
                entry.values.setdefault(key, found.group(1).strip())
                found_any = True
        if found := _RANK.search(text):
            entry.values.setdefault("rank", found.group(1))
            entry.values.setdefault("local_rank", found.group(2))
            found_any = True
        if found := _EXIT.search(text):
            entry.values.setdefault("exitcode", found.group(1))
            entry.values.setdefault("pid", found.group(2))
            found_any = True
        if found_any:
            return True
        # Values after a run of bare labels, in the labels' order (an OCR'd two-column table).
        if entry.labels:
            pending = entry.labels[0]
            if (pending == "time" and _DATE.match(text)) or (
                pending == "host" and _HOSTNAME.match(text)
            ):
                entry.values.setdefault(pending, text)
                entry.labels.pop(0)
                return True
        return False

    def _close(self, sink: Sink) -> None:
        entry, self._entry = self._entry, None
        if entry is None or ("exitcode" not in entry.values and "rank" not in entry.values):
            return
        values = entry.values
        exitcode = int(values["exitcode"]) if "exitcode" in values else None
        name = None
        traceback = values.get("traceback")
        if traceback and (found := _SIGNAL.search(traceback)):
            name = found.group(2)
        elif exitcode is not None and exitcode < 0:
            try:
                name = signal.Signals(-exitcode).name
            except ValueError:
                name = None
        sink.emit(
            ChildFailure(
                ref=SourceRef(self.source, entry.first),
                text=values.get("traceback", "") or f"[{entry.first}]",
                root_cause=entry.root,
                rank=int(values["rank"]) if "rank" in values else None,
                local_rank=int(values["local_rank"]) if "local_rank" in values else None,
                host=values.get("host"),
                pid=int(values["pid"]) if "pid" in values else None,
                exitcode=exitcode,
                signal=name,
                error_file=values.get("error_file"),
                traceback=traceback,
                time=values.get("time"),
            ),
            entry.lines,
        )
