"""The rule registry: one code and one dotted name per rule, documented for ``explain``."""

from __future__ import annotations

from collections import Counter

import pytest

from logsleuth.analysis.rules.registry import RULES, rule_by_code
from logsleuth.cli import main

CONTRACT_KINDS = {
    "inconclusive",
    "missing-collective",
    "collective-mismatch",
    "collective-timeout",
    "init-stall",
    "bootstrap-failure",
    "network-error",
    "transport-degraded",
    "transport-mismatch",
    "config-mismatch",
    "duplicate-gpu",
    "cuda-error",
    "resource-exhausted",
    "process-died",
    "watchdog-stuck",
    "non-collective-stall",
    "concurrent-use",
}
"""CONTRACT section 3's finding kinds, ``healthy`` aside (no rule reports health)."""


def test_codes_and_names_are_unique() -> None:
    assert [c for c, n in Counter(r.code for r in RULES).items() if n > 1] == []
    assert [c for c, n in Counter(r.name for r in RULES).items() if n > 1] == []


def test_every_contract_kind_has_a_rule() -> None:
    assert {r.kind for r in RULES} >= CONTRACT_KINDS
    assert {r.kind for r in RULES} <= CONTRACT_KINDS


def test_the_fallback_rule_is_explained_like_the_others(capsys: pytest.CaptureFixture[str]) -> None:
    assert rule_by_code("ls001") is rule_by_code("diagnosis.inconclusive")
    assert main(["explain", "LS001"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        "LS001 diagnosis.inconclusive (inconclusive)\n\nA hang or failure is evident"
    )
    assert "What to check:" in out
