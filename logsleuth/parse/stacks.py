"""Read stack dumps line by line: py-spy text output and CPython faulthandler output.

``py-spy dump --json`` output is a whole-file format: see :mod:`logsleuth.parse.pyspy_json`.
Each line is parsed on its own with ``grammars/pyspy.lark``; :class:`StackReader` assembles
consecutive lines into one :class:`~logsleuth.model.stacks.StackDump` per process dump
(docs/stack-dump-formats.md sections 1, 3 and 7). Blank lines never reach a reader, so the
gap they leave in the line numbers is what tells two faulthandler dumps apart (threads of
one dump are separated by a blank line, consecutive dumps are not).

An excerpt cut above its first ``Thread`` line (a paste into a ticket) still holds a dump:
frame lines outside any dump open a *headless* one, with one thread whose id, name and
state are unknown (None, as for any value a dump does not print), under this rule:

* A frame line right after a line that opens a dump (``Thread``, ``Process``, ``Python v``,
  ``Current thread``, ``Fatal Python error:``, ...) belongs to that dump, as always.
* Otherwise a *run* is needed: at least two consecutive lines (no blank line between, one
  writer by their prefixes) of one format, each a frame line or, for py-spy, a ``--locals``
  header (``        Arguments:`` / ``        Locals:``), with ``--locals`` variable lines
  allowed inside it; at least one of its frames is a Python frame (py-spy ``(file.py:N)``,
  not a ``(libc.so.6)`` location). A lone ``    word (file.py:12)`` line, or two lines like
  ``    batch_size (int)``, stays what it was.

The first lines of a run are declined while it is being recognized, so every other reader
still sees them; a line another reader took ends the run. Once the run qualifies, its lines
are named in the dump's event like any other.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from functools import cache, lru_cache
from typing import Any

from lark import Lark, Token, Transformer
from lark.exceptions import LarkError

from logsleuth.model.base import SourceRef
from logsleuth.model.stacks import (
    FAULTHANDLER,
    PYSPY,
    PYSTACK,
    Frame,
    StackDump,
    StackDumpError,
    ThreadStack,
    format_frame_line,
)
from logsleuth.parse.base import Line, Reader, Sink
from logsleuth.parse.catalog import load_catalog
from logsleuth.parse.grammar import load_parser

_STARTS = (
    "Process ",
    "Python v",
    "Signal ",
    "Thread ",
    "Current thread ",
    "Stack (most recent",
    "Fatal Python error:",
    "Windows fatal exception:",
    "Timeout (",
    "Error:",
    "Permission Denied:",
    "thread '",
    "Traceback for thread ",
    "The frame stack for thread ",
)
"""First words of the lines that can open a dump; other lines skip the parser when idle."""

_FRAME_LIKE = re.compile(
    r' {4}\S.* \([^()]*\)$| {1,2}File (?:".*"|\?\?\?), line (?:\d+|\?\?\?) in '
)
"""A line that may be a py-spy or faulthandler frame line (``frame_line`` / ``fh_frame`` of
``pyspy.lark`` decide); other indented lines skip the parser while no dump is open."""

_LOCALS_INDENT = " " * 8
"""py-spy ``--locals`` lines are indented at least this far (header 8, variables 12)."""

_MAX_RUN = 256
"""Frame lines held while a headless run waits for a Python frame; more start it afresh."""

_ROOT_FUNCS = frozenset({"<module>", "_bootstrap", "_run_module_as_main"})
"""Outermost frames of a complete stack: a script, a ``threading`` thread, ``python -m``."""

_MAX_ARGV_LINES = 200
"""A py-spy header whose argv runs longer than this is not a header."""

_PYSPY_ERRORS = re.compile(
    r"Failed to (get|find|open|suspend|merge|read|load|copy)|[Pp]ython version|"
    r"Unsupported version|coredump|No such process|os error \d+|[Pp]ermission|panicked"
)
"""py-spy's own error messages: an ``Error:`` line without any of these is someone else's."""


def _known_elsewhere(text: str) -> bool:
    """Say whether an ``Error:`` line holds another program's known message (the catalogs'),
    not py-spy's: that line is evidence for the other readers (``Error: NVRM: Xid ...``)."""
    message = text.removeprefix("Error:").strip()
    if _PYSPY_ERRORS.search(message):
        return False
    found = load_catalog().match(message)
    return found is not None and found.whole


_C_SOURCE = re.compile(r"\.(c|cc|cpp|cxx|h|hh|hpp|cu|cuh|rs)$")


# ---- line shapes (what one parsed line says; never leaves this module) -------------------


@dataclass(frozen=True, slots=True)
class _Header:
    kind: str  # "process", "parent", "signal"
    number: int
    text: str


@dataclass(frozen=True, slots=True)
class _Python:
    version: str
    exe: str | None


@dataclass(frozen=True, slots=True)
class _Thread:
    fmt: str
    tid: int | None
    state: str | None
    name: str | None


@dataclass(frozen=True, slots=True)
class _FrameShape:
    fmt: str
    frame: Frame
    exact: bool = False
    """The line is what :func:`format_frame_line` rebuilds from ``frame``."""


@dataclass(frozen=True, slots=True)
class _Local:
    name: str
    value: str


@dataclass(frozen=True, slots=True)
class _Note:
    """A line that belongs to a dump but adds nothing to the model (``Locals:``, ``  ...``)."""

    fmt: str


@dataclass(frozen=True, slots=True)
class _Separator:
    pass


@dataclass(frozen=True, slots=True)
class _Reason:
    text: str


@dataclass(frozen=True, slots=True)
class _Error:
    text: str
    start: bool


_Shape = _Header | _Python | _Thread | _FrameShape | _Local | _Note | _Separator | _Reason | _Error


def _tid(token: Token) -> int:
    text = str(token)
    return int(text, 16) if text[:2] in ("0x", "0X") else int(text)


def _rest(items: list[Any]) -> str:
    return str(items[0]).strip() if items else ""


def _is_native(file: str, line: int | None) -> bool:
    """Tell a native frame from a Python one by its location (py-spy text has no flag)."""
    if file.startswith("<") or file.endswith((".py", ".pyx", ".pyw")):
        return False
    return line is None or _C_SOURCE.search(file) is not None


_PYSTACK_HEAD = re.compile(
    r" (?:\((?P<name>.*)\) )?(?:\[(?P<status>[^\]]*)\] )?\(most recent call last\):"
)
"""The rest of a pystack thread header: `` (python3) [Has the GIL] (most recent call last):``."""
_PYSTACK_LIBRARY = re.compile(r" \([^()]*\)(?: \(inlined\))?$| \(inlined\) \([^()]*\)$")
"""The library a pystack native frame names after its function: `` (/usr/lib/libc.so.6)``."""


class _LineTransformer(Transformer[Token, _Shape]):
    """Turn the tree of one line into its shape; method names follow the grammar rules."""

    def process_line(self, items: list[Any]) -> _Shape:
        return _Header("process", int(items[0]), _rest(items[1:]))

    def parent_line(self, items: list[Any]) -> _Shape:
        return _Header("parent", int(items[0]), _rest(items[1:]))

    def signal_line(self, items: list[Any]) -> _Shape:
        return _Header("signal", int(items[0]), _rest(items[1:]))

    def python_line(self, items: list[Any]) -> _Shape:
        return _Python(str(items[0]), str(items[1]) if len(items) > 1 else None)

    def pyspy_thread(self, items: list[Any]) -> _Shape:
        tid = state = name = None
        for item in items:
            if item.type == "TID":
                tid = _tid(item)
            elif item.type == "STATUS":
                state = str(item)
            else:
                name = str(item)[1:-1]
        return _Thread(PYSPY, tid, state, name)

    def file_line(self, items: list[Any]) -> tuple[str, int | None]:
        return str(items[0]), int(items[1])

    def file_only(self, items: list[Any]) -> tuple[str, int | None]:
        return str(items[0]), None

    def frame_line(self, items: list[Any]) -> _Shape:
        file, line = items[1]
        func = str(items[0])
        frame = Frame(func=func, file=file, line=line or None, native=_is_native(file, line))
        return _FrameShape(PYSPY, frame)

    def locals_header(self, items: list[Any]) -> _Shape:
        return _Note(PYSPY)

    def local_var(self, items: list[Any]) -> _Shape:
        return _Local(str(items[0]), str(items[1]) if len(items) > 1 else "")

    def separator(self, items: list[Any]) -> _Shape:
        return _Separator()

    def fh_name(self, items: list[Any]) -> str:
        return str(items[0])

    def fh_thread(self, items: list[Any]) -> _Shape:
        return _Thread(FAULTHANDLER, _tid(items[0]), None, items[1] if len(items) > 1 else None)

    def fh_current(self, items: list[Any]) -> _Shape:
        name = items[1] if len(items) > 1 else None
        return _Thread(FAULTHANDLER, _tid(items[0]), "current", name)

    def fh_stack(self, items: list[Any]) -> _Shape:
        return _Thread(FAULTHANDLER, None, "current", None)

    def fh_frame(self, items: list[Any]) -> _Shape:
        file, line, func = str(items[1]), str(items[2]), str(items[3])
        frame = Frame(
            func=func,
            file=None if file == "???" else file[1:-1],
            line=None if line == "???" else int(line),
        )
        return _FrameShape(FAULTHANDLER, frame)

    def fh_fatal(self, items: list[Any]) -> _Shape:
        return _Reason(f"{items[0]} {_rest(items[1:])}".strip())

    def fh_timeout(self, items: list[Any]) -> _Shape:
        return _Reason(f"Timeout ({items[0]})!")

    def fh_no_frame(self, items: list[Any]) -> _Shape:
        return _Note(FAULTHANDLER)

    fh_more_frames = fh_more_threads = fh_runtime = fh_extensions = fh_no_frame
    fh_c_stack = fh_c_frame = fh_no_frame

    def ps_thread(self, items: list[Any]) -> _Shape:
        head = _PYSTACK_HEAD.fullmatch(str(items[1]))
        name = head.group("name") if head else None
        status = head.group("status") if head else ""
        return _Thread(PYSTACK, int(items[0]), "gil" if "Has the GIL" in status else None, name)

    def ps_frame(self, items: list[Any]) -> _Shape:
        kind, file, line, rest = str(items[0]), str(items[1])[1:-1], int(items[2]), str(items[3])
        native = "(C)" in kind
        func = rest
        if native and (library := _PYSTACK_LIBRARY.search(rest)) is not None:
            func = rest[: library.start()]  # `start_thread (/usr/lib/libc.so.6)`
        frame = Frame(
            func=func,
            file=None if file == "???" else file,
            line=line or None,
            native=native,
        )
        return _FrameShape(PYSTACK, frame)

    def ps_note(self, items: list[Any]) -> _Shape:
        return _Note(PYSTACK)

    def error_line(self, items: list[Any]) -> _Shape:
        return _Error(f"{items[0]} {_rest(items[1:])}".strip(), start=True)

    def error_detail(self, items: list[Any]) -> _Shape:
        return _Error(str(items[0]).strip(), start=False)


@cache
def _parser() -> Lark:
    """Build the line parser once per process."""
    return load_parser("pyspy.lark", transformer=_LineTransformer)


_ARGV_RANK = re.compile(r"(?:^|\s)--(?:global[_-])?rank[= ](\d{1,6})\b")
"""A process's global rank on its command line (``--rank 3``, ``--rank=3``, ``--global_rank 3``;
not ``--local_rank`` or ``--node_rank``)."""


_QUICK = re.compile(
    r"Process (?P<pid>\d{1,18}):(?: (?P<argv>.+))?"
    r"|Thread (?P<tid>0[xX][0-9a-fA-F]{1,16}|\d{1,18}) "
    r"\((?P<state>active\+gil|active|idle|gil)\): (?P<name>\".*\")"
)
"""The py-spy lines that differ between the ranks of one job, so that the cache below does
not help: a ``Process`` header (its pid) and a full ``Thread`` header (its id). Every line
this matches parses with rule ``process_line`` or ``pyspy_thread`` of ``pyspy.lark`` to the
shape built from these groups (a unit test holds the two to that)."""


def _quick_shape(found: re.Match[str]) -> _Shape:
    """The shape of a line ``_QUICK`` matched, as the grammar's transformer builds it."""
    tid = found["tid"]
    if tid is None:
        return _Header("process", int(found["pid"]), (found["argv"] or "").strip())
    number = int(tid, 16) if tid[:2] in ("0x", "0X") else int(tid)
    return _Thread(PYSPY, number, found["state"], found["name"][1:-1])


_BARE_FRAMES = {
    PYSPY: (re.compile(r"[ \t]*[^\s(][^()]* \([^()\s]+(?::\d+|\.so[^()\s]*)\)$"), " " * 4),
    FAULTHANDLER: (re.compile(r'[ \t]*File (?:".*"|\?\?\?), line (?:\d+|\?\?\?) in '), " " * 2),
}
"""Frame lines of an open dump whose indentation is not their format's: lost (a page that
collapsed blanks, a paste trimmed at the margin) or added (a dump pasted under a heading with
a tab or a quote's indent before each line), and the indentation their format gives them."""


def _reindented(text: str, fmt: str) -> _FrameShape | None:
    """Read ``text`` as a frame of an open dump of format ``fmt`` whose indentation was lost."""
    bare = _BARE_FRAMES.get(fmt)
    if bare is None or not bare[0].match(text):
        return None
    shape = _parse_line(bare[1] + text.lstrip())
    return shape if isinstance(shape, _FrameShape) and shape.fmt == fmt else None


@lru_cache(maxsize=1 << 16)
def _parse_line(text: str) -> _Shape | None:
    """Parse one line with the ``start`` rule of ``pyspy.lark``; None when it has no known shape.

    Cached: the ranks of one job print the same frame lines, and shapes are immutable. The
    headers that name a pid or a thread id take a regular expression instead of the parser
    (``_QUICK``): a dump file of each rank holds a few, each seen once.
    """
    quick = _QUICK.fullmatch(text)
    if quick is not None:
        return _quick_shape(quick)
    try:
        shape = _parser().parse(text)
    except (LarkError, ValueError):  # ValueError: an integer longer than int() accepts
        return None
    if isinstance(shape, _FrameShape):
        # Decided once per distinct line, so a frame costs no copy of its line when evidence
        # can rebuild it (see Frame.raw).
        return replace(shape, exact=format_frame_line(shape.fmt, shape.frame) == text)
    return shape if isinstance(shape, _Shape) else None


def _frame(shape: _FrameShape, no: int, raw: str, text: str) -> Frame:
    """The frame of line ``no``: ``raw`` as read, ``text`` as parsed (right-stripped)."""
    parsed = shape.frame
    # The shape was parsed from the prefix-stripped, right-stripped text; evidence quotes
    # the raw line, which the fields rebuild only when the two are the same.
    rebuilt = shape.exact and raw == text
    return Frame(
        func=parsed.func,
        file=parsed.file,
        line=parsed.line,
        native=parsed.native,
        at=no,
        raw=None if rebuilt else raw,
    )


_PLAIN_FRAMES: dict[tuple[str, str, int], Frame] = {}
"""(Dump format, frame line as read, its number) -> the frame it gives.

The ranks of one job print the same stacks, mostly on the same lines of their dump files:
frames are immutable, so one object serves them all. Bounded like ``_parse_line``."""

_SHARED_LINE_CHARS = 1024
"""Longer frame lines are not kept in ``_PLAIN_FRAMES`` (which would hold them alive)."""


# ---- assembling dumps ---------------------------------------------------------------------


@dataclass(slots=True)
class _ThreadBuilder:
    tid: int | None
    name: str | None
    state: str | None
    frames: list[Frame] = field(default_factory=list)
    locals: list[tuple[str, str]] = field(default_factory=list)

    def flush_locals(self) -> None:
        if self.locals and self.frames:
            self.frames[-1] = replace(self.frames[-1], locals=tuple(self.locals))
        self.locals = []


@dataclass(slots=True)
class _DumpBuilder:
    fmt: str
    first: Line
    lines: list[int]
    pid: int | None = None
    argv: list[str] = field(default_factory=list)
    in_header: bool = False
    python: str | None = None
    exe: str | None = None
    parent_pid: int | None = None
    reason: str | None = None
    threads: list[_ThreadBuilder] = field(default_factory=list)
    last_no: int = 0
    last_was_frame: bool = False
    headless: bool = False
    """Its first thread's header line is missing (cut away above the first frame)."""

    def take(self, line: Line, *, frame: bool = False) -> None:
        self.lines.append(line.no)
        self.last_no = line.no
        self.last_was_frame = frame

    def add_thread(self, shape: _Thread, line: Line) -> None:
        if self.threads:
            self.threads[-1].flush_locals()
        self.threads.append(_ThreadBuilder(shape.tid, shape.name, shape.state))
        self.take(line)

    def add_frame(self, frame: Frame, no: int) -> None:
        """Add ``frame``, printed on line ``no``, to the last thread."""
        if not self.threads:
            # The excerpt lost the thread's header line: the frames still belong to a thread,
            # one whose id, name and state are unknown.
            self.threads.append(_ThreadBuilder(None, None, None))
            self.headless = True
        thread = self.threads[-1]
        if thread.locals:
            thread.flush_locals()
        thread.frames.append(frame)
        self.lines.append(no)
        self.last_no = no
        self.last_was_frame = True

    def new_thread_starts_dump(self, shape: _Thread, line: Line) -> bool:
        """Tell whether a thread header opens the next dump rather than continuing this one."""
        if shape.tid is not None and any(t.tid == shape.tid for t in self.threads):
            return True
        if self.fmt != FAULTHANDLER:
            return False
        if shape.state == "current":
            # One thread of a dump is the current one, listed among the others: the first
            # ``Current thread`` of a dump continues it even where a paste lost the blank
            # line before it; a second one opens the next dump.
            return any(t.state == "current" for t in self.threads)
        # faulthandler puts a blank line between the threads of one dump and nothing between
        # two dumps: a thread header right after a frame line starts a new dump.
        return self.last_was_frame and line.no == self.last_no + 1

    def looks_cut(self) -> bool:
        """Guess whether the dump ended early.

        It did when the argv never reached its ``Python`` line, when it holds no thread (a
        dumper prints at least one), when its first thread lost its header line, or when the
        last thread's outermost frame is not where stacks start (a script, a thread,
        ``python -m``).
        """
        if self.in_header or self.headless or not self.threads:
            return True
        if not self.threads[-1].frames:
            return False
        outermost = self.threads[-1].frames[-1]
        return not outermost.native and outermost.func.rsplit(".", 1)[-1] not in _ROOT_FUNCS

    def build(self, source: str) -> StackDump:
        for thread in self.threads:
            thread.flush_locals()
            if self.fmt == PYSTACK:
                thread.frames.reverse()  # printed oldest call first; kept innermost first
        main = self._main_index()
        if self.fmt == PYSTACK and self.pid is None and main is not None:
            # pystack names no process; a Linux process's main thread has its pid as id.
            self.pid = self.threads[main].tid
        threads = tuple(
            ThreadStack(
                tid=t.tid, name=t.name, state=t.state, frames=tuple(t.frames), is_main=i == main
            )
            for i, t in enumerate(self.threads)
        )
        hint = self.first.hint
        origin = replace(hint, pid=self.pid) if self.pid is not None else hint
        argv = "\n".join(self.argv)
        if origin.rank is None and (named := _ARGV_RANK.search(argv)) is not None:
            # The script's own ``--rank 3`` on py-spy's ``Process 2204: python train.py --rank 3``.
            origin = replace(origin, rank=int(named.group(1)))
        return StackDump(
            ref=SourceRef(source, self.first.no),
            text=self.first.raw,
            origin=origin,
            fmt=self.fmt,
            pid=self.pid,
            cmdline="\n".join(self.argv).strip() or None,
            python=self.python,
            threads=threads,
            truncated=self.looks_cut(),
            last_line=self.last_no,
            parent_pid=self.parent_pid,
            exe=self.exe,
            reason=self.reason,
        )

    def _main_index(self) -> int | None:
        """Pick the main thread's position.

        In order: named ``MainThread`` (py-spy) or ``Current thread`` (faulthandler),
        ``tid == pid``, the first thread whose outermost Python frame is ``<module>``.
        """
        mark = "MainThread" if self.fmt == PYSPY else "current"
        for i, t in enumerate(self.threads):
            if (t.name if self.fmt == PYSPY else t.state) == mark:
                return i
        for i, t in enumerate(self.threads):
            if self.pid is not None and t.tid == self.pid:
                return i
        for i, t in enumerate(self.threads):
            # The outermost Python frame (native frames such as `_start` may lie below it).
            outer = next((f for f in reversed(t.frames) if not f.native), None)
            if outer is not None and outer.func == "<module>":
                return i
        # faulthandler lists the newest thread first, so the main thread comes last.
        if self.fmt == FAULTHANDLER and self.threads:
            return len(self.threads) - 1
        return None


@dataclass(slots=True)
class _ErrorBuilder:
    first: Line
    message: str
    lines: list[int]
    details: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Run:
    """Frame lines outside any dump that may yet open a headless one (module docstring)."""

    fmt: str
    writer: tuple[str | None, int | None, int | None, int | None]
    lines: list[tuple[Line, _Shape]] = field(default_factory=list)
    stack_lines: int = 0
    """Frame lines and ``--locals`` headers in ``lines``."""
    python: bool = False
    """One of the frames is a Python frame."""

    def qualifies(self) -> bool:
        return self.stack_lines >= 2 and self.python


def _writer(line: Line) -> tuple[str | None, int | None, int | None, int | None]:
    """Who wrote ``line`` as its prefixes say; the lines of one run share it."""
    hint = line.hint
    return (hint.host, hint.pid, hint.rank, hint.local_rank)


class StackReader(Reader):
    """Assemble py-spy text dumps, py-spy error output and faulthandler dumps into events.

    Every line of a dump is named in its :class:`StackDump` event (so it counts as
    recognized) except lines inside a dump that have no known shape, which stay
    unrecognized without ending the dump when they are indented.
    """

    name = "stacks"

    def __init__(self, source: str) -> None:
        super().__init__(source)
        self._dump: _DumpBuilder | None = None
        self._error: _ErrorBuilder | None = None
        self._separators: list[int] | None = None
        """Separator lines after a ``--subprocesses`` block, waiting for the next ``Process``."""
        self._run: _Run | None = None
        """Frame lines declined so far that may open a headless dump (see :meth:`_extend_run`)."""

    def busy(self) -> bool:
        """Return True while a dump, an error message or a subprocess separator run is open."""
        return self._dump is not None or self._error is not None or self._separators is not None

    def feed(self, line: Line, sink: Sink) -> bool:
        """Offer ``line``; return True when it belongs to a stack dump or a py-spy error."""
        text = line.text.rstrip()
        shape = _parse_line(text) if self._may_take(text) else None
        if shape is None and self._dump is not None and not self._dump.in_header:
            shape = _reindented(text, self._dump.fmt)
        if self._error is not None:
            if isinstance(shape, _Error) and not shape.start:
                self._error.lines.append(line.no)
                self._error.details.append(shape.text)
                return True
            self._close_error(sink)
        if self._separators is not None:
            if isinstance(shape, _Separator):
                self._separators.append(line.no)
                return True
            if not (isinstance(shape, _Header) and shape.kind == "process"):
                self._separators = None
        if self._dump is not None:
            if self._dump.in_header and self._header(line, text, shape):
                return True
            if self._continue(line, shape, sink):
                return True
            self._close(sink)
        if self._start(line, shape):
            self._run = None
            return True
        return self._extend_run(line, shape, sink)

    def _may_take(self, text: str) -> bool:
        """Tell whether ``text`` is worth parsing: only dump lines are, most log lines not."""
        if self.busy() or text.startswith(_STARTS):
            return True
        if text[:1] != " ":
            return False
        if self._run is not None and text.startswith(_LOCALS_INDENT):
            return True
        return _FRAME_LIKE.match(text) is not None

    def feed_plain(self, no: int, text: str, sink: Sink) -> bool:
        """:meth:`feed` line ``no`` as it was read: no prefix stripped, nothing cleaned away.

        A frame line inside an open dump, most lines of a dump file, is added without
        building a :class:`Line`; every other line goes through :meth:`feed`.
        """
        dump = self._dump
        if (
            dump is not None
            and not dump.in_header
            and self._error is None
            and self._separators is None
        ):
            key = (dump.fmt, text, no)
            frame = _PLAIN_FRAMES.get(key)
            if frame is None:
                stripped = text.rstrip()
                shape = _parse_line(stripped)
                if type(shape) is _FrameShape and shape.fmt == dump.fmt:
                    frame = _frame(shape, no, text, stripped)
                    if len(text) <= _SHARED_LINE_CHARS:
                        if len(_PLAIN_FRAMES) >= 1 << 16:
                            _PLAIN_FRAMES.clear()
                        _PLAIN_FRAMES[key] = frame
            if frame is not None:
                dump.add_frame(frame, no)
                return True
        return self.feed(Line(no, text, text), sink)

    def close(self, sink: Sink) -> None:
        """Emit what is still open at the end of the input."""
        if self._error is not None:
            self._close_error(sink)
        if self._dump is not None:
            self._close(sink)
        self._separators = None
        self._run = None

    def _extend_run(self, line: Line, shape: _Shape | None, sink: Sink) -> bool:
        """Add ``line`` to the run of frame lines outside a dump; open a dump once it qualifies.

        Returns True when the line opened a headless dump (which then holds the whole run);
        the lines before it were declined, so other readers had them first.
        """
        run = self._run
        if run is not None and run.lines[-1][0].no == line.no:
            return False  # the same line offered again from behind a prefix
        if not isinstance(shape, (_FrameShape, _Note, _Local)):
            # Not cleared: the dispatcher may offer this line again from behind an unknown
            # prefix, as a frame; the next line's number tells whether the run goes on.
            return False
        fmt = shape.fmt if isinstance(shape, (_FrameShape, _Note)) else PYSPY
        if (
            run is None
            or run.fmt != fmt
            or run.lines[-1][0].no + 1 != line.no
            or run.lines[-1][0].no in sink.recognized
            or run.writer != _writer(line)
            or len(run.lines) >= _MAX_RUN
        ):
            run = None
        if run is None:
            # A run starts at a frame line; a locals line or a note alone starts nothing.
            if not isinstance(shape, _FrameShape):
                self._run = None
                return False
            run = self._run = _Run(fmt, _writer(line))
        if isinstance(shape, _FrameShape):
            run.stack_lines += 1
            run.python = run.python or not shape.frame.native
        elif isinstance(shape, _Note):
            if fmt != PYSPY:  # faulthandler's notes (``  ...``) do not extend a run
                return False
            run.stack_lines += 1  # a --locals header
        run.lines.append((line, shape))
        if not run.qualifies():
            return False
        self._run = None
        first = run.lines[0][0]
        self._dump = _DumpBuilder(fmt, first, [], last_no=first.no, headless=True)
        for held, held_shape in run.lines:
            self._continue(held, held_shape, sink)
        return True

    def _header(self, line: Line, text: str, shape: _Shape | None) -> bool:
        """Handle a line while the py-spy ``Process`` header is open (argv may span lines)."""
        dump = self._dump
        assert dump is not None
        if isinstance(shape, _Python):
            dump.python, dump.exe, dump.in_header = shape.version, shape.exe, False
            dump.take(line)
            return True
        if isinstance(shape, _Thread) and shape.fmt == PYSPY:
            dump.in_header = False
            return False
        if (
            isinstance(shape, _FrameShape)
            and shape.fmt == PYSPY
            and not shape.frame.native
            and shape.frame.line is not None
        ):
            # A frame line with its `file:line` is no program text: the `Python` and `Thread`
            # lines between were cut out of the excerpt.
            dump.in_header = False
            return False
        if isinstance(shape, _Header) and shape.kind in ("process", "signal"):
            return False
        if len(dump.argv) >= _MAX_ARGV_LINES:
            return False
        dump.argv.append(text)
        dump.take(line)
        return True

    def _continue(self, line: Line, shape: _Shape | None, sink: Sink) -> bool:
        """Add ``line`` to the open dump; return False when it does not belong there."""
        dump = self._dump
        assert dump is not None
        if isinstance(shape, _Thread) and shape.fmt == dump.fmt:
            if dump.new_thread_starts_dump(shape, line):
                return False
            dump.add_thread(shape, line)
        elif isinstance(shape, _FrameShape) and shape.fmt == dump.fmt:
            dump.add_frame(_frame(shape, line.no, line.raw, line.text.rstrip()), line.no)
        elif isinstance(shape, _Note) and shape.fmt == dump.fmt:
            dump.take(line)
        elif isinstance(shape, _Local) and dump.fmt == PYSPY and dump.threads:
            dump.threads[-1].locals.append((shape.name, shape.value))
            dump.take(line)
        elif isinstance(shape, _Header) and dump.fmt == PYSPY:
            if shape.kind == "parent" and not dump.threads:
                dump.parent_pid = shape.number
            elif shape.kind == "process" and dump.pid is None and not dump.threads:
                # --core: the `Signal` line comes before the `Process` header.
                dump.pid, dump.argv, dump.in_header = shape.number, [shape.text], True
            else:
                return False
            dump.take(line)
        elif isinstance(shape, _Python) and dump.fmt == PYSPY:
            if dump.threads or dump.python is not None:
                return False
            dump.python, dump.exe = shape.version, shape.exe
            dump.take(line)
        elif isinstance(shape, _Separator) and dump.fmt == PYSPY:
            dump.take(line)
            self._close(sink)
            self._separators = []
        elif isinstance(shape, _Reason) and dump.fmt == FAULTHANDLER:
            if dump.threads or dump.reason is not None:
                return False
            dump.reason = shape.text
            dump.take(line)
        elif shape is None and dump.fmt == PYSTACK and line.text[:1].isspace() and dump.threads:
            # pystack prints a frame's source line, and with --locals its names and values,
            # indented under it (its frames carry their `(Python)`/`(C)` mark): part of the
            # dump, nothing to parse.
            dump.take(line, frame=dump.last_was_frame)
        else:
            # An indented line inside a dump (a wrapped frame, a hand edit) is not understood,
            # but it does not end the dump either.
            return shape is None and line.text[:1].isspace() and bool(dump.threads)
        return True

    def _start(self, line: Line, shape: _Shape | None) -> bool:
        """Open a dump or an error message at ``line``; return False when it opens neither."""
        if isinstance(shape, _Error):
            # Only py-spy's own errors open one: ``RuntimeError: Error: Custom DeepSpeed
            # backend called ...`` is another program's message behind its exception type.
            if not shape.start or _known_elsewhere(shape.text):
                return False
            if not _PYSPY_ERRORS.search(shape.text):
                return False
            self._error = _ErrorBuilder(line, shape.text, [line.no])
            return True
        if isinstance(shape, _Header) and shape.kind in ("process", "signal"):
            dump = _DumpBuilder(PYSPY, line, [*(self._separators or ()), line.no], last_no=line.no)
            if shape.kind == "process":
                dump.pid, dump.argv, dump.in_header = shape.number, [shape.text], True
            else:
                dump.reason = f"Signal {shape.number}"
        elif isinstance(shape, _Python):
            dump = _DumpBuilder(PYSPY, line, [line.no], last_no=line.no)
            dump.python, dump.exe = shape.version, shape.exe
        elif isinstance(shape, _Thread):
            dump = _DumpBuilder(shape.fmt, line, [], last_no=line.no)
            dump.add_thread(shape, line)
        elif isinstance(shape, _Reason):
            dump = _DumpBuilder(FAULTHANDLER, line, [line.no], reason=shape.text, last_no=line.no)
        else:
            return False
        self._separators = None
        self._dump = dump
        return True

    def _close(self, sink: Sink) -> None:
        dump = self._dump
        self._dump = None
        if dump is not None:
            sink.emit(dump.build(self.source), dump.lines)

    def _close_error(self, sink: Sink) -> None:
        error = self._error
        self._error = None
        if error is None:
            return
        message = error.message
        if message.startswith("Error:"):
            message = message[len("Error:") :].strip()
        cause = next((d for d in error.details if not d.endswith(":")), None)
        if not error.details and not _PYSPY_ERRORS.search(message):
            return  # an `Error:` line from some other program: leave it unrecognized
        if cause is not None:
            cause = re.sub(r"^(Reason:|\d+:)\s*", "", cause)
            message = f"{message} ({cause})"
        hint = error.first.hint
        event = StackDumpError(
            ref=SourceRef(self.source, error.first.no),
            text=error.first.raw,
            origin=hint,
            message=message,
            pid=hint.pid,
        )
        sink.emit(event, error.lines)
