"""Read gdb stacks line by line: ``thread apply all bt``, pstack and ``thread apply all py-bt``.

Each line is parsed on its own with ``grammars/gdb.lark``; :class:`GdbReader` assembles one
:class:`~logsleuth.model.stacks.StackDump` (``fmt == "gdb"``) per gdb session, from the attach
preamble (``[New LWP ...]``) or the first ``Thread N (...)`` header to the
``[Inferior 1 (process N) detached]`` line or the first line that is not gdb's
(docs/stack-dump-formats.md sections 5.1 to 5.3).

gdb numbers threads from 1 (the main thread) and prints the highest number first; the dump
lists them from thread 1 up, like py-spy. ``py-bt`` frames are Python frames (most recent
call first, like every other stack here); ``bt`` frames are native, with the C++ argument
list cut from the function name so that ``c10d::Work::wait`` reads the same as in py-spy's
``--native`` output. A second listing of the same threads in one session (``bt`` then
``py-bt``) is a second dump of the same process.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from functools import cache, lru_cache
from typing import Any

from lark import Lark, Token, Transformer
from lark.exceptions import LarkError

from logsleuth.model.base import SourceRef
from logsleuth.model.stacks import GDB, Frame, StackDump, ThreadStack
from logsleuth.parse.base import Line, Reader, Sink
from logsleuth.parse.grammar import load_parser

_STARTS = ("Thread ", "[New ", "[Thread debugging", "(gdb)", "#")
"""First words of the lines that can open a gdb session; other lines skip the parser when idle."""

_LOCATION = re.compile(r" (?:at (?P<file>\S.*?):(?P<line>\d+)|from (?P<lib>\S+))$")
_ADDRESS = re.compile(r"^0x[0-9a-fA-F]+ in ")
_EXCERPT_START = re.compile(r"#(0 +[^ ].*\(|\d+ +0x[0-9a-fA-F]+ in )")
"""A frame line that may open a headerless excerpt: ``#0 func (args)``, or any frame with its
address. A flight-recorder trace in a log (``#0 all_reduce from file.py:N``) has neither."""


# ---- line shapes (what one parsed line says; never leaves this module) -------------------


@dataclass(frozen=True, slots=True)
class _Header:
    number: int
    pthread: int | None
    lwp: int | None
    name: str | None


@dataclass(frozen=True, slots=True)
class _FrameShape:
    frame: Frame


@dataclass(frozen=True, slots=True)
class _Continuation:
    location: str


@dataclass(frozen=True, slots=True)
class _End:
    pid: int


@dataclass(frozen=True, slots=True)
class _Preamble:
    """A line gdb prints while attaching; it belongs to the session but says nothing."""


@dataclass(frozen=True, slots=True)
class _Note:
    """A line inside a thread that adds no frame (``Traceback ...``, a source line)."""

    source_line: bool = False


_Shape = _Header | _FrameShape | _Continuation | _End | _Preamble | _Note


def _strip_args(text: str) -> tuple[str, str]:
    """Split ``func (args)`` at the balanced parenthesised group that ends ``text``."""
    if not text.endswith(")"):
        return text, ""
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        char = text[i]
        if char == ")":
            depth += 1
        elif char == "(":
            depth -= 1
            if depth == 0:
                return text[:i].rstrip(), text[i:]
    return text, ""


def native_frame(body: str) -> Frame:
    """Turn a gdb frame body (after ``#N``) into a native :class:`Frame`.

    ``0x... in func(sig) (args) at file.c:57`` gives ``func`` with ``file.c`` and line 57;
    ``... from /lib/libc.so.6`` gives the library's base name as the file, like py-spy's
    ``--native`` frames; ``?? ()`` stays ``??``.
    """
    text = _ADDRESS.sub("", body, count=1)
    file: str | None = None
    line: int | None = None
    if match := _LOCATION.search(text):
        if match.group("lib"):
            file = match.group("lib").rsplit("/", 1)[-1]
        else:
            file, line = match.group("file"), int(match.group("line"))
        text = text[: match.start()]
    func, _ = _strip_args(text.rstrip())
    if func.endswith(" const"):
        func = func[: -len(" const")]
    # The C++ signature gdb prints before the argument values: `wait(std::chrono::...)`.
    name, signature = _strip_args(func)
    if signature and name and not name.endswith(("operator", "::")):
        func = name
    return Frame(func=func or "??", file=file, line=line, native=True)


class _LineTransformer(Transformer[Token, _Shape]):
    """Turn the tree of one line into its shape; method names follow the grammar rules."""

    def pthread_target(self, items: list[Any]) -> tuple[int | None, int | None, str | None]:
        pthread = int(str(items[0]), 16)
        lwp = next((int(i) for i in items[1:] if i.type == "INT"), None)
        name = next((str(i)[1:-1] for i in items[1:] if i.type == "QUOTED"), None)
        return pthread, lwp, name

    def lwp_target(self, items: list[Any]) -> tuple[int | None, int | None, str | None]:
        return None, int(items[0]), str(items[1])[1:-1] if len(items) > 1 else None

    def process_target(self, items: list[Any]) -> tuple[int | None, int | None, str | None]:
        return None, int(items[0]), None

    def thread_header(self, items: list[Any]) -> _Shape:
        pthread, lwp, name = items[1]
        return _Header(int(items[0]), pthread, lwp, name)

    def frame_line(self, items: list[Any]) -> _Shape:
        return _FrameShape(native_frame(str(items[1])))

    def continuation(self, items: list[Any]) -> _Shape:
        return _Continuation(str(items[0]).strip())

    def inferior_end(self, items: list[Any]) -> _Shape:
        return _End(int(items[1]))

    def new_thread(self, items: list[Any]) -> _Shape:
        return _Preamble()

    gdb_note = gdb_prompt = source_missing = new_thread

    def backtrace_stopped(self, items: list[Any]) -> _Shape:
        return _Note()

    pybt_head = pybt_unable = pybt_pseudo = elided = backtrace_stopped

    def pybt_source(self, items: list[Any]) -> _Shape:
        return _Note(source_line=True)

    def pybt_frame(self, items: list[Any]) -> _Shape:
        file = str(items[0])[1:-1]
        return _FrameShape(Frame(func=str(items[2]).strip(), file=file, line=int(items[1])))


@cache
def _parser() -> Lark:
    """Build the line parser once per process."""
    return load_parser("gdb.lark", transformer=_LineTransformer)


@lru_cache(maxsize=1 << 14)
def _parse_line(text: str) -> _Shape | None:
    """Parse one line with ``gdb.lark``; None when it has no known shape."""
    try:
        shape = _parser().parse(text)
    except (LarkError, ValueError):  # ValueError: an integer longer than int() accepts
        return None
    return shape if isinstance(shape, _Shape) else None


# ---- assembling sessions -------------------------------------------------------------------


@dataclass(slots=True)
class _ThreadBuilder:
    number: int
    pthread: int | None
    lwp: int | None
    name: str | None
    frames: list[Frame] = field(default_factory=list)


@dataclass(slots=True)
class _SessionBuilder:
    first: Line
    lines: list[int] = field(default_factory=list)
    threads: list[_ThreadBuilder] = field(default_factory=list)
    pid: int | None = None
    ended: bool = False
    last_was_frame: bool = False

    def take(self, line: Line, *, frame: bool = False) -> None:
        self.lines.append(line.no)
        self.last_was_frame = frame

    def build(self, source: str) -> StackDump:
        # gdb prints the highest thread number first; thread 1 is the main thread.
        ordered = sorted(self.threads, key=lambda t: t.number)
        pid = self.pid
        if pid is None:
            pid = next((t.lwp for t in ordered if t.number == 1), None)
        threads = tuple(
            ThreadStack(
                tid=t.lwp if t.lwp is not None else t.pthread,
                name=t.name,
                state=None,
                frames=tuple(t.frames),
                is_main=t.number == 1 or (pid is not None and t.lwp == pid),
            )
            for t in ordered
        )
        origin = replace(self.first.hint, pid=pid) if pid is not None else self.first.hint
        return StackDump(
            ref=SourceRef(source, self.first.no),
            text=self.first.raw,
            origin=origin,
            fmt=GDB,
            pid=pid,
            cmdline=None,
            python=None,
            threads=threads,
            truncated=not self.ended and self._cut(),
            last_line=self.lines[-1] if self.lines else self.first.no,
        )

    def _cut(self) -> bool:
        """Guess whether the listing ended early: the last thread stops short of its start."""
        if not self.threads or not self.threads[-1].frames:
            return False
        outermost = self.threads[-1].frames[-1]
        if not outermost.native:
            return outermost.func != "<module>"
        return outermost.func not in ("clone", "clone3", "_start", "start_thread", "__clone")


class GdbReader(Reader):
    """Assemble gdb ``thread apply all bt`` / ``py-bt`` and pstack output into dumps."""

    name = "stacks"

    def __init__(self, source: str) -> None:
        super().__init__(source)
        self._session: _SessionBuilder | None = None

    def busy(self) -> bool:
        """Return True while a gdb session is open."""
        return self._session is not None

    def feed(self, line: Line, sink: Sink) -> bool:
        """Offer ``line``; return True when it belongs to a gdb session."""
        text = line.text.rstrip()
        if self._session is None and not text.startswith(_STARTS):
            return False
        shape = _parse_line(text)
        if self._session is not None:
            if self._continue(line, shape):
                return True
            self._close(sink)
        return self._start(line, shape)

    def close(self, sink: Sink) -> None:
        """Emit the session still open at the end of the input."""
        self._close(sink)

    def _start(self, line: Line, shape: _Shape | None) -> bool:
        if isinstance(shape, _Preamble):
            self._session = _SessionBuilder(line, [line.no])
            return True
        if isinstance(shape, _Header):
            self._session = _SessionBuilder(line)
            self._session.threads.append(_thread(shape))
            self._session.take(line)
            return True
        if isinstance(shape, _FrameShape) and _EXCERPT_START.match(line.text):
            # A headerless excerpt (`bt` of one thread): the frames belong to some thread.
            self._session = _SessionBuilder(line)
            self._session.threads.append(_ThreadBuilder(1, None, None, None, [_at(shape, line)]))
            self._session.take(line, frame=True)
            return True
        return False

    def _continue(self, line: Line, shape: _Shape | None) -> bool:
        session = self._session
        assert session is not None
        if session.ended:
            return False
        if isinstance(shape, _Header):
            if any(t.number == shape.number for t in session.threads):
                return False  # the same threads listed again: the next dump of this process
            session.threads.append(_thread(shape))
            session.take(line)
        elif isinstance(shape, _FrameShape):
            if not session.threads:
                return False
            if shape.frame.native and _is_first_frame(line.text) and session.threads[-1].frames:
                return False  # `#0` again without a header: another thread's excerpt
            session.threads[-1].frames.append(_at(shape, line))
            session.take(line, frame=True)
        elif isinstance(shape, _Continuation) and session.last_was_frame:
            frames = session.threads[-1].frames
            if frames[-1].native:
                frames[-1] = _continued(frames[-1], shape.location, line)
            session.take(line, frame=True)
        elif isinstance(shape, _Note | _Continuation) and session.threads:
            session.take(line)
        elif isinstance(shape, _End):
            session.pid = shape.pid
            session.ended = True
            session.take(line)
        elif isinstance(shape, _Preamble):
            if session.threads:
                return False
            session.take(line)
        elif not session.threads and _LOCATION.search(line.text.rstrip()):
            # The stop location gdb prints on attach: `__futex_... (...) at ./nptl/x.c:57`.
            session.take(line)
        else:
            return False
        return True

    def _close(self, sink: Sink) -> None:
        session = self._session
        self._session = None
        if session is None:
            return
        if not session.threads:
            return  # a preamble with no thread listing after it: nothing to say
        sink.emit(session.build(self.source), session.lines)


def _is_first_frame(text: str) -> bool:
    """Tell whether ``text`` is a gdb ``#0`` frame line (innermost frame of a thread)."""
    return text.startswith("#0 ")


def _thread(shape: _Header) -> _ThreadBuilder:
    return _ThreadBuilder(shape.number, shape.pthread, shape.lwp, shape.name)


def _at(shape: _FrameShape, line: Line) -> Frame:
    return replace(shape.frame, at=line.no, raw=line.raw)


def _continued(frame: Frame, location: str, line: Line) -> Frame:
    """Complete a wrapped frame with its ``from lib`` / ``at file:line`` continuation."""
    merged = native_frame(f"{frame.func} () {location}")
    return replace(frame, file=merged.file, line=merged.line)
