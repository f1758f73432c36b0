"""Open an input and decode it: plain files, ``.gz`` (within a budget), URLs, bytes in memory.

Also the notes an input's reading leaves (a damaged ``.gz``, a budget overrun): one line each,
collected per input in :data:`NOTES` (set by :func:`logsleuth.parse.dispatch.read_input`) and
reported as its summary's ``error``.
"""

from __future__ import annotations

import codecs
import contextlib
import io
import os
import zlib
from collections.abc import Generator, Iterator
from contextvars import ContextVar
from dataclasses import replace
from typing import Any, BinaryIO

from logsleuth.parse import budgets
from logsleuth.parse.discover import InputSource, read_head
from logsleuth.parse.remote import open_url

GZIP_MAGIC = b"\x1f\x8b"

_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
"""Byte-order marks and the codec that reads past each (UTF-32 LE's begins with UTF-16 LE's)."""

_UTF16_SAMPLE = 16
"""Bytes needed before text without a byte-order mark is judged to be UTF-16."""


def text_encoding(head: bytes) -> str:
    """The encoding of text that begins with ``head``.

    A byte-order mark names it (Windows PowerShell's ``>`` and ``Out-File`` write UTF-16
    LE with one). UTF-16 without a mark is told by where its NULs fall: in Latin text
    every other byte is NUL, on one side only (a run of NUL padding covers both). Anything
    else is read as UTF-8.
    """
    for bom, name in _BOMS:
        if head.startswith(bom):
            return name
    sample = head[: len(head) & ~1]
    if len(sample) < _UTF16_SAMPLE:
        return "utf-8"
    even, odd = sample[0::2].count(0), sample[1::2].count(0)
    half = len(sample) // 2
    if odd * 10 >= half * 9 and even * 10 < half:
        return "utf-16-le"
    if even * 10 >= half * 9 and odd * 10 < half:
        return "utf-16-be"
    return "utf-8"


def as_utf8(head: bytes) -> bytes:
    """``head`` re-encoded as UTF-8 when it is UTF-16 or UTF-32 (for sniffing its kind)."""
    encoding = text_encoding(head)
    if encoding == "utf-8":
        return head
    return head.decode(encoding, errors="replace").encode("utf-8")


NOTES: ContextVar[list[str] | None] = ContextVar("NOTES", default=None)
"""Data-gap notes of the input being read (a damaged .gz, a budget overrun), one line each."""


def note(text: str) -> None:
    """Add a one-line note about the input being read (once per distinct text)."""
    notes = NOTES.get()
    if notes is not None and text not in notes:
        notes.append(text)


def _raw(source: InputSource) -> BinaryIO:
    if source.url is not None:
        return open_url(source.url)
    if source.data is not None:
        return io.BytesIO(source.data)
    assert source.path is not None
    return source.path.open("rb")


def _raw_chunks(source: InputSource) -> Generator[bytes, None, None]:
    with _raw(source) as handle:
        yield from iter(lambda: handle.read(1 << 20), b"")


def _gzip_header(data: bytes) -> int | None:
    """Return the length of the gzip member header at the start of ``data`` (RFC 1952),
    or None when more bytes are needed; raise zlib.error when it is not one."""
    if len(data) < 10:
        return None
    if data[:3] != b"\x1f\x8b\x08":
        raise zlib.error("not a gzip member header")
    flags, pos = data[3], 10
    if flags & 4:  # FEXTRA
        if len(data) < pos + 2:
            return None
        pos += 2 + int.from_bytes(data[pos : pos + 2], "little")
    for flag in (8, 16):  # FNAME, FCOMMENT: zero-terminated
        if flags & flag:
            end = data.find(b"\0", pos)
            if end < 0:
                return None
            pos = end + 1
    if flags & 2:  # FHCRC
        pos += 2
    return pos if len(data) >= pos else None


def _gunzipped(source: InputSource) -> Generator[bytes, None, None]:
    """Yield the decompressed bytes of a gzip input, streamed, within ``budgets.GZIP_BYTES``.

    Unlike :class:`gzip.GzipFile`, which drops what it decompressed in the ``read`` that
    hits the damage, every byte before a truncation, a corrupt block or a bad CRC is yielded
    (the CRC is checked here, after the data it covers was passed on).
    """
    total = 0
    budget = budgets.GZIP_BYTES
    buffer = b""
    inflate: Any = None
    """The raw-deflate decompressor of the current member; None between members."""
    crc = size = 0
    with _raw(source) as handle:
        for raw in iter(lambda: handle.read(1 << 18), b""):
            buffer += raw
            try:
                while buffer:
                    if inflate is None:
                        header = _gzip_header(buffer)
                        if header is None:
                            break
                        buffer, inflate, crc, size = buffer[header:], zlib.decompressobj(-15), 0, 0
                    out = inflate.decompress(buffer, 1 << 20)
                    buffer = inflate.unconsumed_tail
                    crc, size = zlib.crc32(out, crc), size + len(out)
                    total += len(out)
                    if total > budget:
                        note(f"stopped after {budget >> 20} MiB decompressed (the .gz budget)")
                        yield out[: len(out) - (total - budget)]
                        return
                    if out:
                        yield out
                    if inflate.eof:
                        trailer = inflate.unused_data + buffer
                        if len(trailer) < 8:
                            buffer = trailer
                            break
                        if (
                            int.from_bytes(trailer[:4], "little") != crc
                            or int.from_bytes(trailer[4:8], "little") != size & 0xFFFFFFFF
                        ):
                            raise zlib.error("CRC or length check failed")
                        buffer, inflate = trailer[8:], None
                        if not buffer.strip(b"\0"):
                            buffer = b""  # zero padding after the last member
            except zlib.error as exc:
                note(f"damaged data after {total:,} decompressed bytes ({exc}); read up to there")
                return
    if inflate is not None or buffer:
        note(f"damaged data after {total:,} decompressed bytes (the .gz is cut short)")


def decoded_chunks(source: InputSource) -> Iterator[str]:
    """Yield the decoded text in pieces of whole lines (each ends in ``\\n`` but the last).

    Linear in the input whatever its shape: a line longer than ``budgets.LINE_CHARS`` is cut
    there; a file whose lines end in CR alone is read as lines; a ``.gz`` input stops at
    ``budgets.GZIP_BYTES`` decompressed, and a damaged one yields what decompressed before
    the damage. Either way a note (:func:`note`) says what was lost.
    """
    decoder: codecs.IncrementalDecoder | None = None
    pending: list[str] = []
    """Pieces of the line not ended yet, at most ``budgets.LINE_CHARS`` characters."""
    held = 0
    cr_only: bool | None = None
    with contextlib.ExitStack() as stack:
        chunks = _gunzipped(source) if source.compressed else _raw_chunks(source)
        stack.callback(chunks.close)
        for chunk in chunks:
            if decoder is None:
                decoder = codecs.getincrementaldecoder(text_encoding(chunk))(errors="replace")
            text = decoder.decode(chunk)
            if cr_only is None and text:
                cr_only = "\n" not in text and "\r" in text
            if cr_only:
                text = text.replace("\r", "\n")
            cut = text.rfind("\n") + 1
            if cut:
                if pending:
                    first = text.find("\n")
                    head = text[:first]
                    if held + len(head) > budgets.LINE_CHARS:
                        head = head[: max(0, budgets.LINE_CHARS - held)]
                        note(
                            f"a line longer than {budgets.LINE_CHARS:,} characters was cut to that length"
                        )
                    yield "".join(pending) + head + text[first:cut]
                    pending, held = [], 0
                else:
                    yield text[:cut]
                text = text[cut:]
            if text:
                piece = text[: max(0, budgets.LINE_CHARS - held)]
                if piece:
                    pending.append(piece)
                    held += len(piece)
                if len(piece) < len(text):
                    note(
                        f"a line longer than {budgets.LINE_CHARS:,} characters was cut to that length"
                    )
    rest = decoder.decode(b"", final=True) if decoder is not None else ""
    if rest and held < budgets.LINE_CHARS:
        pending.append(rest)
    if pending:
        yield "".join(pending)


def decoded_lines(source: InputSource) -> Iterator[str]:
    """Yield the decoded physical lines of ``source``, without their ``\\n``."""
    for chunk in decoded_chunks(source):
        lines = chunk.split("\n")
        if lines[-1] == "":
            lines.pop()
        yield from lines


def held(source: InputSource) -> tuple[InputSource, bytes]:
    """The input's first 4 KB; a plain file up to ``_HOLD_BYTES`` comes back read whole.

    Most inputs of a large job are small files (a log and a stack dump per rank): one open
    serves the sniffing here and the reading after it, where a path is opened three more
    times (a gzip probe for each of ``open`` and ``compressed``, then the read).
    """
    if source.path is None or source.data is not None or source.url is not None:
        return source, text_head(source)
    with source.path.open("rb") as handle:
        head = handle.read(4096)
        data = None
        if head[:2] != GZIP_MAGIC and os.fstat(handle.fileno()).st_size <= _HOLD_BYTES:
            data = head + handle.read(_HOLD_BYTES)
            if handle.read(1):
                data = None  # grew while being read: read it as a file
    if head[:2] == GZIP_MAGIC:
        return source, text_head(source)
    if data:
        source = replace(source, data=data)
    return source, text_head(source, head)


_HOLD_BYTES = 1 << 20
"""Plain files up to this size are read in one go (each worker holds one at a time)."""


def text_head(source: InputSource, head: bytes | None = None) -> bytes:
    """The first 4 KB of the input, or of its text after a leading block of NULs.

    ``head``: the first 4 KB, when the caller read them already.
    """
    if head is None:
        head = read_head(source)
    if len(head) < 4096 or head.strip(b"\0"):
        return head
    with source.open() as handle:
        seen = 0
        while seen < budgets.LINE_CHARS * 64:
            block = handle.read(1 << 16)
            if not block:
                break
            seen += len(block)
            text = block.lstrip(b"\0")
            if text:
                return text[:4096]
    return head
