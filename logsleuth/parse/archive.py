"""Read a bundle as people attach it: ``.tar``, ``.tar.gz``/``.tgz``, ``.tar.bz2``, ``.tar.xz``, ``.zip``.

Members are read into memory, never extracted, so an archive cannot write anything to disk.
An archive is refused whole (:class:`ArchiveError`, one line naming the member and why) when a
member's name leaves the archive (an absolute path, ``..``), a link points outside it, a member
is a device or a FIFO, or it holds more than :data:`MAX_MEMBERS` files or expands past
:data:`MAX_TOTAL_BYTES` (a decompression bomb: sizes are counted while decompressing, never
taken from the headers). Directories and links that stay inside are skipped; a single
top-level directory (``bundle/``) is dropped from the names, so the members of
``bundle.tar.gz`` get the names the files of ``bundle/`` get.

:func:`write_archive` writes such an archive from a directory (``logsleuth pack``).
"""

from __future__ import annotations

import io
import os
import posixpath
import stat
import tarfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

MAX_MEMBERS = 20_000
"""Files one archive may hold."""
MAX_TOTAL_BYTES = 2 * 1024**3
"""Bytes the files of one archive may expand to, all together."""
_CHUNK = 1024 * 1024

TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")
ZIP_SUFFIXES = (".zip",)
PACK_FORMATS = {"tar.gz": ".tar.gz", "zip": ".zip"}
"""``logsleuth pack --format`` choices and the suffix each gives."""


class ArchiveError(Exception):
    """An archive cannot be read safely; ``str()`` is the one-line reason."""


@dataclass(frozen=True, slots=True)
class Member:
    """One regular file of an archive: its name inside it and its bytes."""

    name: str
    data: bytes


def is_archive(path: Path) -> bool:
    """Return True when ``path`` is named like an archive logsleuth reads."""
    lower = path.name.lower()
    return lower.endswith(TAR_SUFFIXES + ZIP_SUFFIXES)


def _clean_name(raw: str) -> str:
    """Return the member's name as a relative POSIX path; refuse one that leaves the archive."""
    name = raw.replace("\\", "/")
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise ArchiveError(f"member {raw!r} has an absolute path")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ArchiveError(f"member {raw!r} leaves the archive (..)")
    return "/".join(parts)


def _check_link(name: str, target: str) -> None:
    """Refuse a link whose target is outside the archive; one inside is only skipped."""
    if target.startswith("/") or (len(target) > 1 and target[1] == ":"):
        raise ArchiveError(f"member {name!r} links outside the archive ({target!r})")
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(name), target))
    if resolved == ".." or resolved.startswith("../"):
        raise ArchiveError(f"member {name!r} links outside the archive ({target!r})")


class _Budget:
    """Counts members and expanded bytes against the limits."""

    def __init__(self, max_members: int, max_bytes: int) -> None:
        self.max_members = max_members
        self.max_bytes = max_bytes
        self.members = 0
        self.entries = 0
        self.total = 0

    def entry(self) -> None:
        """Count any entry (directories and links too): a list of names can be a bomb."""
        self.entries += 1
        if self.entries > 4 * self.max_members:
            raise ArchiveError(f"more than {4 * self.max_members} entries; unpack it")

    def member(self) -> None:
        self.members += 1
        if self.members > self.max_members:
            raise ArchiveError(f"more than {self.max_members} files; unpack it and pass the files")

    def read(self, name: str, handle: IO[bytes]) -> bytes:
        """Read a member in chunks, stopping as soon as the total passes the limit."""
        chunks: list[bytes] = []
        while True:
            chunk = handle.read(_CHUNK)
            if not chunk:
                return b"".join(chunks)
            self.total += len(chunk)
            if self.total > self.max_bytes:
                raise ArchiveError(
                    f"expands to more than {_size(self.max_bytes)} (at member {name!r}): "
                    "a decompression bomb, or too large to read in memory"
                )
            chunks.append(chunk)


def _first_line(exc: BaseException) -> str:
    """Return an exception's message as one line (tarfile's lists every method it tried)."""
    text = str(exc).strip().splitlines()
    return text[0].rstrip(":") if text else type(exc).__name__


def _size(count: int) -> str:
    return f"{count / 1024**3:g} GiB" if count >= 1024**3 else f"{count / 1024**2:g} MiB"


def _tar_members(path: Path, budget: _Budget) -> Iterator[tuple[str, bytes]]:
    try:
        with tarfile.open(path, mode="r:*") as archive:
            for info in archive:
                budget.entry()
                name = _clean_name(info.name)
                if info.issym() or info.islnk():
                    _check_link(name, info.linkname)
                    continue
                if info.isdir():
                    continue
                if not info.isfile():
                    raise ArchiveError(f"member {info.name!r} is a device or a FIFO")
                budget.member()
                if info.size > budget.max_bytes - budget.total:
                    raise ArchiveError(
                        f"member {info.name!r} says it holds {info.size} bytes, more than the "
                        f"{_size(budget.max_bytes)} an archive may expand to"
                    )
                handle = archive.extractfile(info)
                if handle is None:  # pragma: no cover - isfile() members always have data
                    continue
                with handle:
                    yield name, budget.read(info.name, handle)
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise ArchiveError(f"not a readable tar archive ({_first_line(exc)})") from exc


def _zip_members(path: Path, budget: _Budget) -> Iterator[tuple[str, bytes]]:
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                budget.entry()
                name = _clean_name(info.filename)
                mode = info.external_attr >> 16
                if stat.S_ISLNK(mode):
                    with archive.open(info) as link:
                        target = link.read(4096).decode("utf-8", errors="replace")
                    _check_link(name, target)
                    continue
                if info.is_dir():
                    continue
                if stat.S_IFMT(mode) not in (0, stat.S_IFREG):
                    raise ArchiveError(f"member {info.filename!r} is a device or a FIFO")
                budget.member()
                with archive.open(info) as handle:
                    yield name, budget.read(info.filename, handle)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, RuntimeError) as exc:
        raise ArchiveError(f"not a readable zip archive ({_first_line(exc)})") from exc


def read_archive(
    path: Path,
    skip: Callable[[str], bool] = lambda name: False,
    *,
    max_members: int | None = None,
    max_bytes: int | None = None,
) -> list[Member]:
    """Return the regular files of the archive at ``path``, sorted by name.

    Args:
        path: A tar (any compression tarfile reads) or zip archive.
        skip: Called with each member's name (after the top directory is dropped); a member
            it returns True for is left out (outputs of an earlier run, documentation).
        max_members: Files allowed (default :data:`MAX_MEMBERS`).
        max_bytes: Expanded bytes allowed (default :data:`MAX_TOTAL_BYTES`).

    Raises:
        ArchiveError: the archive is unsafe, over a limit, or not readable.
    """
    budget = _Budget(
        MAX_MEMBERS if max_members is None else max_members,
        MAX_TOTAL_BYTES if max_bytes is None else max_bytes,
    )
    lower = path.name.lower()
    reader = _zip_members if lower.endswith(ZIP_SUFFIXES) else _tar_members
    found = [(name, data) for name, data in reader(path, budget) if name]
    tops = {name.split("/", 1)[0] for name, _ in found}
    strip = len(tops) == 1 and all("/" in name for name, _ in found)
    members: dict[str, bytes] = {}
    for name, data in found:
        short = name.split("/", 1)[1] if strip else name
        if not skip(short):
            members[short] = data  # a later copy of a name wins, as tar extraction does
    return [Member(name, members[name]) for name in sorted(members)]


def _pack_files(directory: Path) -> list[Path]:
    files = []
    for root, dirs, names in os.walk(directory):
        dirs.sort()
        for name in sorted(names):
            path = Path(root) / name
            # Plain files only: FIFOs the job left and links are no evidence.
            if path.is_file() and not path.is_symlink():
                files.append(path)
    return files


def write_archive(directory: Path, target: Path) -> int:
    """Write ``directory`` as ``target`` (``.tar.gz`` or ``.zip``); return the file count.

    Members are named ``<directory name>/<path>`` in sorted order with fixed times and
    owners, so packing the same files twice gives the same archive.

    Raises:
        ArchiveError: the directory holds no file, or more than the reader accepts.
        OSError: the archive cannot be written.
    """
    files = _pack_files(directory)
    if not files:
        raise ArchiveError("holds no file to pack")
    if len(files) > MAX_MEMBERS:
        raise ArchiveError(f"holds {len(files)} files, more than the {MAX_MEMBERS} analyze reads")
    top = directory.resolve().name or "bundle"
    partial = target.with_name(f".{target.name}.partial")
    try:
        if target.name.lower().endswith(ZIP_SUFFIXES):
            with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as archive:
                for path in files:
                    arcname = f"{top}/{path.relative_to(directory).as_posix()}"
                    info = zipfile.ZipInfo(arcname, date_time=(1980, 1, 1, 0, 0, 0))
                    info.external_attr = (stat.S_IFREG | 0o644) << 16
                    info.compress_type = zipfile.ZIP_DEFLATED
                    archive.writestr(info, path.read_bytes())
        else:
            import gzip

            with (
                partial.open("wb") as raw,
                gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as zipped,
                tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as archive,
            ):
                for path in files:
                    member = tarfile.TarInfo(f"{top}/{path.relative_to(directory).as_posix()}")
                    data = path.read_bytes()
                    member.size = len(data)
                    member.mode = 0o644
                    archive.addfile(member, io.BytesIO(data))
        partial.replace(target)
    finally:
        if partial.exists():
            partial.unlink()
    return len(files)
