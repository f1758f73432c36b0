"""Inputs named by URL (``s3://bucket/job/nccl/``, ``gs://...``, ``https://...``), through fsspec.

fsspec and the protocol's package (s3fs, gcsfs, aiohttp) come with the optional
``[cluster]`` extra; without them a URL is a one-line problem, never a traceback.
Credentials and endpoints are fsspec's and the cloud SDK's own configuration (environment
variables such as ``AWS_ENDPOINT_URL``, ``FSSPEC_S3_ENDPOINT_URL``, credential files), so
Dask workers that read the objects directly find them the same way.

A URL is a directory when it names a prefix holding objects (every object below it is read,
as a directory walk would), a glob when it holds ``*``, ``?`` or ``[``, else one object.
Display names are relative to the common root of the URLs given, so a bundle read from
object storage gets the same names, and so the same diagnosis, as the same bundle on disk.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Sequence
from typing import Any, BinaryIO

_URL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.\-]*)://")
_GLOB = re.compile(r"[*?\[]")
EXTRA_HINT = "pip install 'nccl-logsleuth[cluster]'"


def is_url(arg: str) -> bool:
    """Return True when ``arg`` is a URL read through fsspec (not ``file://`` or a path)."""
    found = _URL.match(arg)
    return found is not None and found.group(1).lower() != "file"


class RemoteError(Exception):
    """A URL cannot be listed or read; ``str()`` is the one-line reason."""


def _reason(exc: BaseException) -> str:
    """One line for an exception of fsspec, the cloud SDK or the network."""
    name = type(exc).__name__
    if isinstance(exc, FileNotFoundError):
        return "no such bucket, object or prefix"
    if isinstance(exc, PermissionError) or name in (
        "NoCredentialsError",
        "PartialCredentialsError",
    ):
        text = " ".join(str(exc).split())[:160]
        return f"access denied or no credentials ({text})" if text else "access denied"
    text = " ".join(str(exc).split())[:200]
    return f"{name}: {text}" if text else name


def filesystem(url: str) -> tuple[Any, str]:
    """Return (fsspec filesystem, path within it) for ``url``.

    Raises:
        RemoteError: fsspec or the protocol's package is not installed, or the URL is bad.
    """
    try:
        import fsspec.core
    except ImportError as exc:
        raise RemoteError(f"reading URLs needs the [cluster] extra ({EXTRA_HINT})") from exc
    try:
        found: tuple[Any, str] = fsspec.core.url_to_fs(url)
        return found
    except ImportError as exc:
        protocol = url.split("://", 1)[0]
        raise RemoteError(
            f"reading {protocol}:// URLs needs a package fsspec names ({exc}); "
            f"the [cluster] extra has s3fs ({EXTRA_HINT})"
        ) from exc
    except (ValueError, OSError) as exc:
        raise RemoteError(_reason(exc)) from exc


def list_url(url: str, skipped: Callable[[str], bool]) -> tuple[str, list[tuple[str, str, int]]]:
    """Expand ``url`` into (root URL, [(object URL, name below the root, size)]).

    ``skipped`` gets the path below the root and says what a directory walk would not read.

    Raises:
        RemoteError: it cannot be listed (missing bucket, no credentials, unreachable).
    """
    fs, path = filesystem(url)
    protocol = url.split("://", 1)[0]
    try:
        if _GLOB.search(path):
            root = path[: _GLOB.search(path).start()].rsplit("/", 1)[0]  # type: ignore[union-attr]
            found = fs.glob(path, detail=True)
            infos = {p: i for p, i in found.items() if i.get("type") != "directory"}
        elif fs.isdir(path):
            root = path.rstrip("/")
            infos = fs.find(path, detail=True)
        else:
            info = fs.info(path)
            root = posixpath.dirname(path.rstrip("/"))
            infos = {info["name"]: info}
    except Exception as exc:  # the SDKs raise their own types: each becomes one line
        raise RemoteError(_reason(exc)) from exc
    if not infos:
        raise RemoteError("no object matches" if _GLOB.search(path) else "no objects below it")
    objects: list[tuple[str, str, int]] = []
    for name, info in sorted(infos.items()):
        rel = posixpath.relpath(name, root) if root else name
        if skipped(rel):
            continue
        full = fs.unstrip_protocol(name) if hasattr(fs, "unstrip_protocol") else name
        if "://" not in full:
            full = f"{protocol}://{name}"
        objects.append((full, rel, int(info.get("size") or 0)))
    return f"{protocol}://{root}", objects


def common_root(roots: Sequence[str]) -> str:
    """Return the longest common directory of URL roots (``""`` when they share none)."""
    if not roots:
        return ""
    parts = [r.rstrip("/").split("/") for r in roots]
    common: list[str] = []
    for pieces in zip(*parts, strict=False):
        if len(set(pieces)) != 1:
            break
        common.append(pieces[0])
    return "/".join(common)


def open_url(url: str) -> BinaryIO:
    """Open the object at ``url`` for binary reading (raises OSError when it cannot)."""
    try:
        fs, path = filesystem(url)
        return fs.open(path, "rb")  # type: ignore[no-any-return]
    except OSError:
        raise
    except Exception as exc:
        raise OSError(_reason(exc)) from exc
