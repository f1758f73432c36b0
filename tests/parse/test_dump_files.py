"""A file of py-spy dumps read straight through the stack reader gives what the line
dispatcher gives (lines._read_plain_dump), on every fixture and on edited copies."""

from __future__ import annotations

from pathlib import Path

import pytest

from logsleuth.parse import lines, stacks
from logsleuth.parse.discover import InputSource
from logsleuth.parse.dispatch import InputResult, read_input

ROOT = Path(__file__).resolve().parents[2] / "fixtures"
DUMPS = sorted(
    str(p.relative_to(ROOT))
    for p in ROOT.rglob("*")
    if p.is_file() and p.read_bytes().startswith(b"Process ")
)

EDITS = {
    "as is": lambda text: text,
    "crlf": lambda text: text.replace("\n", "\r\n"),
    "no final newline": lambda text: text.rstrip("\n"),
    "blank lines": lambda text: text.replace("\n", "\n\n", 3),
    "trailing blank": lambda text: text.replace("\n", " \n", 2),
    "tab indent": lambda text: text.replace("\n    ", "\n\t", 2),
    "launcher tag": lambda text: text.replace("\n", "\n[rank3]:", 2),
    "numbered": lambda text: "".join(f"{i} {line}\n" for i, line in enumerate(text.split("\n"))),
    "torch after": lambda text: text + "[rank0]:[E1121 16:04:06.731000 1 a.py:1] boom\n",
    "stray line": lambda text: text + "some other output\n",
    "section header": lambda text: "Process 12:\n" + text,
    "repeated": lambda text: text.replace("\n", " [repeated 3x across cluster]\n", 1),
    "entity": lambda text: text.replace("\n", " &amp;\n", 1),
    "two dumps": lambda text: text + text,
    "nccl argv": lambda text: text.replace("\n", " NCCL INFO x\n", 1),
}


def _read(name: str, data: bytes, *, fast: bool, monkeypatch: pytest.MonkeyPatch) -> InputResult:
    with monkeypatch.context() as patch:
        if not fast:
            patch.setattr(lines, "_read_plain_dump", lambda *args: None)
        stacks._parse_line.cache_clear()
        return read_input(InputSource(name=name, path=None, data=data), 5, audit=True)


def test_the_fixtures_hold_py_spy_dump_files() -> None:
    assert len(DUMPS) >= 20


@pytest.mark.parametrize("edit", sorted(EDITS))
@pytest.mark.parametrize("name", DUMPS)
def test_a_dump_file_reads_the_same_straight_or_line_by_line(
    name: str, edit: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = (ROOT / name).read_bytes().decode("utf-8", errors="replace")
    data = EDITS[edit](text).encode()
    assert _read(name, data, fast=True, monkeypatch=monkeypatch) == _read(
        name, data, fast=False, monkeypatch=monkeypatch
    )


def test_a_plain_dump_file_takes_the_straight_path(monkeypatch: pytest.MonkeyPatch) -> None:
    data = (ROOT / "real/stacks/pyspy-0.4.3_py3.8_blocking.txt").read_bytes()
    taken: list[str] = []
    straight = lines._read_plain_dump

    def spy(source: InputSource, *args: object) -> InputResult | None:
        result = straight(source, *args)  # type: ignore[arg-type]
        taken.append("straight" if result is not None else "by line")
        return result

    monkeypatch.setattr(lines, "_read_plain_dump", spy)
    read_input(InputSource(name="d.txt", path=None, data=data))
    assert taken == ["straight"]


@pytest.mark.parametrize(
    "line",
    [
        "Process 1: a",
        "Process 1:",
        "Process 01: x  y",
        "Process 1:  spaced",
        'Process 1: Thread 3 (idle): "x"',
        'Thread 1 (idle): "MainThread"',
        'Thread 0x7FE760C2CB80 (active+gil): "BusyLoop"',
        'Thread 0X1f (gil): "a"b"',
        'Thread 12 (active): ""',
        'Thread 12 (active): "x" (most recent call first):"',
        'Thread 0123 (idle): "x"',
    ],
)
def test_quick_headers_parse_as_the_grammar_does(line: str) -> None:
    found = stacks._QUICK.fullmatch(line)
    assert found is not None
    assert stacks._quick_shape(found) == stacks._parser().parse(line)
