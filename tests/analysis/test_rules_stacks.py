"""LS104 (a rank stuck outside communication) and LS105 (ranks still initializing), read from
small hand-written py-spy dumps: must-fire and must-not-fire fixtures.

Each rank's dump is a file ``rank<N>.txt`` (the rank comes from the file name) of process
``1000 + N``, written in py-spy 0.4.3's text format.
"""

from __future__ import annotations

from pathlib import Path

from logsleuth.api import analyze
from logsleuth.model.diagnosis import Evidence, Finding

HEADER = """\
Process {pid}: /opt/venv/bin/python3 -u train.py
Python v3.11.7 (/usr/local/bin/python3.11)

Thread {pid} (idle): "MainThread"
"""

ALL_REDUCE = """\
    all_reduce (torch/distributed/distributed_c10d.py:2501)
    _exception_logger.<locals>.wrapper (torch/distributed/c10d_logger.py:83)
    train_step (train.py:128)
    main (train.py:180)
    <module> (train.py:200)
"""

# time.sleep shows only with --native: the Python frames end at the caller.
SLEEP = """\
    clock_nanosleep (libc.so.6)
    time_sleep (libpython3.11.so.1.0)
    wait_for_file (train.py:150)
    main (train.py:175)
    <module> (train.py:200)
"""

DATALOADER = """\
    _PollLikeSelector.select (selectors.py:415)
    wait (multiprocessing/connection.py:947)
    _MultiProcessingDataLoaderIter._try_get_data (torch/utils/data/dataloader.py:1133)
    _MultiProcessingDataLoaderIter.__next__ (torch/utils/data/dataloader.py:631)
    main (train.py:173)
    <module> (train.py:200)
"""

CUDA_SYNC = """\
    synchronize (torch/cuda/__init__.py:801)
    train_step (train.py:131)
    main (train.py:180)
    <module> (train.py:200)
"""

INIT = """\
    _store_based_barrier (torch/distributed/distributed_c10d.py:4337)
    init_process_group (torch/distributed/distributed_c10d.py:1520)
    setup (train.py:40)
    main (train.py:170)
    <module> (train.py:200)
"""


def write_job(tmp_path: Path, stacks: dict[int, str]) -> list[str]:
    """Write one py-spy dump per rank; return the paths to analyse."""
    for rank, frames in stacks.items():
        text = HEADER.format(pid=1000 + rank) + frames
        (tmp_path / f"rank{rank}.txt").write_text(text, encoding="utf-8")
    return [str(tmp_path)]


def findings(paths: list[str], code: str) -> list[Finding]:
    """Return the findings of rule ``code`` for ``paths``."""
    return [f for f in analyze(paths).diagnosis.findings if f.code == code]


# ---- LS104 stacks.non_collective --------------------------------------------------------------


def test_ls104_names_the_rank_sleeping_while_the_others_all_reduce(tmp_path: Path) -> None:
    paths = write_job(
        tmp_path, {0: ALL_REDUCE, 1: ALL_REDUCE, 2: SLEEP, 3: ALL_REDUCE, 4: ALL_REDUCE}
    )
    (finding,) = findings(paths, "LS104")
    assert (finding.kind, finding.severity) == ("non-collective-stall", "critical")
    assert (finding.ranks, finding.pids) == ((2,), (1002,))
    assert finding.title == (
        "rank 2 is stuck sleeping at wait_for_file (train.py:150) while 4 rank(s) wait in "
        "all_reduce"
    )
    # The dump header, then the innermost Python frame, which is also the call site here.
    assert finding.evidence == (
        Evidence("rank2.txt", 1, "Process 1002: /opt/venv/bin/python3 -u train.py"),
        Evidence("rank2.txt", 7, "    wait_for_file (train.py:150)"),
    )
    assert finding.evidence_total == 2


def test_ls104_quotes_the_innermost_frame_and_the_call_site(tmp_path: Path) -> None:
    stacks = {rank: ALL_REDUCE for rank in range(5)}
    stacks[3] = DATALOADER
    (finding,) = findings(write_job(tmp_path, stacks), "LS104")
    assert (finding.ranks, finding.pids) == ((3,), (1003,))
    assert finding.evidence == (
        Evidence("rank3.txt", 1, "Process 1003: /opt/venv/bin/python3 -u train.py"),
        Evidence("rank3.txt", 5, "    _PollLikeSelector.select (selectors.py:415)"),
        Evidence("rank3.txt", 9, "    main (train.py:173)"),
    )
    for evidence in finding.evidence:
        line = (tmp_path / evidence.source).read_text().splitlines()[evidence.line - 1]
        assert evidence.text == line


def test_ls104_names_a_lone_process_stuck_in_the_dataloader(tmp_path: Path) -> None:
    (finding,) = findings(write_job(tmp_path, {0: DATALOADER}), "LS104")
    assert finding.ranks == (0,)
    assert finding.title == (
        "rank 0 is stuck in data loading at main (train.py:173); no rank is in a collective"
    )


def test_ls104_is_silent_when_every_rank_waits_in_the_same_collective(tmp_path: Path) -> None:
    paths = write_job(tmp_path, {rank: ALL_REDUCE for rank in range(5)})
    assert findings(paths, "LS104") == []


def test_ls104_is_silent_for_one_process_computing_alone(tmp_path: Path) -> None:
    assert findings(write_job(tmp_path, {0: CUDA_SYNC}), "LS104") == []


# ---- LS105 init.stall ------------------------------------------------------------------------


def test_ls105_names_the_rank_still_in_init_process_group(tmp_path: Path) -> None:
    paths = write_job(tmp_path, {0: ALL_REDUCE, 1: ALL_REDUCE, 2: ALL_REDUCE, 3: INIT})
    (finding,) = findings(paths, "LS105")
    assert (finding.kind, finding.ranks, finding.pids) == ("init-stall", (3,), (1003,))
    assert finding.detail == ("Main thread in process-group initialization at setup (train.py:40).")
    assert finding.evidence == (
        Evidence("rank3.txt", 1, "Process 1003: /opt/venv/bin/python3 -u train.py"),
        Evidence(
            "rank3.txt", 5, "    _store_based_barrier (torch/distributed/distributed_c10d.py:4337)"
        ),
        Evidence("rank3.txt", 7, "    setup (train.py:40)"),
    )
    assert findings(paths, "LS104") == []


def test_ls105_is_silent_when_every_rank_is_past_init(tmp_path: Path) -> None:
    paths = write_job(tmp_path, {rank: ALL_REDUCE for rank in range(4)})
    assert findings(paths, "LS105") == []


def test_ls105_is_silent_when_every_rank_is_still_initializing(tmp_path: Path) -> None:
    paths = write_job(tmp_path, {rank: INIT for rank in range(4)})
    assert findings(paths, "LS105") == []
