"""Excerpts that group each process's lines under a header, with the lines' prefixes cut."""

from __future__ import annotations

from pathlib import Path

import pytest

from logsleuth.api import analyze
from logsleuth.model.messages import SectionHeader
from logsleuth.model.nccl import NcclCollective
from logsleuth.model.stacks import StackDump
from logsleuth.parse.discover import discover
from logsleuth.parse.dispatch import read_inputs

COLL = (
    "{op}: opCount {n:x} sendbuff 0x7f27f7250200 recvbuff 0x7f27f7250000 count {count} "
    "datatype 7 op 0 root 0 comm 0x{comm:x} [nranks=3] stream 0x7f2c34000d10"
)


def _read(path: Path, every_line: bool = True) -> list[object]:
    """The events of ``path``; with ``every_line``, each of its lines must be recognized."""
    sources, problems = discover([str(path)])
    assert not problems
    (result,) = read_inputs(sources)
    assert not isinstance(result, Exception)
    if every_line:
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
    events = _read(path, every_line=False)
    assert not [e for e in events if isinstance(e, SectionHeader)]
    (coll,) = [e for e in events if isinstance(e, NcclCollective)]
    assert coll.origin.rank is None


_DUMP = 'Thread {tid} (active): "MainThread"\n    train (train.py:{line})\n'


@pytest.mark.parametrize(
    ("intro", "rank", "pid"),
    [
        ("py-spy dump on rank 1 gives:", 1, None),
        ("and on rank 1:", 1, None),
        ("$ py-spy dump --pid 3313", None, 3313),
        ("# py-spy dump --pid 3313  (rank 1)", 1, 3313),
    ],
)
def test_a_sentence_or_command_that_introduces_a_dump_names_its_process(
    tmp_path: Path, intro: str, rank: int | None, pid: int | None
) -> None:
    path = tmp_path / "paste.txt"
    path.write_text(f"{intro}\n\n{_DUMP.format(tid=3313, line=77)}")
    (dump,) = [e for e in _read(path) if isinstance(e, StackDump)]
    assert (dump.origin.rank, dump.origin.pid) == (rank, pid)


@pytest.mark.parametrize(
    "line",
    [
        "The job hangs on rank 1 and rank 2:",  # two ranks: says nothing of the lines below
        "[rank0]: the stacks of rank 1:",  # a line rank 0 wrote
        "I ran py-spy on it:",  # no rank, no pid
    ],
)
def test_a_sentence_that_names_no_one_process_is_no_header(tmp_path: Path, line: str) -> None:
    path = tmp_path / "paste.txt"
    path.write_text(f"{line}\n{_DUMP.format(tid=3313, line=77)}")
    events = _read(path, every_line=False)
    assert not [e for e in events if isinstance(e, SectionHeader)]


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


def test_tails_file_headers_name_the_rank_of_each_files_lines(tmp_path: Path) -> None:
    # ``tail -n 2 logs/*.log``: a header per file; a file whose name gives no rank ends
    # the section before it.
    coll = COLL.format(op="AllReduce", n=1, count=4, comm=1)
    path = tmp_path / "tail.txt"
    path.write_text(
        f"==> logs/rank0.log <==\n{coll}\n\n==> logs/rank_7.log <==\n{coll}\n\n"
        f"==> logs/launcher.log <==\n{coll}\n"
    )
    events = _read(path)
    headers = [e for e in events if isinstance(e, SectionHeader)]
    assert [(h.label, h.origin.rank) for h in headers] == [
        ("logs/rank0.log", 0),
        ("logs/rank_7.log", 7),
        ("logs/launcher.log", None),
    ]
    colls = [e for e in events if isinstance(e, NcclCollective)]
    assert [e.origin.rank for e in colls] == [0, 7, None]


def test_a_letter_label_outranks_the_host_a_collectors_prefix_names(tmp_path: Path) -> None:
    # ``kubectl logs --prefix`` names one pod on every line; ``Rank A:`` and ``Rank B:``
    # under it are still two processes.
    path = tmp_path / "paste.txt"
    coll = COLL.format(op="AllReduce", n=1, count=4, comm=1)
    text = f"Rank A:\n{coll}\nRank B:\n{coll}\n"
    path.write_text("".join(f"[pod/trainer-0/pytorch] {line}\n" for line in text.splitlines()))
    colls = [e for e in _read(path) if isinstance(e, NcclCollective)]
    assert [e.origin.host for e in colls] == ["Rank A", "Rank B"]


def test_a_file_header_behind_a_log_formats_prefix_is_a_header(tmp_path: Path) -> None:
    # A script that logs ``tail``'s output through glog (absl, XLA): the prefix is not one
    # that cleaning takes off, but the header behind it still opens rank 3's section.
    path = tmp_path / "tail.txt"
    prefix = "I0510 07:28:04.417845 139863945226048 logging.py:337] "
    coll = COLL.format(op="AllReduce", n=1, count=4, comm=1)
    path.write_text(f"{prefix}==> logs/rank3.log <==\n{coll}\n")
    events = _read(path)
    assert [(h.label, h.origin.rank) for h in events if isinstance(h, SectionHeader)] == [
        ("logs/rank3.log", 3)
    ]
    assert [e.origin.rank for e in events if isinstance(e, NcclCollective)] == [3]


@pytest.mark.parametrize(
    ("hosts", "host"),
    [("gpu03", "gpu03"), ("node7 (1)", "node7"), ("gpu[01-02,04]", None), ("node[1-4] (4)", None)],
)
def test_a_dshbak_or_clush_block_names_the_host_of_its_lines(
    tmp_path: Path, hosts: str, host: str | None
) -> None:
    # ``pdsh ... | dshbak -c`` and ``clush -b`` gather output per host under a host list
    # between two rules; a list of several hosts names none of them alone.
    xid = "[Wed Mar  6 11:42:09 2024] NVRM: Xid (PCI:0000:ba:00): 79, pid=1, GPU has fallen off the bus."
    rule = "-" * 16
    path = tmp_path / "dmesg.txt"
    path.write_text(f"{rule}\nother01\n{rule}\n{xid}\n{rule}\n{hosts}\n{rule}\n{xid}\n")
    events = _read(path)
    headers = [e for e in events if isinstance(e, SectionHeader)]
    assert [(h.ref.line, h.origin.host) for h in headers] == [(2, "other01"), (6, host)]
    xids = [e for e in events if "Xid" in e.text]
    assert [e.origin.host for e in xids] == ["other01", host]


def test_a_word_between_rules_that_no_rule_closes_is_no_host(tmp_path: Path) -> None:
    coll = COLL.format(op="AllReduce", n=1, count=4, comm=1)
    path = tmp_path / "paste.txt"
    path.write_text(f"{'-' * 16}\nSummary\n{coll}\n")
    events = _read(path, every_line=False)
    assert not [e for e in events if isinstance(e, SectionHeader)]
    (read,) = [e for e in events if isinstance(e, NcclCollective)]
    assert read.origin.host is None


@pytest.mark.parametrize("intro", ["and the other workers:", "Then all ranks:"])
def test_a_sentence_about_the_other_processes_ends_the_section(tmp_path: Path, intro: str) -> None:
    # A described pod, then the ticket's words for the rest of the job: the watchdog line
    # below is another worker's, not the pod's.
    path = tmp_path / "ticket.txt"
    path.write_text(
        "Name:             trainer-worker-3\n"
        "Namespace:        training\n"
        "Reason:           Evicted\n"
        f"{intro}\n"
        "[rank0]:[E1128 06:40:01.5 ProcessGroupNCCL.cpp:1595] [PG 0 Rank 0] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=88, OpType=ALLREDUCE, NumelIn=1, "
        "NumelOut=1, Timeout(ms)=1800000) ran for 1800092 milliseconds before timing out.\n"
    )
    events = _read(path, every_line=False)
    last = events[-1]
    assert type(last).__name__ == "WatchdogTimeout"
    assert (last.origin.rank, last.origin.host) == (0, None)  # type: ignore[attr-defined]


def test_a_sentence_about_the_same_process_keeps_the_section(tmp_path: Path) -> None:
    path = tmp_path / "paste.txt"
    path.write_text(f"Rank 3:\nI ran py-spy on it:\n{_DUMP.format(tid=3313, line=77)}")
    (dump,) = [e for e in _read(path, every_line=False) if isinstance(e, StackDump)]
    assert dump.origin.rank == 3


@pytest.mark.parametrize(
    ("intro", "host"),
    [
        ("dmesg -T on gpu-b07:", "gpu-b07"),
        ("master-0 just shows the NCCL error afterwards:", "master-0"),
        ("---- node trn-a100-02 console ----", "trn-a100-02"),
        ("Logs from node01:", "node01"),
    ],
)
def test_a_sentence_that_names_one_host_places_the_lines_below_it(
    tmp_path: Path, intro: str, host: str
) -> None:
    path = tmp_path / "ticket.txt"
    path.write_text(f"{intro}\n{_DUMP.format(tid=3313, line=77)}")
    (dump,) = [e for e in _read(path, every_line=False) if isinstance(e, StackDump)]
    assert dump.origin.host == host


@pytest.mark.parametrize(
    "line",
    [
        "Logs from node1 and node2:",  # two hosts: says nothing of the lines below
        "torch 2.4.0 with cuda12.4:",  # a version, not a host
        "The error on step 1200:",
    ],
)
def test_a_sentence_without_exactly_one_host_places_nothing(tmp_path: Path, line: str) -> None:
    path = tmp_path / "ticket.txt"
    path.write_text(f"{line}\n{_DUMP.format(tid=3313, line=77)}")
    (dump,) = [e for e in _read(path, every_line=False) if isinstance(e, StackDump)]
    assert dump.origin.host is None
