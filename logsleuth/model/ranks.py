"""Rank sets as the compact ranges people read: ``0-36,38-63``."""

from __future__ import annotations

from collections.abc import Iterable

LISTED_RANKS = 1 << 16
"""The most ranks a message lists one by one (as ranges); a claimed world size above it is
reported by count."""


def format_ranks(ranks: Iterable[int]) -> str:
    """Format integers as sorted, comma-separated inclusive ranges (``"0-3,5,7-9"``)."""
    values = sorted(set(ranks))
    if not values:
        return ""
    parts: list[str] = []
    start = prev = values[0]
    for value in values[1:]:
        if value == prev + 1:
            prev = value
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = value
    parts.append(str(start) if start == prev else f"{start}-{prev}")
    return ",".join(parts)


def name_ranks(ranks: Iterable[int]) -> str:
    """Name ranks for a sentence: ``rank 5``, ``ranks 0-3,6``."""
    values = sorted(set(ranks))
    return f"rank {values[0]}" if len(values) == 1 else f"ranks {format_ranks(values)}"


def parse_ranks(text: str) -> tuple[int, ...]:
    """Parse the output of :func:`format_ranks` back into a sorted tuple."""
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part[1:]:
            lo, hi = part.split("-", 1)
            out.update(range(int(lo), int(hi) + 1))
        else:
            out.add(int(part))
    return tuple(sorted(out))


def absent_ranks(size: int, present: Iterable[int], limit: int) -> list[int] | None:
    """Return the ranks of ``0..size-1`` not in ``present``, or None when more than ``limit``.

    ``size`` is a claimed world size read from the input, so it never sizes anything here:
    the answer is built from the gaps between the ranks seen, and its length is checked
    against ``limit`` before a single rank is listed.
    """
    seen = sorted({r for r in present if 0 <= r < size})
    if size - len(seen) > limit:
        return None
    out: list[int] = []
    previous = -1
    for rank in [*seen, size]:
        out.extend(range(previous + 1, rank))
        previous = rank
    return out
