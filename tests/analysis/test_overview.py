"""The overview views: where each rank stopped, first errors, configuration, evidence context."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.synth import generate
from logsleuth.api import analyze
from logsleuth.model.diagnosis import Diagnosis
from logsleuth.report.common import overview_rows

NCCL = Path(__file__).resolve().parents[2] / "fixtures" / "real" / "nccl"


@pytest.fixture(scope="module")
def stalled(tmp_path_factory: pytest.TempPathFactory) -> Diagnosis:
    out = tmp_path_factory.mktemp("stalled")
    generate(out, ranks=16, hosts=2, ops=24, fault="missing-collective", culprit=9, launcher=True)
    return analyze([str(out)]).diagnosis


def test_progress_puts_the_laggard_in_a_group_of_its_own(stalled: Diagnosis) -> None:
    world = stalled.progress[0]
    assert (world.nranks, world.members, world.laggards) == (16, 16, "9")
    assert [(g.ranks, g.count, g.op_count, g.collective, g.behind) for g in world.groups] == [
        ("0-8,10-15", 15, 23, "AllReduce", 0),
        ("9", 1, 22, "AllReduce", 1),
    ]


def test_timeline_counts_one_message_from_many_ranks_once(stalled: Diagnosis) -> None:
    watchdog = [e for e in stalled.timeline if e.kind == "watchdog timeout"]
    assert len(watchdog) == 1
    assert (watchdog[0].ranks, watchdog[0].processes) == ("0-8,10-15", 15)
    assert watchdog[0].evidence is not None
    assert "Watchdog caught collective operation timeout" in watchdog[0].evidence.text


def test_evidence_lines_carry_the_kept_lines_around_them(stalled: Diagnosis) -> None:
    evidence = stalled.findings[0].evidence[0]
    assert evidence.context
    assert all(abs(line - evidence.line) <= 3 for line, _ in evidence.context)
    assert evidence.line not in [line for line, _ in evidence.context]


def test_config_names_the_nccl_version_that_differs() -> None:
    d = analyze(
        [
            str(NCCL / "version_2_14_fastsocket_node1.log"),
            str(NCCL / "version_2_19_socket_node2.log"),
        ]
    ).diagnosis
    version = next(c for c in d.config if c.key == "NCCL version")
    assert version.differs
    assert sorted(v.value for v in version.values) == ["2.14.3", "2.19.3"]
    assert d.config[0].differs
    assert not next(c for c in d.config if c.key == "CUDA driver").differs


def test_first_nccl_warn_of_a_process_is_its_first_error() -> None:
    d = analyze([str(NCCL / "roce_status12_then_flush.log")]).diagnosis
    first = d.timeline[0]
    assert first.kind == "NCCL WARN"
    assert first.message.startswith(
        "NET/IB : Got completion from peer 172.36.143.59<44206> with status=12"
    )
    assert first.evidence is not None and first.evidence.line == 1


def test_a_rank_only_a_prefix_names_has_evidence(tmp_path: Path) -> None:
    # torch's excepthook tags each line with its rank; nothing names a host or pid.
    log = tmp_path / "train.log"
    log.write_text(
        "[rank2]: Traceback (most recent call last):\n"
        '[rank2]:   File "/job/train.py", line 12, in <module>\n'
        "[rank2]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
    )
    diagnosis = analyze([str(log)]).diagnosis
    assert [(v.rank, v.sources) for v in diagnosis.ranks] == [(2, ("train.log",))]
    assert ("ranks with evidence", "rank 2") in overview_rows(diagnosis)
