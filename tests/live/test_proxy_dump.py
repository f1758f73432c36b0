"""Live mode's NCCL proxy-state dumps: the signal only to ranks running NCCL, one dump per rank.

A stand-in rank installs a handler for the signal that prints a proxy-state dump on its
stdout (as NCCL's proxy thread does) into the shared launcher log; live must cut each
rank's dump from that log and write it where ``analyze`` finds it with the rank.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from logsleuth.api import analyze
from logsleuth.live.capture import nccl_ready_pids, proxy_dump_lines, request_proxy_dumps
from logsleuth.live.environment import diagnostics_env, proxy_dump_signal

DUMPER = """
import signal, sys, time
def dump(signum, frame):
    sys.stdout.write("noise before\\nACTIVE OPS\\n[0-3|28| Recv {peer}R/2]\\n[X]\\n")
    sys.stdout.flush()
signal.signal(signal.SIGUSR2, dump)
print("ready", flush=True)
time.sleep(60)
"""


def _start(code: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and log.read_text().count("ready") < 1:
        time.sleep(0.05)
    return proc


@pytest.fixture
def job(tmp_path: Path) -> Iterator[tuple[Path, list[subprocess.Popen[bytes]]]]:
    log = tmp_path / "launcher.log"
    log.touch()
    procs = [_start(DUMPER.format(peer=0), log)]
    procs.append(_start("import time\nprint('ready', flush=True)\ntime.sleep(60)\n", log))
    yield log, procs
    for proc in procs:
        proc.kill()
        proc.wait()


def test_only_ranks_with_nccl_init_get_the_signal_and_each_dump_is_kept(
    tmp_path: Path, job: tuple[Path, list[subprocess.Popen[bytes]]]
) -> None:
    log, (nccl_rank, gloo_rank) = job
    nccl = tmp_path / "nccl"
    nccl.mkdir()
    (nccl / f"node1.{nccl_rank.pid}.log").write_text(
        f"node1:{nccl_rank.pid}:{nccl_rank.pid} [0] NCCL INFO comm 0x1 rank 1 nranks 2 "
        "cudaDev 0 nvmlDev 0 busId 18000 commId 0x2 - Init COMPLETE\n"
    )
    (nccl / f"node1.{gloo_rank.pid}.log").write_text("")  # a process with no communicator
    assert nccl_ready_pids(nccl) == {nccl_rank.pid}
    targets = [(1, nccl_rank.pid), (0, gloo_rank.pid)]
    assert request_proxy_dumps(targets, signal.SIGUSR2, log, nccl) == 1
    assert (nccl / "proxy.rank1.txt").read_text() == (
        "[rank1]:ACTIVE OPS\n[rank1]:[0-3|28| Recv 0R/2]\n[rank1]:[X]\n"
    )
    # The process without NCCL was not signalled (SIGUSR2 would have ended it).
    assert gloo_rank.poll() is None
    d = analyze([str(nccl / "proxy.rank1.txt")]).diagnosis
    assert d.p2p is not None
    assert [(o.rank, o.op, o.peer, o.channel) for o in d.p2p.pending] == [(1, "recv", 0, 2)]


def test_the_last_complete_dump_is_cut_from_the_output() -> None:
    text = "ACTIVE OPS\n[0-1|5| Send 1S/0]\n[X]\nx\nACTIVE OPS\n[0-2|6| Send 1S/1]\n[X]\n"
    assert proxy_dump_lines(text) == ["ACTIVE OPS", "[0-2|6| Send 1S/1]", "[X]"]
    assert proxy_dump_lines("ACTIVE OPS\n[0-2|6| Send 1S/1]\n") is None


def test_the_signal_is_set_at_launch_and_the_users_own_wins(tmp_path: Path) -> None:
    env = diagnostics_env(tmp_path)
    assert env["NCCL_PROXY_DUMP_SIGNAL"] == str(int(signal.SIGUSR2))
    assert proxy_dump_signal(env) == signal.SIGUSR2
    assert proxy_dump_signal({"NCCL_PROXY_DUMP_SIGNAL": "10"}) == 10
    assert proxy_dump_signal({"NCCL_PROXY_DUMP_SIGNAL": "no"}) is None
    assert proxy_dump_signal({}) is None
