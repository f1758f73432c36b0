"""Find the inputs: files, directories (recursively), ``.gz`` files and ``-`` (standard input).

Archives (``.tar.gz``, ``.zip`` ...) are read like directories, in memory (:mod:`.archive`).

Problems with one path (missing, unreadable, a symlink loop, a FIFO nobody writes to) are
returned as :class:`Problem` values so that the rest of the input is still analysed; only
the caller decides whether nothing analysable is left. Inputs come back in one canonical
order whatever the order of the arguments, so the same inputs give the same diagnosis.
Standard input, pipes (``<(cat log)``) and FIFOs are read once, as they arrive, into a
temporary file, so they are never held in memory and their first bytes are not lost.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import gzip
import io
import os
import posixpath
import re
import select
import shutil
import stat
import sys
import tempfile
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from logsleuth.parse import budgets
from logsleuth.parse.archive import ArchiveError, is_archive, read_archive
from logsleuth.parse.remote import RemoteError, common_root, is_url, list_url, open_url

_SKIP_NAMES = frozenset({"diagnosis.json", "report.html", "truth.json", "teardown.log"})
"""Outputs of an earlier run inside a bundle directory, what a job printed after live ended
it (live/session.py), and answer keys of test cases."""
_DOC_SUFFIXES = (".md", ".rst")
"""Notes: read only when a directory holds nothing else (an excerpt saved as issue.md)."""
_SKIP_SUFFIXES = (*_DOC_SUFFIXES, ".teardown")
"""Documentation beside the logs (a case's README) is not evidence, nor what NCCL wrote after
live began to end the job (``nccl/NAME.teardown``, live/session.py)."""
_SKIP_DIRS = frozenset({".git", "__pycache__", ".venv", "node_modules"})
_GZIP_MAGIC = b"\x1f\x8b"
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


_URL_GZIP: dict[str, bool] = {}
"""Whether an object read by URL is gzip data, from the first bytes an open read."""


@dataclass(frozen=True, slots=True)
class InputSource:
    """One input to read: a file path, or bytes in memory when ``path`` is None."""

    name: str
    """Display name: the path relative to the common input directory."""
    path: Path | None
    data: bytes | None = None
    """The bytes of an input held in memory (tests, small generated inputs)."""
    url: str | None = None
    """An object read through fsspec (``s3://...``); ``path`` and ``data`` are then None."""
    size: int | None = None
    """The size in bytes when the listing gave it (URLs), for progress and scheduling."""

    def open(self) -> BinaryIO:
        """Open the input for binary reading, transparently decompressing gzip."""
        if self.url is not None:
            handle = open_url(self.url)
            head = handle.read(2)
            handle.seek(0)
            _URL_GZIP[self.url] = head == _GZIP_MAGIC
            if head == _GZIP_MAGIC:
                return gzip.GzipFile(fileobj=handle, mode="rb")  # type: ignore[return-value]
            return handle
        if self.data is not None:
            buffer = io.BytesIO(self.data)
            if self.data[:2] == _GZIP_MAGIC:
                return gzip.GzipFile(fileobj=buffer, mode="rb")  # type: ignore[return-value]
            return buffer
        assert self.path is not None
        with self.path.open("rb") as probe:
            head = probe.read(2)
        if head == _GZIP_MAGIC:
            return gzip.open(self.path, "rb")  # type: ignore[return-value]
        return self.path.open("rb")

    @property
    def compressed(self) -> bool:
        """Return True when the input is gzip data (read decompressed)."""
        if self.data is not None:
            return self.data[:2] == _GZIP_MAGIC
        if self.url is not None:
            if self.url in _URL_GZIP:  # known from an earlier open: no second request
                return _URL_GZIP[self.url]
            try:
                with open_url(self.url) as probe:
                    return probe.read(2) == _GZIP_MAGIC
            except OSError:
                return False
        assert self.path is not None
        try:
            with self.path.open("rb") as probe:
                return probe.read(2) == _GZIP_MAGIC
        except OSError:
            return False


@dataclass(frozen=True, slots=True)
class Problem:
    """A path that cannot be analysed (or only in part), with the reason in one line."""

    name: str
    reason: str
    trace: str = ""
    """The traceback of an unexpected exception, shown only with ``--debug``."""


def display_name(name: str) -> str:
    """Return ``name`` fit to print: undecodable bytes and control characters escaped."""
    text = name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return _CONTROL.sub(lambda m: ascii(m.group())[1:-1], text)


def _skipped(name: str) -> bool:
    return name in _SKIP_NAMES or name.startswith(".") or name.lower().endswith(_SKIP_SUFFIXES)


class _Walk:
    """A directory walk with a depth budget that reports what it cannot enter."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems

    def files(self, top: str, label: str) -> list[tuple[str, str]]:
        """Return (path, path relative to ``top``) of the regular files below ``top``.

        Notes (``.md``, ``.rst``) beside logs are skipped; when the walk finds nothing
        else, the notes are returned: they are the excerpt.
        """
        found: list[tuple[str, str]] = []
        notes: list[tuple[str, str]] = []
        stack: list[tuple[str, str, int]] = [(top, "", 0)]
        while stack:
            directory, rel, depth = stack.pop()
            try:
                with os.scandir(directory) as scan:
                    entries = sorted(scan, key=lambda e: e.name)
            except OSError as exc:
                where = display_name(os.path.join(label, rel)) if rel else display_name(label)
                self.problems.append(Problem(where, f"cannot list directory: {_reason(exc)}"))
                continue
            subdirs: list[tuple[str, str, int]] = []
            for entry in entries:
                name = entry.name
                child = os.path.join(rel, name) if rel else name
                child_label = os.path.join(label, child)
                try:
                    is_dir = entry.is_dir(follow_symlinks=False)
                    is_file = not is_dir and entry.is_file()
                except OSError as exc:
                    self.problems.append(Problem(display_name(child_label), _reason(exc)))
                    continue
                if not (is_dir or is_file) and entry.is_symlink():
                    reason = _missing_reason(entry.path)
                    self.problems.append(Problem(display_name(child_label), reason))
                    continue
                if is_dir:
                    if name in _SKIP_DIRS or name.startswith("."):
                        continue
                    if depth + 1 > budgets.DIR_DEPTH:
                        self.problems.append(
                            Problem(
                                display_name(child_label),
                                f"nested more than {budgets.DIR_DEPTH} directories deep; "
                                "not searched",
                            )
                        )
                        continue
                    subdirs.append((entry.path, child, depth + 1))
                elif is_file and not _skipped(name):
                    found.append((entry.path, child))
                elif is_file and name.lower().endswith(_DOC_SUFFIXES) and not name.startswith("."):
                    notes.append((entry.path, child))
            stack.extend(reversed(subdirs))
        # A directory of nothing but notes (an excerpt kept as issue.md) is that evidence.
        return found or notes


def _reason(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "symbolic link loop"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if exc.errno == errno.ENAMETOOLONG:
        return "path too long"
    if exc.errno == errno.ETIMEDOUT and exc.strerror:
        return exc.strerror
    return (exc.strerror or str(exc)).lower()


def _missing_reason(path: str) -> str:
    if not os.path.islink(path):
        return "no such file or directory"
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "symbolic link loop"
    return "broken symbolic link (its target does not exist)"


_SPOOL_DIR: list[str] = []


def _spool_dir() -> str:
    if not _SPOOL_DIR:
        made = tempfile.mkdtemp(prefix="logsleuth-")
        atexit.register(shutil.rmtree, made, True)
        _SPOOL_DIR.append(made)
    return _SPOOL_DIR[0]


def _spool(stream: BinaryIO | int) -> Path:
    """Copy a stream (a file object or a file descriptor) into a temporary file, in pieces."""
    fd, name = tempfile.mkstemp(dir=_spool_dir(), suffix=".input")
    with os.fdopen(fd, "wb") as out:
        if isinstance(stream, int):
            while chunk := os.read(stream, 1 << 20):
                out.write(chunk)
        else:
            shutil.copyfileobj(stream, out, 1 << 20)
    return Path(name)


def _spool_pipe(path: str) -> Path:
    """Read a FIFO or pipe without blocking forever on one that has no writer.

    Raises:
        OSError: it cannot be opened, or nothing was written to it within the wait budget.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLHUP)
        deadline = time.monotonic() + budgets.PIPE_WAIT_S
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise OSError(
                    errno.ETIMEDOUT,
                    f"FIFO or pipe with no writer (nothing within {budgets.PIPE_WAIT_S:g} s)",
                )
            if poller.poll(int(left * 1000) + 1):
                break
        os.set_blocking(fd, True)
        return _spool(fd)
    finally:
        os.close(fd)


def _common_dir(roots: Sequence[str]) -> str | None:
    if not roots:
        return None
    try:
        return os.path.commonpath(roots)
    except ValueError:  # different drives
        return None


def discover(
    args: Sequence[str], stdin: BinaryIO | None = None
) -> tuple[list[InputSource], list[Problem]]:
    """Expand command-line paths into inputs, in one canonical order.

    Args:
        args: Paths as given: files, directories, ``.gz`` files, ``-`` for standard input.
        stdin: Where ``-`` reads from (defaults to ``sys.stdin.buffer``).

    Returns:
        The inputs (display names relative to their common directory, sorted by them; each
        file once however often it was named) and the problems, sorted by name.
    """
    files: dict[tuple[int, int], tuple[str, str]] = {}
    """(device, inode) -> (real path, path to open), so a file named twice is read once."""
    roots: list[str] = []
    problems: list[Problem] = []
    walk = _Walk(problems)
    streams: dict[str, Path] = {}
    urls = sorted({a for a in args if is_url(a)})
    for arg in sorted(set(args) - set(urls)):
        if arg == "-":
            stream = stdin if stdin is not None else sys.stdin.buffer
            streams["<stdin>"] = _spool(stream)
            continue
        label = display_name(arg)
        try:
            info = os.stat(arg)
        except OSError as exc:
            reason = _missing_reason(arg) if exc.errno == errno.ENOENT else _reason(exc)
            problems.append(Problem(label, reason))
            continue
        if not (stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode)):
            if not stat.S_ISFIFO(info.st_mode):
                problems.append(Problem(label, "not a file, a directory or a pipe"))
                continue
            try:
                streams[label] = _spool_pipe(arg)
            except OSError as exc:
                problems.append(Problem(label, _reason(exc)))
            continue
        real = os.path.realpath(arg)
        if stat.S_ISDIR(info.st_mode):
            found = walk.files(arg, label)
            if not found:
                problems.append(Problem(label, "directory contains no files"))
                continue
            roots.append(real)
            for path, rel in found:
                try:
                    st = os.stat(path)
                except OSError as exc:
                    problems.append(Problem(display_name(path), _reason(exc)))
                    continue
                files.setdefault((st.st_dev, st.st_ino), (os.path.join(real, rel), path))
        elif not os.access(arg, os.R_OK):
            problems.append(Problem(label, "permission denied"))
        else:
            files.setdefault((info.st_dev, info.st_ino), (real, arg))
            roots.append(real if is_archive(Path(real)) else os.path.dirname(real))
    base = _common_dir(roots)
    sources: list[tuple[str, str, InputSource]] = []
    for real, path in files.values():
        name = os.path.relpath(real, base) if base is not None else real
        shown = display_name(name)
        if is_archive(Path(path)):
            archived = _archive_sources(path, name, problems)
            sources.extend((s.name, f"{real}:{s.name}", s) for s in archived)
            continue
        sources.append((shown, real, InputSource(name=shown, path=Path(path))))
    for label, spooled in streams.items():
        sources.append((label, label, InputSource(name=label, path=spooled)))
    sources.extend(_url_sources(urls, problems))
    sources.sort(key=lambda item: (item[0], item[1]))
    problems.sort(key=lambda p: (p.name, p.reason))
    return [s for _, _, s in sources], problems


def _url_sources(
    urls: Sequence[str], problems: list[Problem]
) -> list[tuple[str, str, InputSource]]:
    """List URL inputs (fsspec); names relative to the common root of the URLs given."""
    listed: list[tuple[str, list[tuple[str, str, int]]]] = []
    for url in urls:
        try:
            listed.append(list_url(url, _member_skipped))
        except RemoteError as exc:
            problems.append(Problem(display_name(url), str(exc)))
    base = common_root([root for root, _ in listed])
    found: dict[str, tuple[str, str, InputSource]] = {}
    for root, objects in listed:
        for full, rel, size in objects:
            where = f"{root}/{rel}"
            name = where[len(base) + 1 :] if base and where.startswith(base + "/") else where
            shown = display_name(name)
            source = InputSource(name=shown, path=None, url=full, size=size)
            found.setdefault(full, (shown, full, source))
    return list(found.values())


def _member_skipped(name: str) -> bool:
    """Return True for an archive member a directory walk would not yield."""
    *dirs, base = name.split("/")
    if any(d in _SKIP_DIRS or d.startswith(".") for d in dirs):
        return True
    return _skipped(base)


def _archive_sources(path: str, name: str, problems: list[Problem]) -> list[InputSource]:
    """Read an archive (``.tar.gz``, ``.zip``, ...) as a directory, in memory (:mod:`.archive`)."""
    label = path if name == "." else name
    try:
        members = read_archive(Path(path), _member_skipped)
    except ArchiveError as exc:
        problems.append(Problem(display_name(label), str(exc)))
        return []
    if not members:
        problems.append(Problem(display_name(label), "archive contains no files"))
    # An archive given alone is the common directory: its members get a bundle's names.
    return [
        InputSource(
            name=display_name(m.name if name == "." else posixpath.join(name, m.name)),
            path=None,
            data=m.data,
        )
        for m in members
    ]


def read_head(source: InputSource, size: int = 4096) -> bytes:
    """Return the first ``size`` bytes of the (decompressed) input; raise OSError on failure."""
    with source.open() as handle:
        try:
            return handle.read(size)
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            with contextlib.suppress(Exception):
                handle.close()
            raise OSError(f"corrupt gzip data ({exc})") from exc


def looks_binary(head: bytes) -> bool:
    """Return True when ``head`` is not text: NUL-heavy or mostly undecodable.

    py-spy ``--core`` captures carry runs of NUL padding inside otherwise readable text,
    so NULs alone do not make a file binary; the share of printable text does.
    """
    if not head:
        return False
    sample = head.replace(b"\x00", b"")
    if len(sample) * 4 < len(head):
        return True
    text = sample.decode("utf-8", errors="replace")
    bad = len(_NOT_TEXT.findall(text))
    return bad * 10 > len(text)


_NOT_TEXT = re.compile("[\ufffd\x00-\x08\x0b\x0e-\x1a\x1c-\x1f]")
"""Undecodable bytes and control characters other than tab, newlines, ESC and form feed."""
