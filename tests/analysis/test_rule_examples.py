"""Every rule fires on the incidents ``fixtures/rules/examples.toml`` lists for it, and on no
near miss listed beside them.

The examples are real captures where one exists (the corpus, live bundles, NCCL and torch
logs) and otherwise the small incidents of ``fixtures/rules/`` (see its ``generate.py``).
A rule is checked on its own (``Rule.check`` over the evidence index), so a finding that the
diagnosis later merges into a stronger one still counts as fired.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest
import tomllib

from logsleuth.analysis.index import EvidenceIndex, build_index
from logsleuth.analysis.rules.base import Rule
from logsleuth.analysis.rules.registry import RULES
from logsleuth.model.base import Event, InputSummary
from logsleuth.parse.discover import discover
from logsleuth.parse.dispatch import read_inputs

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
EXAMPLES: dict[str, dict[str, list[str]]] = tomllib.loads(
    (FIXTURES / "rules" / "examples.toml").read_text()
)


@cache
def _index(example: str) -> EvidenceIndex:
    path = FIXTURES / example
    assert path.exists(), f"{example} is not under fixtures/"
    sources, problems = discover([str(path)])
    assert not problems, problems
    events: list[Event] = []
    summaries: list[InputSummary] = []
    for result in read_inputs(sources, keep_ops=64):
        assert not isinstance(result, Exception), result
        events.extend(result.events)
        summaries.append(result.summary)
    return build_index(events, summaries)


def _fires(rule: type[Rule], example: str) -> bool:
    return any(f.code == rule.code for f in rule().check(_index(example)))


CASES = [
    (r, example, fires)
    for r in RULES
    for fires, key in ((True, "fires"), (False, "quiet"))
    for example in EXAMPLES.get(r.code, {}).get(key, [])
]


def test_every_rule_has_an_example_and_a_counterexample() -> None:
    assert sorted(EXAMPLES) == sorted(r.code for r in RULES), (
        "examples.toml and the registry differ"
    )
    assert [c for c, e in EXAMPLES.items() if not e.get("fires") or not e.get("quiet")] == []


@pytest.mark.parametrize(
    ("rule", "example", "fires"),
    CASES,
    ids=[f"{r.code}-{'fires' if f else 'quiet'}-{Path(e).name[:40]}" for r, e, f in CASES],
)
def test_a_rule_fires_on_its_examples_only(rule: type[Rule], example: str, fires: bool) -> None:
    assert _fires(rule, example) == fires, (
        f"{rule.code} {rule.name} {'does not fire' if fires else 'fires'} on {example}"
    )
