"""Input discovery: files, directories, .gz, stdin, and bad paths reported in one line."""

from __future__ import annotations

import gzip
import io
from pathlib import Path

from logsleuth.parse.discover import discover, looks_binary, read_head


def test_directories_are_walked_in_order_and_outputs_skipped(tmp_path: Path) -> None:
    (tmp_path / "nccl").mkdir()
    (tmp_path / "nccl" / "b.log").write_text("x\n")
    (tmp_path / "nccl" / "a.log").write_text("x\n")
    (tmp_path / "report.html").write_text("<html>")
    (tmp_path / "diagnosis.json").write_text("{}")
    sources, problems = discover([str(tmp_path)])
    assert [s.name for s in sources] == ["nccl/a.log", "nccl/b.log"]
    assert problems == []


def test_notes_beside_logs_are_skipped_but_notes_alone_are_the_evidence(tmp_path: Path) -> None:
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "rank0.log").write_text("x\n")
    (tmp_path / "job" / "README.md").write_text("how this was collected\n")
    (tmp_path / "ticket").mkdir()
    (tmp_path / "ticket" / "issue.md").write_text("> [rank3]:[E1012 ...] Heartbeat monitor\n")
    (tmp_path / "ticket" / "truth.json").write_text("{}")
    sources, problems = discover([str(tmp_path / "job"), str(tmp_path / "ticket")])
    assert [s.name for s in sources] == ["job/rank0.log", "ticket/issue.md"]
    assert problems == []


def test_missing_path_and_empty_directory_are_problems(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    sources, problems = discover([str(tmp_path / "nope.log"), str(tmp_path / "empty")])
    assert sources == []
    # Problems come sorted by name, whatever the order of the arguments.
    assert [(p.name.rsplit("/", 1)[-1], p.reason) for p in problems] == [
        ("empty", "directory contains no files"),
        ("nope.log", "no such file or directory"),
    ]


def test_gzip_is_read_transparently(tmp_path: Path) -> None:
    path = tmp_path / "rank0.log.gz"
    path.write_bytes(gzip.compress(b"gpu:1:1 [0] NCCL INFO Using network IB\n"))
    sources, _ = discover([str(path)])
    assert read_head(sources[0]).startswith(b"gpu:1:1")


def test_stdin_is_one_input() -> None:
    sources, _ = discover(["-"], stdin=io.BytesIO(b"hello\n"))
    assert [s.name for s in sources] == ["<stdin>"]
    assert read_head(sources[0]) == b"hello\n"


def test_binary_detection_tolerates_nul_padding() -> None:
    assert looks_binary(bytes(range(256)) * 4)
    assert not looks_binary(
        b'Thread 1 (idle): "MainThread"\n' + b"\x00" * 40 + b"    f (x.py:1)\n" * 20
    )
