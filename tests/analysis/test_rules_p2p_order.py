"""LS114 p2p.cross_communicator_order: one process's sends and receives over several
communicators taking turns, and the log ends there (one side's view of an ordering deadlock)."""

from __future__ import annotations

from pathlib import Path

from logsleuth.api import analyze

ROOT = Path(__file__).resolve().parents[2]
CORPUS_240 = (
    ROOT / "fixtures" / "real" / "corpus" / "240-send-recv-two-comms-opposite-directions-coll-log"
)

_LINE = (
    "gpu1:4100:4188 [1] NCCL INFO {op}: opCount {count:x} sendbuff 0x7f0 recvbuff 0x7f1 "
    "count 1024 datatype 7 op 0 root {peer} comm {comm} [nranks=2] stream {stream}\n"
)
_A = ("0x7f5128002e10", "0x55f1de727ae0")
_B = ("0x7f516c002e10", "0x55f1de7279a0")


def _log(ops: list[tuple[str, tuple[str, str]]]) -> str:
    text = ""
    for number, (op, (comm, stream)) in enumerate(ops):
        peer = 1 if comm == _A[0] else 0
        text += _LINE.format(op=op, count=number, peer=peer, comm=comm, stream=stream)
    return text


def _verdict(tmp_path: Path, text: str) -> tuple[str, str | None, set[str]]:
    path = tmp_path / "rank1.log"
    path.write_text(text, encoding="utf-8")
    d = analyze([str(path)]).diagnosis
    return d.verdict.kind, d.verdict.code, {f.code for f in d.findings}


def test_sends_and_receives_over_two_communicators_that_stop_lead(tmp_path: Path) -> None:
    ops = [("Send", _A), ("Recv", _B), ("Send", _A), ("Recv", _B), ("Send", _A), ("Recv", _B)]
    kind, code, _ = _verdict(tmp_path, _log(ops))
    assert (kind, code) == ("concurrent-use", "LS114")


def test_the_reporters_three_excerpts_of_one_process_are_read_together() -> None:
    d = analyze([str(CORPUS_240)]).diagnosis
    assert (d.verdict.kind, d.verdict.code) == ("concurrent-use", "LS114")
    assert d.verdict.culprit_pids == (199574,)
    lead = d.findings[0]
    assert "0x7f5128002e10" in lead.detail and "0x7f516c002e10" in lead.detail
    assert lead.evidence and lead.evidence[-1].source.endswith("rank1_fragment_c_tail.log")


def test_one_communicator_or_a_torn_down_one_is_quiet(tmp_path: Path) -> None:
    one = [("Send", _A), ("Recv", _A)] * 3
    assert "LS114" not in _verdict(tmp_path, _log(one))[2]
    # Each communicator used in one run of operations: nothing took turns.
    runs = [("Send", _A)] * 3 + [("Recv", _B)] * 3
    assert "LS114" not in _verdict(tmp_path, _log(runs))[2]
    # The process destroyed its communicators: it did not hang in them.
    turns = [("Send", _A), ("Recv", _B)] * 3
    ends = "".join(
        f"gpu1:4100:4100 [1] NCCL INFO comm {comm} rank {rank} nranks 2 cudaDev 1 busId 2000 "
        "- Destroy COMPLETE\n"
        for rank, (comm, _) in enumerate((_A, _B))
    )
    kind, _, codes = _verdict(tmp_path, _log(turns) + ends)
    assert "LS114" not in codes and kind != "concurrent-use"
