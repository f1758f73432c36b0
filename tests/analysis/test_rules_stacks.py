"""LS104 (a rank stuck outside communication) and LS105 (ranks still initializing), read from
small hand-written py-spy dumps: must-fire and must-not-fire fixtures.

Each rank's dump is a file ``rank<N>.txt`` (the rank comes from the file name) of process
``1000 + N``, written in py-spy 0.4.3's text format.
"""

from __future__ import annotations

from collections.abc import Mapping
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


# ---- snapshots: stuck or progressing ----------------------------------------------------------

# The same rank a few seconds later, one frame further in its loop.
DATALOADER_LATER = DATALOADER.replace("main (train.py:173)", "main (train.py:176)")


def write_snapshots(tmp_path: Path, stacks: Mapping[int, tuple[str, ...]]) -> list[str]:
    """Write ``rank<R>.<n>.txt`` (n = 1, 2, ...) per rank, like a ``logsleuth live`` bundle."""
    for rank, shots in stacks.items():
        for n, frames in enumerate(shots, 1):
            text = HEADER.format(pid=1000 + rank) + frames
            (tmp_path / f"rank{rank}.{n}.txt").write_text(text, encoding="utf-8")
    return [str(tmp_path)]


def test_ls104_says_the_straggler_is_stuck_when_two_snapshots_agree(tmp_path: Path) -> None:
    stacks = {rank: (ALL_REDUCE, ALL_REDUCE) for rank in range(4)}
    stacks[2] = (DATALOADER, DATALOADER)
    (finding,) = findings(write_snapshots(tmp_path, stacks), "LS104")
    assert (finding.ranks, finding.confidence) == ((2,), 0.95)
    assert finding.detail.endswith(
        "The main thread showed the same stack in all 2 snapshots: it is stuck there, not slow."
    )
    assert {e.source for e in finding.evidence} == {"rank2.2.txt"}  # the latest snapshot


def test_ls104_says_the_straggler_progresses_when_its_stack_moved(tmp_path: Path) -> None:
    stacks = {rank: (ALL_REDUCE, ALL_REDUCE) for rank in range(4)}
    stacks[2] = (DATALOADER, DATALOADER_LATER)
    (finding,) = findings(write_snapshots(tmp_path, stacks), "LS104")
    assert (finding.ranks, finding.confidence) == ((2,), 0.7)
    assert finding.detail.endswith(
        "The main-thread stack of rank 2 changed between snapshots: it is progressing "
        "(slowly), not stuck."
    )
    assert "main (train.py:176)" in finding.title


def test_ls107_counts_snapshots_of_the_live_skip_collective_bundle() -> None:
    bundle = Path(__file__).resolve().parents[2] / "fixtures" / "real" / "live" / "skip-collective"
    (finding,) = findings([str(bundle / "stacks"), str(bundle / "manifest.json")], "LS107")
    assert (finding.kind, finding.ranks) == ("missing-collective", (1,))
    assert finding.detail.endswith(
        "The main thread showed the same stack in all 2 snapshots: it is stuck there, not slow."
    )


# ---- rank identity of dumps that name no process ----------------------------------------------


def test_faulthandler_dumps_take_their_rank_from_the_file_name(tmp_path: Path) -> None:
    frames = {
        0: '  File "/job/train.py", line 128 in train_step',
        1: '  File "/job/train.py", line 173 in main',
    }
    for rank in range(4):
        body = (
            '  File "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", '
            "line 2501 in all_reduce\n" + frames[0]
            if rank != 3
            else '  File "/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py", '
            "line 631 in __next__\n" + frames[1]
        )
        text = f"Current thread 0x00007f00000000{rank:02x} (most recent call first):\n{body}\n"
        (tmp_path / f"rank{rank}.log").write_text(text, encoding="utf-8")
    (finding,) = findings([str(tmp_path)], "LS104")
    assert (finding.ranks, finding.pids) == ((3,), ())
    assert finding.title.startswith("rank 3 is stuck in data loading at main (/job/train.py:173)")


# ---- the DataLoader workers of a stuck rank ---------------------------------------------------


def test_ls104_names_the_dataloader_workers_of_a_subprocesses_dump() -> None:
    root = Path(__file__).resolve().parents[2] / "fixtures" / "real"
    paths = [
        str(root / "stacks" / "gloo-hang_pyspy-0.4.3_torchrun_agent_subprocesses.txt"),
        str(root / "torch" / "gloo-hang_torchrun_log_after_SIGKILL_rank3.log"),
    ]
    (finding,) = findings(paths, "LS104")
    assert (finding.ranks, finding.pids) == ((3,), (13273,))
    assert finding.detail.endswith(
        "Its DataLoader workers: pid 13361 at SlowDataset.__getitem__ (hang_dist.py:8); "
        "pid 13363 at SlowDataset.__getitem__ (hang_dist.py:8)."
    )
    source = "stacks/gloo-hang_pyspy-0.4.3_torchrun_agent_subprocesses.txt"
    assert [(e.source, e.line) for e in finding.evidence][3:] == [
        (source, 83),
        (source, 88),
        (source, 60),
        (source, 65),
    ]
