"""Find the inputs: files, directories (recursively), ``.gz`` files and ``-`` (standard input).

Archives (``.tar.gz``, ``.zip`` ...) are read like directories, in memory (:mod:`.archive`).

Problems with one path (missing, unreadable, empty, binary) are returned as
:class:`Problem` values so that the rest of the input is still analysed; only the caller
decides whether nothing analysable is left.
"""

from __future__ import annotations

import gzip
import io
import os
import posixpath
import sys
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from logsleuth.parse.archive import ArchiveError, is_archive, read_archive

_SKIP_NAMES = frozenset({"diagnosis.json", "report.html", "truth.json", "teardown.log"})
"""Outputs of an earlier run inside a bundle directory, what a job printed after live ended
it (live/session.py), and answer keys of test cases."""
_SKIP_SUFFIXES = (".md", ".rst")
"""Documentation beside the logs (a case's README) is not evidence."""
_SKIP_DIRS = frozenset({".git", "__pycache__", ".venv", "node_modules"})
_GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True, slots=True)
class InputSource:
    """One input to read: a file path, or standard input when ``path`` is None."""

    name: str
    """Display name: the path relative to the common input directory."""
    path: Path | None
    data: bytes | None = None
    """The bytes of standard input, read once."""

    def open(self) -> BinaryIO:
        """Open the input for binary reading, transparently decompressing gzip."""
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


@dataclass(frozen=True, slots=True)
class Problem:
    """A path that cannot be analysed, with the reason in one line."""

    name: str
    reason: str


def _walk(directory: Path) -> Iterator[Path]:
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("."))
        for name in sorted(files):
            if name in _SKIP_NAMES or name.startswith(".") or name.lower().endswith(_SKIP_SUFFIXES):
                continue
            path = Path(root) / name
            if path.is_file():
                yield path


def _skipped(name: str) -> bool:
    """Return True for an archive member :func:`_walk` would not yield from a directory."""
    *dirs, base = name.split("/")
    if any(d in _SKIP_DIRS or d.startswith(".") for d in dirs):
        return True
    return base in _SKIP_NAMES or base.startswith(".") or base.lower().endswith(_SKIP_SUFFIXES)


def _archive_sources(path: Path, name: str, problems: list[Problem]) -> list[InputSource]:
    label = str(path) if name == "." else name
    try:
        members = read_archive(path, _skipped)
    except ArchiveError as exc:
        problems.append(Problem(label, str(exc)))
        return []
    if not members:
        problems.append(Problem(label, "archive contains no files"))
    # An archive given alone is the common directory: its members get a bundle's names.
    return [
        InputSource(
            name=m.name if name == "." else posixpath.join(name, m.name), path=None, data=m.data
        )
        for m in members
    ]


def _common_dir(roots: Sequence[Path]) -> Path | None:
    if not roots:
        return None
    try:
        return Path(os.path.commonpath([str(r.resolve()) for r in roots]))
    except ValueError:  # different drives
        return None


def discover(
    args: Sequence[str], stdin: BinaryIO | None = None
) -> tuple[list[InputSource], list[Problem]]:
    """Expand command-line paths into inputs, in a deterministic order.

    Args:
        args: Paths as given: files, directories, ``.gz`` files, ``-`` for standard input.
        stdin: Where ``-`` reads from (defaults to ``sys.stdin.buffer``).

    Returns:
        The inputs (display names relative to their common directory) and the problems.
    """
    files: list[Path] = []
    roots: list[Path] = []
    problems: list[Problem] = []
    want_stdin = False
    seen: set[Path] = set()
    for arg in args:
        if arg == "-":
            want_stdin = True
            continue
        path = Path(arg)
        if not path.exists():
            problems.append(Problem(arg, "no such file or directory"))
        elif path.is_dir():
            found = [p for p in _walk(path) if p.resolve() not in seen]
            if not found:
                problems.append(Problem(arg, "directory contains no files"))
            else:
                roots.append(path)
            for p in found:
                seen.add(p.resolve())
                files.append(p)
        elif not os.access(path, os.R_OK):
            problems.append(Problem(arg, "permission denied"))
        elif path.resolve() not in seen:
            seen.add(path.resolve())
            files.append(path)
            roots.append(path if is_archive(path) else path.parent)
    base = _common_dir(roots)
    sources: list[InputSource] = []
    for p in files:
        name = os.path.relpath(p.resolve(), base) if base is not None else str(p)
        if is_archive(p):
            sources.extend(_archive_sources(p, name, problems))
            continue
        sources.append(InputSource(name=name, path=p))
    if want_stdin:
        stream = stdin if stdin is not None else sys.stdin.buffer
        sources.append(InputSource(name="<stdin>", path=None, data=stream.read()))
    return sources, problems


def read_head(source: InputSource, size: int = 4096) -> bytes:
    """Return the first ``size`` bytes of the (decompressed) input; raise OSError on failure."""
    with source.open() as handle:
        try:
            return handle.read(size)
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
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
    bad = sum(1 for ch in text if ch == "\ufffd" or (ord(ch) < 32 and ch not in "\t\n\r\x1b\x0c"))
    return bad * 10 > len(text)
