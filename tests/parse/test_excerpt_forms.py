"""Evidence pasted into a ticket reads as the file it came from.

A paste is indented as a code block, labelled per line by pdsh, prefixed per physical line
by a collector (a CRI timestamp, ``[rank0]:``, ``> `` quote markers) even where the program
wrapped a message over two lines, or hard-wrapped by a terminal or a ticket. Each form is
built here from real lines; the corpus-wide check that verdicts survive these forms is in
``tests/test_corpus.py``.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from logsleuth.api import analyze
from logsleuth.model.nccl import NcclUnrecognized, NcclWarn
from logsleuth.model.stacks import StackDump
from logsleuth.model.torch import WatchdogError, WatchdogTimeout
from logsleuth.parse.catalog import MIN_ANCHOR, load_catalog
from logsleuth.parse.clean import (
    detect_frame,
    detect_indent,
    detect_lead,
    detect_word_wrap,
    detect_wrap,
    strip_prefixes,
    unframe,
)
from logsleuth.parse.discover import InputSource
from logsleuth.parse.dispatch import InputResult, read_input
from logsleuth.parse.numbering import detect_numbering
from tests.knowledge.catalog import instantiate

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "fixtures" / "real" / "corpus"


def read(text: str, name: str = "paste.log") -> InputResult:
    return read_input(InputSource(name=name, path=None, data=text.encode()))


def shape(result: InputResult) -> list[tuple[str, int]]:
    """What a reader made of a file: each event's kind and line."""
    return [(type(e).__name__, e.ref.line) for e in result.events]


PYSPY = (CORPUS / "018-pyspy-stale-jit-filebaton-lock" / "pyspy_rank0.txt").read_text()
RAS = (CORPUS / "232-ncclras-mismatch-30-stragglers-not-listed" / "ncclras_status.txt").read_text()


# ---------------------------------------------------------------- indentation


def test_a_code_block_indent_is_found_and_a_frames_only_fragment_keeps_its_own() -> None:
    assert detect_indent(["    NCCL version 2.26.2", "", "    Job summary", "\tx"]) == ""
    assert detect_indent(["    NCCL version 2.26.2", "      Job summary", "    ====="]) == "    "
    # A py-spy dump cut down to its frames: the indentation is the format's.
    frames = ["    wait (torch/utils/file_baton.py:42)", "    load (deepspeed/builder.py:480)"]
    assert detect_indent(frames) == ""
    faulthandler = ['  File "train.py", line 12 in main', '  File "x.py", line 3 in <module>']
    assert detect_indent(faulthandler) == ""
    assert detect_indent(["    only one line"]) == ""
    # The first line of an excerpt cut in its middle, before a dump's frames.
    assert detect_indent([' (idle): "MainThread"', "    wait (threading.py:302)"]) == ""
    # A box of pipes around every line (a tool's frame, a table's cells) is no indent: it goes first.
    boxed = ["| Process 42: python train.py |", "|  |", "|     f (x.py:3) |"]
    assert detect_frame(boxed)
    assert [unframe(line) for line in boxed] == [
        "Process 42: python train.py",
        "",
        "    f (x.py:3)",
    ]
    # A table with rules (nvidia-smi's, markdown's) is rows, not a frame.
    assert not detect_frame(["| GPU | Name |", "|-----|------|", "| 0   | H100 |"])
    # A tab is a code block's indent as well (markdown takes one tab for four blanks).
    assert detect_indent(["\tProcess 42: python train.py", "\t    wait (x.py:3)"]) == "\t"
    assert detect_indent([" Process 42: python train.py", "     wait (x.py:3)"]) == ""


def test_a_dump_cut_in_its_first_line_names_its_process_as_well_as_it_can(
    tmp_path: Path,
) -> None:
    text = CORPUS / "234-pyspy-rank0-dataloader-queue-get-others-allreduce" / "pyspy_rank0.txt"
    lines = text.read_text().split("\n")
    lines[0] = lines[0][len(lines[0]) // 2 :]  # 'Thread 0x7FA6E7C01740' cut away
    paste = tmp_path / "paste.txt"
    paste.write_text("\n".join(lines))
    verdict = analyze([str(paste)]).diagnosis.verdict
    assert verdict.kind == "non-collective-stall"
    assert "pid None" not in verdict.summary and "pid  " not in verdict.summary
    assert "no rank or pid" in verdict.summary


@pytest.mark.parametrize("text", [PYSPY, RAS], ids=["py-spy dump", "NCCL RAS status"])
def test_an_indented_paste_reads_as_the_file_itself(text: str) -> None:
    plain = read(text)
    indented = read("\n".join("    " + line if line else line for line in text.split("\n")))
    assert shape(indented) == shape(plain)
    assert indented.summary.recognized == plain.summary.recognized
    assert indented.summary.unrecognized == plain.summary.unrecognized


@pytest.mark.parametrize("text", [PYSPY, RAS], ids=["py-spy dump", "NCCL RAS status"])
def test_a_web_page_or_word_processor_copy_reads_as_the_file_itself(text: str) -> None:
    plain = read(text)
    typographic = text.replace("  ", "\u00a0 ").replace('"', "\u201d").replace("-", "\u2013")
    copied = read(typographic)
    assert shape(copied) == shape(plain)
    assert copied.summary.recognized == plain.summary.recognized


# ---------------------------------------------------------------- pdsh labels


def test_pdsh_labels_on_a_stack_dump_name_the_host_and_leave_the_frames() -> None:
    labelled = "\n".join(f"gpu-node17: {line}" for line in PYSPY.split("\n"))
    assert detect_numbering(labelled.split("\n")[:200]) == "pdsh"
    result = read(labelled, "pyspy_rank0.txt")
    dumps = [e for e in result.events if isinstance(e, StackDump)]
    plain = [e for e in read(PYSPY, "pyspy_rank0.txt").events if isinstance(e, StackDump)]
    assert [len(t.frames) for d in dumps for t in d.threads] == [
        len(t.frames) for d in plain for t in d.threads
    ]
    assert {d.origin.host for d in dumps} == {"gpu-node17"}
    assert result.summary.unrecognized == 0


def test_words_before_a_colon_are_no_host_labels() -> None:
    # "Epoch: 3" / "loss: 0.1" lines hold no digit in their label: not pdsh.
    lines = [f"{word}: {n}" for n in range(20) for word in ("Epoch", "loss", "lr")]
    assert detect_numbering(lines) is None


def test_a_label_that_no_nccl_line_echoes_is_no_host_label() -> None:
    # NCCL lines name their host: a label that is not one of them is not pdsh's.
    nccl = "gpu-a01:4721:4790 [0] NCCL INFO Connected all rings"
    assert detect_numbering([f"node17: {nccl}"] * 10) is None
    assert detect_numbering([f"gpu-a01: {nccl}"] * 10) == "pdsh"


# ---------------------------------------------------------------- collectors' stamps


@pytest.mark.parametrize(
    "prefix",
    ["2026-03-21 02:07:08.408 ", "2026-03-21T02:07:08 ", "Mar 21 02:07:08 ", "Mar  1 02:07:08 "],
    ids=["iso-space", "iso-t", "syslog", "syslog-day"],
)
@pytest.mark.parametrize("text", [PYSPY, RAS], ids=["py-spy dump", "NCCL RAS status"])
def test_a_collector_stamp_on_every_line_reads_as_the_file_itself(prefix: str, text: str) -> None:
    plain = read(text)
    stamped = read("\n".join(prefix + line for line in text.split("\n")))
    assert shape(stamped) == shape(plain)
    assert stamped.summary.recognized == plain.summary.recognized
    assert all(e.origin.time is not None for e in stamped.events)


def test_a_journal_line_names_the_host_and_pid_of_its_writer() -> None:
    journal = "\n".join(
        f"Mar 21 02:07:{n:02d} gpu-node17 python[46930]: {line}"
        for n, line in enumerate(PYSPY.split("\n"))
    )
    assert detect_numbering(journal.split("\n")) == "syslog"
    (dump,) = [e for e in read(journal).events if isinstance(e, StackDump)]
    assert (dump.origin.host, dump.origin.pid) == ("gpu-node17", 46930)


def test_a_kernel_line_among_others_names_its_host() -> None:
    # journalctl -k lines pasted between a job's own: the syslog prefix is read per line.
    text = (
        "[rank12]: RuntimeError: NCCL communicator was aborted on rank 12.\n"
        "Mar 14 03:12:55 gpu-n12 kernel: NVRM: Xid (PCI:0000:b5:00): 79, pid=48812, "
        "name=python, GPU has fallen off the bus.\n"
    )
    hosts = [e.origin.host for e in read(text).events if "Xid" in e.text]
    assert hosts == ["gpu-n12"]


@pytest.mark.parametrize(
    "line",
    [
        "gpu-h12 kernel: [1893022.112240] NVRM: Xid (PCI:0000:b3:00): 74, pid=88123, name=python",
        "[ 1893022.112240] gpu-h12 kernel: NVRM: Xid (PCI:0000:b3:00): 74, pid=88123, name=python",
        "gpu-h12: [1893022.112240] NVRM: Xid (PCI:0000:b3:00): 74, pid=88123, name=python",
    ],
    ids=["kern.log without time", "journalctl short-monotonic", "pdsh dmesg"],
)
def test_a_kernel_line_names_its_host_in_every_form_dmesg_is_collected(line: str) -> None:
    hosts = [e.origin.host for e in read(line + "\n").events if "Xid" in e.text]
    assert hosts == ["gpu-h12"]


def test_a_word_and_colon_is_no_host_label_of_a_message() -> None:
    # A label must hold a digit to name a host ('dmesg:' does not).
    text = "dmesg: NVRM: Xid (PCI:0000:b3:00): 74, pid=88123, name=python\n"
    assert [e.origin.host for e in read(text).events if "Xid" in e.text] == [None]


@pytest.mark.parametrize("header", ["=== rank {r} ===", "---- rank {r} ----", "## rank {r}"])
def test_each_dump_under_a_section_header_is_that_ranks(header: str) -> None:
    # Dumps pasted one after another under headers: each header ends the dump above it.
    text = "".join(f"{header.format(r=r)}\n{PYSPY}\n" for r in (0, 1, 2))
    dumps = [e for e in read(text).events if isinstance(e, StackDump)]
    assert [d.origin.rank for d in dumps] == [0, 1, 2]


# ---------------------------------------------------------------- wrapped pieces


WATCHDOG = (
    "[rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught "
    "collective operation timeout: ",
    "WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=466119168, NumelOut=466119168, "
    "Timeout(ms)=600000) ran for 600060 milliseconds before timing out.",
)


@pytest.mark.parametrize(
    "prefix",
    ["", "2026-03-21T02:07:08.408271257Z stderr F ", "> ", "gpu-node17: "],
    ids=["bare", "cri", "quote", "pdsh"],
)
def test_a_wrapped_message_joins_without_the_prefix_of_its_second_piece(prefix: str) -> None:
    text = "\n".join(prefix + piece for piece in WATCHDOG) + "\n"
    result = read(text * 3)
    assert result.summary.unrecognized == 0
    # One event per message, quoting its whole text; no prefix in the middle of it.
    timeouts = [e for e in result.events if "Watchdog caught" in e.text]
    assert [e.ref.line for e in timeouts] == [1, 3, 5]
    for event in timeouts:
        assert "ran for 600060 milliseconds" in event.text
        assert prefix.strip() == "" or event.text.count(prefix.strip()) == 1


def _watchdogs(text: str) -> list[tuple[int, int | None, str | None]]:
    """(line, SeqNum, OpType) of each watchdog timeout read from ``text``."""
    result = read(text)
    assert result.summary.unrecognized == 0
    return [(e.ref.line, e.seq, e.op_type) for e in result.events if isinstance(e, WatchdogTimeout)]


WHOLE = [
    "".join(WATCHDOG).replace("[rank0]", f"[rank{r}]").replace("[Rank 0]", f"[Rank {r}]")
    for r in range(4)
]


@pytest.mark.parametrize("width", [72, 80, 100])
def test_a_word_wrap_that_dropped_its_blanks_reads_as_the_whole_lines(width: int) -> None:
    # An editor or mail client reflowed the paste: each break drops the blank it broke at.
    pieces = [piece for line in WHOLE for piece in textwrap.wrap(line, width)]
    got = _watchdogs("\n".join(pieces) + "\n")
    firsts = [1 + sum(len(textwrap.wrap(w, width)) for w in WHOLE[:r]) for r in range(4)]
    assert got == [(n, 1580, "ALLREDUCE") for n in firsts]


@pytest.mark.parametrize("quote", ["> ", "> > "])
def test_a_word_wrap_a_mail_client_quoted_reads_as_the_whole_lines(quote: str) -> None:
    # A mailing list's reply: the client reflowed the paste at 70 columns, then quoted it.
    pieces = [quote + piece for line in WHOLE for piece in textwrap.wrap(line, 70)]
    got = _watchdogs("\n".join(pieces) + "\n")
    assert [(seq, op) for _, seq, op in got] == [(1580, "ALLREDUCE")] * 4


def test_an_editors_gutter_numbers_are_taken_off() -> None:
    # ``  12 | text`` (a code viewer's copy with its gutter): a frame keeps its indentation.
    lines = [
        "Process 4242: python train.py",
        "Python v3.10.12 (/usr/bin/python3.10)",
        "",
        'Thread 4242 (active): "MainThread"',
        "    all_reduce (torch/distributed/distributed_c10d.py:2288)",
        "    main (train.py:88)",
    ]
    numbered = [f"{n + 11:4d} | {line}" for n, line in enumerate(lines)]
    assert detect_numbering(numbered) == "gutter"
    dumps = [e for e in read("\n".join(numbered) + "\n").events if isinstance(e, StackDump)]
    assert [f.func for f in dumps[0].threads[0].frames] == ["all_reduce", "main"]


def test_a_word_wrap_reads_beside_a_longer_line_the_paster_typed() -> None:
    # A forum post: the log was reflowed at 72 columns, the sentence above it was not.
    prose = "Training hangs at the start of epoch 2 on 4 GPUs (single node). After 10 minutes:"
    pieces = [piece for line in WHOLE[:3] for piece in textwrap.wrap(line, 72)]
    assert len(prose) > max(len(p) for p in pieces)
    result = read("\n".join([prose, "", *pieces]) + "\n")
    assert result.summary.unrecognized == 1  # the sentence, as typed
    timeouts = [e for e in result.events if isinstance(e, WatchdogTimeout)]
    assert [(e.rank, e.seq, e.op_type) for e in timeouts] == [
        (r, 1580, "ALLREDUCE") for r in range(3)
    ]


def test_a_word_wrap_that_kept_its_blanks_is_no_hard_wrap() -> None:
    # fold -s: every piece ends in the blank it broke at, and the longest pieces of four
    # similar messages share one length; that is no terminal's width.
    pieces = [p for line in WHOLE for p in textwrap.wrap(line, 100, drop_whitespace=False)]
    assert detect_wrap(pieces) is None
    assert [n for n, *_ in _watchdogs("\n".join(pieces) + "\n")] == [1, 4, 7, 10]


def test_log_lines_of_one_shape_near_one_length_are_no_word_wrap() -> None:
    lines = [
        f"step {n:05d} | loss 2.{n % 10}13 | lr 3.0e-4 | tokens/s 81234 | mem 61.2 GB"
        for n in range(9)
    ]
    assert detect_word_wrap(lines) is None
    assert read("\n".join(lines) + "\n").summary.lines == 9


SACCT = [
    "JobID           JobName  Partition    Account  AllocCPUS      State ExitCode NodeList",
    "------------ ---------- ---------- ---------- ---------- ---------- -------- ---------------",
    "88123             train        gpu     mlteam        256 OUT_OF_ME+    0:125 gpu-[10-13]",
    "88123.batch       batch                mlteam         64 OUT_OF_ME+    0:125 gpu-10",
    "88123.0          python                mlteam        256 OUT_OF_ME+    0:125 gpu-[10-13]",
]


def test_a_fixed_width_table_is_no_wrap() -> None:
    # sacct, squeue, nvidia-smi: rows of one width whose columns line up, under a rule.
    assert detect_wrap(SACCT) is None
    assert detect_word_wrap(SACCT) is None
    # One event per line: the header and its rule are sacct's too, each row one message.
    result = read("\n".join(SACCT) + "\n")
    assert [e.ref.line for e in result.events] == [1, 2, 3, 4, 5]
    assert result.summary.unrecognized == 0


def test_one_line_said_twice_is_no_hard_wrap() -> None:
    # An error and the traceback that ends in it: the longest line twice, each followed by
    # something else. The same text twice is no terminal width.
    error = "RuntimeError: CUDA error: an illegal memory access was encountered"
    sample = [error, '  "extraInfo": {', "Traceback (most recent call last):", error, "}"]
    assert detect_wrap(sample) is None


NVLS = (
    "c2ce1c877ea3:1023:1032 [0] NCCL INFO NVLS Bind mem 0xac0000000 UC handle 0x7f3310ccb240 "
    "MC handle 0x7f3310ccaa20 size 1073741824"
)
IB_WARN = (
    "task-646--1-mhpnk:91:123 [0] transport/net_ib.cc:881 NCCL WARN NET/IB : Got completion "
    "from peer 172.17.127.143<49577> with error 12, opcode 1, len 0, vendor err 129"
)


@pytest.mark.parametrize("line", [NVLS, IB_WARN], ids=["catalog INFO", "IB WARN"])
@pytest.mark.parametrize("width", [72, 80, 100])
def test_a_line_hard_wrapped_once_reads_as_the_whole_line(line: str, width: int) -> None:
    whole = read(line + "\n")
    wrapped = read(line[:width] + "\n" + line[width:] + "\n")
    assert wrapped.summary.recognized == 2 and wrapped.summary.unrecognized == 0
    assert [type(e) for e in wrapped.events] == [type(e) for e in whole.events]
    event = wrapped.events[0]
    if isinstance(event, NcclWarn):
        assert event.family == whole.events[0].family != "other"


def test_an_unknown_line_is_not_joined_to_a_line_that_does_not_complete_it() -> None:
    # A message no rule or catalog entry knows stays itself; the next line stays its own.
    unknown = "gpu-a01:4721:4790 [0] NCCL INFO Some message no release of NCCL ever printed, 12"
    result = read(f"{unknown}\nEpoch 3 done\n{unknown}\n")
    kinds = [type(e) for e in result.events]
    assert kinds.count(NcclUnrecognized) == 2
    assert [e.ref.line for e in result.events if isinstance(e, NcclUnrecognized)] == [1, 3]


# ---------------------------------------------------------------- a first line cut mid-message


def test_a_first_line_cut_mid_message_is_typed_and_its_start_restored() -> None:
    cut = IB_WARN[IB_WARN.index("tion from peer") :]
    result = read(cut + "\n")
    assert result.summary.recognized == 1
    (event,) = result.events
    assert event.text == cut  # evidence quotes what was pasted
    assert event.message == (
        "NET/IB : Got completion from peer 172.17.127.143<49577> with error 12, opcode 1, len 0,"
        " vendor err 129"
    )


def test_a_cut_line_whose_end_is_mostly_values_is_known_by_their_places(
    tmp_path: Path,
) -> None:
    # ``socketPollConnect: Connect to 10.0.0.4<56849> returned ...`` cut inside the address:
    # few literal characters are left, but four values stand where the format has them.
    paste = tmp_path / "node5_error.log"
    paste.write_text(
        "0.0.4<56849> returned 113(No route to host) errno 115(Operation now in progress)\n"
    )
    result = read_input(InputSource(name="node5_error.log", path=paste))
    assert result.summary.recognized == 1
    assert analyze([str(paste)]).diagnosis.verdict.kind == "bootstrap-failure"


@pytest.mark.parametrize(
    "text",
    [
        "ed with error Cannot allocate memory",
        "ed 1 (x) errno 2 (y)",  # the same places, too little text in them to tell
    ],
)
def test_values_alone_do_not_make_a_cut_message(text: str) -> None:
    assert read(text + "\n").summary.recognized == 0


def test_a_cut_line_of_inline_code_keeps_its_message() -> None:
    # `...` around the line: the cut took the opening backtick, the closing one is left
    # after the format's last literal text.
    cut = "0.0.4<56849> returned 113(No route to host) errno 115(Operation now in progress)"
    assert read(f"{cut}`\n").summary.recognized == 1


def test_the_cut_line_verdict_names_the_failure(tmp_path: Path) -> None:
    paste = tmp_path / "hung_pod.log"
    paste.write_text(IB_WARN[IB_WARN.index("tion from peer") :] + "\n")
    assert analyze([str(paste)]).diagnosis.verdict.kind == "network-error"


def test_only_the_first_line_may_begin_mid_message() -> None:
    cut = IB_WARN[IB_WARN.index("tion from peer") :]
    result = read(f"Epoch 3 done, loss 0.25\n{cut}\n")
    assert all(e.ref.line != 2 for e in result.events)
    assert result.summary.unrecognized == 1


@pytest.mark.parametrize(
    "text",
    [
        "ed with error Cannot allocate memory",  # too little of any message is left
        "hello world, this line is about nothing NCCL ever printed at all",
        "x = 12, y = 13, and the rest of an unrelated sentence",
    ],
)
def test_little_or_foreign_text_is_no_cut_message(text: str) -> None:
    assert load_catalog().match_cut(text) is None


def test_a_cut_line_is_matched_without_backtracking() -> None:
    # Many repeats of a format's short pieces: a linear search, not a regex that backtracks.
    line = "Channel : [ ] -> via " * 400
    assert load_catalog().match_cut(line) is None


def test_every_nccl_format_cut_in_its_first_piece_is_restored() -> None:
    # Each NCCL message of the catalog, filled in and cut halfway into its first literal
    # piece, comes back whole (as the same message or one whose text is the same).
    catalog = load_catalog()
    checked = 0
    for entry in catalog.entries:
        if entry.family != "nccl" or entry.fmt.startswith("re:") or "%" not in entry.fmt:
            continue
        first = entry.fmt[: entry.fmt.index("%")]
        rest_literal = entry.literal - len(first.strip())
        if len(first) < 8 or rest_literal < MIN_ANCHOR:
            continue
        message = instantiate(entry.fmt)
        cut = message[len(first) // 2 :]
        found = catalog.match_cut(cut)
        assert found is not None, entry.fmt
        kept = cut[len(first) - len(first) // 2 :]
        assert " ".join(found.restored.split()).endswith(" ".join(kept.split())), entry.fmt
        if found.entry.fmt == entry.fmt:
            assert " ".join(found.restored.split()) == " ".join(message.split()), entry.fmt
        checked += 1
    assert checked > 100


def test_a_line_cut_before_the_word_its_message_is_indexed_by_is_typed_by_its_start() -> None:
    # torch's store-barrier message cut at 120 columns: its rarer words (world_size,
    # worker_count) are gone, its start is not.
    line = (
        "I0510 07:28:04.417845 139863945226048 distributed_c10d.py:337] Waiting in store based "
        "barrier to initialize process grou"
    )
    found = load_catalog().match(line)
    assert found is not None and not found.whole
    assert found.entry.fmt.startswith("Waiting in store based barrier to initialize process")
    assert load_catalog().match("Waiting for the weather to get better, nothing more") is None


@pytest.mark.parametrize(
    "prefix",
    ["2026-03-21T02:07:08.123456789Z stderr F ", "Mar 21 02:07:08 gpu-node17 python[4242]: "],
    ids=["cri", "journald"],
)
def test_a_dump_cut_above_its_header_behind_a_collector_prefix_is_a_dump(prefix: str) -> None:
    # The bare collector prefix shape must not take the first frame lines away from the
    # stack reader while their run forms.
    lines = CORPUS / "234-pyspy-rank0-dataloader-queue-get-others-allreduce" / "pyspy_rank0.txt"
    frames = lines.read_text().split("\n")[1:]
    result = read("\n".join(prefix + line for line in frames if line))
    dumps = [e for e in result.events if isinstance(e, StackDump)]
    assert len(dumps) == 1
    assert len(dumps[0].threads[0].frames) == len([f for f in frames if f.strip()])


def test_a_flattened_paste_of_many_messages_is_read_without_backtracking() -> None:
    # Line breaks lost: 200 connection messages on one line. The catalog's regexes take
    # each piece at its first place (atomic groups); lazy groups alone backtracked for
    # minutes on 20 of them.
    flat = " ".join(
        f"Channel {i % 32:02d}/0 : {i % 8}[{i % 8}] -> {(i + 1) % 8}[{(i + 1) % 8}] via P2P/IPC"
        for i in range(200)
    )
    found = load_catalog().match(flat)
    assert found is not None and found.whole and found.start == 0
    assert found.entry.fmt.startswith("Channel %02d/%01d : %d[%d] -> %d[%d] via P2P/IPC")
    assert found.fields[:3] == ("00", "0", "0")


# ---------------------------------------------------------------- lines cut at a width

TIMEOUT_LINE = (
    "[E ProcessGroupNCCL.cpp:475] [Rank 1] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=3, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for "
    "1800083 milliseconds before timing out."
)


@pytest.mark.parametrize("width", [123, 124, 128, 145])
def test_a_watchdog_timeout_cut_after_its_op_type_is_still_one(width: int) -> None:
    # Cut anywhere after the separator that follows OpType: the fields before the cut are
    # whole, the rank, SeqNum and OpType are read.
    line = TIMEOUT_LINE[:width]
    assert "OpType=ALLREDUCE," in line and not line.endswith(")")
    (event,) = [e for e in read(line + "\n").events if type(e).__name__ == "WatchdogTimeout"]
    assert (event.origin.rank, event.seq, event.op_type) == (1, 3, "ALLREDUCE")


@pytest.mark.parametrize("width", [107, 115, 119])
def test_a_watchdog_timeout_cut_inside_seqnum_or_optype_is_not_read_as_one(width: int) -> None:
    # "SeqNum=3" may have been "SeqNum=31", "OpType=ALLRED" anything: no number is made up.
    line = TIMEOUT_LINE[:width]
    assert [e for e in read(line + "\n").events if type(e).__name__ == "WatchdogTimeout"] == []


def test_a_desync_report_cut_at_a_width_is_still_a_mismatch(tmp_path: Path) -> None:
    # Cut inside the first fingerprint: the catalog may type the line by the fingerprint
    # message quoted in it; the knowledge base reads the whole line.
    line = (
        "RuntimeError: Detected mismatch between collectives on ranks. Rank 4 is running "
        "collective: CollectiveFingerPrint(SequenceNumber=35, OpType=_ALLGATHER_BASE, "
        "TensorShape=[9634624]"
    )[:120]
    log = tmp_path / "error.log"
    log.write_text(line + "\n")
    assert analyze([str(log)]).diagnosis.verdict.kind == "collective-mismatch"


@pytest.mark.parametrize(
    "line",
    [
        "Error: NVRM: Xid (PCI:0000:b3:00): 79, pid=48812, name=python, GPU has fallen off the bus.",
        "Error: Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 1000",
    ],
)
def test_an_error_label_before_another_programs_known_message_keeps_it(line: str) -> None:
    # 'Error:' opens py-spy's own error messages; another program's message behind it is
    # that program's evidence, not a failed stack dump.
    result = read(line + "\n")
    assert result.summary.recognized == 1
    assert [type(e).__name__ for e in result.events] == ["LogMessage"]


def test_py_spys_own_error_stays_a_stack_dump_error() -> None:
    text = "Error: Failed to get process executable name. Check that the process is running.\n"
    assert [type(e).__name__ for e in read(text).events] == ["StackDumpError"]


def test_lightnings_rank_prefix_names_the_rank_of_its_traceback() -> None:
    result = read(
        "[rank: 3] Seed set to 42\n"
        "[rank: 3] Traceback (most recent call last):\n"
        '[rank: 3]   File "/workspace/train.py", line 97, in training_step\n'
        '[rank: 3]     logits = self.model(batch["input_ids"])\n'
        "[rank: 3] RuntimeError: CUDA error: an illegal memory access was encountered\n"
    )
    (traceback,) = [e for e in result.events if type(e).__name__ == "PythonTraceback"]
    assert (traceback.origin.rank, traceback.ref.line) == (3, 2)
    assert result.summary.unrecognized <= 1  # the seed notice, at most


def test_a_piece_cut_inside_a_log_prefix_continues_the_wrapped_line() -> None:
    # torch's "{}Process group watchdog thread terminated ..." begins with a value (its log
    # prefix): the piece after a cut inside that prefix still matches the format, but it is
    # the wrapped line's tail.
    line = (
        "[rank5]:[E207 19:37:09.983600771 ProcessGroupNCCL.cpp:1895] [PG ID 0 PG GUID "
        "0(default_pg) Rank 5] Process group watchdog thread terminated with exception: NCCL "
        "error: remote process exited or there was a network error, NCCL version 2.21.5"
    )
    pieces = [line[i : i + 80] for i in range(0, len(line), 80)]
    assert pieces[1].startswith("efault_pg) Rank 5]")
    events = read("\n".join(pieces * 2) + "\n").events
    assert [(type(e).__name__, e.ref.line) for e in events] == [
        ("WatchdogError", 1),
        ("WatchdogError", 4),
    ]


def test_a_whole_message_that_ends_in_a_blank_is_not_a_wrapped_piece() -> None:
    # NCCL's text for ncclSystemError ends in a blank; the "Last error:" under it and the
    # detail under that are the c10 record's, not the rest of a wrapped line.
    text = (
        "[rank13]:[E1123 10:30:55.700000 913 ProcessGroupNCCL.cpp:1595] [PG ID 0 PG GUID "
        "0(default_pg) Rank 13] Process group watchdog thread terminated with exception: NCCL "
        "error: unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version "
        "2.21.5\n"
        "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or "
        "device error. \n"
        "Last error:\n"
        "NET/IB : Got completion from peer 10.12.0.21<38841> with status=12 opcode=0 len=0\n"
    )
    result = read(text)
    assert result.summary.unrecognized == 0
    (error,) = result.events
    assert isinstance(error, WatchdogError)
    assert error.error_code == "ncclSystemError"
    assert error.detail is not None and error.detail.startswith("NET/IB : Got completion")


@pytest.mark.parametrize(
    "line",
    [
        "Epoch 10/10 finished, val_loss=0.412",
        "[rank3]: step 1200 train_loss 2.113",
        "iter 400 | loss 1.9 | lr 3e-4",
    ],
)
def test_a_training_progress_line_is_recognized(line: str) -> None:
    result = read(line + "\n")
    assert (result.summary.recognized, result.summary.unrecognized) == (1, 0)


def test_tensorflows_error_report_is_read_line_by_line() -> None:
    # A collective aborted in MultiWorkerMirroredStrategy: the error, the remote task,
    # gRPC's JSON detail, TensorFlow's advice and the graph node it was raised in.
    text = (
        "2026-11-23 10:31:07.654321: E tensorflow/core/common_runtime/base_collective_executor"
        ".cc:249] BaseCollectiveExecutor::StartAbort UNAVAILABLE: Collective ops is aborted "
        "by: failed to connect to all addresses\n"
        "Additional GRPC error information from remote target /job:worker/replica:0/task:2:\n"
        ':{"created":"@1700733067.654000000","description":"Failed to pick subchannel",'
        '"grpc_status":14}\n'
        "The error could be from a previous operation. Restart your program to reset.\n"
        "Node: 'CollectiveReduceV2'\n"
        "\t [[{{node CollectiveReduceV2}}]] [Op:__inference_train_function_5123]\n"
    )
    result = read(text)
    assert (result.summary.recognized, result.summary.unrecognized) == (6, 0)


def _cat_n(text: str) -> str:
    """``text`` as ``cat -n`` prints it: each line numbered, then a tab."""
    return "".join(f"{n:6d}\t{line}\n" for n, line in enumerate(text.splitlines(), 1))


def test_a_py_spy_dump_numbered_by_cat_n_keeps_its_frames() -> None:
    # cat -n puts a tab after the number; the frames' own indentation follows it.
    dump = (
        'Thread 0x7FA6E7C01740 (idle): "MainThread"\n'
        "    wait (threading.py:302)\n"
        "    get (queue.py:170)\n"
        "\n"
        "    train (fairseq_cli/train.py:274)\n"
    )
    result = read(_cat_n(dump), "pyspy_rank0.txt")
    (stack,) = [e for e in result.events if isinstance(e, StackDump)]
    assert [f.func for t in stack.threads for f in t.frames] == ["wait", "get", "train"]
    assert result.summary.unrecognized == 0


def test_an_ncclras_report_numbered_by_cat_n_is_read() -> None:
    text = CORPUS / "232-ncclras-mismatch-30-stragglers-not-listed" / "ncclras_status.txt"
    plain = read(text.read_text(), "ncclras_status.txt")
    numbered = read(_cat_n(text.read_text()), "ncclras_status.txt")
    assert [type(e).__name__ for e in numbered.events] == [type(e).__name__ for e in plain.events]
    assert numbered.summary.unrecognized == plain.summary.unrecognized


def test_one_cut_at_a_terminal_width_that_splits_a_word_is_a_wrap(tmp_path: Path) -> None:
    line = (
        "fail to new train...e= NCCL error in: /pytorch/torch/lib/c10d/ProcessGroupNCCL.cpp:272, "
        "unhandled system error"
    )
    assert detect_wrap([line[:80], line[80:]]) == 80
    # A line that is 80 long by chance, then a line of its own: no wrap.
    assert detect_wrap(["E" * 79 + ".", "Traceback (most recent call last):"]) is None
    assert detect_wrap([line[:79], line[79:]]) is None  # no terminal's width
    log = tmp_path / "error.log"
    log.write_text(f"{line[:80]}\n{line[80:]}\n")
    verdict = analyze([str(log)]).diagnosis.verdict
    assert "ProcessGroupNCCL.cpp:272, unhandled system error" in verdict.summary


def test_a_whole_line_as_long_as_a_terminal_is_wide_is_no_cut() -> None:
    # A traceback frame of exactly 100 characters ends in its function's name: it is whole.
    frame = '[1,2]<stderr>:  File "/usr/local/lib/python3.8/dist-packages/opennmt/bin/main.py", line 318, in main'
    assert len(frame) == 100
    text = f"{frame}\nfoo bar\nthe same on every rank\n"
    assert detect_wrap(text.splitlines()) is None
    assert shape(read(text)) == [("LogMessage", 1)]


def test_a_lists_items_are_no_cut_pieces_of_each_other() -> None:
    # Each bullet is an item of its own, whatever the length of the one before.
    warn = "gpu47:4962:5097 [1] transport/nvls.cc:223 NCCL WARN Cuda failure 999 'unknown error"
    text = f"- {warn}\n- pasted from the job's output\n- the same on every rank\n"
    [event] = read(text).events
    assert isinstance(event, NcclWarn)
    assert event.message == "Cuda failure 999 'unknown error"


def test_a_jobs_own_tag_on_every_line_is_taken_off(tmp_path: Path) -> None:
    dump = [
        "Process 4242: python train.py",
        "Python v3.11.7 (/usr/bin/python3.11)",
        "",
        'Thread 4242 (idle): "MainThread"',
        "    all_reduce (torch/distributed/distributed_c10d.py:2050)",
        "    train (train.py:88)",
    ]
    tagged = [f"[job-7f3a][trainer] {line}" for line in dump]
    assert detect_lead(tagged) == "[job-7f3a][trainer] "
    log = tmp_path / "rank0.txt"
    log.write_text("\n".join(tagged) + "\n")
    assert analyze([str(log)]).diagnosis.stack_classes  # read as a stack dump
    # A known prefix keeps its meaning (stripped line by line); a message logged again and
    # again shares its words, not a tag.
    assert detect_lead([f"[rank0]: {line}" for line in dump]) == ""
    again = "[W socket.cpp:663] [c10d] The client socket has failed to connect to [n1]:29500 "
    assert detect_lead([again + f"(errno: 111 - try {n})." for n in range(4)]) == ""


def test_a_collectors_posix_time_is_a_stamp() -> None:
    lines = [f"1732527600.{n:03d} [rank0]: step {n}" for n in range(4)]
    assert detect_numbering(lines) == "epoch"
    text, hint = strip_prefixes(lines[1], "epoch")
    assert (text, hint.rank, hint.time) == ("step 1", 0, 1732527600.001)
    assert detect_numbering([f"1732527600123 line {n}" for n in range(3)]) == "epoch"
