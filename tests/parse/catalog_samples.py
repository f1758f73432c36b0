"""Instantiate catalog format strings with sample arguments, as a program would print them."""

from __future__ import annotations

import re

_PRINTF = re.compile(
    r"%(?:\([A-Za-z_]\w*\))?[-+ #0]*(?:\*|\d+)?(?:\.(?:\*|\d+))?(?:hh|h|ll|l|L|z|j|t|q)?"
    r"([diouxXeEfFgGcspmn%])"
)
_BRACES = re.compile(r"\{[^{}\n]{0,80}\}")

_SAMPLES = {
    "d": "12",
    "i": "3",
    "u": "7",
    "o": "17",
    "x": "1f",
    "X": "1F",
    "p": "0x7f3a2c001200",
    "s": "mlx5_0",
    "c": "R",
    "f": "2.50",
    "F": "2.50",
    "e": "2.5e+00",
    "E": "2.5E+00",
    "g": "2.5",
    "G": "2.5",
    "m": "Connection refused",
    "n": "",
    "%": "%",
}


def instantiate(fmt: str) -> str:
    """Return ``fmt`` (printf, ``{}`` or ``{name}`` style) with sample values, first line only."""
    fmt = fmt.replace('\\"', '"').replace("\\t", " ")
    lines = [piece for piece in fmt.split("\\n") if piece.strip()]
    first = lines[0] if lines else fmt
    text = _PRINTF.sub(lambda m: _SAMPLES[m.group(1)], first)
    return _BRACES.sub("42", text).strip()
