"""Point-to-point matching (analysis/p2p.py) and LS125: the last stuck send/recv and whose it is.

The must-fire cases are the real 4-rank gloo bundles under fixtures/real/live/ captured with
``logsleuth repro run NAME --live`` (stacks taken with ``py-spy dump --locals``, so the
peer of each blocked send/recv is known); each names exactly its culprit stage and kind.
The small dumps written here are the must-not-fire cases and the edge cases.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from logsleuth.api import analyze
from logsleuth.model.diagnosis import Diagnosis
from logsleuth.report.json import build_json

LIVE = Path(__file__).resolve().parents[2] / "fixtures" / "real" / "live"


def _diagnose(*paths: Path | str) -> Diagnosis:
    return analyze([str(p) for p in paths]).diagnosis


@pytest.mark.parametrize(
    ("bundle", "kind", "culprit", "waiter", "fragment"),
    [
        # rank 1 receives from rank 2 instead of rank 0: 1 and 2 both recv from each other,
        # rank 0 waits in its send to 1
        (
            "pipeline-wrong-peer",
            "collective-mismatch",
            1,
            0,
            "rank 1 waits to receive from rank 2 while rank 0 waits to send to rank 1",
        ),
        # rank 1 drops its last send to rank 2 and waits in the final barrier
        (
            "pipeline-drop-send",
            "missing-collective",
            1,
            2,
            "rank 1 never posted that send: it is in barrier at finish",
        ),
        # rank 1 sends to rank 3, skipping rank 2, which waits to receive from it
        (
            "ring-skip-hop",
            "collective-mismatch",
            1,
            2,
            "rank 1 waits to send to rank 3 while rank 2 waits to receive from rank 1",
        ),
    ],
)
def test_pipeline_bundle_names_exactly_the_culprit_stage(
    bundle: str, kind: str, culprit: int, waiter: int, fragment: str
) -> None:
    d = _diagnose(LIVE / bundle)
    assert (d.verdict.kind, d.verdict.culprit_ranks) == (kind, (culprit,)), [
        f"{f.code} {f.kind} {f.ranks} {f.title}" for f in d.findings[:4]
    ]
    top = d.findings[0]
    assert top.code == "LS125"
    assert fragment in top.title + " " + top.detail
    # No waiting stage is blamed at the culprit's level.
    critical = [f for f in d.findings if f.severity == "critical"]
    assert all(set(f.ranks) <= {culprit} for f in critical), [(f.code, f.ranks) for f in critical]
    # The wait-for graph ends at the culprit, with a p2p edge from the stage that waits on it.
    assert d.waitfor is not None
    assert d.waitfor.culprits == (f"rank {culprit}",)
    edge = next(e for e in d.waitfor.edges if e.waiter == f"rank {waiter}")
    assert (edge.waits_for, edge.source) == (f"rank {culprit}", "p2p")
    assert d.p2p is not None and d.p2p.culprits == (culprit,)


def test_drop_send_wait_chain_runs_from_the_last_stage_to_the_culprit() -> None:
    d = _diagnose(LIVE / "pipeline-drop-send")
    assert "Wait chain: rank 3 -> rank 2 -> rank 1." in d.findings[0].detail
    assert d.waitfor is not None
    # rank 1 (in the barrier) does not "wait for" the stages that wait on it
    assert not [e for e in d.waitfor.edges if e.waiter == "rank 1"]


def test_p2p_json_names_the_pair_and_the_ops_on_both_sides() -> None:
    data = build_json(_diagnose(LIVE / "pipeline-wrong-peer"))
    p2p = data["p2p"]
    assert isinstance(p2p, dict)
    assert p2p["culprits"] == [1] and p2p["kind"] == "collective-mismatch"
    assert p2p["sources"] == ["stacks"]
    pending = {(o["rank"], o["op"], o["peer"]) for o in p2p["pending"]}
    assert pending == {(0, "send", 1), (1, "recv", 2), (2, "recv", 1), (3, "recv", 2)}
    deadlock = next(s for s in p2p["stuck"] if s["waiter"] == 1)
    assert deadlock["kind"] == "deadlock" and deadlock["peer"] == 2
    assert deadlock["peer_op"]["op"] == "recv" and deadlock["peer_op"]["peer"] == 1
    assert deadlock["op"]["where"] == "recv at main (pipeline_wrong_peer.py:30)"
    assert deadlock["op"]["evidence"]["source"] == "stacks/rank1.2.txt"
    json.dumps(data)  # plain JSON values only


def test_bundles_without_point_to_point_ops_have_no_p2p_view() -> None:
    d = _diagnose(LIVE / "skip-collective")
    assert d.p2p is None
    assert build_json(d)["p2p"] is None
    assert all(f.code != "LS125" for f in d.findings)


_STACK = """Process {pid}: python train.py
Python v3.11.7 (/usr/bin/python3.11)

Thread {pid} (idle): "MainThread"
    {call} (torch/distributed/distributed_c10d.py:2799)
        Arguments:
            tensor: <Tensor at 0x7f6987f081e0>
            {arg}: {peer}
            group: None
            tag: 0
    main (train.py:{line})
"""


def _write_stack(directory: Path, rank: int, call: str, peer: int, line: int) -> None:
    arg = "dst" if call == "send" else "src"
    text = _STACK.format(pid=100 + rank, call=call, arg=arg, peer=peer, line=line)
    for snapshot in (1, 2):
        (directory / f"rank{rank}.{snapshot}.txt").write_text(text, encoding="utf-8")


def test_a_matched_send_and_recv_is_not_a_culprit(tmp_path: Path) -> None:
    # rank 0 sends to 1 and rank 1 receives from 0: a transfer caught in flight
    _write_stack(tmp_path, 0, "send", 1, 10)
    _write_stack(tmp_path, 1, "recv", 0, 20)
    d = _diagnose(tmp_path)
    assert d.p2p is not None
    assert d.p2p.culprits == () and d.p2p.stuck == ()
    assert all(f.code != "LS125" for f in d.findings)


def test_two_ranks_receiving_from_each_other_are_a_deadlock(tmp_path: Path) -> None:
    _write_stack(tmp_path, 0, "recv", 1, 10)
    _write_stack(tmp_path, 1, "recv", 0, 20)
    d = _diagnose(tmp_path)
    assert d.p2p is not None
    assert d.p2p.kind == "collective-mismatch"
    assert d.p2p.culprits == (0, 1)
    assert {s.kind for s in d.p2p.stuck} == {"deadlock"}
    assert d.verdict.kind == "collective-mismatch"
    assert "wait for each other" in d.verdict.summary


def test_a_proxy_dump_without_a_prefix_or_known_pid_is_set_aside(tmp_path: Path) -> None:
    # The dump names no rank: its ops cannot be placed, so they are not guessed at.
    (tmp_path / "out.log").write_text("ACTIVE OPS\n[0-3|28| Recv 4R/2]\n[X]\n", encoding="utf-8")
    d = _diagnose(tmp_path / "out.log")
    assert d.p2p is None


def test_of_two_wrong_peer_candidates_the_one_off_the_usual_hop_is_named(tmp_path: Path) -> None:
    # A ring of 4 where rank 2 sends to rank 0 (two hops on): rank 0 receives from its
    # neighbour 3 while rank 2 waits to send to it, but only rank 2 left the ring's hop.
    _write_stack(tmp_path, 0, "recv", 3, 10)
    _write_stack(tmp_path, 1, "send", 2, 10)
    _write_stack(tmp_path, 2, "send", 0, 11)
    _write_stack(tmp_path, 3, "recv", 2, 10)
    d = _diagnose(tmp_path)
    assert (d.verdict.kind, d.verdict.culprit_ranks) == ("collective-mismatch", (2,))
    assert d.verdict.summary == (
        "rank 2 waits to send to rank 0 while rank 3 waits to receive from rank 2: "
        "rank 2 named the wrong peer"
    )


def test_the_text_report_shows_the_frontier() -> None:
    from logsleuth.report.text import render_text

    text = render_text(_diagnose(LIVE / "pipeline-drop-send"), width=200)
    section = text.split("POINT-TO-POINT FRONTIER\n", 1)[1].split("\n\n", 1)[0]
    assert section.splitlines()[0] == "  waiting ends at rank 1 (missing-collective)"
    assert "rank 2 -> rank 1  rank 2 waits to receive from rank 1" in section
    assert "rank 3 -> rank 2  rank 3 waits to receive from rank 2" in section


def _fr_dump(rank: int, entries: list[tuple[str, int, int, str]]) -> str:
    """A flight-recorder JSON dump of P2P entries (op, peer, p2p_seq_id, state)."""
    arrow = {"send": "->", "recv": "<-"}
    return json.dumps(
        {
            "version": "2.10",
            "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
            "pg_status": {},
            "entries": [
                {
                    "record_id": n,
                    "pg_id": 0,
                    "process_group": ["0", "default_pg"],
                    "collective_seq_id": 0,
                    "p2p_seq_id": seq,
                    "op_id": n + 1,
                    "profiling_name": f"nccl:{op} {rank}{arrow[op]}{peer}",
                    "is_p2p": True,
                    "input_sizes": [[1024]],
                    "output_sizes": [[1024]],
                    "input_dtypes": ["Float"],
                    "output_dtypes": ["Float"],
                    "state": state,
                    "retired": state == "completed",
                    "timeout_ms": 600000,
                    "frames": [{"name": "forward_step", "filename": "pp.py", "line": 40}],
                }
                for n, (op, peer, seq, state) in enumerate(entries)
            ],
        }
    )


def test_flight_recorder_p2p_entries_are_matched_with_their_history(tmp_path: Path) -> None:
    # rank 1 posted 4 recvs from rank 0 (the last one pending); rank 0 sent only 3
    fr = tmp_path / "fr"
    fr.mkdir()
    done = [("send", 1, seq, "completed") for seq in (1, 2, 3)]
    (fr / "rank_0.json").write_text(_fr_dump(0, done), encoding="utf-8")
    recvs = [("recv", 0, seq, "completed") for seq in (1, 2, 3)] + [("recv", 0, 4, "started")]
    (fr / "rank_1.json").write_text(_fr_dump(1, recvs), encoding="utf-8")
    d = _diagnose(fr)
    assert d.p2p is not None and d.p2p.sources == ("flight-recorder",)
    assert (d.p2p.kind, d.p2p.culprits) == ("missing-collective", (0,))
    stuck = d.p2p.stuck[0]
    assert (stuck.waiter, stuck.peer, stuck.op.seq) == (1, 0, 4)
    assert (stuck.sent, stuck.received) == (3, 4)
    assert "rank 1 waits to receive from rank 0 at p2p_seq_id 4" in stuck.summary
    assert "(rank 0 posted 3 send(s) to rank 1, which posted 4 recv(s) from it)" in stuck.summary


def test_the_html_report_shows_the_frontier() -> None:
    from logsleuth.report.html import render_html

    page = render_html(_diagnose(LIVE / "ring-skip-hop"))
    section = page.split('<section id="p2p">', 1)[1].split("</section>", 1)[0]
    assert "Waiting ends at rank 1" in section
    assert "<td>rank 2 \u2192 rank 1</td><td>peer-busy</td>" in section
    assert "rank 3 never posted that recv" in section
    assert '<section id="p2p">' not in render_html(_diagnose(LIVE / "skip-collective"))


def test_a_proxy_op_to_the_rank_itself_is_not_a_wait(tmp_path: Path) -> None:
    (tmp_path / "job.log").write_text(
        "[rank3]:ACTIVE OPS\n[rank3]:[0-1|9| Send 3S/0]\n[rank3]:[X]\n", encoding="utf-8"
    )
    d = _diagnose(tmp_path / "job.log")
    assert d.p2p is not None
    assert (d.p2p.pending, d.p2p.stuck, d.p2p.culprits) == ((), (), ())
