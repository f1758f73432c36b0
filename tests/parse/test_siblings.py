"""Ranks from sibling file names: what a number in per-process files' names is, told by the
files whose lines name their rank, gives the rank of a file whose lines name none."""

from __future__ import annotations

from pathlib import Path

import pytest

from logsleuth.api import analyze
from logsleuth.model.base import NO_ORIGIN, Event, Origin, SourceRef
from logsleuth.model.messages import LogMessage
from logsleuth.parse.siblings import sibling_ranks


def _line(name: str, rank: int | None) -> Event:
    origin = NO_ORIGIN if rank is None else Origin(rank=rank)
    return LogMessage(
        ref=SourceRef(name, 1), text="x", origin=origin, family="torch", level="ERROR",
        catalog="t", message="x", label="", fields=(), rank=rank, subsystems=(),
    )  # fmt: skip


def _files(names_ranks: dict[str, list[int | None]]) -> list[tuple[str, list[Event]]]:
    return [(name, [_line(name, r) for r in ranks]) for name, ranks in names_ranks.items()]


def test_the_number_the_named_files_agree_on_names_the_bare_files_rank() -> None:
    files = _files({f"slurm-884213-{t}.out": [None if t == 1 else t] for t in range(4)})
    assert sibling_ranks(files) == {"slurm-884213-1.out": 1}


def test_a_local_rank_number_names_the_rank_at_the_nodes_offset() -> None:
    # torchrun's --log-dir of the second node: local ranks 0-3 are ranks 4-7.
    files = _files(
        {f"logs/run_x1/attempt_0/{n}/stderr.log": [None if n == 2 else 4 + n] for n in range(4)}
    )
    assert sibling_ranks(files) == {"logs/run_x1/attempt_0/2/stderr.log": 6}


@pytest.mark.parametrize(
    "named",
    [
        {"w-0.log": [0], "w-1.log": [None], "w-2.log": []},  # one file says what it is
        {"w-0.log": [0], "w-1.log": [None], "w-2.log": [5]},  # offsets disagree
        {"w-0.log": [0], "w-1.log": [None], "w-2.log": [2], "w-3.log": [3, 0]},  # combined log
    ],
    ids=["one-agreeing", "disagreeing", "combined-log"],
)
def test_no_rank_is_given_without_two_agreeing_files_and_none_against(
    named: dict[str, list[int | None]],
) -> None:
    assert sibling_ranks(_files(named)) == {}


TIMEOUT = (
    "[E1123 10:41:07.512331 60{r} ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=1562, OpType=ALLREDUCE, NumelIn=1, "
    "NumelOut=1, Timeout(ms)=600000) ran for 600041 milliseconds before timing out.\n"
)
SHM = (
    "Traceback (most recent call last):\n"
    '  File "train.py", line 55, in <module>\n'
    "    batch = next(it)\n"
    "RuntimeError: DataLoader worker (pid 873) is killed by signal: Bus error. It is possible "
    "that dataloader's workers are out of shared memory. Please try to raise your shared "
    "memory limit.\n"
)


def test_a_bare_traceback_in_a_per_task_file_is_that_tasks_rank(tmp_path: Path) -> None:
    # srun --output=slurm-%j-%t.out: tasks 0, 2 and 3 time out naming their ranks; task 1's
    # file holds only its traceback.
    for task in range(4):
        text = SHM if task == 1 else TIMEOUT.format(r=task)
        (tmp_path / f"slurm-884213-{task}.out").write_text(text)
    verdict = analyze([str(tmp_path)]).diagnosis.verdict
    assert verdict.kind == "resource-exhausted"
    assert verdict.culprit_ranks == (1,)


def test_a_tee_tagged_local_rank_takes_the_offset_its_launcher_shows(tmp_path: Path) -> None:
    # torchrun --tee 3 on the second node: [default1]:[rank9]: says local ranks are ranks - 8.
    text = "".join(
        f"[default{local}]:[rank{local + 8}]:" + TIMEOUT.format(r=local + 8) for local in (0, 1, 2)
    ) + (
        "[default5]:Traceback (most recent call last):\n"
        '[default5]:  File "train.py", line 9, in <module>\n'
        "[default5]:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
    )
    (tmp_path / "node1.log").write_text(text)
    verdict = analyze([str(tmp_path)]).diagnosis.verdict
    assert verdict.culprit_ranks == (13,)


def test_a_tee_tag_without_its_launchers_offset_stays_a_local_rank(tmp_path: Path) -> None:
    text = (
        "[default5]:Traceback (most recent call last):\n"
        '[default5]:  File "train.py", line 9, in <module>\n'
        "[default5]:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
        # Two nodes' launchers in one file: local rank 0 is rank 0 and rank 8.
        "[default0]:[rank0]:" + TIMEOUT.format(r=0) + "[default0]:[rank8]:" + TIMEOUT.format(r=8)
    )
    (tmp_path / "job.log").write_text(text)
    verdict = analyze([str(tmp_path)]).diagnosis.verdict
    assert 5 not in verdict.culprit_ranks and 13 not in verdict.culprit_ranks
    assert "local rank 5" in verdict.summary
