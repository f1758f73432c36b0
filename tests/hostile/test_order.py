"""Any order of the arguments gives byte-identical diagnosis JSON (issue 19).

Over the whole shared corpus (``../shared/corpus/*/`` beside the repository root): each
case alone and every case at once, with the files given sorted, reversed, shuffled and
duplicated, and as directories.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from logsleuth.api import analyze
from logsleuth.errors import InputError
from logsleuth.report.json import render_json

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT.parent / "shared" / "corpus"
CASES = sorted(p for p in CORPUS.iterdir() if p.is_dir()) if CORPUS.is_dir() else []

pytestmark = pytest.mark.skipif(not CASES, reason=f"no corpus at {CORPUS}")


def _files(cases: list[Path]) -> list[str]:
    return [
        str(p)
        for case in cases
        for p in sorted(case.iterdir())
        if p.is_file() and not p.name.startswith("truth.")
    ]


def _orders(files: list[str]) -> list[list[str]]:
    shuffled = list(files)
    random.Random(19).shuffle(shuffled)
    duplicated = [*files, *files[::2], *reversed(files[1::3])]
    return [list(reversed(files)), shuffled, duplicated]


def _json(paths: list[str]) -> str:
    try:
        return render_json(analyze(paths).diagnosis)
    except InputError as exc:  # a case with nothing analysable: the same message then
        return f"error: {exc}"


def test_the_whole_corpus_in_any_order_gives_the_same_json() -> None:
    files = _files(CASES)
    expected = _json(files)
    for order in _orders(files):
        assert _json(order) == expected
    # Directories and files mixed, in reverse: the same inputs, the same bytes.
    assert _json([str(c) for c in reversed(CASES)]) == expected


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name[:3])
def test_each_case_in_any_order_gives_the_same_json(case: Path) -> None:
    files = _files([case])
    expected = _json(files)
    for order in _orders(files):
        assert _json(order) == expected
