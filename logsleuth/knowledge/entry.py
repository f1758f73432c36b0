"""What one known message means: the typed, validated form of a knowledge-base entry."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from logsleuth.model.diagnosis import KINDS, SEVERITIES

ROLES = ("cause", "symptom", "benign", "internal")
"""``cause``: the message names the fault. ``symptom``: what a victim sees of a fault elsewhere
(it points away from the writer). ``benign``: informational or harmless. ``internal``: an NCCL
invariant failed; the cause is a bug or a version problem, not the job."""

SIDES = ("self", "peer", "host", "none")
"""Who the culprit is: the writer's own process, the peer the message names (an address or a
rank), the writer's host (a node-wide resource), or nobody in particular."""

GROUPS = ("peer", "rank", "ranks", "host", "pid", "local_rank")
"""Named groups a pattern may capture to say which peer, rank, host or process the message
names (``ranks``: several ranks, the numbers in the captured text; ``pid``: the process a
line about a host names, as the OOM killer's victim; ``local_rank``: the worker a launcher's
line names by its place on the launcher's host)."""

DEFAULT_SEVERITY = {"cause": "critical", "symptom": "error", "internal": "error", "benign": "info"}


class KnowledgeError(ValueError):
    """A knowledge-base file is malformed: the message names the file and the entry."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Entry:
    """One message (or family of messages) and what it means.

    Attributes:
        id: Stable dotted name (``socket.closed-by-peer``).
        family: Who prints it and where (``nccl/socket``, ``torch/store``, ``gloo``, ...).
        patterns: Regular expressions searched in an event's message text.
        keywords: Lower-case literals of which one must occur for any pattern to match
            (the prefilter that keeps thousands of entries cheap).
        kind: The finding kind (CONTRACT vocabulary).
        role: One of :data:`ROLES`.
        culprit: One of :data:`SIDES`.
        severity: The severity of the finding raised for it (``info`` for benign).
        priority: Higher is tried first where several entries match one text.
        meaning: One line: what the message says happened.
        next_steps: What to check or do, most useful first.
        explain: Longer text for ``logsleuth explain``: causes, context, what it is not.
        fires: Example messages that must match this entry.
        not_fires: Similar messages that must not match this entry.
        defer_to: The finding code of a rule that reads this message better, if any.
        before_init_kind: The kind the message has when its writer never completed a
            communicator init (a closed connection during bootstrap is a bootstrap failure).
        reported_at_info: The project reports this failure at an informational level
            (Lightning's child-process observer logs a child's death with ``logger.info``):
            the line counts as a failure although INFO lines that quote failure words do not.
        source: The data file the entry was read from.
    """

    id: str
    family: str
    patterns: tuple[re.Pattern[str], ...]
    keywords: tuple[str, ...]
    kind: str
    role: str
    culprit: str
    severity: str
    priority: int
    meaning: str
    next_steps: tuple[str, ...]
    explain: str
    fires: tuple[str, ...]
    not_fires: tuple[str, ...] = ()
    defer_to: str | None = None
    before_init_kind: str | None = None
    reported_at_info: bool = False
    source: str = ""

    def search(self, text: str, lowered: str | None = None) -> re.Match[str] | None:
        """Return the first pattern match in ``text``, or None (keywords checked first)."""
        low = text.lower() if lowered is None else lowered
        if not any(k in low for k in self.keywords):
            return None
        return self.search_patterns(text)

    def search_patterns(self, text: str) -> re.Match[str] | None:
        """Return the first pattern match in ``text`` (the caller checked the keywords)."""
        for pattern in self.patterns:
            found = pattern.search(text)
            if found is not None:
                return found
        return None

    def describe(self) -> str:
        """Return the entry as ``logsleuth explain`` prints it."""
        lines = [
            f"{self.id} ({self.kind}, {self.role}, culprit: {self.culprit})",
            "",
            self.meaning,
            "",
            *_wrap(self.explain.strip()),
            "",
            "What to check:",
            *(f"  - {step}" for step in self.next_steps),
            "",
            "Example:",
            *(f"  {example}" for example in self.fires[:2]),
        ]
        if self.defer_to:
            lines += ["", f"Read by the more specific rule {self.defer_to} where it applies."]
        return "\n".join(lines) + "\n"


def _wrap(text: str) -> list[str]:
    return text.splitlines() if text else []


def build_entry(raw: Mapping[str, object], source: str) -> Entry:
    """Check one TOML table and build its :class:`Entry`.

    Raises:
        KnowledgeError: a field is missing, of the wrong type, outside its vocabulary, or a
            pattern does not compile; the message names ``source`` and the entry id.
    """
    ident = raw.get("id")
    where = f"{source}: entry {ident!r}" if isinstance(ident, str) else f"{source}: entry"

    def fail(reason: str) -> KnowledgeError:
        return KnowledgeError(f"{where}: {reason}")

    def text(name: str, default: str | None = None) -> str:
        value = raw.get(name, default)
        if not isinstance(value, str) or not value.strip():
            raise fail(f"'{name}' must be a non-empty string")
        return value

    def texts(name: str, required: bool = True) -> tuple[str, ...]:
        value = raw.get(name, [] if not required else None)
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise fail(f"'{name}' must be a list of non-empty strings")
        if required and not value:
            raise fail(f"'{name}' must not be empty")
        return tuple(value)

    known = {
        "id", "family", "patterns", "keywords", "kind", "role", "culprit", "severity",
        "priority", "meaning", "next_steps", "explain", "fires", "not_fires", "defer_to",
        "before_init_kind", "reported_at_info",
    }  # fmt: skip
    unknown = sorted(set(raw) - known)
    if unknown:
        raise fail(f"unknown field(s) {', '.join(unknown)}")
    if not isinstance(ident, str) or not re.fullmatch(r"[a-z0-9]+(?:[.-][a-z0-9]+)*", ident):
        raise fail("'id' must be a dotted lower-case name")
    kind = text("kind")
    if kind not in KINDS:
        raise fail(f"unknown kind {kind!r}")
    role = text("role")
    if role not in ROLES:
        raise fail(f"unknown role {role!r} (one of {', '.join(ROLES)})")
    culprit = text("culprit")
    if culprit not in SIDES:
        raise fail(f"unknown culprit side {culprit!r} (one of {', '.join(SIDES)})")
    severity = text("severity", DEFAULT_SEVERITY[role])
    if severity not in SEVERITIES:
        raise fail(f"unknown severity {severity!r}")
    priority = raw.get("priority", 0)
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise fail("'priority' must be an integer")
    patterns: list[re.Pattern[str]] = []
    for source_text in texts("patterns"):
        try:
            compiled = re.compile(source_text)
        except re.error as e:
            raise fail(f"pattern {source_text!r} does not compile: {e}") from e
        extra = set(compiled.groupindex) - set(GROUPS)
        if extra:
            raise fail(f"pattern {source_text!r} has unknown named group(s) {sorted(extra)}")
        patterns.append(compiled)
    keywords = texts("keywords")
    if any(k != k.lower() for k in keywords):
        raise fail("'keywords' must be lower case")
    defer = raw.get("defer_to")
    if defer is not None and (not isinstance(defer, str) or not re.fullmatch(r"LS\d{3}", defer)):
        raise fail("'defer_to' must be a finding code such as LS201")
    before_init = raw.get("before_init_kind")
    if before_init is not None and before_init not in KINDS:
        raise fail(f"unknown before_init_kind {before_init!r}")
    at_info = raw.get("reported_at_info", False)
    if not isinstance(at_info, bool):
        raise fail("'reported_at_info' must be true or false")
    return Entry(
        id=ident,
        family=text("family"),
        patterns=tuple(patterns),
        keywords=keywords,
        kind=kind,
        role=role,
        culprit=culprit,
        severity=severity,
        priority=priority,
        meaning=text("meaning"),
        next_steps=texts("next_steps", required=role != "benign"),
        explain=text("explain"),
        fires=texts("fires"),
        not_fires=texts("not_fires", required=False),
        defer_to=defer,
        before_init_kind=before_init if isinstance(before_init, str) else None,
        reported_at_info=at_info,
        source=source,
    )
