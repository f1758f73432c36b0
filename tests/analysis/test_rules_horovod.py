"""LS121 horovod.stall: Horovod's stall inspector read across ranks."""

from __future__ import annotations

from pathlib import Path

from logsleuth.api import analyze

HEAD = (
    "[0]<stderr>:[2020-12-29 16:50:57.724380: W horovod/common/stall_inspector.cc:105] One or "
    "more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and "
    "are waiting for remainder of ranks for more than 60 seconds. This may indicate that "
    "different ranks are trying to submit different tensors or that only subset of ranks is "
    "submitting tensors, which will cause deadlock.\n"
)


def _ls121(tmp_path: Path, text: str) -> list[tuple[str, tuple[int, ...]]]:
    log = tmp_path / "horovod.log"
    log.write_text(text, encoding="utf-8")
    d = analyze([str(log)]).diagnosis
    return [(f.kind, f.ranks) for f in d.findings if f.code == "LS121"]


def test_one_rank_missing_what_the_others_submitted_is_the_culprit(tmp_path: Path) -> None:
    text = (
        HEAD + "[0]<stderr>:Missing ranks:\n[0]<stderr>:3: [allreduce.grad_0, allreduce.grad_1]\n"
    )
    assert _ls121(tmp_path, text) == [("missing-collective", (3,))]


def test_ranks_missing_each_others_tensors_run_different_collectives(tmp_path: Path) -> None:
    text = (
        HEAD
        + "[0]<stderr>:Missing ranks:\n"
        + "[0]<stderr>:0: [broadcast.bool.sz]\n"
        + "[0]<stderr>:1: [allreduce.c_d1.bias, allreduce.c_d1.weight ...]\n"
    )
    assert _ls121(tmp_path, text) == [("collective-mismatch", ())]


def test_stalled_ops_ready_on_rank_1_only_leave_rank_0_missing(tmp_path: Path) -> None:
    text = (
        "Stalled ops: \n"
        "model/HorovodAllgather_grads_concat_0 [ready ranks: 1], \n"
        "model/HorovodAllreduce_grads_AddN_58_0 [ready ranks: 1], \n"
    )
    assert _ls121(tmp_path, text) == [("missing-collective", (0,))]


def test_no_stall_report_no_finding(tmp_path: Path) -> None:
    text = "[0]<stderr>:Epoch 1/10\n[1]<stderr>:Epoch 1/10\n"
    assert _ls121(tmp_path, text) == []


def test_a_stall_report_cut_before_its_list_names_no_rank(tmp_path: Path) -> None:
    assert _ls121(tmp_path, HEAD) == [("missing-collective", ())]
