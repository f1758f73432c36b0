"""Rank sets as the compact ranges people read: ``0-36,38-63``."""

from __future__ import annotations

from collections.abc import Iterable


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
