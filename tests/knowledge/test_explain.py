"""``logsleuth explain`` lists and searches the knowledge base besides the rules."""

from __future__ import annotations

import pytest

from logsleuth.cli import main
from logsleuth.knowledge import entries


def test_explain_words_of_a_message_prints_its_entry(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "wrong magic"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("socket.foreign-connection (bootstrap-failure, cause, culprit: peer)\n")
    assert "What to check:" in out


def test_explain_a_whole_message_prints_the_entry_it_matches(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["explain", "Error : ring 2 does not loop back to start (5 != 0)"]) == 0
    assert capsys.readouterr().out.startswith("topo.ring-broken (inconclusive, internal,")


def test_explain_several_matches_lists_them(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "fabric manager"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) >= 2
    assert "nvls.fabric" in {line.split()[0] for line in lines}


def test_explain_a_range_lists_its_rules(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "LS7xx"]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] == [
        "LS701",
        "LS702",
        "LS703",
        "LS704",
        "LS705",
    ]


def test_explain_messages_lists_every_entry(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "--messages"]) == 0
    ids = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert ids == [e.id for e in entries()]


def test_explain_nothing_known_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "no such thing at all"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "logsleuth: error: unknown finding code 'no such thing at all' (known: LS001,"
    )
    assert err.endswith("and no known message matches it\n")
