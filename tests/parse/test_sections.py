"""Excerpts that group each process's lines under a header, with the lines' prefixes cut."""

from __future__ import annotations

from pathlib import Path

import pytest

from logsleuth.api import analyze
from logsleuth.model.messages import SectionHeader
from logsleuth.model.nccl import NcclCollective
from logsleuth.parse.discover import discover
from logsleuth.parse.dispatch import read_inputs

COLL = (
    "{op}: opCount {n:x} sendbuff 0x7f27f7250200 recvbuff 0x7f27f7250000 count {count} "
    "datatype 7 op 0 root 0 comm 0x{comm:x} [nranks=3] stream 0x7f2c34000d10"
)


def _read(path: Path) -> list[object]:
    sources, problems = discover([str(path)])
    assert not problems
    (result,) = read_inputs(sources)
    assert not isinstance(result, Exception)
    assert result.summary.unrecognized == 0, result.unrecognized
    return list(result.events)


def _excerpt(orders: dict[str, list[tuple[str, int]]], header: str) -> str:
    lines: list[str] = []
    for label, calls in orders.items():
        lines += [header.format(label=label), "```"]
        for i, (op, count) in enumerate(calls):
            comm = 0x7F0000001000 + 0x100 * len(lines) + i
            lines.append(COLL.format(op=op, n=0, count=count, comm=comm))
        lines += ["```", ""]
    return "\n".join(lines)


@pytest.mark.parametrize("header", ["Rank {label}:", "## rank {label}", "**Worker {label}:**"])
def test_lines_under_a_header_are_that_process_s(tmp_path: Path, header: str) -> None:
    calls = [("AllGather", 8), ("AllReduce", 3), ("AllReduce", 2)]
    path = tmp_path / "paste.txt"
    path.write_text(_excerpt({"0": calls, "1": calls}, header))
    events = _read(path)
    headers = [e for e in events if isinstance(e, SectionHeader)]
    assert [h.origin.rank for h in headers] == [0, 1]
    colls = [e for e in events if isinstance(e, NcclCollective)]
    # Three lines of one length each: not pieces of one wrapped line.
    assert [(e.origin.rank, e.op, e.count) for e in colls] == [
        (r, op, n) for r in (0, 1) for op, n in calls
    ]


def test_a_letter_label_keeps_two_processes_apart(tmp_path: Path) -> None:
    path = tmp_path / "paste.txt"
    path.write_text(_excerpt({"A": [("AllReduce", 3)], "B": [("AllReduce", 3)]}, "Rank {label}:"))
    colls = [e for e in _read(path) if isinstance(e, NcclCollective)]
    assert [e.origin.host for e in colls] == ["Rank A", "Rank B"]


def test_a_sentence_about_a_rank_is_no_header(tmp_path: Path) -> None:
    path = tmp_path / "paste.txt"
    path.write_text(
        "Rank 3 hangs in the allreduce\n" + COLL.format(op="AllReduce", n=1, count=4, comm=1) + "\n"
    )
    sources, _ = discover([str(path)])
    (result,) = read_inputs(sources)
    assert not isinstance(result, Exception)
    assert not [e for e in result.events if isinstance(e, SectionHeader)]
    (coll,) = [e for e in result.events if isinstance(e, NcclCollective)]
    assert coll.origin.rank is None


def test_the_odd_order_of_three_is_named(tmp_path: Path) -> None:
    same = [("AllGather", 8), ("AllReduce", 3), ("AllReduce", 2)]
    swapped = [("AllGather", 8), ("AllReduce", 2), ("AllReduce", 3)]
    path = tmp_path / "paste.txt"
    path.write_text(_excerpt({"A": same, "B": swapped, "C": same}, "Rank {label}:"))
    d = analyze([str(path)]).diagnosis
    # The excerpt names its processes by letter only: the label is all there is to name.
    assert (d.verdict.kind, d.verdict.code, d.verdict.culprit_hosts) == (
        "collective-mismatch",
        "LS113",
        ("Rank B",),
    )
    assert "call 2" in d.verdict.summary
