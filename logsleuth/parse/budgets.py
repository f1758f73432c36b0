"""What one input may cost: the limits that hostile or damaged input cannot push past.

Numbers and sizes read from an input are checked against these before they size anything.
An input that overruns one is reported in one line (the rest of it, or the other inputs,
are still analysed); nothing here is a tuning knob for ordinary logs.
"""

from __future__ import annotations

JSON_BYTES = 32 << 20
"""A whole-file JSON document (py-spy ``--json``, a flight-recorder or ncclras JSON, a bundle
manifest) is read whole only up to this size; a larger file is read line by line."""
JSON_VALUES = 2_000_000
"""The most values (objects, arrays, scalars) such a document may hold."""
NESTING = 64
"""The deepest nesting of containers a JSON or pickle input may have (real ones need < 8)."""
PICKLE_BYTES = 16 << 20
"""A flight-recorder pickle larger than this is refused."""
PICKLE_OBJECTS = 1_000_000
"""The most objects a flight-recorder pickle may expand to, every shared reference counted
as often as it is reached (a ``billion laughs`` pickle is small but expands without bound)."""
GZIP_BYTES = 4 << 30
"""Decompressed bytes read from one ``.gz`` input; the rest is a data gap."""
INT_LIMIT = 1 << 64
"""No NCCL, torch or py-spy field is this wide: a number past it is damaged or crafted, and its
line is counted unrecognized."""
LINE_CHARS = 1 << 20
"""Characters kept of one physical line; the rest of an overlong line is dropped."""
DIR_DEPTH = 64
"""Directories nested deeper than this below a path given on the command line are not searched."""
PIPE_WAIT_S = 10.0
"""How long a FIFO or pipe may stay without a writer (or data) before it is given up."""


def over_budget(value: object, max_objects: int, max_depth: int = NESTING) -> str | None:
    """Return why ``value`` (decoded JSON or an unpickled dump) is too big, or None.

    The walk is iterative and counts every container and scalar each time it is reached,
    so a structure that shares references is measured by what it expands to; it stops as
    soon as a budget is overrun.
    """
    count = 0
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        count += 1
        if count > max_objects:
            return f"more than {max_objects:,} values, shared references counted"
        if isinstance(item, dict):
            children: list[object] = [*item.keys(), *item.values()]
        elif isinstance(item, list | tuple | set | frozenset):
            children = list(item)
        else:
            continue
        if children and depth >= max_depth:
            return f"nested more than {max_depth} levels deep"
        if count + len(children) > max_objects:
            return f"more than {max_objects:,} values, shared references counted"
        stack.extend((child, depth + 1) for child in children)
    return None
