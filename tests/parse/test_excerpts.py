"""Excerpts as people paste them: a recognized line keeps its event whatever surrounds it.

The lines are every corpus line that is recognized on its own; the surroundings are the
prefixes launchers, collectors and log viewers put in front of lines (gathered from the
corpus, the NCCL log spec and the launchers' documentation), issue-thread quoting,
inline-code backticks, HTML escaping, and terminal hard-wrapping at 80, 120 and 200
columns. Also: every corpus case gets a verdict, and coverage of the corpus lines.
"""

from __future__ import annotations

import html
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logsleuth.api import analyze
from logsleuth.model.base import Event
from logsleuth.model.messages import LogMessage
from logsleuth.model.nccl import NcclWarn
from logsleuth.parse.catalog import load_catalog
from logsleuth.parse.coverage import measure_coverage
from logsleuth.parse.discover import InputSource
from logsleuth.parse.dispatch import read_input

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "fixtures" / "real" / "corpus"
COPIES = 3
"""Each excerpt carries its prefix (or wrap) on several lines, as a pasted block does."""

PREFIXES = (
    "[rank3]:",  # torch excepthook / torchrun --tee
    "[rank13]: ",
    "[default3]:",  # torchrun --tee 3
    "[1,3]<stdout>:",  # Open MPI --tag-output
    "[1,3]<stderr>:",
    "3: ",  # srun --label
    "(RayWorkerWrapper pid=1019) ",  # Ray worker
    "(pid=909608) ",
    "(RayWorkerVllm pid=4028887) ERROR 03-28 21:38:23 ray_utils.py:44] ",  # vLLM under Ray
    "2024-03-18T17:38:50.208Z ",  # docker logs -t / kubectl --timestamps
    "2024-03-18T17:38:50.2081234Z ",  # GitHub Actions
    "2024-03-18T17:38:50.208123456Z stdout F ",  # Kubernetes CRI log file
    "2024-03-18T17:38:50.208+00:00 ip-10-0-1-7/trainer/i-0abc123 ",  # aws logs tail
    "[2024-03-18 17:38:50] ",  # CI systems, NCCL_DEBUG_TIMESTAMP_FORMAT
    "[pod/trainer-0/pytorch] ",  # kubectl logs --prefix
    "> ",  # issue-thread quote
    "> > ",
    "gpu-a01: ",  # pdsh
    "{n} ",  # log viewer line numbers
    "[{n}] ",
    "Dec 01 12:00:01 gpu-a01 python[4711]: ",  # journald / syslog
    "trainer-1  | ",  # docker compose
    "[2026-08-04 11:58:42 TP1] ",  # sglang
    "I0510 07:28:04.417845 139863945226048 logging.py:337] ",  # absl/glog
    "100%|##########| 10/10 [00:01<00:00,  9.80it/s]",  # a tqdm bar the line was glued to
    "\x1b[36m(RayWorker pid=12)\x1b[0m ",  # coloured Ray prefix
    "12:01:33 | worker-7 | ",  # an unknown collector's columns
)


def _read(text: str) -> list[Event]:
    source = InputSource(name="excerpt.log", path=None, data=text.encode())
    return list(read_input(source).events)


def _key(event: Event) -> tuple[str, str]:
    if isinstance(event, LogMessage):
        # Several catalog rows can hold one text (the same WARN in two source files): the
        # message (its longest literal piece) is what must be kept, not which row of it.
        entry = load_catalog().entry(event.catalog or "")
        return ("LogMessage", entry.anchor if entry is not None else event.catalog or "")
    if isinstance(event, NcclWarn):
        return ("NcclWarn", event.message.split("\n")[0][:60])
    return (type(event).__name__, "")


@cache
def _recognized_lines() -> tuple[tuple[str, tuple[str, str]], ...]:
    """Every corpus line that is one recognized event on its own, with that event's key."""
    found: dict[str, tuple[str, str]] = {}
    for path in sorted(CORPUS.rglob("*")):
        if not path.is_file() or path.name.startswith("truth.") or path.suffix == ".md":
            continue
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            line = line.strip()
            if len(line) < 10 or len(line) > 600 or line in found or "\x1b" in line:
                continue
            events = [e for e in _read(line + "\n") if e.RECOGNIZED]
            if len(events) == 1:
                found[line] = _key(events[0])
    return tuple(sorted(found.items()))


def _keys(text: str) -> set[tuple[str, str]]:
    return {_key(e) for e in _read(text) if e.RECOGNIZED}


def test_there_are_enough_lines_and_prefixes() -> None:
    assert len(_recognized_lines()) > 200
    assert len(PREFIXES) >= 25


LINES = st.sampled_from(_recognized_lines())
SETTINGS = settings(
    max_examples=400, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@SETTINGS
@given(LINES, st.sampled_from(PREFIXES))
def test_a_prefix_keeps_the_event(item: tuple[str, tuple[str, str]], prefix: str) -> None:
    line, key = item
    text = "".join(f"{prefix.format(n=451 + i)}{line}\n" for i in range(COPIES))
    assert key in _keys(text), (prefix, line)


@SETTINGS
@given(LINES, st.sampled_from(("quote", "backticks", "html", "bullet", "br")))
def test_pasting_keeps_the_event(item: tuple[str, tuple[str, str]], how: str) -> None:
    line, key = item
    pasted = {
        "quote": f"> {line}",
        "backticks": f"`{line}`",
        "html": html.escape(line, quote=True),
        "bullet": f"- {line}",
        "br": f"{line}<br>",
    }[how]
    # A list's marker is read as one only on several lines: one ``- `` may be the text's.
    more = "- pasted from the job's output\n- the same on every rank\n" if how == "bullet" else ""
    assert key in _keys(f"{pasted}\n{more}"), (how, pasted)


@SETTINGS
@given(LINES, st.sampled_from((80, 120, 200)))
def test_hard_wrapping_keeps_the_event(item: tuple[str, tuple[str, str]], width: int) -> None:
    line, key = item
    pieces = [line[i : i + width] for i in range(0, len(line), width)]
    text = "".join("\n".join(pieces) + "\n" for _ in range(COPIES))
    assert key in _keys(text), (width, line)


@SETTINGS
@given(LINES, st.sampled_from((80, 100, 120)), st.sampled_from((2, 4, 20)))
def test_wrapping_under_a_hanging_indent_keeps_the_event(
    item: tuple[str, tuple[str, str]], width: int, hang: int
) -> None:
    # A logging handler that wraps to the terminal (rich's) indents the pieces after the
    # first to its message column; each piece fills the width with its indent. The lines'
    # prefixes differ in length (ranks 1, 10, 100), so the cuts fall at different places.
    line, key = item
    text = ""
    for rank in (1, 10, 100):
        whole = f"[rank{rank}]:{line}"
        pieces, rest = [whole[:width]], whole[width:]
        while rest:
            pieces.append(" " * hang + rest[: width - hang])
            rest = rest[width - hang :]
        text += "\n".join(pieces) + "\n"
    assert key in _keys(text), (width, hang, line)


def _cases() -> list[Path]:
    return sorted(p for p in CORPUS.iterdir() if p.is_dir())


def test_every_corpus_case_gets_a_verdict(figures: list[tuple[str, str]]) -> None:
    """No excerpt is turned away: analyze never ends without a verdict (no exit 2)."""
    failed: list[str] = []
    for case in _cases():
        inputs = [
            str(p)
            for p in sorted(case.rglob("*"))
            if p.is_file() and not p.name.startswith("truth.")
        ]
        result = analyze(inputs)
        if not result.diagnosis.verdict.kind:
            failed.append(case.name)
    figures.append(
        (
            "corpus cases with a verdict",
            f"{len(_cases()) - len(failed)} of {len(_cases())}"
            + (f"; none: {failed}" if failed else ""),
        )
    )
    assert not failed


def test_corpus_lines_are_recognized(figures: list[tuple[str, str]]) -> None:
    result = measure_coverage([str(CORPUS)])
    share = result.recognized / max(1, result.lines - result.blank)
    figures.append(
        (
            "corpus lines recognized (non-blank)",
            f"{result.recognized} of {result.lines - result.blank} ({100 * share:.1f}%) in "
            f"{result.inputs} inputs; NCCL-prefixed lines {result.nccl_recognized} of "
            f"{result.nccl_lines}",
        )
    )
    assert share >= 0.90


@pytest.mark.parametrize(
    ("line", "level"),
    [
        # TensorFlow's C++ logging (tsl): the letter after the time.
        (
            "2024-05-02 11:03:12.221000: E tensorflow/core/nccl/nccl_manager.cc:741] Error "
            "invoking NCCL: frobnicated",
            "ERROR",
        ),
        ("2024-05-02 11:03:12.221000: W tensorflow/core/kernels/x.cc:1] Frobnicated", "INFO"),
        # DeepSpeed's logger and vLLM's: the level word.
        ("[2024-05-02 11:33:12,950] [ERROR] [engine.py:322:step] frobnicated the quux", "ERROR"),
        ("ERROR 05-02 11:03:12 worker.py:120] frobnicated the quux", "ERROR"),
        ("INFO 05-02 11:03:12 worker.py:120] frobnicated the quux", "INFO"),
    ],
    ids=["tsl-error", "tsl-warning", "deepspeed", "vllm", "vllm-info"],
)
def test_a_known_prefix_gives_an_unknown_message_its_level(line: str, level: str) -> None:
    # No catalog knows the message; the prefix still says whether the line reports an error.
    [event] = _read(line + "\n")
    assert isinstance(event, LogMessage)
    assert event.level == level
