"""Flight-recorder dumps written by torch 2.13 (gloo): parsed safely, matched across ranks."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from logsleuth.api import analyze
from logsleuth.errors import InputError
from logsleuth.parse.flight_recorder import load_fr_pickle, parse_fr_dump

ROOT = Path(__file__).resolve().parents[2]
FR = ROOT / "fixtures" / "real" / "fr"


def test_real_dump_fields() -> None:
    dump = parse_fr_dump(
        load_fr_pickle((FR / "type" / "rank_1").read_bytes(), "type/rank_1"), "type/rank_1"
    )
    assert dump.rank == 1
    assert dump.version == "2.10"
    assert [g.ranks for g in dump.groups] == [(0, 1, 2)]
    assert [(s.last_enqueued, s.last_completed) for s in dump.status] == [(3, 2)]
    assert [(e.collective_seq_id, e.profiling_name, e.op) for e in dump.entries] == [
        (1, "gloo:all_reduce", "all_reduce"),
        (2, "gloo:all_reduce", "all_reduce"),
        (3, "gloo:broadcast", "broadcast"),
    ]
    assert dump.entries[2].input_sizes == ((4,),)
    assert dump.entries[2].input_dtypes == ("Float",)
    assert "(fr_job3.py:11)" in dump.entries[2].describe()


def test_skipped_collective_names_the_rank_that_skipped() -> None:
    d = analyze([str(FR / "skip")]).diagnosis
    assert d.verdict.kind == "missing-collective"
    assert d.verdict.culprit_ranks == (1,)
    assert "all_reduce #3" in d.verdict.summary
    first = d.findings[0].evidence[0]
    assert (first.source, first.line) == ("rank_1", 2)


def test_type_mismatch_names_the_odd_rank_with_both_call_sites() -> None:
    d = analyze([str(FR / "type")]).diagnosis
    assert d.verdict.kind == "collective-mismatch"
    assert d.verdict.culprit_ranks == (1,)
    finding = d.findings[0]
    assert finding.code == "LS106"
    assert "gloo:broadcast" in finding.title and "gloo:all_reduce" in finding.title
    assert "fr_job3.py:11" in finding.detail and "fr_job3.py:13" in finding.detail


def test_without_every_dump_the_absent_rank_is_not_blamed(tmp_path: Path) -> None:
    for rank in (0, 2):
        shutil.copy(FR / "type" / f"rank_{rank}", tmp_path / f"rank_{rank}")
    d = analyze([str(tmp_path)]).diagnosis
    assert not [f for f in d.findings if f.code == "LS106"]
    # Two agreeing dumps prove no normal end either: not healthy, and nobody is blamed.
    assert d.verdict.kind == "inconclusive" and d.verdict.culprit_ranks == ()


def test_two_sides_of_equal_size_lower_the_confidence(tmp_path: Path) -> None:
    for rank in (0, 1):
        shutil.copy(FR / "type" / f"rank_{rank}", tmp_path / f"rank_{rank}")
    (finding,) = [f for f in analyze([str(tmp_path)]).diagnosis.findings if f.code == "LS106"]
    assert finding.confidence < 0.5
    assert "uncertain" in finding.detail
    assert "No dump from rank(s) 2" in finding.detail


def test_json_variant(tmp_path: Path) -> None:
    for rank in (0, 1, 2):
        data = load_fr_pickle((FR / "type" / f"rank_{rank}").read_bytes(), "x")
        (tmp_path / f"rank_{rank}.json").write_text(json.dumps(data))
    d = analyze([str(tmp_path)]).diagnosis
    assert d.verdict.kind == "collective-mismatch"
    assert d.verdict.culprit_ranks == (1,)
    assert {i.kind for i in d.inputs} == {"flight-recorder"}


def _split_group_dump(rank: int, members: list[int], collectives: int) -> dict[str, object]:
    """A real rank-0 dump rewritten as a member of split group "1" (``members``)."""
    data = load_fr_pickle((FR / "skip" / "rank_0").read_bytes(), "x")
    data["pg_config"] = {"1": {"name": "1", "desc": "split", "ranks": str(members)}}
    data["entries"] = [
        {**e, "process_group": ("1", "split")} for e in data["entries"][:collectives]
    ]
    return data


def test_split_groups_that_reuse_a_name_are_not_compared(tmp_path: Path) -> None:
    """Ranks 0-1 and 2-3 each form a group named "1"; 2-3 ran fewer collectives in theirs."""
    for rank, members, count in ((0, [0, 1], 3), (1, [0, 1], 3), (2, [2, 3], 2), (3, [2, 3], 2)):
        dump = _split_group_dump(rank, members, count)
        (tmp_path / f"rank_{rank}.json").write_text(json.dumps(dump))
    d = analyze([str(tmp_path)]).diagnosis
    assert not [f for f in d.findings if f.code == "LS106"]
    # Within one of those groups, a rank that is behind is still found.
    (tmp_path / "rank_3.json").write_text(json.dumps(_split_group_dump(3, [2, 3], 1)))
    (tmp_path / "rank_2.json").write_text(json.dumps(_split_group_dump(2, [2, 3], 2)))
    (finding,) = [f for f in analyze([str(tmp_path)]).diagnosis.findings if f.code == "LS106"]
    assert finding.ranks == (3,) and "process group 1" in finding.title


class _Evil:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, ("echo pwned > /dev/null",))


def test_a_pickle_that_would_run_code_is_refused(tmp_path: Path) -> None:
    payload = pickle.dumps({"version": "2.10", "entries": [_Evil()], "pg_config": {}})
    with pytest.raises(InputError, match=r"^evil: not a flight-recorder dump \(refusing to load"):
        load_fr_pickle(payload, "evil")
    path = tmp_path / "rank_0"
    path.write_bytes(payload)
    result = subprocess.run(
        [sys.executable, "-m", "logsleuth", "analyze", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert "refusing to load" in result.stderr


def _kill_tree(root: int) -> None:
    """Kill a process and all its descendants (torchrun starts each rank in its own session)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    todo, found = [root], []
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, ()))
    for pid in found:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
@pytest.mark.parametrize(
    ("mode", "kind"), [("skip", "missing-collective"), ("type", "collective-mismatch")]
)
def test_dumps_from_a_real_gloo_job(tmp_path: Path, mode: str, kind: str) -> None:
    """Run the capture script as a real 3-rank torch job and analyse what it writes."""
    script = (FR / "capture_fr.py").read_text().replace("/tmp/fr/", f"{tmp_path}/")
    (tmp_path / "job.py").write_text(script)
    env = {**os.environ, "TORCH_FR_BUFFER_SIZE": "100", "OMP_NUM_THREADS": "1"}
    with socket.socket() as probe:  # a free port: other jobs may hold torchrun's default
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "3",
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(port),
        str(tmp_path / "job.py"),
        mode,
    ]
    job = subprocess.Popen(
        command,
        env=env,
        cwd=tmp_path,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        _, err = job.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        _kill_tree(job.pid)
        job.wait()
        pytest.fail("the torch job did not finish in 240 s")
    assert job.returncode == 0, err.decode(errors="replace")[-2000:]
    dumps = sorted(tmp_path.glob(f"{mode}_rank_*"))
    assert len(dumps) == 3
    d = analyze([str(p) for p in dumps]).diagnosis
    assert d.verdict.kind == kind
    assert d.verdict.culprit_ranks == (1,)


def test_the_failed_collectives_call_site_is_quoted(tmp_path: Path) -> None:
    # torch 2.6+: the watchdog prints the flight recorder's stack of the failed collective.
    log = tmp_path / "r1.log"
    log.write_text(
        "[rank1]:[E1125 08:00:01.000000000 701 ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID "
        "0(default_pg) Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12, "
        "OpType=ALLGATHER, NumelIn=1, NumelOut=2, Timeout(ms)=600000) ran for 600083 "
        "milliseconds before timing out.\n"
        "[rank1]:[E1125 08:00:01.000000000 701 ProcessGroupNCCL.cpp:2162] [PG ID 0 PG GUID "
        "0(default_pg) Rank 1] Stack trace of the failed collective: \n"
        "#0 all_gather_into_tensor from /usr/lib/python3/dist-packages/torch/distributed/"
        "distributed_c10d.py:3772\n"
        "#1 wrapper from /usr/lib/python3/dist-packages/torch/distributed/c10d_logger.py:81\n"
        "#2 gather_metrics from /workspace/eval.py:57\n"
        "#3 <module> from /workspace/eval.py:120\n"
    )
    lead = analyze([str(log)]).diagnosis.findings[0]
    assert "rank 1 enqueued all_gather_into_tensor at gather_metrics (/workspace/eval.py:57)" in (
        lead.detail
    )
    assert ("r1.log", 2) in {(e.source, e.line) for e in lead.evidence}
