"""Every WARN format of NCCL 2.3-2.30 maps to a knowledge-base entry, with any arguments."""

from __future__ import annotations

import pytest

from logsleuth.knowledge import entries, entry_by_id, lookup, match
from tests.knowledge.catalog import (
    ALTERNATE,
    FormatRow,
    instantiate,
    instantiate_torch,
    read_rows,
    torch_rows,
    warn_rows,
)

ROWS = warn_rows()

NO_FIXED_TEXT = {
    "%s": "misc/strongstream.cc passes another message's text through a bare %s; the text "
    "it prints is that other message, which its own entry reads",
}
"""Formats without any fixed words, the reason each cannot and need not have an entry."""

REFINEMENTS = {
    "ib.completion-flushed": "the completion-error rows with status 5 (a flush, never the first error)",
    "socket.recv-timeout": "the recv-failed rows whose error is a timeout or a lost route",
    "socket.net-type-mismatch": "the wrong-type rows whose types are the Socket and IB transports'",
}
"""Entries that read one catalog row differently for some argument values."""


def test_the_catalog_has_every_warn_row() -> None:
    assert len(ROWS) == 1022
    assert {r.level for r in read_rows()} >= {"WARN", "INFO", "TRACE"}


def test_every_warn_row_maps_to_an_entry(report_figure: list[str]) -> None:
    unmatched = [
        r for r in ROWS if r.format not in NO_FIXED_TEXT and lookup(instantiate(r.format)) is None
    ]
    exempt = [r for r in ROWS if r.format in NO_FIXED_TEXT]
    assert [f"{r.file}: {r.format}" for r in unmatched] == []
    assert [r.format for r in exempt] == ["%s"]
    covered = len(ROWS) - len(exempt)
    figure = f"catalog coverage: {covered}/{len(ROWS)} NCCL WARN rows map to an entry ({len(exempt)} without fixed text)"
    print(figure)
    report_figure.append(figure)


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"L{r.line}")
def test_a_row_maps_to_one_entry_whatever_its_arguments(row: FormatRow) -> None:
    if row.format in NO_FIXED_TEXT:
        pytest.skip(NO_FIXED_TEXT[row.format])
    first = lookup(instantiate(row.format))
    second = lookup(instantiate(row.format, ALTERNATE))
    assert first is not None, instantiate(row.format)
    assert second is not None, instantiate(row.format, ALTERNATE)
    # Arguments may refine the reading (errno 12 is the memlock limit, status 5 a flush), but
    # never move a message to another family.
    assert first.entry.family == second.entry.family, (row.format, first.entry.id, second.entry.id)


def test_every_entry_covers_a_catalog_row_or_a_framework_message() -> None:
    """No entry is invented: each reads catalog rows, a framework message, or refines a row."""
    # WARN rows, and the INFO rows of the downgrades NCCL reports at INFO level.
    catalog = [r for r in read_rows() if r.level in ("WARN", "INFO")]
    used = {h.entry.id for r in catalog if (h := lookup(instantiate(r.format))) is not None}
    framework = {e.id for e in entries() if not e.family.startswith("nccl/")}
    assert sorted(e.id for e in entries() if e.id not in used | framework) == sorted(REFINEMENTS)
    flushed = instantiate(
        "NET/IB : Got completion from peer %s with status=%d opcode=%d len=%d vendor err %d",
        {"d": "5", "s": "10.0.0.2<43211>"},
    )
    assert match(flushed) is entry_by_id("ib.completion-flushed")
    timed_out = "Net : Call to recv from 10.0.0.2<43211> failed : Connection timed out"
    assert match(timed_out) is entry_by_id("socket.recv-timeout")
    crossed = "socketFinalizeAccept: wrong type 3 != 4"
    assert match(crossed) is entry_by_id("socket.net-type-mismatch")


def test_instantiate_gives_the_message_nccl_prints() -> None:
    assert instantiate("Connect to %s failed : %s") == "Connect to mlx5_0 failed : mlx5_0"
    assert instantiate("size=0x%lx %zu %p %%") == "size=0x7f3a2c 12 0x7f3a2c001200 %"
    assert instantiate('set to \\"1\\".\\n') == 'set to "1".'
    assert instantiate("Call to {name} failed") == "Call to ibv_reg_mr failed"


TORCH_ROWS = torch_rows()
TORCH_EXEMPT = {
    "template:_FAILURE_FORMAT_TEMPLATE": "torchrun's failure block, read whole as a ChildFailure event",
    "template:_MSG_FORMAT_TEMPLATE": "torchrun's failure block, read whole as a ChildFailure event",
}
FRAMEWORK_ERROR_FLOOR = 0.30
"""Share of the framework catalog's error-level rows (usage errors included) the entries read."""


def test_every_explained_framework_message_maps_to_an_entry(report_figure: list[str]) -> None:
    explained = [r for r in TORCH_ROWS if r.meaning]
    exempt = [r for r in explained if r.level in TORCH_EXEMPT or r.format == "error - {}"]
    unmatched = [
        f"{r.line}: {r.format}"
        for r in explained
        if r not in exempt and lookup(instantiate_torch(r.format)) is None
    ]
    assert unmatched == []
    assert len(exempt) == 4
    report_figure.append(
        f"framework catalog: {len(explained) - len(exempt)}/{len(explained)} messages with a "
        f"meaning map to an entry ({len(exempt)} are torchrun's summary block or have no fixed text)"
    )


def test_framework_error_messages_are_read(report_figure: list[str]) -> None:
    components = {
        "c10d-nccl",
        "c10d-nccl2",
        "c10d-gloo",
        "gloo",
        "c10d-store",
        "c10d",
        "c10d-wrapper",
        "elastic",
        "deepspeed",
        "xla",
    }
    errors = [
        r
        for r in TORCH_ROWS
        if r.component in components
        and any(
            w in r.level
            for w in ("ERROR", "THROW", "CHECK", "ENFORCE", "raise", "EXC", "MSG", "STR", "WARN")
        )
    ]
    read = [r for r in errors if lookup(instantiate_torch(r.format)) is not None]
    share = len(read) / len(errors)
    report_figure.append(
        f"framework catalog: {len(read)}/{len(errors)} ({share:.0%}) error-level messages (usage "
        "errors such as 'Tensors must be contiguous' included) map to an entry"
    )
    assert share >= FRAMEWORK_ERROR_FLOOR
