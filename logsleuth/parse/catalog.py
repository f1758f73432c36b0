"""Recognize known messages by their text, wherever they stand in a line.

The messages come from data, not from examples: every format string of
``grammars/catalogs/nccl-log-formats.tsv`` (NCCL 2.3-2.30), of
``grammars/catalogs/torch-distributed-messages.tsv`` (PyTorch c10d, ProcessGroupNCCL, gloo,
TCPStore, elastic/torchrun, flight recorder, DeepSpeed, XLA) and of
``grammars/catalogs/extra-messages.tsv`` (launchers and frameworks the two catalogs do not
cover: Horovod, NVSHMEM, nccl-tests, JAX/XLA, Lightning, Ray, ...).

A format string becomes a regular expression: its literal text (blank runs match any blank
run) with a lazy group for every ``printf`` conversion, ``{}``/``{name}`` field and
``{MACRO}``. To stay fast with thousands of formats, each one is indexed by its rarest
word; a line is only checked against the formats whose rarest word it contains. A format
that cannot match whole (the line was cut, or wrapped) still matches by its longest
literal piece when that piece is long enough to be unmistakable.
"""

from __future__ import annotations

import csv
import re
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache

from logsleuth.parse.clean import strip_prefixes
from logsleuth.resources import grammar_path

CATALOG_FILES = (
    ("nccl", "catalogs/nccl-log-formats.tsv"),
    ("torch", "catalogs/torch-distributed-messages.tsv"),
    ("extra", "catalogs/extra-messages.tsv"),
)

# printf conversions (NCCL) and Python %-formats; {}, {name}, {expr:spec} (fmt, f-strings);
# {MACRO} spliced into NCCL literals.
_PLACEHOLDER = re.compile(
    r"%(?:\([A-Za-z_]\w*\))?[-+ #0]*(?:\*|\d+)?(?:\.(?:\*|\d+))?(?:hh|h|ll|l|L|z|j|t|q)?"
    r"[diouxXeEfFgGcspmn]"
    r"|\{[^{}\n]{0,80}\}"
)
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]{3,}")
_BLANKS = re.compile(r"\s+")

MIN_LITERAL = 10
"""A format with less literal text than this is too generic to recognize a line by."""
MIN_ANCHOR = 20
"""A literal piece this long recognizes a cut or wrapped line on its own."""

_TORCH_FAMILY = {
    "gloo": "gloo",
    "elastic": "elastic",
    "deepspeed": "deepspeed",
    "xla": "xla",
    "fr_trace": "fr_trace",
}


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """One known message.

    Attributes:
        id: ``nccl:<row>``, ``torch:<row>`` or ``extra:<row>`` (1-based data row).
        family: Who prints it (``nccl``, ``torch``, ``gloo``, ``elastic``, ``deepspeed``,
            ``xla``, ``horovod``, ``nvshmem``, ``nccl-tests``, ...).
        level: The level the catalog gives (``WARN``, ``INFO``, ``ERROR``, ``CHECK``, ...).
        fmt: The format string's first line, as written.
        literal: How many literal characters the format has (its specificity).
        anchor: Its longest literal piece (blank runs folded to one blank).
        head: The start of its first literal piece, up to a word end near
            :data:`HEAD_SPAN` characters (a message reworded or cut later still starts
            the same); empty when too short to be unmistakable.
    """

    id: str
    family: str
    level: str
    fmt: str
    literal: int
    anchor: str
    head: str = ""
    subsystems: tuple[str, ...] = ()
    """The NCCL debug subsystems an INFO/TRACE message is printed under (``INIT``, ``NVLS``)."""
    names: tuple[str, ...] = ()
    """The name the format gives each value (``{local_rank}``, ``%(pid)s``, ``(?P<rank>..)``;
    ``""`` for an unnamed ``%d`` or ``{}``), in the order of :attr:`CatalogMatch.fields`."""


PREFIX = "PREFIX"
"""The level of an entry that is the shape of a line prefix, not a message."""
_PREFIX_DEPTH = 3
HEAD_SPAN = 48
"""How much of a message's start identifies it when the rest differs."""


def _head(first: str) -> str:
    if len(first) < MIN_ANCHOR:
        return ""
    if len(first) <= HEAD_SPAN:
        return first
    cut = first.rfind(" ", MIN_ANCHOR, HEAD_SPAN)
    return first[: cut if cut > 0 else HEAD_SPAN]


@dataclass(frozen=True, slots=True)
class CatalogMatch:
    """Where and how a line matched a catalog entry."""

    entry: CatalogEntry
    start: int
    """Offset in the line where the message begins (what precedes it is a prefix)."""
    fields: tuple[str, ...]
    """The values of the format's placeholders, when the whole format matched."""
    whole: bool
    """The whole format matched (False: only its anchor, in a cut or wrapped line)."""
    end: int = 0
    """Offset in the line where the matched text ends."""
    restored: str = ""
    """For a line that begins mid-message: the message with the start the cut took, from
    the format (its values there unknown: ``…``); empty otherwise."""


def _unescape(fmt: str) -> list[str]:
    """Undo the C escapes the NCCL catalog keeps as written; return the format's lines.

    A multi-line format (NCCL's WARNs that continue on further lines) prints each of its
    lines as a physical line of its own, so each is a message to recognize.
    """
    fmt = fmt.replace('\\"', '"').replace("\\t", " ").replace("\\\\", "\\")
    return [piece.strip() for piece in fmt.split("\\n") if piece.strip()]


def _pieces(fmt: str) -> list[str]:
    return [_BLANKS.sub(" ", p) for p in _PLACEHOLDER.split(fmt)]


def _family(kind: str, row: dict[str, str]) -> str:
    if kind == "nccl":
        return "nccl"
    if kind == "extra":
        return row.get("family", "") or "other"
    component = row.get("component", "")
    return _TORCH_FAMILY.get(component, "torch")


def _rows(kind: str, text: str) -> Iterator[tuple[int, dict[str, str]]]:
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    reader = csv.DictReader(lines, delimiter="\t", quoting=csv.QUOTE_NONE)
    for number, row in enumerate(reader, start=1):
        yield number, {k: (v or "") for k, v in row.items() if k is not None}


def _format_of(kind: str, row: dict[str, str]) -> str:
    if kind == "nccl":
        return row.get("format string", row.get("format", ""))
    return row.get("format", "")


@dataclass(slots=True)
class _Compiled:
    entry: CatalogEntry
    words: frozenset[str]
    source: str
    order: int = 0
    regex: re.Pattern[str] | None = None

    tail_pieces: list[tuple[int, int, list[str]]] | None = None

    def tails(self) -> list[tuple[int, int, list[str]]]:
        """The ends of the format from each literal piece after the first on, longest first:
        (literal length, index of that piece, the pieces from it on, blank runs folded; a
        last piece ``""`` means the format ends in a value)."""
        if self.tail_pieces is None:
            pieces = _pieces(self.source)
            found: list[tuple[int, int, list[str]]] = []
            for start in range(1, len(pieces)):
                rest = pieces[start:]
                literal = sum(len(p.strip()) for p in rest)
                if literal >= MIN_ANCHOR // 2 and rest[0].strip():
                    found.append((literal, start, rest))
            self.tail_pieces = found
        return self.tail_pieces

    def restore(self, line: str, start: int, lead: str) -> tuple[int, str]:
        """How much of the last literal piece before piece ``start`` a cut line's ``lead``
        (the text before that piece) still holds, and the message with its start restored
        from the format (a value the cut took, or took part of, is ``…``)."""
        pieces = _pieces(self.source)
        last = max((i for i in range(start) if pieces[i].strip()), default=0)
        before = pieces[last]
        kept = next(
            (k for k in range(min(len(before), len(lead)), 0, -1) if before.endswith(lead[:k])),
            0,
        )
        head = "…".join(pieces[: last + 1])  # the pieces the cut took, values unknown
        values = lead[kept:] if kept else "…" + lead
        return kept, head + values + line[len(lead) :]

    def pattern(self) -> re.Pattern[str]:
        if self.regex is None and self.source.startswith("re:"):
            body = self.source[3:]
            if body.startswith("^") and self.entry.level != PREFIX:
                # A line's own start, or where an unknown prefix ends: after a blank.
                body = r"(?<!\S)" + body[1:]
            self.regex = re.compile(body)
        if self.regex is None:
            pieces = _pieces(self.source)
            parts = [_piece_regex(pieces[0])]
            # Each value and the piece after it are one atomic group: the piece is taken at
            # its first place after the one before. Later places cannot fit a line the first
            # does not, so the match is the one plain lazy groups give, without their
            # backtracking (exponential on a line of many repeats, e.g. a flattened paste of
            # connection lines).
            for piece in pieces[1:-1]:
                parts.append(f"(?>(.*?){_piece_regex(piece)})")
            if len(pieces) > 1:
                last = pieces[-1]
                # A trailing placeholder takes the rest of the line.
                parts.append(f"(?>(.*?){_piece_regex(last)})" if last else "(.*)")
            self.regex = re.compile("".join(parts))
        return self.regex


def _piece_regex(piece: str) -> str:
    """A literal piece of a format as a regular expression; its blanks match any blank run."""
    return r"\s+".join(re.escape(w) for w in piece.split(" "))


_CUT_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]{2,}")
"""The words a cut line is looked up by: its end may hold only short ones (``via P2P``)."""
_CUT_LEAD = 160
"""How much of a cut value (or piece) may stand before the first whole literal piece."""


class Catalog:
    """All known messages, indexed for :meth:`match`."""

    def __init__(self, entries: list[tuple[CatalogEntry, str]]) -> None:
        self.entries: tuple[CatalogEntry, ...] = tuple(e for e, _ in entries)
        compiled = [
            _Compiled(entry, _index_words(source), source, order)
            for order, (entry, source) in enumerate(entries)
        ]
        self._index = _by_rarest_word(compiled, lambda item: item.words)
        self._always = [item for item in compiled if not item.words]
        self._by_id = {item.entry.id: item for item in compiled}
        self._heads: dict[str, list[_Compiled]] | None = None
        """The rarest word of each message start -> its entries (made on first use)."""
        self._by_word: dict[str, list[_Compiled]] | None = None
        """Every word of every format -> its entries (for :meth:`match_cut`, made on use)."""
        self._prefixes = [item for item in compiled if item.entry.level == PREFIX]

    def candidates(self, text: str) -> list[_Compiled]:
        """Return the entries whose rarest word ``text`` contains, in catalog order."""
        return [*self._always, *_looked_up(self._index, _WORD.findall(text))]

    def match(self, text: str, depth: int = 0) -> CatalogMatch | None:
        """Return the most specific known message in ``text``, or None.

        The most specific is the one with the most literal text; among equals, the one
        that starts first, then the first in catalog order. A line prefix shape (level
        ``PREFIX``: a vLLM, sglang, glog or journald prefix) is only the answer when no
        message follows it; the message after it is looked for as at a line start.
        """
        candidates = self.candidates(text)
        prefix = self._best(text, [c for c in candidates if c.entry.level == PREFIX])
        if prefix is not None and depth < _PREFIX_DEPTH and prefix.end > prefix.start:
            # What follows the prefix may carry a launcher's prefix of its own (Ray, torchrun).
            rest = strip_prefixes(text[prefix.end :])[0]
            inner = self.match(rest, depth + 1)
            if inner is not None:  # a message after the prefix, or the innermost prefix
                shift = len(text) - len(rest) if text.endswith(rest) else prefix.end
                return CatalogMatch(
                    inner.entry, inner.start + shift, inner.fields, inner.whole, inner.end + shift
                )
        best = self._best(text, [c for c in candidates if c.entry.level != PREFIX])
        if best is None and prefix is None:
            # A line cut at its end may have lost the word the entry is indexed by: the
            # entries are looked up by the rarest word of their message start instead.
            if self._heads is None:
                starts = [
                    i for i in self._by_id.values() if i.entry.head and i.entry.level != PREFIX
                ]
                self._heads = _by_rarest_word(
                    starts, lambda i: frozenset(_WORD.findall(i.entry.head))
                )
            best = self._best(text, _looked_up(self._heads, _WORD.findall(text)))
        return best if best is not None else prefix

    def prefix_end(self, text: str) -> int:
        """Return where the line prefix shapes at the start of ``text`` end (0: none)."""
        end = 0
        for _ in range(_PREFIX_DEPTH):
            for item in self._prefixes:
                found = item.pattern().match(text[end:])
                if found is not None and found.end() > 0:
                    end += found.end()
                    break
            else:
                break
        return end

    def _best(self, text: str, candidates: list[_Compiled]) -> CatalogMatch | None:
        best: CatalogMatch | None = None
        # Among equally specific matches the first in catalog order wins, whatever order the
        # candidates came in (they come from a set of words: its order varies per process).
        best_key: tuple[int, int, int, int] | None = None
        for item in candidates:
            entry = item.entry
            found = item.pattern().search(text)
            if found is not None:
                match = CatalogMatch(entry, found.start(), found.groups(), True, found.end())
                key = (1, entry.literal, -found.start(), -item.order)
            else:
                at = _folded_find(text, entry.anchor) if len(entry.anchor) >= MIN_ANCHOR else -1
                size = len(entry.anchor)
                if at < 0 and entry.head:
                    at, size = _folded_find(text, entry.head), len(entry.head)
                if at < 0:
                    continue
                match = CatalogMatch(entry, at, (), False, at + size)
                key = (0, size, -at, -item.order)
            if best_key is None or key > best_key:
                best, best_key = match, key
        return best

    def match_cut(self, text: str) -> CatalogMatch | None:
        """Return the known message whose end ``text`` is, when ``text`` begins mid-message.

        An excerpt's first line may be cut anywhere in it (a selection started mid-line):
        what is left is the end of a message, from inside one of its literal pieces or
        values on. That end, from some literal piece on, must match the rest of the line;
        at least :data:`MIN_ANCHOR` literal characters of it (the cut piece's tail
        included) must stand in the line, so that a line is not typed by a few common
        words. The values are not read (the match is not whole); the message is restored
        from the format (:attr:`CatalogMatch.restored`). Among several, the one with the
        most literal text matched wins, then the first in catalog order.
        """
        if self._by_word is None:
            self._by_word = defaultdict(list)
            for item in self._by_id.values():
                if item.entry.level != PREFIX and not item.source.startswith("re:"):
                    for word in set(_CUT_WORD.findall(item.source)):
                        self._by_word[word].append(item)
        line = _BLANKS.sub(" ", text).rstrip()
        best: CatalogMatch | None = None
        best_key: tuple[int, int] | None = None
        for item in _looked_up(self._by_word, _CUT_WORD.findall(text)):
            for literal, start, rest in item.tails():
                at = _tail_at(line, rest)
                if at is None:
                    continue
                kept, restored = item.restore(line, start, line[:at])
                # Each value the rest of the line fits in its place says as much as a
                # character of literal text (``returned 113(No route to host) errno 115(...)``).
                said = literal + kept + len(rest) - 1
                if said < MIN_ANCHOR:
                    continue
                key = (said, -item.order)
                if best_key is None or key > best_key:
                    best = CatalogMatch(item.entry, 0, (), False, len(line), restored)
                    best_key = key
                break  # the longest end of this entry that fits
        return best

    def entry(self, entry_id: str) -> CatalogEntry | None:
        """Return the entry with id ``entry_id``."""
        item = self._by_id.get(entry_id)
        return item.entry if item is not None else None


def _by_rarest_word(
    items: list[_Compiled], words_of: Callable[[_Compiled], frozenset[str]]
) -> dict[str, list[_Compiled]]:
    """Index ``items`` by the rarest (among them) of the words a matching line must hold."""
    frequency: dict[str, int] = defaultdict(int)
    for item in items:
        for word in words_of(item):
            frequency[word] += 1
    index: dict[str, list[_Compiled]] = defaultdict(list)
    for item in items:
        words = words_of(item)
        if words:
            index[min(words, key=lambda w: (frequency[w], -len(w), w))].append(item)
    return index


def _looked_up(index: dict[str, list[_Compiled]], words: list[str]) -> list[_Compiled]:
    """The entries ``index`` files under any of ``words``, each once."""
    found: dict[str, _Compiled] = {}
    for word in set(words):
        for item in index.get(word, ()):
            found[item.entry.id] = item
    return list(found.values())


def _tail_at(line: str, rest: list[str]) -> int | None:
    """Where the end of a format (its pieces ``rest``, values between them) begins in
    ``line``, which it must fill to the end; None when it does not fit.

    The first piece is taken at its last place within :data:`_CUT_LEAD` characters that
    lets the rest fit (what precedes it is the cut piece and value); each later piece at
    its first place after the one before, the last one at the line's end unless the format
    ends in a value. A linear search by ``str.find``: no backtracking regular expression.
    """
    first, *later = rest
    # How the line must end after the pieces found in turn: right after the first piece
    # (the format ends there), anyhow (it ends in a value: its last piece is ""), or with
    # the format's last piece.
    closing = later[-1].rstrip() if later else None
    at = line.rfind(first, 0, min(len(line), _CUT_LEAD + len(first)))
    while at >= 0:
        pos = at + len(first)
        for piece in later[:-1]:
            pos = line.find(piece, pos)
            if pos < 0:
                break
            pos += len(piece)
        else:
            if closing is None:
                fits = pos == len(line)
            else:
                fits = not later[-1] or (line.endswith(closing) and len(line) - len(closing) >= pos)
            if fits:
                return at
        at = line.rfind(first, 0, at + len(first) - 1) if at > 0 else -1
    return None


def _index_words(source: str) -> frozenset[str]:
    """Return the words a line must contain for ``source`` to match it.

    For a regular expression (``re:``) only plain words outside escapes, classes and
    alternatives count; one with none is tried on every line.
    """
    if not source.startswith("re:"):
        # A field's name (``{last_return_code}``) is no text of the line: only literals count.
        return frozenset(_WORD.findall(_PLACEHOLDER.sub(" ", source)))
    # Escapes, classes and repeats are cut out; a word touching a cut is only part of a word.
    # (\b is a word boundary: the word beside it is whole.)
    body = re.sub(r"\\.|\[[^\]]*\]|\{[^}]*\}", "\x00", source[3:].replace("\\b", " "))
    while True:  # groups may be optional or alternatives: no word inside one is required
        stripped = re.sub(r"\([^()]*\)", "\x00", body)
        if stripped == body:
            break
        body = stripped
    words = [
        m.group()
        for m in _WORD.finditer(body)
        if re.fullmatch(r"[A-Za-z0-9_]+", m.group())
        and body[m.start() - 1 : m.start()] != "\x00"
        and body[m.end() : m.end() + 1] not in ("\x00", "?", "*")
    ]
    return frozenset(words[:1]) if words else frozenset()


def _folded_find(text: str, anchor: str) -> int:
    """Find ``anchor`` in ``text`` with every blank run matching any blank run."""
    at = text.find(anchor)
    if at >= 0 or ("  " not in text and "\t" not in text):
        return at
    found = re.search(r"\s+".join(re.escape(w) for w in anchor.split(" ")), text)
    return found.start() if found else -1


def _entries(kind: str, text: str) -> Iterator[tuple[CatalogEntry, str]]:
    for number, row in _rows(kind, text):
        raw = _format_of(kind, row)
        level = row.get("level", "").split(":")[0].split("+")[0].strip() or "INFO"
        if raw.startswith("re:"):
            # A pattern of a kind of line: any catalog format is more specific.
            yield _entry(kind, number, row, level, raw, [""], MIN_LITERAL), raw
            continue
        lines = _unescape(raw)
        for part, source in enumerate(lines, start=1):
            pieces = [p.strip() for p in _pieces(source)]
            literal = sum(len(p) for p in pieces)
            if literal < MIN_LITERAL:
                continue
            ident = f"{number}" if part == 1 or len(lines) == 1 else f"{number}.{part}"
            yield _entry(kind, ident, row, level, source, pieces, literal), source


def _entry(
    kind: str,
    ident: int | str,
    row: dict[str, str],
    level: str,
    source: str,
    pieces: list[str],
    literal: int,
) -> CatalogEntry:
    return CatalogEntry(
        id=f"{kind}:{ident}",
        family=_family(kind, row),
        level=level,
        fmt=source,
        literal=literal,
        anchor=max(pieces, key=len),
        head=_head(_BLANKS.sub(" ", pieces[0])) if pieces[0] else "",
        subsystems=_subsystems(row.get("subsys", "")) if kind == "nccl" else (),
        names=_field_names(source),
    )


_NAMED = re.compile(r"\{([A-Za-z_][\w.]*)(?:[!:][^{}]*)?\}|%\(([A-Za-z_]\w*)\)")
"""A placeholder that names its value: ``{name}``, ``{obj.name:spec}``, ``%(name)s``."""


def _field_names(source: str) -> tuple[str, ...]:
    """The name of each value a format captures (see :attr:`CatalogEntry.names`).

    An attribute (``{self._rank}``) is named by its last part, without leading underscores.
    """
    if source.startswith("re:"):
        try:
            pattern = re.compile(source[3:])
        except re.error:
            return ()
        by_number = {number: name for name, number in pattern.groupindex.items()}
        return tuple(by_number.get(i, "") for i in range(1, pattern.groups + 1))
    names: list[str] = []
    for found in _PLACEHOLDER.finditer(source):
        named = _NAMED.fullmatch(found.group())
        name = (named.group(1) or named.group(2)) if named else ""
        names.append(name.rsplit(".", 1)[-1].lstrip("_"))
    return tuple(names)


def _subsystems(flags: str) -> tuple[str, ...]:
    """``NCCL_INIT|NCCL_NET`` -> ``("INIT", "NET")``; ``NCCL_ALL`` (WARN, VERSION) -> ``()``."""
    names = {f.strip().removeprefix("NCCL_") for f in flags.split("|") if f.strip()}
    return tuple(sorted(names - {"ALL", ""}))


@cache
def load_catalog() -> Catalog:
    """Read the message catalogs shipped in ``grammars/catalogs/`` once per process."""
    entries: list[tuple[CatalogEntry, str]] = []
    for kind, name in CATALOG_FILES:
        text = grammar_path(name).read_text(encoding="utf-8")
        entries.extend(_entries(kind, text))
    return Catalog(entries)


def whole_message(text: str) -> bool:
    """Return True when ``text`` is one whole known message (the catalog's), blanks aside."""
    bare = strip_prefixes(text)[0].rstrip()
    found = load_catalog().match(bare)
    return found is not None and found.whole and found.start == 0 and found.end == len(bare)
