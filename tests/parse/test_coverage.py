"""``logsleuth coverage``: what is recognized, and the rest grouped by shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from logsleuth.cli import main
from logsleuth.parse.coverage import measure_coverage

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared"
"""The shared reference folder beside the repository (absent in a clone of its own)."""


def test_unknown_lines_are_grouped_by_shape_with_one_example(tmp_path: Path) -> None:
    log = tmp_path / "rank0.log"
    log.write_text(
        "h1:10:11 [0] NCCL INFO NET/IB : No device found.\n"
        "h1:10:11 [0] NCCL INFO Brand new message 17 of 0x1f\n"
        "h2:20:21 [1] NCCL INFO Brand new message 18 of 0x2e\n"
        "\n"
        "some tool printed 3 things\n",
        encoding="utf-8",
    )
    result = measure_coverage([str(log)])
    assert (result.lines, result.blank, result.recognized, result.unrecognized) == (5, 1, 1, 3)
    assert (result.nccl_lines, result.nccl_recognized) == (3, 1)
    first = result.shapes[0]
    assert (first.shape, first.count, first.nccl) == ("Brand new message N of N", 2, True)
    assert (first.source, first.line) == ("rank0.log", 2)
    assert first.example.startswith("h1:10:11 [0] NCCL INFO Brand new message 17")
    assert result.shapes[1].shape == "some tool printed N things"
    assert dict(result.kinds) == {"NcclNetDevices": 1, "NcclUnrecognized": 2}


def test_coverage_json_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "a.log"
    log.write_text("h:1:1 [0] NCCL INFO cudaDriverVersion 12040\n", encoding="utf-8")
    assert main(["coverage", "--json", str(log)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["nccl_lines"] == 1 and data["nccl_share"] == 1.0
    assert data["kinds"] == {"NcclCudaDriver": 1}
    assert main(["coverage", str(log)]) == 0
    assert "NCCL lines: 1 of 1 recognized (100.00%)" in capsys.readouterr().out


@pytest.mark.skipif(not SHARED.is_dir(), reason="the shared corpus is not mounted")
def test_at_least_99_percent_of_corpus_nccl_lines_are_recognized() -> None:
    result = measure_coverage([str(SHARED / "corpus"), str(SHARED / "samples")])
    assert result.nccl_lines > 100
    assert result.nccl_share >= 0.99, [g.example for g in result.shapes if g.nccl]
