"""The knowledge base as data: every entry's examples, the loader's checks, the matcher."""

from __future__ import annotations

import pytest

from logsleuth.knowledge import Entry, KnowledgeError, entries, entry_by_id, lookup, match, search
from logsleuth.knowledge.matcher import KeywordIndex, check_unique, parse_entries
from logsleuth.model.diagnosis import KINDS
from tests.knowledge.catalog import instantiate, warn_rows

ENTRIES = entries()

VALID = """
[[entry]]
id = "demo.entry"
family = "nccl/demo"
kind = "network-error"
role = "cause"
culprit = "self"
keywords = ["demo"]
patterns = ['demo (?P<peer>\\S+) failed']
meaning = "A demo."
next_steps = ["Check it."]
explain = "Demo."
fires = ["demo 10.0.0.1<1> failed"]
"""


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.id)
def test_each_entry_fires_on_its_examples_and_not_on_its_counterexamples(entry: Entry) -> None:
    for example in entry.fires:
        hit = lookup(example)
        assert hit is not None and hit.entry.id == entry.id, (example, hit and hit.entry.id)
    for example in entry.not_fires:
        assert match(example) is not entry, example


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.id)
def test_each_entry_is_complete(entry: Entry) -> None:
    assert entry.kind in KINDS
    assert entry.meaning.endswith((".", ")")), entry.meaning
    assert entry.explain.strip()
    if entry.role != "benign":
        assert entry.next_steps
    if entry.role == "internal":
        assert entry.kind == "inconclusive"
        assert any("version" in s.lower() for s in entry.next_steps)
    assert all(any(k in x.lower() for k in entry.keywords) for x in entry.fires)


def test_the_knowledge_base_is_large_and_ordered() -> None:
    assert len(ENTRIES) >= 90
    assert [(-e.priority, e.id) for e in ENTRIES] == sorted((-e.priority, e.id) for e in ENTRIES)
    assert {e.role for e in ENTRIES} == {"cause", "symptom", "benign", "internal"}
    assert {e.culprit for e in ENTRIES} == {"self", "peer", "host", "none"}


def test_a_symptom_points_away_from_the_writer() -> None:
    hit = lookup("socketProgress: Connection closed by remote peer gpu-node002<47192>")
    assert hit is not None
    assert (hit.entry.role, hit.entry.culprit, hit.field("peer")) == (
        "symptom",
        "peer",
        "gpu-node002<47192>",
    )


def test_a_quoted_nccl_warn_wins_over_the_framework_wrapper() -> None:
    text = (
        "NCCL error in: ProcessGroupNCCL.cpp:1191, invalid usage (run with NCCL_DEBUG=WARN "
        "for details), NCCL version 2.14.3 ncclInvalidUsage: This usually reflects invalid "
        "usage of NCCL library. Last error: Duplicate GPU detected : rank 1 and rank 0 both "
        "on CUDA device 1000"
    )
    assert match(text) is entry_by_id("init.duplicate-gpu")
    assert match(text.split(" Last error:")[0]) is entry_by_id("result.invalid-usage")


def test_unknown_text_matches_nothing() -> None:
    assert match("") is None
    assert match("Training step 100 loss 0.25") is None


def test_search_finds_entries_by_words_id_and_message() -> None:
    assert [e.id for e in search("wrong magic")] == ["socket.foreign-connection"]
    assert [e.id for e in search("shm.exhausted")] == ["shm.exhausted"]
    assert search("XML Import Channel : dev 3 not found.")[0].id == "topo.xml-file"
    assert search("   ") == []


def test_describe_prints_what_explain_shows() -> None:
    entry = entry_by_id("socket.foreign-connection")
    assert entry is not None
    text = entry.describe()
    assert text.startswith("socket.foreign-connection (bootstrap-failure, cause, culprit: peer)\n")
    assert "What to check:\n  - " in text


def test_a_valid_file_loads() -> None:
    (entry,) = parse_entries(VALID, "knowledge/demo.toml")
    assert (entry.id, entry.severity, entry.priority, entry.source) == (
        "demo.entry",
        "critical",
        0,
        "knowledge/demo.toml",
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (('kind = "network-error"', 'kind = "network"'), "unknown kind 'network'"),
        (
            ('role = "cause"', 'role = "root"'),
            "unknown role 'root' (one of cause, symptom, benign, internal)",
        ),
        (
            ('culprit = "self"', 'culprit = "me"'),
            "unknown culprit side 'me' (one of self, peer, host, none)",
        ),
        (
            ("patterns = ['demo (?P<peer>\\S+) failed']", "patterns = ['demo (']"),
            "pattern 'demo (' does not compile: missing ), unterminated subpattern at position 5",
        ),
        (
            ("patterns = ['demo (?P<peer>\\S+) failed']", "patterns = ['demo (?P<who>x)']"),
            "pattern 'demo (?P<who>x)' has unknown named group(s) ['who']",
        ),
        (('keywords = ["demo"]', 'keywords = ["Demo"]'), "'keywords' must be lower case"),
        (('meaning = "A demo."', 'meaning = ""'), "'meaning' must be a non-empty string"),
        (('fires = ["demo 10.0.0.1<1> failed"]', "fires = []"), "'fires' must not be empty"),
        (('explain = "Demo."', 'explain = "Demo."\nexample = "x"'), "unknown field(s) example"),
        (
            ('explain = "Demo."', 'explain = "Demo."\nreported_at_info = "yes"'),
            "'reported_at_info' must be true or false",
        ),
    ],
)
def test_a_malformed_entry_is_named_in_one_line(change: tuple[str, str], message: str) -> None:
    text = VALID.replace(*change)
    assert text != VALID
    with pytest.raises(KnowledgeError) as info:
        parse_entries(text, "knowledge/demo.toml")
    assert str(info.value) == f"knowledge/demo.toml: entry 'demo.entry': {message}"


def test_malformed_toml_and_duplicates_are_named() -> None:
    with pytest.raises(KnowledgeError, match=r"^knowledge/bad.toml: not valid TOML: "):
        parse_entries("[[entry]\n", "knowledge/bad.toml")
    with pytest.raises(
        KnowledgeError, match=r"^knowledge/bad.toml: unknown top-level key\(s\) rules$"
    ):
        parse_entries("rules = 1\n", "knowledge/bad.toml")
    (one,) = parse_entries(VALID, "knowledge/a.toml")
    (two,) = parse_entries(VALID, "knowledge/b.toml")
    with pytest.raises(KnowledgeError) as info:
        check_unique([one, two])
    assert (
        str(info.value)
        == "knowledge/b.toml: entry 'demo.entry' is also defined in knowledge/a.toml"
    )


def test_the_keyword_automaton_finds_every_occurrence() -> None:
    index = KeywordIndex(["he", "she", "his", "hers", "ibv_"])
    assert index.found_in("ushers") == {"she", "he", "hers"}
    assert index.found_in("ahishers") == {"his", "she", "he", "hers"}
    assert index.found_in("call to ibv_reg_mr") == {"ibv_"}
    assert index.found_in("") == set()


def test_the_prefilter_changes_no_answer() -> None:
    """Matching through the automaton gives what trying every entry in order gives."""
    texts = [instantiate(r.format) for r in warn_rows()] + [x for e in ENTRIES for x in e.fires]
    for text in texts:
        naive = next((e for e in ENTRIES if e.search(text) is not None), None)
        assert match(text) is naive, text
