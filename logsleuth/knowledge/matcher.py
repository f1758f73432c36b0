"""Load the knowledge base once and find the entry a message text belongs to.

Every entry names lower-case keywords, one of which must occur in a text before its regular
expressions are tried: a text is lowered once and each keyword is a substring test, so
thousands of entries cost microseconds per message. Results are cached per text, because
one failure prints the same message on many ranks.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib import resources

from logsleuth.knowledge.entry import Entry, KnowledgeError, build_entry

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

DATA_PACKAGE = "logsleuth.knowledge"


@dataclass(frozen=True, slots=True)
class Hit:
    """An entry that matched a text, and what its pattern's named groups captured."""

    entry: Entry
    fields: tuple[tuple[str, str], ...] = ()

    def field(self, name: str) -> str | None:
        """Return the captured group ``name`` (``peer``, ``rank``, ``ranks``, ``host``, ``pid``)
        or None."""
        return next((value for key, value in self.fields if key == name), None)


def parse_entries(text: str, source: str) -> list[Entry]:
    """Parse one knowledge file (TOML with ``[[entry]]`` tables) into entries.

    Raises:
        KnowledgeError: the TOML is malformed or an entry is invalid; names ``source``.
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise KnowledgeError(f"{source}: not valid TOML: {e}") from e
    unknown = sorted(set(data) - {"entry"})
    if unknown:
        raise KnowledgeError(f"{source}: unknown top-level key(s) {', '.join(unknown)}")
    tables = data.get("entry", [])
    if not isinstance(tables, list):
        raise KnowledgeError(f"{source}: 'entry' must be an array of tables ([[entry]])")
    return [build_entry(_table(t, source), source) for t in tables]


def _table(value: object, source: str) -> Mapping[str, object]:
    if not isinstance(value, dict):
        raise KnowledgeError(f"{source}: every [[entry]] must be a table")
    return value


def check_unique(found: Iterable[Entry]) -> tuple[Entry, ...]:
    """Return ``found`` ordered for matching (priority, then id); reject duplicate ids."""
    seen: dict[str, str] = {}
    ordered = sorted(found, key=lambda e: (-e.priority, e.id))
    for entry in ordered:
        if entry.id in seen:
            raise KnowledgeError(
                f"{entry.source}: entry {entry.id!r} is also defined in {seen[entry.id]}"
            )
        seen[entry.id] = entry.source
    return tuple(ordered)


@cache
def entries() -> tuple[Entry, ...]:
    """Return every entry of the shipped knowledge base, in matching order."""
    data = resources.files(DATA_PACKAGE).joinpath("data")
    loaded: list[Entry] = []
    for item in sorted(data.iterdir(), key=lambda p: p.name):
        if item.name.endswith(".toml"):
            loaded += parse_entries(item.read_text(encoding="utf-8"), f"knowledge/{item.name}")
    return check_unique(loaded)


def entry_by_id(ident: str) -> Entry | None:
    """Return the entry named ``ident``, or None."""
    return next((e for e in entries() if e.id == ident.strip().lower()), None)


class KeywordIndex:
    """Find which keywords occur in a text in one pass (an Aho-Corasick automaton).

    The cost of a search grows with the length of the text, not with the number of keywords,
    so the prefilter stays cheap however many entries the knowledge base holds.
    """

    def __init__(self, keywords: Iterable[str]) -> None:
        self._goto: list[dict[str, int]] = [{}]
        self._out: list[frozenset[str]] = [frozenset()]
        for word in sorted(set(keywords)):
            node = 0
            for char in word:
                nxt = self._goto[node].get(char)
                if nxt is None:
                    nxt = len(self._goto)
                    self._goto[node][char] = nxt
                    self._goto.append({})
                    self._out.append(frozenset())
                node = nxt
            self._out[node] = self._out[node] | {word}
        self._fail = [0] * len(self._goto)
        queue = list(self._goto[0].values())
        for node in queue:  # breadth first: a node's fail link is set before its children's
            for char, child in self._goto[node].items():
                queue.append(child)
                fail = self._fail[node]
                while fail and char not in self._goto[fail]:
                    fail = self._fail[fail]
                target = self._goto[fail].get(char, 0)
                self._fail[child] = target if target != child else 0
                self._out[child] = self._out[child] | self._out[self._fail[child]]

    def found_in(self, lowered: str) -> set[str]:
        """Return the keywords that occur in ``lowered``."""
        goto, fail, out = self._goto, self._fail, self._out
        node = 0
        found: set[str] = set()
        for char in lowered:
            while node and char not in goto[node]:
                node = fail[node]
            node = goto[node].get(char, 0)
            if out[node]:
                found |= out[node]
        return found


@cache
def _index() -> tuple[KeywordIndex, dict[str, tuple[int, ...]]]:
    """Return the keyword automaton and, per keyword, the positions of its entries."""
    by_keyword: dict[str, list[int]] = {}
    for position, entry in enumerate(entries()):
        for keyword in entry.keywords:
            by_keyword.setdefault(keyword, []).append(position)
    return KeywordIndex(by_keyword), {k: tuple(v) for k, v in by_keyword.items()}


@lru_cache(maxsize=8192)
def lookup(text: str) -> Hit | None:
    """Return the entry ``text`` belongs to (highest priority first) and its captured fields."""
    if not text:
        return None
    automaton, by_keyword = _index()
    candidates = sorted({p for k in automaton.found_in(text.lower()) for p in by_keyword[k]})
    ordered = entries()
    for position in candidates:
        entry = ordered[position]
        found = entry.search_patterns(text)
        if found is not None:
            fields = tuple((k, v) for k, v in sorted(found.groupdict().items()) if v)
            return Hit(entry, fields)
    return None


def match(text: str) -> Entry | None:
    """Return the entry whose pattern matches ``text``, or None."""
    hit = lookup(text)
    return hit.entry if hit else None


def search(query: str) -> list[Entry]:
    """Return the entries a person looks for: by id, by a message they match, or by words.

    A query that is an entry's id returns that entry; a message text returns the entry it
    matches; otherwise every entry whose id, family, meaning, explanation, keywords or
    examples contain the query (case-insensitive) is returned, in matching order.
    """
    wanted = query.strip()
    if not wanted:
        return []
    exact = entry_by_id(wanted)
    if exact is not None:
        return [exact]
    low = wanted.lower()
    found = [
        e
        for e in entries()
        if low in e.id
        or low in e.family.lower()
        or low in e.meaning.lower()
        or low in e.explain.lower()
        or any(low in k or k in low for k in e.keywords if len(k) >= 6)
        or any(low in x.lower() for x in e.fires)
    ]
    hit = match(wanted)
    if hit is not None and hit not in found:
        found.insert(0, hit)
    return found
