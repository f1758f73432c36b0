"""The synthetic incident generator: deterministic, format-faithful, faults where promised."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from benchmarks.synth import FAULTS, generate, main

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
INFO = re.compile(r"^gpu-node\d{3}:(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] NCCL INFO \S")
WARN = re.compile(r"^gpu-node\d{3}:\d+:\d+ \[\d+\] [\w/]+\.cc:\d+ NCCL WARN \S")
COLL = re.compile(
    r"NCCL INFO (?P<op>\w+): opCount (?P<oc>[0-9a-f]+) sendbuff 0x[0-9a-f]+ recvbuff 0x[0-9a-f]+ "
    r"count (?P<count>\d+) datatype (?P<dt>\d+) op (?P<redop>\d+) root (?P<root>\d+) "
    r"comm (?P<comm>0x[0-9a-f]+) \[nranks=(?P<nranks>\d+)\] stream 0x[0-9a-f]+$"
)


def _small(out: Path, fault: str, culprit: int = 5, **kw: Any) -> dict[str, Any]:
    args: dict[str, Any] = {"ranks": 8, "hosts": 2, "ops": 50, "seed": 3, "culprit": culprit}
    args.update(kw)
    return generate(out, fault=fault, **args)


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "README.md"
    }


def _world_colls(log: Path) -> list[re.Match[str]]:
    """Return the COLL lines of the world communicator (the widest ``[nranks=N]``)."""
    colls = [m for line in log.read_text().splitlines() if (m := COLL.search(line))]
    widest = max(int(m["nranks"]) for m in colls)
    return [m for m in colls if int(m["nranks"]) == widest]


def _log_of(out: Path, rank: int) -> Path:
    entry = json.loads((out / "manifest.json").read_text())["ranks"][str(rank)]
    return out / "nccl" / f"{entry['host']}.{entry['pid']}.log"


def test_same_seed_gives_identical_bytes(tmp_path: Path) -> None:
    kw = {"comms": 3, "launcher": True, "stacks": True}
    _small(tmp_path / "a", "collective-mismatch", **kw)
    _small(tmp_path / "b", "collective-mismatch", **kw)
    _small(tmp_path / "c", "collective-mismatch", seed=4, **kw)
    assert _tree(tmp_path / "a") == _tree(tmp_path / "b")
    assert _tree(tmp_path / "a") != _tree(tmp_path / "c")


@pytest.mark.parametrize("version", ["2.21.5", "2.20.5", "2.19.3", "2.18.3", "2.18.1", "2.4.8"])
def test_every_nccl_line_has_the_documented_prefix(tmp_path: Path, version: str) -> None:
    comms = 1 if version == "2.4.8" else 2
    _small(tmp_path, "process-died", nccl_version=version, comms=comms)
    for log in sorted((tmp_path / "nccl").iterdir()):
        host, pid = log.stem.split(".")
        lines = log.read_text().split("\n")
        assert lines[-1] == ""
        for no, line in enumerate(lines[:-1]):
            if line == "":
                # NCCL starts every WARN with a newline: a blank line, then the WARN line.
                assert WARN.match(lines[no + 1]), (log.name, no)
                continue
            m = INFO.match(line) or WARN.match(line)
            assert m, (log.name, line)
            assert line.startswith(f"{host}:{pid}:"), (log.name, line)


def test_version_specific_lines(tmp_path: Path) -> None:
    _small(tmp_path / "new", "healthy", nccl_version="2.21.5")
    _small(tmp_path / "mid", "healthy", nccl_version="2.19.3")
    _small(tmp_path / "old", "healthy", nccl_version="2.4.8")
    new = _log_of(tmp_path / "new", 0).read_text()
    mid = _log_of(tmp_path / "mid", 0).read_text()
    old = _log_of(tmp_path / "old", 0).read_text()
    assert "NCCL INFO NCCL version 2.21.5+cuda12.4\n" in new
    assert re.search(
        r"NCCL INFO ncclCommInitRank comm 0x\w+ rank 0 nranks 8 .* - Init START\n", new
    )
    assert re.search(r"NCCL INFO Channel 00/32 :    0   1   2   3   4   5   6   7\n", new)
    rank3 = _log_of(tmp_path / "new", 3).read_text()
    assert re.search(
        r"NCCL INFO Channel 00/0 : 3\[3\] -> 4\[0\] \[send\] via NET/IB/3/GDRDMA\n", rank3
    )
    rank4 = _log_of(tmp_path / "new", 4).read_text()
    assert "NCCL INFO Channel 00/0 : 3[3] -> 4[0] [receive] via NET/IB/0/GDRDMA\n" in rank4
    assert re.search(
        r"NCCL INFO comm 0x\w+ rank 0 nRanks 8 nNodes 2 localRanks 4 localRank 0 MNNVL 0\n", new
    )
    assert re.search(r"NCCL INFO comm 0x\w+ rank 0 nranks 8 .* commId 0x\w+ - Init START\n", mid)
    assert "ncclCommInitRank" not in mid and "nRanks 8 nNodes" not in mid
    assert "NCCL INFO Bootstrap : Using [0]eth0:10.42.0.11<0>\n" in old
    assert re.search(r"NCCL INFO Ring 00 : 0\[0\] -> 1\[1\] via P2P/IPC\n", old)
    assert re.search(
        r"NCCL INFO comm 0x\w+ rank 0 nranks 8 cudaDev 0 nvmlDev 0 - Init COMPLETE\n", old
    )
    assert "Init START" not in old and "Channel 00/" not in old


def test_opcount_is_hex_and_consecutive_per_communicator(tmp_path: Path) -> None:
    _small(tmp_path, "healthy", comms=3, ops=400)
    for log in sorted((tmp_path / "nccl").iterdir()):
        by_comm: dict[str, list[int]] = {}
        for line in log.read_text().splitlines():
            if m := COLL.search(line):
                by_comm.setdefault(m["comm"], []).append(int(m["oc"], 16))
        assert len(by_comm) == 3
        for counts in by_comm.values():
            assert counts == list(range(len(counts)))
        assert max(len(c) for c in by_comm.values()) == 400


def test_missing_collective_culprit_stops_one_op_early(tmp_path: Path) -> None:
    truth = _small(tmp_path, "missing-collective", comms=2)
    assert truth["kind"] == "missing-collective"
    assert truth["culprit_ranks"] == [5] and truth["culprit_hosts"] == ["gpu-node002"]
    last = {r: int(_world_colls(_log_of(tmp_path, r))[-1]["oc"], 16) for r in range(8)}
    assert last[5] == 48
    assert all(last[r] == 49 for r in range(8) if r != 5)
    assert truth["hang"] == {"op": "AllReduce", "opCount": "31", "seq": 50}


@pytest.mark.parametrize(
    ("fault", "field", "culprit_value", "peer_value"),
    [("collective-mismatch", "op", "AllGather", "AllReduce"), ("size-mismatch", "count", "3", "2")],
)
def test_mismatch_differs_at_the_same_opcount(
    tmp_path: Path, fault: str, field: str, culprit_value: str, peer_value: str
) -> None:
    truth = _small(tmp_path, fault, culprit=3)
    assert truth["kind"] == "collective-mismatch"
    for rank in range(8):
        colls = _world_colls(_log_of(tmp_path, rank))
        assert [m["oc"] for m in colls] == [f"{k:x}" for k in range(50)]
        assert colls[-1][field] == (culprit_value if rank == 3 else peer_value)
        assert {m["op"] for m in colls[:-1]} == {"AllReduce"}


def test_socket_fallback_host_uses_sockets(tmp_path: Path) -> None:
    truth = _small(tmp_path, "socket-fallback", culprit=6)
    assert truth["kind"] == "transport-degraded"
    assert truth["culprit_hosts"] == ["gpu-node002"] and truth["culprit_ranks"] == [4, 5, 6, 7]
    for rank in range(8):
        text = _log_of(tmp_path, rank).read_text()
        nets = set(re.findall(r"\] via (NET/[\w/]+)\n", text))
        if rank >= 4:
            assert "NCCL INFO Using network Socket\n" in text and nets == {"NET/Socket/0"}
        else:
            assert "NCCL INFO Using network IB\n" in text
            assert nets == {f"NET/IB/{rank}/GDRDMA"}


def test_process_died_culprit_log_just_ends(tmp_path: Path) -> None:
    truth = _small(tmp_path, "process-died", culprit=2, launcher=True, stacks=True)
    assert truth["kind"] == "process-died"
    assert (
        _log_of(tmp_path, 2)
        .read_text()
        .splitlines()[-1]
        .split(" NCCL INFO ")[1]
        .startswith("AllReduce: opCount 31 ")
    )
    warned = [
        r
        for r in range(8)
        if "NCCL WARN NET/IB : Got completion from peer 10.42.0.11<"
        in _log_of(tmp_path, r).read_text()
    ]
    assert warned and all(r >= 4 for r in warned)
    assert not (tmp_path / "stacks" / "rank2.0.txt").exists()
    launcher = (tmp_path / "launcher.log").read_text()
    pid = json.loads((tmp_path / "manifest.json").read_text())["ranks"]["2"]["pid"]
    assert truth["culprit_pids"] == [pid]
    assert f"  exitcode  : -9 (pid: {pid})  (SIGKILL)\n" in launcher
    assert "ncclRemoteError: A call failed possibly due to a network error" in launcher


def test_dataloader_stall_launcher_and_stacks(tmp_path: Path) -> None:
    truth = _small(tmp_path, "dataloader-stall", launcher=True, stacks=True)
    assert truth["kind"] == "non-collective-stall"
    launcher = (tmp_path / "launcher.log").read_text()
    timeouts = re.findall(
        r"^\[rank(\d+)\]:\[E\d{3,4} [\d:.]{18} ProcessGroupNCCL\.cpp:607\] \[Rank \1\] "
        r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=50, OpType=ALLREDUCE, "
        r"NumelIn=2, NumelOut=2, Timeout\(ms\)=600000\) ran for 600\d{3} milliseconds before "
        r"timing out\.$",
        launcher,
        re.M,
    )
    assert sorted(map(int, timeouts)) == [0, 1, 2, 3, 4, 6, 7]
    assert launcher.count("last enqueued NCCL work: 50, last completed NCCL work: 49.\n") == 7
    assert (
        launcher.count("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n") == 2
    )
    assert re.search(
        r"^  rank      : 5 \(local_rank: 1\)\n  exitcode  : -15 \(pid: \d+\)  \(SIGTERM\)$",
        launcher,
        re.M,
    )
    culprit = (tmp_path / "stacks" / "rank5.0.txt").read_text()
    main_thread = culprit.split('"MainThread"\n')[1].split("Thread ")[0].splitlines()
    assert (
        main_thread[7]
        == "    _MultiProcessingDataLoaderIter._next_data (torch/utils/data/dataloader.py:1505)"
    )
    assert main_thread[9] == "    train (train.py:173)"
    peer = (tmp_path / "stacks" / "rank0.0.txt").read_text()
    assert '"MainThread"\n    all_reduce (torch/distributed/distributed_c10d.py:2501)\n' in peer
    assert peer.startswith("Process ") and peer.endswith(")\n") and "\n\n" in peer
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["schema"] == "logsleuth.bundle/1"
    assert manifest["ranks"]["5"] == {
        "host": "gpu-node002",
        "local_rank": 1,
        "pid": truth["culprit_pids"][0],
    }


def test_bad_arguments_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="cannot be spread evenly"):
        generate(tmp_path, ranks=10, hosts=3, fault="healthy")
    with pytest.raises(ValueError, match="supported are"):
        generate(tmp_path, nccl_version="2.12.12")
    with pytest.raises(SystemExit) as exc:
        main(["--out", str(tmp_path), "--culprit", "99"])
    assert exc.value.code == 2
    assert "culprit rank 99 is outside 0..15" in capsys.readouterr().err
    assert set(FAULTS) >= {"healthy", "missing-collective", "process-died"}


def _documented_commands(readme: Path) -> list[list[str]]:
    """Return the ``python benchmarks/synth.py ...`` commands a README documents."""
    return [
        shlex.split(line.strip())[2:]
        for line in readme.read_text().splitlines()
        if line.strip().startswith("python benchmarks/synth.py ")
    ]


@pytest.mark.parametrize("readme", ["demo/README.md", "synthetic/README.md"])
def test_fixtures_are_what_the_documented_commands_generate(
    tmp_path: Path, readme: str, capsys: pytest.CaptureFixture[str]
) -> None:
    commands = _documented_commands(FIXTURES / readme)
    assert commands
    for argv in commands:
        out = argv[argv.index("--out") + 1]
        fresh = tmp_path / out
        argv[argv.index("--out") + 1] = str(fresh)
        assert main(argv) == 0
        assert _tree(fresh) == _tree(ROOT / out), out
    capsys.readouterr()


def test_demo_is_small_and_tells_the_story() -> None:
    demo = FIXTURES / "demo"
    assert sum(p.stat().st_size for p in demo.rglob("*") if p.is_file()) < 2_000_000
    manifest = json.loads((demo / "manifest.json").read_text())
    assert len(manifest["ranks"]) == 16
    assert manifest["ranks"]["11"]["host"] == "gpu-node002"
    assert len(list((demo / "stacks").iterdir())) == 16
    assert (demo / "launcher.log").read_text().count(
        "Watchdog caught collective operation timeout"
    ) == 15


def test_every_generated_nccl_line_is_recognized(tmp_path: Path) -> None:
    nccl = pytest.importorskip("logsleuth.parse.nccl")
    base = pytest.importorskip("logsleuth.parse.base")
    for version in ("2.21.5", "2.18.3", "2.4.8"):
        out = tmp_path / version
        comms = 1 if version == "2.4.8" else 3
        _small(out, "process-died", nccl_version=version, comms=comms)
        _small(out / "s", "socket-fallback", nccl_version=version, comms=comms)
        _small(out / "e", "early-exit", nccl_version=version, comms=comms)
        _small(out / "i", "init-never", nccl_version=version, comms=comms)
        _small(out / "c", "concurrent-use", nccl_version=version, comms=comms)
        for log in sorted(out.rglob("*.log")):
            reader = nccl.NcclReader(log.name)
            sink = base.Sink()
            numbers = []
            for no, text in enumerate(log.read_text().splitlines(), 1):
                if not text:
                    continue
                numbers.append(no)
                assert reader.feed(base.Line(no, text, text), sink), (version, log.name, text)
            reader.close(sink)
            missed = sorted(set(numbers) - sink.recognized)
            assert not missed, (
                version,
                log.name,
                [log.read_text().splitlines()[n - 1] for n in missed[:5]],
            )


def test_exception_culprit_raises_and_its_host_is_stopped(tmp_path: Path) -> None:
    truth = _small(tmp_path, "exception", launcher=True, stacks=True)
    assert truth["kind"] == "process-died" and truth["culprit_ranks"] == [5]
    launcher = (tmp_path / "launcher.log").read_text()
    assert "[rank5]: Traceback (most recent call last):\n" in launcher
    assert re.search(
        r"^\[rank5\]: ValueError: non-finite loss \(nan\) at step \d+$", launcher, re.M
    )
    pid = truth["culprit_pids"][0]
    assert f"  exitcode  : 1 (pid: {pid}) \n  error_file: <N/A>\n" in launcher
    assert f"failed (exitcode: 1) local_rank: 1 (pid: {pid})" in launcher
    # The culprit's siblings were stopped by torchrun long before any watchdog fired.
    timeouts = {
        int(r)
        for r in re.findall(
            r"^\[rank(\d+)\]:\[E\S+ \S+ ProcessGroupNCCL\.cpp:607\]", launcher, re.M
        )
    }
    assert timeouts == {0, 1, 2, 3}
    # It never enqueued the collective the others hang in, and its log just ends.
    last = _log_of(tmp_path, 5).read_text().splitlines()[-1]
    assert last.split(" NCCL INFO ")[1].startswith("AllReduce: opCount 30 ")
    assert sorted(p.name for p in (tmp_path / "stacks").iterdir()) == [
        f"rank{r}.0.txt" for r in range(4)
    ]


def test_early_exit_culprit_destroys_its_comm_and_is_not_listed(tmp_path: Path) -> None:
    truth = _small(tmp_path, "early-exit", launcher=True, stacks=True)
    assert truth["kind"] == "process-died" and truth["culprit_ranks"] == [5]
    lines = _log_of(tmp_path, 5).read_text().splitlines()
    assert lines[-1].endswith(" - Destroy COMPLETE")
    assert lines[-2].split(" NCCL INFO ")[1].startswith("AllReduce: opCount 30 ")
    launcher = (tmp_path / "launcher.log").read_text()
    assert "  rank      : 5 (local_rank: 1)" not in launcher
    assert launcher.count("  rank      : ") == 7
    assert not (tmp_path / "stacks" / "rank5.0.txt").exists()


def test_init_never_culprit_writes_no_nccl_log(tmp_path: Path) -> None:
    truth = _small(tmp_path, "init-never", launcher=True, stacks=True)
    assert truth["kind"] == "init-stall" and truth["culprit_ranks"] == [5]
    assert not _log_of(tmp_path, 5).exists()
    for rank in (0, 4, 7):
        last = _log_of(tmp_path, rank).read_text().splitlines()[-1]
        assert " NCCL INFO ncclCommInitRank comm 0x" in last
        assert f" rank {rank} nranks 8 cudaDev {rank % 4} " in last
        assert last.endswith(" - Init START")
    culprit = (tmp_path / "stacks" / "rank5.0.txt").read_text()
    assert '"MainThread"\n    prepare_data (train.py:41)\n    main (train.py:202)\n' in culprit
    peer = (tmp_path / "stacks" / "rank0.0.txt").read_text()
    assert "    init_process_group (torch/distributed/distributed_c10d.py:1899)\n" in peer
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["stalled_at"] is not None
    assert "Watchdog caught" not in (tmp_path / "launcher.log").read_text()


def test_concurrent_use_two_threads_share_the_world_comm(tmp_path: Path) -> None:
    truth = _small(tmp_path, "concurrent-use", culprit=2)
    assert truth["kind"] == "concurrent-use"
    for rank in (0, 2):
        text = _log_of(tmp_path, rank).read_text()
        tids = {
            int(m[1]) for m in re.finditer(r"^\S+:\d+:(\d+) \[\d\] NCCL INFO AllReduce", text, re.M)
        }
        assert len(tids) == 2
    culprit = _world_colls(_log_of(tmp_path, 2))[-1]
    peer = _world_colls(_log_of(tmp_path, 0))[-1]
    assert culprit["oc"] == peer["oc"] == "31"
    assert (peer["count"], int(culprit["count"]) > 1000) == ("2", True)
