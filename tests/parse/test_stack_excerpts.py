"""Stack dumps pasted into a ticket, cut anywhere: above the header, mid-thread, at both ends.

Every real sample is cut at every line and read through the dispatcher as a file of its own;
what a user checks is compared with the whole sample: the frames are still there (innermost
first, in their thread), every line is accounted for, and the verdict and stack class of an
incident do not depend on whether the dump's header made it into the paste. The other side
of the rule (docs in ``logsleuth/parse/stacks.py``): frame-shaped lines that are not a run
stay what they were.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logsleuth.api import analyze
from logsleuth.model.base import Event
from logsleuth.model.stacks import StackDump
from logsleuth.parse.base import InputResult, Line, Sink
from logsleuth.parse.clean import clean, detect_wrap, strip_prefixes
from logsleuth.parse.discover import InputSource
from logsleuth.parse.dispatch import read_input
from logsleuth.parse.stacks import StackReader
from logsleuth.report.json import build_json

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures" / "real"
SAMPLES = sorted(
    p.relative_to(FIXTURES).as_posix()
    for p in (
        *(FIXTURES / "stacks").glob("*.txt"),
        *(FIXTURES / "stacks").glob("*.log"),
        *(FIXTURES / "corpus").glob("*/pyspy*.txt"),
    )
    if "gdb" not in p.name and "pstack" not in p.name and "pystack" not in p.name
)
"""Every real py-spy text and faulthandler sample (gdb output has its own reader; pystack's,
oldest call first with source lines between frames, has tests of its own)."""

_LOCALS_HEADER = re.compile(r" {8}(?:Arguments|Locals)::?$")

Frames = list[tuple[int, str, str | None, int | None]]


def read(data: bytes, name: str = "pyspy_rank0.txt") -> InputResult:
    return read_input(InputSource(name=name, path=None, data=data), audit=True)


def physical(name: str) -> list[bytes]:
    lines = (FIXTURES / name).read_bytes().split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return lines


def frames(events: tuple[Event, ...], shift: int = 0) -> Frames:
    """Every frame of every dump, as (line in the whole sample, function, file, line)."""
    return sorted(
        (f.at + shift, f.func, f.file, f.line)
        for e in events
        if isinstance(e, StackDump)
        for t in e.threads
        for f in t.frames
        if f.at is not None
    )


@cache
def whole(name: str) -> tuple[Frames, dict[int, tuple[int, bool]]]:
    """The whole sample: its frames, and for each frame line its thread's first frame line
    and whether it is a native frame."""
    # Read by the stack reader alone: the whole sample's frames as it assembles them.
    reader, sink = StackReader(name), Sink()
    for number, raw in enumerate(physical(name), 1):
        cleaned = clean(raw.decode("utf-8", errors="replace"))
        text, hint = strip_prefixes(cleaned)
        if text.strip():
            reader.feed(Line(number, text, cleaned, hint), sink)
    reader.close(sink)
    events = tuple(sink.events)
    thread_of: dict[int, tuple[int, bool]] = {}
    for event in events:
        if not isinstance(event, StackDump):
            continue
        for thread in event.threads:
            numbers = [f.at for f in thread.frames if f.at is not None]
            for frame in thread.frames:
                if frame.at is not None:
                    thread_of[frame.at] = (numbers[0], frame.native)
    return frames(events), thread_of


def _text(name: str, number: int) -> str:
    return strip_prefixes(clean(physical(name)[number - 1].decode("utf-8", errors="replace")))[0]


def expected(name: str, start: int, end: int) -> tuple[Frames, list[int]]:
    """The frames an excerpt of lines ``start+1..end`` must keep, and the frame lines of a
    leading piece of a thread that is too short to be a run (they must not be taken).

    The piece of the first thread that lost its header (its frames and --locals lines up to
    the next other line) is a run when, from its first frame line, it holds two frame lines
    or --locals headers and one Python frame.
    """
    all_frames, thread_of = whole(name)
    kept = [f for f in all_frames if start < f[0] <= end]
    piece = []
    number = start + 1
    while number <= end and (number in thread_of or _text(name, number).startswith(" " * 8)):
        if number in thread_of and piece and thread_of[number][0] == number:
            break  # the next thread (faulthandler dumps may follow each other directly)
        piece.append(number)
        number += 1
    frame_lines = [n for n in piece if n in thread_of]
    if not frame_lines:
        return kept, []
    stack_lines = [
        n
        for n in piece
        if n in thread_of or (n > frame_lines[0] and _LOCALS_HEADER.match(_text(name, n)))
    ]
    python = any(not thread_of[n][1] for n in frame_lines)
    if len(stack_lines) >= 2 and python:
        return kept, []
    return [f for f in kept if f[0] not in frame_lines], frame_lines


def check_excerpt(name: str, start: int, end: int) -> InputResult | None:
    lines = physical(name)
    excerpt = b"\n".join(lines[start:end]) + b"\n"
    if not excerpt.strip():
        return None
    result = read(excerpt, Path(name).name)
    summary = result.summary
    assert summary.recognized + summary.unrecognized + summary.blank == summary.lines
    want, lone = expected(name, start, end)
    assert frames(result.events, start) == want
    missed = {n + start for n in result.unrecognized_lines}
    assert set(lone) <= missed
    for event in result.events:
        if isinstance(event, StackDump) and opened_at_a_frame(event):
            first = event.threads[0]
            assert (first.tid, first.name, first.state, event.truncated) == (None, None, None, True)
    return result


def opened_at_a_frame(dump: StackDump) -> bool:
    """Whether ``dump`` begins with a frame line: a run opened it, no header line."""
    return bool(dump.threads and dump.threads[0].frames) and (
        dump.threads[0].frames[0].at == dump.ref.line
    )


def test_no_stack_sample_is_taken_for_hard_wrapped_output() -> None:
    # Frame lines of one (longest) length followed by frames of other files, or a py-spy
    # header's argv line before its "Python v" line, are no terminal's cut.
    for name in SAMPLES:
        lines = physical(name)
        sample = [clean(r.decode("utf-8", errors="replace")) for r in lines[:200]]
        assert detect_wrap(sample) is None, name


def test_there_are_samples_of_each_format() -> None:
    assert len(SAMPLES) >= 30
    assert any("faulthandler" in s for s in SAMPLES)
    assert any("locals" in s for s in SAMPLES)
    assert any("native" in s for s in SAMPLES)


@pytest.mark.parametrize("name", SAMPLES)
def test_cut_above_any_line_keeps_the_frames(name: str) -> None:
    for start in range(len(physical(name))):
        check_excerpt(name, start, len(physical(name)))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(SAMPLES), st.integers(0, 200), st.integers(1, 200))
def test_cut_at_both_ends_keeps_the_frames(name: str, start: int, length: int) -> None:
    total = len(physical(name))
    start = start % total
    check_excerpt(name, start, min(total, start + length))


# ---- what a user checks ---------------------------------------------------------------------

CASE_234 = FIXTURES / "corpus" / "234-pyspy-rank0-dataloader-queue-get-others-allreduce"


def _verdict(paths: list[Path]) -> tuple[str, list[int], list[tuple[str, str]]]:
    report = build_json(analyze([str(p) for p in paths]).diagnosis)
    verdict = report["verdict"]
    classes = [(c["ranks"], c["category"]) for c in report["stacks"]["classes"]]
    return verdict["kind"], verdict["culprit_ranks"], classes


def test_the_brief_excerpt_is_read_as_a_dump(tmp_path: Path) -> None:
    """``tail -n +8`` of case 234: only outer frames are left, but they are a dump of rank 0."""
    lines = (CASE_234 / "pyspy_rank0.txt").read_text().splitlines(keepends=True)
    cut = tmp_path / "pyspy_rank0.txt"
    cut.write_text("".join(lines[7:]))
    result = read(cut.read_bytes())
    (dump,) = result.events
    assert isinstance(dump, StackDump)
    assert (dump.fmt, dump.pid, dump.ref.line, dump.last_line, dump.truncated) == (
        "py-spy",
        None,
        1,
        6,
        True,
    )
    (thread,) = dump.threads
    assert (thread.tid, thread.name, thread.state) == (None, None, None)
    assert [f.func for f in thread.frames] == [
        "__iter__",
        "train",
        "inner",
        "main",
        "distributed_main",
        "call_main",
    ]
    assert (result.summary.recognized, result.summary.unrecognized) == (6, 0)
    assert _verdict([cut])[1:] == ([], [("0", "unknown")])


@pytest.mark.parametrize("cut", [1, 2])
def test_case_234_keeps_its_verdict_without_the_thread_line(tmp_path: Path, cut: int) -> None:
    lines = (CASE_234 / "pyspy_rank0.txt").read_text().splitlines(keepends=True)
    path = tmp_path / "pyspy_rank0.txt"
    path.write_text("".join(lines[cut:]))
    whole_verdict = _verdict([CASE_234 / "pyspy_rank0.txt"])
    assert whole_verdict == ("non-collective-stall", [0], [("0", "lock")])
    assert _verdict([path]) == whole_verdict


def test_a_bundle_whose_dumps_lost_their_headers_keeps_its_verdict(tmp_path: Path) -> None:
    """The live skip-collective bundle: rank from ``stacks/rank<R>.<n>.txt``, not the header."""
    bundle = tmp_path / "bundle"
    shutil.copytree(FIXTURES / "live" / "skip-collective", bundle)
    (bundle / "diagnosis.json").unlink(missing_ok=True)
    whole_verdict = _verdict([bundle])
    for dump in sorted((bundle / "stacks").glob("rank*.txt")):
        lines = dump.read_text().splitlines(keepends=True)
        assert lines[3].startswith("Thread ")
        dump.write_text("".join(lines[4:]))  # Process, Python, blank and Thread lines cut
    assert whole_verdict == (
        "missing-collective",
        [1],
        [("0,2-3", "collective"), ("1", "collective")],
    )
    assert _verdict([bundle]) == whole_verdict


@pytest.mark.parametrize(
    "cut", [("Thread 0x",), ("Fatal Python error", "", "Thread 0x")], ids=["thread", "all"]
)
def test_a_faulthandler_dump_in_a_launcher_log_keeps_its_class(
    tmp_path: Path, cut: tuple[str, ...]
) -> None:
    """The live size-mismatch bundle: a faulthandler dump (no rank prefix) in the launcher log,
    its ``Thread`` line (or the ``Fatal Python error`` line too) cut: still one in all_reduce."""
    bundle = tmp_path / "bundle"
    shutil.copytree(FIXTURES / "live" / "size-mismatch", bundle)
    (bundle / "diagnosis.json").unlink(missing_ok=True)
    whole_verdict = _verdict([bundle])
    log = bundle / "launcher.log"
    lines = log.read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line.startswith("Thread 0x"))
    first = at - len(cut) + 1
    assert [
        line.rstrip("\n")[: len(c)] for line, c in zip(lines[first : at + 1], cut, strict=True)
    ] == list(cut)
    log.write_text("".join(lines[:first] + lines[at + 1 :]))
    assert whole_verdict == ("collective-mismatch", [], [("", "collective")])
    assert _verdict([bundle]) == whole_verdict
    report = build_json(analyze([str(bundle)]).diagnosis)
    (stack_class,) = report["stacks"]["classes"]
    assert stack_class["collective"] == "all_reduce"


def test_a_faulthandler_excerpt_without_its_thread_line() -> None:
    text = (
        '  File "/home/train/job/fh_dump.py", line 12 in step\n'
        '  File "/home/train/job/fh_dump.py", line 13 in <module>\n'
    )
    result = read(text.encode(), "rank3.log")
    (dump,) = result.events
    assert isinstance(dump, StackDump)
    assert (dump.fmt, dump.truncated, len(dump.threads)) == ("faulthandler", True, 1)
    assert [(f.func, f.line) for f in dump.threads[0].frames] == [("step", 12), ("<module>", 13)]
    assert dump.threads[0].is_main  # its <module> frame says so


def test_the_rank_comes_from_the_launcher_prefix_of_a_headless_run() -> None:
    text = (
        '[default3]:  File "/job/train.py", line 40 in wait\n'
        '[default3]:  File "/job/train.py", line 90 in <module>\n'
    )
    (dump,) = read(text.encode(), "launcher.log").events
    assert isinstance(dump, StackDump)
    assert (dump.origin.local_rank, dump.text) == (3, text.splitlines()[0])


@pytest.mark.parametrize(
    "prefix", ["2024-03-18T17:38:50.208Z ", "[pod/trainer-0/pytorch] ", "> ", "3: "]
)
def test_a_headless_run_behind_a_collector_prefix(prefix: str) -> None:
    text = "".join(
        f"{prefix}{line}\n"
        for line in (
            "    all_reduce (torch/distributed/distributed_c10d.py:3252)",
            "    train_step (hang_dist.py:15)",
        )
    )
    result = read(text.encode(), "job.log")
    (dump,) = result.events
    assert isinstance(dump, StackDump)
    assert [f.func for f in dump.threads[0].frames] == ["all_reduce", "train_step"]
    assert result.summary.recognized == 2


def test_a_locals_excerpt_cut_mid_frame() -> None:
    """py-spy --locals: variable lines of a frame that was cut are taken from the first frame."""
    text = (
        "            self: <Queue at 0x7f>\n"
        "    Condition.wait (threading.py:320)\n"
        "        Arguments:\n"
        "            self: <Condition at 0x7f>\n"
        "    Queue.get (queue.py:171)\n"
    )
    result = read(text.encode())
    (dump,) = result.events
    assert isinstance(dump, StackDump)
    assert (dump.ref.line, dump.last_line) == (2, 5)
    waits, gets = dump.threads[0].frames
    assert waits.locals == (("self", "<Condition at 0x7f>"),)
    assert gets.func == "Queue.get"
    assert result.unrecognized_lines == (1,)


def test_a_header_cut_above_the_thread_line() -> None:
    """``Process`` and ``Python`` lines kept, the ``Thread`` line cut: one dump, its thread
    unknown; without the ``Python`` line the frames are not taken for the argv."""
    header = "Process 13270: /opt/venv/bin/python3 -u hang_dist.py\n"
    frames_text = (
        "    all_reduce (torch/distributed/distributed_c10d.py:3252)\n"
        "    train_step (hang_dist.py:15)\n"
    )
    for text in (
        header + "Python v3.11.7 (/usr/local/bin/python3.11)\n\n" + frames_text,
        header + "\n" + frames_text,
        header + frames_text,
    ):
        (dump,) = read(text.encode()).events
        assert isinstance(dump, StackDump)
        assert (dump.pid, dump.cmdline, dump.truncated) == (
            13270,
            "/opt/venv/bin/python3 -u hang_dist.py",
            True,
        )
        assert [(t.tid, [f.func for f in t.frames]) for t in dump.threads] == [
            (None, ["all_reduce", "train_step"])
        ]


def test_a_header_with_no_thread_is_truncated() -> None:
    text = "Process 1: python x.py\nPython v3.11.7 (/usr/bin/python3)\n"
    (dump,) = read(text.encode()).events
    assert isinstance(dump, StackDump)
    assert (dump.threads, dump.truncated) == ((), True)


# ---- not a stack: the other side of the rule ----------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        # one frame-shaped line inside prose
        "Starting training\n    main (train.py:12)\nepoch 1 done\n",
        # a list of options, not frames: no Python frame
        "Options:\n    batch_size (int)\n    lr (float)\n",
        # native frames alone
        "    pthread_cond_wait (libc.so.6)\n    0x7ffbc06a3f16 (libc.so.6)\n",
        # a blank line between two frame lines
        "    f (a.py:1)\n\n    g (b.py:2)\n",
        # two writers
        '[default0]:  File "a.py", line 1 in f\n[default1]:  File "b.py", line 2 in g\n',
        # two formats
        '    f (a.py:1)\n  File "b.py", line 2 in g\n',
        # a Python traceback (", in" with a comma) is the torch reader's
        '  File "a.py", line 3, in <module>\n  File "a.py", line 2, in main\n',
        # locals lines without a frame above them
        "        Locals:\n            a: 1\n            b: 2\n",
    ],
)
def test_frame_shaped_lines_that_are_no_run_open_no_dump(text: str) -> None:
    result = read(text.encode(), "job.log")
    assert not [e for e in result.events if isinstance(e, StackDump)]


@cache
def _log_fixtures() -> tuple[Path, ...]:
    """Every real and synthetic log fixture that is not a stack dump file."""
    found = []
    for path in sorted((ROOT / "fixtures").rglob("*")):
        if not path.is_file() or path.suffix not in (".log", ".txt", ".out"):
            continue
        if path.parent.name == "stacks" or "pyspy" in path.name or "gdb" in path.name:
            continue
        found.append(path)
    return tuple(found)


def test_no_log_fixture_grows_a_headless_dump() -> None:
    """Real logs hold indented lines of every shape; none opens a dump at a frame line."""
    assert len(_log_fixtures()) > 100
    for path in _log_fixtures():
        for event in read(path.read_bytes(), path.name).events:
            if isinstance(event, StackDump):
                assert not opened_at_a_frame(event), f"{path}:{event.ref.line}"


@pytest.mark.parametrize(
    "form",
    [lambda line: line.lstrip(), lambda line: re.sub(" +", " ", line)],
    ids=["indentation lost", "blanks collapsed"],
)
def test_frames_that_lost_their_indentation_stay_frames(form: Callable[[str], str]) -> None:
    # A page that collapses blanks, or a paste trimmed at the margin: the frames of an open
    # dump are still its frames, quoted as they stand.
    dump = (
        "Process 46930: python -u main.py --local_rank=0\n"
        "Python v3.11.2 (/usr/bin/python3.11)\n\n"
        'Thread 46930 (idle): "MainThread"\n'
        "    wait (torch/utils/file_baton.py:42)\n"
        "    jit_load (deepspeed/ops/op_builder/builder.py:480)\n"
        "    <module> (main.py:328)\n"
        "Traceback (most recent call last):\n"
        '  File "/job/train.py", line 9, in <module>\n'
        "    step()\n"
        "RuntimeError: later (not a frame)\n"
    )
    events = read("".join(form(line) + "\n" for line in dump.splitlines()).encode()).events
    (stack,) = [e for e in events if isinstance(e, StackDump)]
    assert [f.func for f in stack.threads[0].frames] == ["wait", "jit_load", "<module>"]
    # The traceback after the dump is no frame of it.
    assert any(
        "later" in f"{e.text} {getattr(e, 'exc_message', '')}"
        for e in events
        if not isinstance(e, StackDump)
    )


@pytest.mark.parametrize("indent", ["\t", "  ", "> "])
def test_dumps_indented_under_headings_keep_their_frames(indent: str) -> None:
    # Each rank's dump pasted under a heading of its own, its lines indented (a tab, a
    # list item's blanks): the headings are not indented, so no common indent is taken off.
    dumps = "".join(
        f"rank {rank}:\n"
        + "".join(
            f"{indent}{line}\n"
            for line in (
                f'Thread {1001 + rank} (idle): "MainThread"',
                f"    {func} ({where})",
                "    load_model (train.py:20)",
            )
        )
        for rank, func, where in ((0, "read", "ssl.py:1130"), (1, "broadcast", "c10d.py:2233"))
    )
    stacks = [e for e in read(dumps.encode()).events if isinstance(e, StackDump)]
    assert [[f.func for f in s.threads[0].frames] for s in stacks] == [
        ["read", "load_model"],
        ["broadcast", "load_model"],
    ]


def test_an_error_behind_an_exception_type_is_no_py_spy_error(tmp_path: Path) -> None:
    # DeepSpeed raises ``RuntimeError("Error: Custom DeepSpeed backend ...")``: its message
    # begins like py-spy's error output, but the line is the exception's.
    log = tmp_path / "train.log"
    log.write_text(
        "RuntimeError: Error: Custom DeepSpeed backend called without initializing DeepSpeed "
        "distributed.\n"
    )
    diagnosis = analyze([str(log)]).diagnosis
    assert [(i.kind, i.recognized) for i in diagnosis.inputs] == [("log", 1)]
    # The exception the process raised: its death, not a stack dump's failure.
    assert (diagnosis.verdict.code, diagnosis.verdict.kind) == ("LS204", "process-died")
