"""Finding the job's processes and ranks in /proc."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator

import pytest

from logsleuth.live.procs import (
    descendants,
    find_ranks,
    group_members,
    is_alive,
    marked_processes,
    read_environ,
)

# Rank 0 and rank 1 as torchrun starts them; rank 1 has a child (a data-loader worker) that
# inherits its environment and must not count as a rank.
TREE = 'RANK=0 LOCAL_RANK=0 sleep 30 & RANK=1 LOCAL_RANK=1 sh -c "sleep 30 & wait" & wait'


@pytest.fixture
def tree() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(
        ["sh", "-c", TREE], env={**os.environ, "MARK_UNDER_TEST": "yes"}, start_new_session=True
    )
    deadline = time.monotonic() + 5
    while len(descendants(proc.pid)) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    yield proc
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def test_ranks_are_the_top_processes_with_rank_variables(tree: subprocess.Popen[bytes]) -> None:
    pids = [tree.pid, *descendants(tree.pid)]
    ranks = find_ranks(pids, "nodeA")
    assert sorted(ranks) == [0, 1]
    assert {r.local_rank for r in ranks.values()} == {0, 1}
    assert {r.host for r in ranks.values()} == {"nodeA"}
    worker = [p for p in descendants(ranks[1].pid)]
    assert len(worker) == 1
    assert read_environ(worker[0])["RANK"] == "1"  # type: ignore[index]
    assert worker[0] not in {r.pid for r in ranks.values()}


def test_group_and_marker_find_every_process(tree: subprocess.Popen[bytes]) -> None:
    members = group_members(tree.pid)
    assert tree.pid in members and len(members) == 4
    assert marked_processes("MARK_UNDER_TEST", "yes") == sorted(members)


def test_a_dead_process_is_not_alive() -> None:
    proc = subprocess.Popen(["true"])
    proc.wait()
    assert not is_alive(proc.pid)
    assert find_ranks([proc.pid], socket.gethostname()) == {}
