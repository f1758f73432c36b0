"""The parsers' tables are cached per user, and a bad cache file never breaks a run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from logsleuth.parse.grammar import _cache_file

LOG = (
    "gpu-a01:4711:4711 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n"
    "[rank0]:[E502 11:13:12.221000000 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=77, OpType=ALLREDUCE, NumelIn=1, "
    "NumelOut=1, Timeout(ms)=600000) ran for 600044 milliseconds before timing out.\n"
)


def _analyze(log: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    command = [sys.executable, "-m", "logsleuth", "analyze", str(log), "--format", "json"]
    return subprocess.run(command, env=env, capture_output=True, text=True, check=False)


def test_the_cache_lives_in_the_users_folder_and_survives_a_corrupt_file(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text(LOG, encoding="utf-8")
    cache = tmp_path / "cache"
    first = _analyze(log, cache)
    files = sorted((cache / "logsleuth").iterdir())
    assert [f.name.split("-")[1] for f in files] == ["nccl", "torch"]
    # A file cut while it was written (two processes at once) or tampered with.
    for f in files:
        f.write_bytes(b"not a pickle\n")
    second = _analyze(log, cache)
    assert (second.returncode, second.stdout, second.stderr) == (
        first.returncode,
        first.stdout,
        first.stderr,
    )
    assert all(f.stat().st_size > 1000 for f in files)  # rebuilt


def test_without_a_home_no_cache_is_written(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", "relative/home")
    assert _cache_file("torch.lark", "line", "contextual") is None
