"""Verdicts on one-sided excerpts as tickets paste them: one tool's report, one launcher's
summary, one rank's traceback. Each names the culprit the excerpt itself names.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from logsleuth.api import analyze
from logsleuth.model.diagnosis import Finding, Verdict


def _verdict(tmp_path: Path, text: str) -> Verdict:
    return _lead(tmp_path, text)[0]


def _lead(tmp_path: Path, text: str) -> tuple[Verdict, Finding]:
    """The verdict and the finding it comes from."""
    log = tmp_path / "ticket.log"
    log.write_text(text, encoding="utf-8")
    diagnosis = analyze([str(log)]).diagnosis
    lead = diagnosis.findings[0]
    assert lead.code == diagnosis.verdict.code
    return diagnosis.verdict, lead


FR_TRACE = """\
$ python -m torch.distributed.flight_recorder.fr_trace -j /tmp/fr_dumps/
Not all ranks joining collective, sequence number: 14
group info: 0:default_pg
collective: nccl:all_reduce
missing ranks: {missing}
input sizes: [[4096, 4096]]
output sizes: [[4096, 4096]]
expected ranks: 8
collective state: scheduled
"""


@pytest.mark.parametrize(("missing", "ranks"), [("{3}", (3,)), ("{2, 7}", (2, 7))])
def test_the_flight_recorder_report_names_the_missing_ranks(
    tmp_path: Path, missing: str, ranks: tuple[int, ...]
) -> None:
    # fr_trace reports its findings at INFO: an analyzer's level says nothing about the job.
    verdict = _verdict(tmp_path, FR_TRACE.format(missing=missing))
    assert (verdict.kind, verdict.culprit_ranks) == ("missing-collective", ranks)


def test_mpirun_names_the_node_of_the_rank_it_saw_killed(tmp_path: Path) -> None:
    text = (
        "[1,0]<stdout>:Epoch 3 step 1200 loss 2.113\n"
        "mpirun noticed that process rank 3 with PID 0 on node gpu-2 exited on signal 9 "
        "(Killed).\n"
    )
    verdict = _verdict(tmp_path, text)
    assert (verdict.kind, verdict.culprit_ranks, verdict.culprit_hosts) == (
        "process-died",
        (3,),
        ("gpu-2",),
    )


SUMMARY = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
======================================================
train.py FAILED
------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2024-08-14_22:01:09
  host      : node-a3
  rank      : 6 (local_rank: 6)
  exitcode  : {code} (pid: 812)
  error_file: <N/A>
  traceback : Signal {number} ({name}) received by PID 812
======================================================
"""


@pytest.mark.parametrize(("number", "name"), [(11, "SIGSEGV"), (7, "SIGBUS")])
def test_a_rank_that_crashed_on_a_signal_of_its_own_is_the_cause(
    tmp_path: Path, number: int, name: str
) -> None:
    verdict, lead = _lead(tmp_path, SUMMARY.format(code=-number, number=number, name=name))
    assert (verdict.kind, verdict.code, verdict.culprit_ranks) == ("process-died", "LS204", (6,))
    assert (verdict.culprit_hosts, verdict.culprit_pids) == (("node-a3",), (812,))
    assert verdict.confidence >= 0.7
    # The evidence quoted is the line that says how it ended, not the entry's '[0]:' head.
    assert f"Signal {number} ({name})" in lead.evidence[0].text
    assert "PYTHONFAULTHANDLER" in lead.next_steps[0]


def test_a_kill_from_outside_stays_a_weak_verdict(tmp_path: Path) -> None:
    verdict = _verdict(tmp_path, SUMMARY.format(code=-9, number=9, name="SIGKILL"))
    assert (verdict.kind, verdict.culprit_ranks) == ("process-died", (6,))
    assert verdict.confidence < 0.5


def test_a_rendezvous_timeout_raised_without_a_message_is_a_bootstrap_failure(
    tmp_path: Path,
) -> None:
    text = """\
[I1201 10:00:00.001000 2211 torch/distributed/elastic/agent/server/api.py:662] [default] Rendezvous'ing worker group
Traceback (most recent call last):
  File "/usr/local/lib/python3.11/site-packages/torch/distributed/elastic/rendezvous/dynamic_rendezvous.py", line 654, in run
    raise RendezvousTimeoutError
torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError
"""
    verdict, lead = _lead(tmp_path, text)
    assert verdict.kind == "bootstrap-failure"
    assert "(elastic.rendezvous-timeout;" in lead.detail


@pytest.mark.parametrize(
    ("line", "entry"),
    [
        (
            "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:799] connect "
            "[127.0.1.1]:19325: Connection refused",
            "gloo.loopback-peer",
        ),
        (
            "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:799] connect "
            "[10.0.0.3]:19325: Connection refused",
            "gloo.connect",
        ),
    ],
    ids=["loopback", "routable"],
)
def test_a_gloo_connect_failure_at_init_is_a_bootstrap_failure(
    tmp_path: Path, line: str, entry: str
) -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "ddp.py", line 30, in <module>\n'
        '    dist.init_process_group("gloo", rank=rank, world_size=2)\n'
        f"{line}\n"
    )
    verdict, lead = _lead(tmp_path, text)
    assert verdict.kind == "bootstrap-failure"
    assert f"({entry};" in lead.detail


def test_a_traceback_no_prefix_places_is_still_the_failure_shown(tmp_path: Path) -> None:
    # One process's traceback pasted without a launcher's [rankN]: tag: the exception is the
    # failure the excerpt shows, even though no rank can be named.
    text = """\
[2025-01-10 10:00:00] Scheduler hit an exception: Traceback (most recent call last):
  File "/srv/app/scheduler.py", line 1745, in run_scheduler_process
    scheduler.event_loop()
  File "/srv/app/model_runner.py", line 700, in forward
    return self.forward_decode(batch)
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB.
"""
    verdict, lead = _lead(tmp_path, text)
    assert (verdict.kind, verdict.code, verdict.culprit_ranks) == ("process-died", "LS204", ())
    assert "torch.OutOfMemoryError" in verdict.summary
    assert lead.evidence[0].line == 1


def test_a_traceback_of_a_lost_peer_is_no_failure_of_its_own(tmp_path: Path) -> None:
    text = """\
Traceback (most recent call last):
  File "train.py", line 80, in <module>
    dist.all_reduce(t)
RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.0.2]:51234
"""
    verdict = _verdict(tmp_path, text)
    assert verdict.code != "LS204"
