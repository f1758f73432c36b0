"""Every shortcut of the NCCL line parser agrees with the full LALR parser (issue 12).

The shortcuts stand before ``grammars/nccl.lark`` for speed and are composed of its own
terminals (:mod:`logsleuth.parse.nccl_line`):

(a) the fast path ``_parse_frequent`` answers None or exactly what rule ``line`` gives;
(b) the pre-filter ``_maybe_nccl`` never turns away a line rule ``line`` or ``envelope``
    accepts;
(c) the torn-line head regex ``head_at`` finds a head exactly where the grammar's head
    terminals match (leftmost, non-overlapping; at most one head terminal per position).

Inputs: every line of the real NCCL fixtures and of the corpus (as written and with the
launcher prefixes stripped), catalog format strings (``nccl-log-formats.tsv``) after a
random valid prefix, generated COLL and transport lines (the fast path's domain), and all
of these cut, spliced, joined into torn lines.
"""

from __future__ import annotations

import csv
import re
from functools import cache
from pathlib import Path
from typing import Any

from hypothesis import assume, given, settings
from hypothesis import strategies as st
from lark.exceptions import LarkError

from logsleuth.parse.clean import strip_prefixes
from logsleuth.parse.grammar import terminal_pattern, terminal_regex
from logsleuth.parse.nccl_line import (
    _maybe_nccl,
    _parse,
    _parse_frequent,
    _parser,
    head_at,
    level_marker,
    partial_fields,
    partial_prefix,
)
from logsleuth.resources import grammar_path
from tests.knowledge.catalog import instantiate

ROOT = Path(__file__).resolve().parents[2]
HEADS = ("INFO_HEAD", "TRACE_HEAD", "WARN_HEAD", "CALL_HEAD", "ABORT_HEAD")
EXAMPLES = settings(max_examples=400, deadline=None, derandomize=True)


def _full(text: str, start: str) -> Any:
    """Parse ``text`` by rule ``start`` with no shortcut; None when the grammar rejects it."""
    try:
        return _parser().parse(text, start=start)
    except LarkError:
        return None


def check_fast_path(text: str) -> None:
    fast = _parse_frequent(text)
    if fast is not None:
        assert fast == _full(text, "line"), text


def check_prefilter(text: str) -> None:
    if _full(text, "line") is not None or _full(text, "envelope") is not None:
        assert _maybe_nccl(text), text


def check_head_at(text: str) -> None:
    heads = [terminal_regex(_parser(), name) for name in HEADS]
    expected: list[tuple[int, int]] = []
    pos = 0
    while pos <= len(text):
        ends = [m.end() for m in (h.match(text, pos) for h in heads) if m is not None]
        assert len(ends) <= 1, (pos, text)
        if ends:
            expected.append((pos, ends[0]))
            pos = max(ends[0], pos + 1)
        else:
            pos += 1
    assert [m.span() for m in head_at().finditer(text)] == expected, text


def check_all(text: str) -> None:
    check_fast_path(text)
    check_prefilter(text)
    check_head_at(text)


# ---------------------------------------------------------------- real lines


@cache
def real_lines() -> tuple[str, ...]:
    files = sorted((ROOT / "fixtures/real/nccl").glob("*.log"))
    files += sorted(
        p for p in (ROOT / "fixtures/real/corpus").rglob("*") if p.suffix in (".log", ".txt", ".md")
    )
    lines: dict[str, None] = {}
    for path in files:
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.strip():
                lines[line] = None
                lines[strip_prefixes(line)[0]] = None
    return tuple(lines)


def test_real_lines_agree_with_the_full_parser() -> None:
    lines = real_lines()
    assert len(lines) > 1000
    for text in lines:
        check_all(text)
    # The fast path and the heads are exercised, not vacuously true.
    assert sum(_parse_frequent(t) is not None for t in lines) > 50
    assert sum(head_at().search(t) is not None for t in lines) > 300


# ---------------------------------------------------------------- generated lines


@cache
def catalog_messages() -> dict[str, tuple[str, ...]]:
    text = grammar_path("catalogs/nccl-log-formats.tsv").read_text(encoding="utf-8")
    rows = csv.DictReader(
        [line for line in text.splitlines() if not line.startswith("#")],
        delimiter="\t",
        quoting=csv.QUOTE_NONE,
    )
    messages: dict[str, dict[str, None]] = {}
    for row in rows:
        level = row["level"]
        messages.setdefault(level, {})[instantiate(row["format"])] = None
    return {level: tuple(found) for level, found in messages.items()}


hosts = st.from_regex(r"[a-z][a-z0-9.-]{0,10}[0-9]?", fullmatch=True)
ids = st.integers(0, 99999).map(str)
devs = st.integers(-1, 15).map(lambda d: f"[{d}]")
sources = st.sampled_from(["misc/socket.cc", "init.cc", "transport/net_ib.cc", "enqueue.cc"])
stamps = st.sampled_from(
    ["", "[2026-04-22 21:34:20] ", "[2026-04-22 21:34:20.123456] ", "Apr 22 21:34:20 ", "12:00 "]
)


@st.composite
def prefixes(draw: st.DrawFn, level: str) -> str:
    """A valid NCCL prefix of ``level`` (spec 1.3), every optional part drawn."""
    writer = f"{draw(hosts)}:{draw(ids)}:{draw(ids)}"
    dev = draw(devs)
    nccl = draw(st.sampled_from(["NCCL ", ""]))
    line = draw(st.integers(1, 2000))
    if level == "INFO":
        head = f"{writer} {dev} {nccl}INFO "
    elif level == "WARN":
        func = draw(st.sampled_from(["", " (ncclSocketConnect)", " ()"]))
        head = f"{writer} {dev} {draw(sources)}:{line}{func} {nccl}WARN "
    elif level == "TRACE":
        ms = draw(st.floats(0, 1e6).map(lambda f: f"{f:.6f}"))
        head = f"{writer} {dev} {ms} ncclProxyProgress:{line} NCCL TRACE "
    elif level == "CALL":
        head = f"{writer} NCCL CALL "
    else:
        head = f"{writer} {dev} {draw(sources)}:{line} NCCL ABORT "
    return draw(stamps) + head


@st.composite
def catalog_lines(draw: st.DrawFn) -> str:
    """A catalog format string with sample arguments after a random valid prefix."""
    messages = catalog_messages()
    level = draw(st.sampled_from(sorted(set(messages) - {"VERSION"})))
    if level == "VERSION" or draw(st.integers(0, 40)) == 0:
        return draw(stamps) + draw(st.sampled_from(messages["VERSION"]))
    return draw(prefixes(level)) + draw(st.sampled_from(messages[level]))


pointers = st.one_of(
    st.integers(1, 2**48).map(hex), st.just("(nil)"), st.integers(0, 255).map(lambda n: f"{n:x}")
)
numbers = st.integers(-2, 2**40).map(str)
COLL_KEYS = ("sendbuff", "recvbuff", "count", "datatype", "op", "root", "comm", "nranks")
COLL_KEYS += ("stream", "size", "bogus")


@st.composite
def coll_lines(draw: st.DrawFn) -> str:
    """A COLL enqueue line of any era (spec 2.9), fields drawn, some out of shape."""
    op = draw(st.sampled_from(["AllReduce: ", "Broadcast: ", "ReduceScatter: ", "", "x: "]))
    fields = [f"opCount {draw(st.integers(0, 2**32)):x}"]
    for key in draw(
        st.lists(
            st.sampled_from(COLL_KEYS),
            max_size=10,
        )
    ):
        if key in ("sendbuff", "recvbuff", "comm", "stream"):
            fields.append(f"{key} {draw(pointers)}")
        elif key == "nranks":
            fields.append(f"[nranks={draw(numbers)}]")
        else:
            fields.append(f"{key} {draw(numbers)}")
    tail = draw(st.sampled_from(["", " ", "  ", "\t"]))
    return draw(prefixes("INFO")) + op + " ".join(fields) + tail


@st.composite
def connect_lines(draw: st.DrawFn) -> str:
    """A per-channel transport line (spec 2.8), 2.4 and 2.5+ forms, with or without REST."""
    word = draw(st.sampled_from(["Channel", "Ring"]))
    chan = draw(st.sampled_from(["00", "01/0", "31/2", "7"]))
    peer = draw(st.sampled_from(["0", "1[1]", "37[5]", "-1", "2[b000]"]))
    other = draw(st.sampled_from(["1", "0[0]", "36[4]"]))
    direction = draw(st.sampled_from(["", " [send]", " [receive]"]))
    rest = draw(st.sampled_from(["", " P2P/IPC/read", " NET/IB/0/GDRDMA", "  ", " x"]))
    return f"{draw(prefixes('INFO'))}{word} {chan} : {peer} -> {other}{direction} via{rest}"


COMM_KEYS = ("cudaDev", "nvmlDev", "busId", "commId", "parent", "color", "key", "splitCount")


@st.composite
def comm_lines(draw: st.DrawFn) -> str:
    """A communicator line (spec 2.2): Init/Abort/Destroy START/COMPLETE of every era, glued
    "key 0- Init" children, "[Rank N]" heads, the nNodes/localRanks line; some out of shape."""
    rank = draw(numbers)
    config = draw(st.booleans())
    leads = ["", "ncclCommInitRank ", "ncclCommSplit ", f"[Rank {rank}] "]
    lead = "" if config else draw(st.sampled_from(leads))
    words = [f"comm {draw(pointers)} rank {rank}"]
    words.append(f"{draw(st.sampled_from(['nranks', 'nRanks']))} {draw(numbers)}")
    if config:
        words.append(f"nNodes {draw(numbers)} localRanks {draw(numbers)} localRank {draw(numbers)}")
        if draw(st.booleans()):
            words.append(f"MNNVL {draw(numbers)}")
        tail = ""
    else:
        for key in draw(st.lists(st.sampled_from(COMM_KEYS), max_size=6)):
            value = draw(pointers) if key in ("commId", "parent") else draw(numbers)
            words.append(f"{key} {value}")
        phase = draw(st.sampled_from(["Init", "Abort", "Destroy", "Revoke", "Init"]))
        stage = draw(st.sampled_from(["START", "COMPLETE"]))
        result = draw(st.sampled_from(["", ", result 0", ", result -3"]))
        tail = f"{draw(st.sampled_from([' - ', '- ', ' -  ']))}{phase} {stage}{result}"
    space = draw(st.sampled_from(["", " ", "\t"]))
    return draw(prefixes("INFO")) + lead + " ".join(words) + tail + space


tree_items = st.tuples(*(st.integers(-1, 4096) for _ in range(6))).map(
    lambda n: f"[{abs(n[0])}] {n[1]}/{n[2]}/{n[3]}->{n[4]}->{n[5]}"
)


@st.composite
def trees_lines(draw: st.DrawFn) -> str:
    """A ``Trees`` line (spec 2.7): channels between blanks, glued, cut or followed by text."""
    items = draw(st.lists(tree_items, max_size=8))
    glue = draw(st.sampled_from([" ", "", "  ", "\t"]))
    tail = draw(st.sampled_from(["", " ", " [3] 1/2", " x"]))
    return draw(prefixes("INFO")) + "Trees" + glue + glue.join(items) + tail


base_lines = st.one_of(
    catalog_lines(),
    coll_lines(),
    connect_lines(),
    comm_lines(),
    trees_lines(),
    st.sampled_from(sorted(real_lines())),
)


@st.composite
def mangled(draw: st.DrawFn) -> str:
    """A base line as it is, cut, spliced or torn into another (spec 4.3)."""
    text = draw(base_lines)
    how = draw(st.sampled_from(["as-is", "cut", "splice", "torn", "torn"]))
    if how == "cut":
        return text[: draw(st.integers(0, len(text)))]
    if how == "splice":
        at = draw(st.integers(0, len(text)))
        return (
            text[:at] + draw(st.sampled_from([" ", ":", "[", "]", "\t", "0", "NCCL "])) + text[at:]
        )
    if how == "torn":
        other = draw(base_lines)
        return text[: draw(st.integers(0, len(text)))] + other
    return text


@EXAMPLES
@given(mangled())
def test_the_fast_path_agrees_with_the_grammar(text: str) -> None:
    check_fast_path(text)


@EXAMPLES
@given(st.one_of(coll_lines(), connect_lines(), comm_lines(), trees_lines()))
def test_the_fast_path_answers_for_its_own_lines_as_the_grammar_does(text: str) -> None:
    check_fast_path(text)


def test_the_fast_path_reads_communicator_and_trees_lines() -> None:
    # Each line kind of the fast path is taken by it, not left to the parser.
    examples: list[str] = []

    @settings(max_examples=200, deadline=None, derandomize=True)
    @given(st.one_of(comm_lines(), trees_lines()))
    def collect(text: str) -> None:
        examples.append(text)

    collect()
    taken = [t for t in examples if _parse_frequent(t) is not None]
    assert sum("- Init " in t for t in taken) > 3
    assert sum("localRanks" in t for t in taken) > 3
    assert sum("Trees" in t for t in taken) > 3


@EXAMPLES
@given(mangled())
def test_the_prefilter_never_rejects_a_line_the_grammar_accepts(text: str) -> None:
    check_prefilter(text)


@EXAMPLES
@given(mangled())
def test_the_torn_line_head_is_where_the_grammar_heads_match(text: str) -> None:
    check_head_at(text)


def test_generated_lines_are_mostly_accepted() -> None:
    # The strategies are not vacuous: most lines they draw are in the language (some are
    # drawn out of it on purpose: a transport line without its transport, a bare "%s").
    examples: list[str] = []

    @settings(max_examples=200, deadline=None, derandomize=True)
    @given(st.one_of(catalog_lines(), coll_lines(), connect_lines(), comm_lines(), trees_lines()))
    def collect(text: str) -> None:
        examples.append(text)

    collect()
    accepted = sum(_full(t, "line") is not None for t in examples)
    assert accepted >= 0.6 * len(examples)
    assert sum(_parse_frequent(t) is not None for t in examples) > 10


def test_the_pre_filter_takes_what_the_grammar_takes_past_the_old_spelling() -> None:
    # The grammar ignores blanks between VERSION_KW and VERSION_STR: so does the pre-filter.
    for text in ("NCCL version 2.18.1+cuda12.1", "NCCL version\t2.18.1", "NCCL version2.4.8"):
        assert _full(text, "line") is not None
        assert _maybe_nccl(text)


# ---------------------------------------------------------------- the pieces


def test_the_timestamp_lookahead_is_made_of_the_prefix_pieces() -> None:
    # A terminal cannot compose a lookahead: TIMESTAMP restates the start of a prefix.
    parser = _parser()
    writer, dev = (terminal_pattern(parser, n) for n in ("NCCL_WRITER", "NCCL_DEV"))
    assert f"(?={writer} (?:{dev} |NCCL ))" in terminal_pattern(parser, "TIMESTAMP")


def test_every_head_is_made_of_the_prefix_pieces() -> None:
    parser = _parser()
    writer = terminal_pattern(parser, "NCCL_WRITER")
    for name in HEADS:
        assert terminal_pattern(parser, name).startswith(writer)
    assert terminal_pattern(parser, "HEAD").count(writer) == len(HEADS)


@EXAMPLES
@given(st.sampled_from(["INFO", "WARN", "TRACE", "CALL", "ABORT"]).flatmap(prefixes))
def test_a_partial_prefix_reads_every_field_of_a_whole_one(prefix: str) -> None:
    # A whole prefix is the widest partial one: each field comes back as written.
    head = re.sub(r"^(?:\[[^\]]*\] |Apr 22 \S+ |12:00 )", "", prefix)
    marker = level_marker().search(head)
    # "(func) WARN" without NCCL is no real form (func came with 2.30.7, NCCL with 2.3).
    assume(") WARN" not in head)
    assert marker is not None
    group = next(g for g in (1, 2, 3) if marker.group(g))
    found = partial_prefix().search(head, 0, marker.start(group))
    assert found is not None and found.start() == 0, head
    fields = partial_fields(found)
    host, pid, rest = head.split(":", 2)
    assert (fields["host"], fields["pid"]) == (host, pid)
    assert fields["tid"] == rest.split(" ", 1)[0]
    if " [" in head:
        assert f"[{fields['dev']}]" in head


def _line_or_envelope(text: str) -> Any:
    parsed = _full(text, "line")
    return parsed if parsed is not None else _full(text, "envelope")


@EXAMPLES
@given(mangled(), st.sampled_from(["h1:1:2 [0] NCCL INFO ", "other-host:77:78 [5] NCCL INFO "]))
def test_a_message_parsed_before_gives_what_the_grammar_gives_under_another_head(
    text: str, head: str
) -> None:
    # (d) the message cache: the same INFO message text under a second head answers
    # exactly what the full parser answers for that line.
    body = text.split(" NCCL INFO ", 1)[-1]
    first, second = "x9:3:4 [1] NCCL INFO " + body, head + body
    assert _parse(first) == _line_or_envelope(first), first
    assert _parse(second) == _line_or_envelope(second), second


def test_the_message_cache_answers_for_real_lines_twice_as_the_grammar_does() -> None:
    lines = [line for line in real_lines() if " NCCL INFO " in line]
    assert len(lines) > 100
    for _ in range(2):
        for line in lines:
            assert _parse(line) == _line_or_envelope(line), line
