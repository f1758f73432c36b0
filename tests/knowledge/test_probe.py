"""The issue's probe: one NCCL WARN line in an otherwise normal rank log, for every WARN row."""

from __future__ import annotations

from pathlib import Path

import pytest

from logsleuth.api import analyze
from tests.knowledge.catalog import ROOT, instantiate, nccl_line, warn_rows

NORMAL_LOG = ROOT / "fixtures" / "synthetic" / "healthy" / "nccl" / "gpu-node001.56683.log"
AFTER_INIT = 131
"""The log's lines up to its Init COMPLETE; the WARN goes after them, mid-run."""
FLOOR = 0.85


def test_one_warn_in_a_normal_log_gets_a_verdict_of_its_own(
    tmp_path: Path, report_figure: list[str], record_property: pytest.RecordProperty
) -> None:
    lines = NORMAL_LOG.read_text().splitlines(keepends=True)
    assert "Init COMPLETE" in lines[AFTER_INIT - 1]
    assert analyze([str(NORMAL_LOG)]).diagnosis.verdict.kind == "healthy"
    rows = warn_rows()
    generic = []
    target = tmp_path / NORMAL_LOG.name
    for row in rows:
        warn = nccl_line(instantiate(row.format), row.file) + "\n"
        target.write_text("".join([*lines[:AFTER_INIT], warn, *lines[AFTER_INIT:]]))
        if analyze([str(target)]).diagnosis.verdict.code == "LS001":
            generic.append(f"{row.file}: {row.format}")
    share = 1 - len(generic) / len(rows)
    figure = (
        f"one-WARN probe: {len(rows) - len(generic)}/{len(rows)} ({share:.1%}) NCCL WARN rows "
        "get a verdict other than the generic LS001"
    )
    print(figure)
    report_figure.append(figure)
    record_property("one_warn_probe", f"{share:.4f}")
    assert share >= FLOOR, f"{figure}; generic: {generic[:10]}"
