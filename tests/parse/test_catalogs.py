"""Generated from the message catalogs: every known message is recognized as a typed event.

Each row of ``grammars/catalogs/nccl-log-formats.tsv`` (INFO, WARN, TRACE) and each
ERROR/WARNING/CHECK/THROW row of ``grammars/catalogs/torch-distributed-messages.tsv`` is
instantiated with sample arguments, as the program would print it, and read on its own.
It must become an event that counts as recognized and belongs to the right family. The
rates are printed at the end of the run; rows below the bar are listed with the reason.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

from logsleuth.model.base import Event
from logsleuth.model.messages import LogMessage
from logsleuth.model.torch import WatchdogProgress
from logsleuth.parse.catalog import load_catalog
from logsleuth.parse.discover import InputSource
from logsleuth.parse.dispatch import read_input
from logsleuth.resources import grammar_path
from tests.knowledge.catalog import instantiate, instantiate_torch

BAR = 0.98
TORCH_LEVELS = ("ERROR", "WARNING", "WARN", "CHECK", "THROW")
TORCH_FAMILIES = {
    "gloo": {"gloo", "torch"},
    "elastic": {"elastic", "torch"},
    "deepspeed": {"deepspeed", "torch"},
    "xla": {"xla", "torch"},
    "fr_trace": {"fr_trace", "torch"},
}


def _rows(name: str) -> list[dict[str, str]]:
    text = grammar_path(f"catalogs/{name}").read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    return list(csv.DictReader(lines, delimiter="\t", quoting=csv.QUOTE_NONE))


def _read(text: str) -> list[Event]:
    source = InputSource(name="sample.log", path=None, data=(text + "\n").encode())
    result = read_input(source)
    assert result.summary.lines == 1
    return [e for e in result.events if e.RECOGNIZED]


def _nccl_line(level: str, message: str) -> str:
    if level == "WARN":
        return f"gpu-node001:4711:4799 [3] misc/socket.cc:123 NCCL WARN {message}"
    if level == "TRACE":
        return f"gpu-node001:4711:4799 [3] 1234.567890 ncclProxyProgress:88 NCCL TRACE {message}"
    return f"gpu-node001:4711:4799 [3] NCCL INFO {message}"


def _family(event: Event) -> str:
    if isinstance(event, LogMessage):
        return event.family
    module = type(event).__module__.rsplit(".", 1)[-1]
    return {"nccl": "nccl", "torch": "torch", "stacks": "stacks"}.get(module, module)


def test_nccl_catalog_rows_are_recognized_as_nccl_events(
    figures: list[tuple[str, str]],
) -> None:
    rows = [r for r in _rows("nccl-log-formats.tsv") if r["level"] in ("INFO", "WARN", "TRACE")]
    missed: list[str] = []
    for row in rows:
        line = _nccl_line(row["level"], instantiate(row["format"]))
        events = _read(line)
        if not any(_family(e) in ("nccl", "env") for e in events):
            missed.append(f"{row['level']} {row['format'][:90]!r}: not recognized ({line[:60]})")
    rate = 1 - len(missed) / len(rows)
    figures.append(
        (
            "NCCL catalog rows recognized (INFO/WARN/TRACE, 2.3-2.30)",
            f"{len(rows) - len(missed)} of {len(rows)} ({100 * rate:.1f}%); not recognized: "
            "formats that are only placeholders or a few letters ('%s', '-> %d', "
            "'%s (%d)'), too generic to tell from other text",
        )
    )
    assert rate >= BAR, "\n".join(missed)


def test_torch_catalog_error_rows_are_recognized_in_their_family(
    figures: list[tuple[str, str]],
) -> None:
    rows = [
        r
        for r in _rows("torch-distributed-messages.tsv")
        if r["level"].split(":")[0].split("+")[0].split("(")[0] in TORCH_LEVELS
    ]
    missed: list[str] = []
    for row in rows:
        line = instantiate_torch(row["format"])
        want = TORCH_FAMILIES.get(row["component"], {"torch"})
        events = _read(line)
        if not any(_family(e) in want for e in events):
            got = [_family(e) for e in events]
            missed.append(f"{row['level']} {row['format'][:90]!r}: {got}")
    rate = 1 - len(missed) / len(rows)
    figures.append(
        (
            "PyTorch/gloo/elastic/DeepSpeed catalog error rows recognized",
            f"{len(rows) - len(missed)} of {len(rows)} ({100 * rate:.1f}%); not recognized: "
            "messages of fewer than 10 literal characters ('Rank {}', '{} {}')",
        )
    )
    assert rate >= BAR, "\n".join(missed)


@pytest.mark.parametrize(
    ("line", "family", "level"),
    [
        ("NCCL WARN Cuda failure 'out of memory'", "nccl", "WARN"),
        ("Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 2000", "nccl", "WARN"),
        (
            "socketStartConnect: Connect to 192.168.19.14<52822> failed : No route to host",
            "nccl",
            "WARN",
        ),
        (
            "Horovod has been shut down. This was caused by an exception on one of the ranks or "
            "an attempt to allreduce, allgather or broadcast a tensor after one of the ranks "
            "finished execution.",
            "horovod",
            "ERROR",
        ),
        ("# Avg bus bandwidth    : 12.3456", "nccl-tests", "INFO"),
    ],
)
def test_a_message_is_found_without_any_prefix(line: str, family: str, level: str) -> None:
    events = _read(line)
    assert events, line
    event = events[0]
    assert _family(event) == family
    if isinstance(event, LogMessage):
        assert event.level == level


def test_a_message_behind_an_unknown_prefix_keeps_the_prefix_as_label() -> None:
    line = (
        "12:01:33 | worker-7 | Duplicate GPU detected : rank 2 and rank 3 both on CUDA device 1000"
    )
    (event,) = _read(line)
    assert isinstance(event, LogMessage)
    assert event.catalog is not None and event.catalog.startswith("nccl:")
    # The time of day is a known prefix (read as the line's time); the rest is unknown.
    assert event.label == "| worker-7 |"
    assert event.origin.time == 12 * 3600 + 1 * 60 + 33
    assert event.message.startswith("Duplicate GPU detected")
    assert dict(event.fields)["arg0"] == "2"


_PROGRESS = re.compile(
    r"last enqueued (?:NCCL )?work: \{\}, last completed (?:NCCL )?work: \{\}", re.IGNORECASE
)


def _progress_rows() -> list[dict[str, str]]:
    return [r for r in _rows("torch-distributed-messages.tsv") if _PROGRESS.search(r["format"])]


@pytest.mark.parametrize("row", _progress_rows(), ids=lambda r: r["format"][:48])
def test_every_watchdog_progress_form_of_the_catalog_gives_the_ranks_progress(
    row: dict[str, str],
) -> None:
    """Each release's way of printing 'last enqueued / last completed work' is read as the
    rank's progress: the wait chain finds the rank behind from these numbers."""
    numbers = iter(range(4100, 4200))
    fmt = row["format"]
    # The leading placeholder is the process group's log prefix.
    head = "[PG ID 0 PG GUID 0(default_pg) Rank 3] " if fmt.startswith("{}") else ""
    body = re.sub(r"\{[^{}]*\}", lambda _: str(next(numbers)), fmt.removeprefix("{}"))
    found = re.search(
        r"last enqueued (?:NCCL )?work: (\d+), last completed (?:NCCL )?work: (\d+)",
        body,
        re.IGNORECASE,
    )
    assert found is not None
    line = f"[rank3]:[E1124 03:00:01.000111 ProcessGroupNCCL.cpp:1608] {head}{body}"
    progress = [e for e in _read(line) if isinstance(e, WatchdogProgress)]
    assert len(progress) == 1, line
    assert progress[0].last_enqueued == int(found.group(1))
    assert progress[0].last_completed == int(found.group(2))
    assert progress[0].rank == 3


def test_catalog_entries_come_from_all_three_files() -> None:
    kinds = {entry.id.split(":")[0] for entry in load_catalog().entries}
    assert kinds == {"nccl", "torch", "extra"}
    assert Path(grammar_path("catalogs/extra-messages.tsv")).is_file()


def test_a_message_is_found_by_its_literal_words_not_its_field_names() -> None:
    # DeepSpeed's "{cmd} exits with return code = {last_return_code}": the line holds the
    # words of the format, never the names of its fields.
    line = "['/usr/bin/python3', '-u', 'train.py', '--local_rank=2'] exits with return code = -9"
    (event,) = _read(line)
    assert isinstance(event, LogMessage)
    assert (event.family, event.level) == ("deepspeed", "ERROR")
    # The values are named as the format names them.
    assert dict(event.fields)["last_return_code"] == "-9"


def test_no_catalog_message_needs_its_field_names_in_the_line() -> None:
    catalog = load_catalog()
    needing = [
        entry.fmt
        for entry in catalog.entries
        if not entry.fmt.startswith("re:")
        and any(name and name in catalog._by_id[entry.id].words for name in entry.names)
        and not any(name in re.sub(r"\{[^{}]*\}", " ", entry.fmt) for name in entry.names if name)
    ]
    assert needing == []
