"""Infer the NCCL release range of a stream from the shapes of its lines (spec section 5).

Each NCCL message that only some releases print narrows the range of the process that
wrote it; :class:`VersionTracker` intersects them per (host, pid). A version line gives
the exact release. The features are the spec's list, most specific first; a line that
shows none says nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

Version = tuple[int, int, int]

OLDEST: Version = (2, 0, 0)
NEWEST: Version = (99, 0, 0)
"""Open bounds: "2.30.7 or newer" is kept as (2.30.7, NEWEST)."""


def parse_version(text: str) -> Version | None:
    """Return ``2.21.5`` (or ``2.21.5+cuda12.4``, ``22304``) as a tuple; None if it is none."""
    found = re.match(r"(\d+)\.(\d+)\.(\d+)", text)
    if found:
        major, minor, patch = (int(g) for g in found.groups())
        return major, minor, patch
    if text.isdigit() and len(text) == 5:
        # NCCL_VERSION_CODE since 2.9: major*10000 + minor*100 + patch.
        code = int(text)
        return code // 10000, code // 100 % 100, code % 100
    return None


def format_version(version: Version) -> str:
    """Return ``2.21.5``; the open bounds read ``""``."""
    return "" if version in (OLDEST, NEWEST) else ".".join(map(str, version))


# (feature name, message regex, lowest, highest). Searched in the message after the prefix.
_FEATURES: tuple[tuple[str, str, Version, Version], ...] = (
    ("info-loc", r"^\S+:\d+ \(\S*\) -> -?\d+", (2, 30, 7), NEWEST),
    ("shm-direct", r"via SHM/direct(?!/direct)", (2, 30, 7), NEWEST),
    ("proxy-tprank", r"^Connected to proxy tpRank", (2, 30, 7), NEWEST),
    ("git-version", r"^NCCL git version", (2, 29, 2), NEWEST),
    ("rank-init", r"^\[Rank -?\d+\] \w+ comm |childCount", (2, 29, 2), NEWEST),
    (
        "ib-status-name",
        r"^NET/IB ?: Got completion (?!.*reqSize).*status=IBV_WC_\w+\(.*vendor_err=",
        (2, 29, 2),
        NEWEST,
    ),
    ("topo-affinity", r"^ncclTopoGetCpuAffinity: Affinity for GPU", (2, 28, 3), NEWEST),
    ("net-assigned", r"^Assigned NET plugin .* to comm", (2, 27, 3), NEWEST),
    ("retry-sleep", r"returned .*, retrying \(\d+/\d+\) after sleep", (2, 27, 3), NEWEST),
    ("gdr-pci", r"/GDRDMA\(PCI\)|\bread \d+ mode \w", (2, 26, 2), NEWEST),
    (
        "bootstrap-nospace",
        r"^Bootstrap: Using|splitCount|CC Off, workFifoBytes|Algo \w+ proto \w+ channel\{Lo\.\.Hi\}",
        (2, 24, 3),
        NEWEST,
    ),
    (
        "binomial",
        r"^Connected binomial trees|^Init timings - |^Bootstrap timings total",
        (2, 23, 4),
        NEWEST,
    ),
    # "Channel 00/24 :  0  1": width = digits of nranks-1 (2.23.4+); before, " %3d" after ": ".
    ("ring-dump-width", r"^Channel \d+/\d+ : {1,3}\d+(?: +\d+)* *$", (2, 23, 4), NEWEST),
    ("api-comm", r"^nccl\w+ comm (?:0x[0-9a-fA-F]+|\(nil\)) rank", (2, 21, 5), NEWEST),
    ("topo-id", r"\b(?:GPU|NET|CPU|NIC|NVS)/[0-9a-fA-F]+-[0-9a-fA-F]+\b", (2, 21, 5), NEWEST),
    ("coll-channels", r"^\d+ coll channels, \d+ collnet channels", (2, 20, 3), NEWEST),
    ("init-start-commid", r"commId 0x[0-9a-fA-F]+ ?- Init START", (2, 18, 3), NEWEST),
    ("ring-transport", r"^Ring \d+ : -?\d+(?:\[[0-9a-fA-F]+\])? -> -?\d+", (2, 3, 5), (2, 6, 4)),
    (
        "shm-nvmldev",
        r"^Channel \d+ : -?\d+\[\d{1,2}\] -> -?\d+\[\d{1,2}\] via SHM/\w+/\w+",
        (2, 18, 3),
        (2, 30, 4),
    ),
    ("ring-pxn", r"^Connected all rings, use ring PXN", (2, 24, 3), NEWEST),
    ("p2p-cumem", r"via P2P/CUMEM", (2, 18, 1), NEWEST),
    (
        "system-maxbw",
        r"^=== System : maxBw|^threadThresholds \d+/\d+/\d+ \| \d+/\d+/\d+ \| \d+ \| \d+",
        (2, 14, 3),
        NEWEST,
    ),
    ("cuda-driver", r"^cudaDriverVersion \d", (2, 13, 4), NEWEST),
    ("net-conn-index", r"^Channel \d+/\d+ : .*\[(?:send|receive)\] via NET/", (2, 12, 7), NEWEST),
    ("net-no-index", r"^Channel \d+ : .*\[(?:send|receive)\] via NET/", (2, 7, 3), (2, 11, 4)),
    ("bootstrap-index", r"^Bootstrap : Using \[\d+\]", (2, 4, 8), (2, 7, 8)),
    ("coll-no-name", r"^opCount [0-9a-fA-F]+ sendbuff ", (2, 3, 5), (2, 3, 5)),
)

# The [x] field of a transport line (spec 2.8), read besides the line's other feature: a
# packed PCI bus id (>= 4 hex digits) in 2.5.6-2.18.1, the nvmlDev ("/c" lines) from 2.18.3.
_DEVICE_FIELD: tuple[tuple[str, str, Version, Version], ...] = (
    (
        "transport-busid",
        r"(?:Channel|Ring) \d+(?:/\d+)? : -?\d+\[[0-9a-fA-F]{4,}\] -> ",
        (2, 5, 6),
        (2, 18, 1),
    ),
    ("transport-nvmldev", r"Channel \d+/\d+ : -?\d+\[\d{1,2}\] -> ", (2, 18, 3), NEWEST),
)
_DEVICE_SCAN = re.compile(
    "|".join(f"(?P<f{i}>{pattern})" for i, (_, pattern, _, _) in enumerate(_DEVICE_FIELD))
)

_SCAN = re.compile(
    "|".join(f"(?P<f{i}>{pattern})" for i, (_, pattern, _, _) in enumerate(_FEATURES))
)


def _alternatives(pattern: str) -> list[str]:
    """Split ``pattern`` at its top-level ``|`` (not inside a group or a class)."""
    out: list[str] = []
    depth, in_class, start, i = 0, False, 0, 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            i += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char in "()":
            depth += 1 if char == "(" else -1
        elif char == "|" and depth == 0:
            out.append(pattern[start:i])
            start = i + 1
        i += 1
    out.append(pattern[start:])
    return out


_SPECIAL = set(".^$*+?{}[]()|\\")


def _leading_literals(alternative: str) -> list[str] | None:
    """Return the literal texts one of which every match of ``alternative`` starts with.

    Read from the front of the pattern: an optional ``\\b``, an optional group of literal
    choices ``(?:GPU|NET)``, then literal characters (escaped punctuation included) up to
    the first special one; a character a quantifier follows is not kept. None when the
    pattern does not start that way.
    """
    text = alternative.removeprefix("\\b")
    choices = [""]
    if text.startswith("(?:"):
        inner, sep, text = text[3:].partition(")")
        if not sep or any(c in _SPECIAL - {"|"} for c in inner):
            return None
        choices = inner.split("|")
    literal = ""
    i = 0
    while i < len(text):
        char = text[i]
        if char == "\\" and i + 1 < len(text) and not text[i + 1].isalnum():
            char, step = text[i + 1], 2
        elif char in _SPECIAL:
            break
        else:
            step = 1
        if text[i + step : i + step + 1] in ("*", "+", "?", "{"):
            break
        literal += char
        i += step
    found = [choice + literal for choice in choices]
    return found if all(found) else None


# Most features are anchored at the message's start. The scan above, searched, would try
# each of them at every position of a long ``Trees`` or ring line; the same leftmost match
# is found by matching all of them at position 0, then searching only the others.
_SCAN_LATER = re.compile(
    "|".join(
        f"(?P<f{i}>{'|'.join(rest)})"
        for i, (_, pattern, _, _) in enumerate(_FEATURES)
        if (rest := [a for a in _alternatives(pattern) if not a.startswith("^")])
    )
)
_LEADS = [
    _leading_literals(a)
    for _, pattern, _, _ in _FEATURES
    for a in _alternatives(pattern)
    if not a.startswith("^")
]
_LATER_HINT = (
    re.compile("|".join(re.escape(w) for lead in _LEADS for w in lead or ()))
    if all(lead is not None for lead in _LEADS)
    else None
)
"""Where a later feature can begin: its leading literals, searched as one literal
alternation (a hundred times faster than the grouped scan on a long ``Trees`` line)."""
_TIMESTAMP_DEFAULT = re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] $")


def message_features(message: str) -> list[tuple[str, Version, Version]]:
    """Return (feature, lowest, highest) of the release-specific features in ``message``.

    At most two: the first feature of the spec's list found, and for a transport line
    what its ``[x]`` device field says.
    """
    features: list[tuple[str, Version, Version]] = []
    for table, scan in ((_FEATURES, _SCAN), (_DEVICE_FIELD, _DEVICE_SCAN)):
        found = scan.match(message)
        if found is None and table is _FEATURES:
            # A later feature starts where one of its leading literals stands: none, none.
            hint = _LATER_HINT.search(message, 1) if _LATER_HINT is not None else None
            if hint is not None or _LATER_HINT is None:
                found = _SCAN_LATER.search(message, hint.start() if hint is not None else 1)
        if found is not None and found.lastgroup is not None:
            name, _, low, high = table[int(found.lastgroup[1:])]
            features.append((name, low, high))
        if not message.startswith(("Channel", "Ring")):
            break
    return features


def head_features(
    level: str, func: str | None, stamp: str | None, old_format: bool
) -> tuple[str, Version, Version] | None:
    """Return the release feature of a line prefix (spec 1.3, 1.4), if it has one."""
    if old_format:
        return "no-nccl-word", OLDEST, (2, 2, 99)
    if level == "WARN" and func is not None:
        return "warn-func", (2, 30, 7), NEWEST
    if level == "CALL":
        return "call-line", (2, 13, 4), NEWEST
    if level == "WARN" and stamp is not None and _TIMESTAMP_DEFAULT.match(stamp):
        return "warn-timestamp", (2, 26, 2), NEWEST
    return None


@dataclass(slots=True)
class StreamRange:
    """What one stream's lines said about its release so far."""

    low: Version = OLDEST
    high: Version = NEWEST
    exact: Version | None = None
    evidence: list[tuple[str, int]] | None = None
    """(feature, line number) of each feature that narrowed the range."""
    first_line: int = 0
    first_text: str = ""
    connects: int = 0
    """Transport connection lines seen (only the first few are looked at)."""

    def narrow(self, feature: str, low: Version, high: Version, line: int, text: str) -> None:
        """Intersect with [low, high]; a contradicting feature (mixed logs) is ignored."""
        new_low, new_high = max(self.low, low), min(self.high, high)
        if new_low > new_high or (new_low, new_high) == (self.low, self.high):
            return
        self.low, self.high = new_low, new_high
        if self.evidence is None:
            self.evidence = []
            self.first_line, self.first_text = line, text
        self.evidence.append((feature, line))

    def pin(self, version: Version, line: int, text: str) -> None:
        """The stream printed its version line: the range is that one release."""
        self.exact = version
        if self.evidence is None:
            self.evidence = []
            self.first_line, self.first_text = line, text
        self.evidence.append(("version-line", line))
        self.low = self.high = version

    def within(self, low: Version, high: Version) -> bool:
        """Return True when every release the stream may run lies in [low, high]."""
        return self.low >= low and self.high <= high


class VersionTracker:
    """Narrow each (host, pid) stream's release range line by line."""

    __slots__ = ("streams",)

    def __init__(self) -> None:
        self.streams: dict[tuple[str | None, int | None], StreamRange] = {}

    def get(self, stream: tuple[str | None, int | None]) -> StreamRange:
        """Return (creating) the range of ``stream``."""
        found = self.streams.get(stream)
        if found is None:
            found = self.streams[stream] = StreamRange()
        return found
