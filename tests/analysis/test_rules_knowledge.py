"""LS701-LS703: what NCCL and the frameworks say went wrong, read through the knowledge base."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from logsleuth.analysis.diagnose import diagnose
from logsleuth.api import NoAnalysableInput, analyze
from logsleuth.knowledge import lookup
from logsleuth.model.base import Origin, SourceRef
from logsleuth.model.diagnosis import Diagnosis
from logsleuth.model.messages import LogMessage
from logsleuth.parse.discover import discover
from logsleuth.parse.dispatch import read_inputs
from tests.knowledge.catalog import nccl_line

ROOT = Path(__file__).resolve().parents[2]
HEALTHY = ROOT / "fixtures" / "synthetic" / "healthy" / "nccl"
CORPUS = ROOT / "fixtures" / "real" / "corpus"
RANK_FILES = {
    0: ("gpu-node001", 56683),
    1: ("gpu-node001", 56685),
    2: ("gpu-node001", 56687),
    3: ("gpu-node001", 56690),
    4: ("gpu-node002", 86389),
    5: ("gpu-node002", 86390),
    6: ("gpu-node002", 86392),
    7: ("gpu-node002", 86394),
}
AFTER_INIT = 131
"""Lines of a healthy rank log up to its Init COMPLETE; WARNs are inserted after them."""


def _with_warns(tmp_path: Path, warns: dict[int, list[str]], ranks: range = range(8)) -> Diagnosis:
    """Analyse the healthy 8-rank job with ``warns`` (rank -> WARN messages) put after init."""
    for rank in ranks:
        host, pid = RANK_FILES[rank]
        name = f"{host}.{pid}.log"
        if rank not in warns:
            shutil.copy(HEALTHY / name, tmp_path / name)
            continue
        lines = (HEALTHY / name).read_text().splitlines(keepends=True)
        extra = [nccl_line(m, "init.cc", host, pid, pid + 7) + "\n" for m in warns[rank]]
        (tmp_path / name).write_text("".join(lines[:AFTER_INIT] + extra + lines[AFTER_INIT:]))
    return analyze([str(tmp_path)]).diagnosis


def test_a_cause_blames_the_rank_that_printed_it(tmp_path: Path) -> None:
    diagnosis = _with_warns(tmp_path, {5: ["XML Import Channel : dev 5 not found."]})
    verdict = diagnosis.verdict
    assert (verdict.kind, verdict.code) == ("config-mismatch", "LS701")
    assert (verdict.culprit_ranks, verdict.culprit_hosts, verdict.culprit_pids) == (
        (5,),
        ("gpu-node002",),
        (86390,),
    )
    finding = diagnosis.findings[0]
    assert finding.next_steps[-1] == "logsleuth explain topo.xml-file"
    assert "XML Import Channel" in finding.evidence[0].text


def test_a_foreign_connection_blames_the_host_of_the_address_named(tmp_path: Path) -> None:
    diagnosis = _with_warns(
        tmp_path, {0: ["socketFinalizeAccept from 10.42.0.12<38211>: wrong type 1 != 4"]}
    )
    verdict = diagnosis.verdict
    assert (verdict.kind, verdict.code) == ("bootstrap-failure", "LS701")
    assert verdict.culprit_hosts == ("gpu-node002",)
    assert verdict.culprit_ranks == ()
    assert "host gpu-node002 (10.42.0.12)" in diagnosis.findings[0].detail


def test_a_victims_message_alone_points_at_the_peer(tmp_path: Path) -> None:
    diagnosis = _with_warns(tmp_path, {0: ["Proxy Call to rank 5 failed (Setup)"]})
    verdict = diagnosis.verdict
    assert (verdict.kind, verdict.code) == ("process-died", "LS702")
    assert (verdict.culprit_ranks, verdict.culprit_hosts, verdict.culprit_pids) == (
        (5,),
        ("gpu-node002",),
        (86390,),
    )
    assert "LS001" not in {f.code for f in diagnosis.findings}


def test_a_cause_outranks_the_symptoms_it_explains(tmp_path: Path) -> None:
    diagnosis = _with_warns(
        tmp_path,
        {
            0: ["Proxy Call to rank 5 failed (Setup)"],
            5: ["NET/IB : Call to ibv_reg_mr failed with error Cannot allocate memory errno 12"],
        },
    )
    verdict = diagnosis.verdict
    assert (verdict.kind, verdict.code) == ("resource-exhausted", "LS701")
    # The host is short of locked memory; rank 5 ran into the limit, and rank 0 waits for it.
    assert (verdict.culprit_ranks, verdict.culprit_hosts) == ((5,), ("gpu-node002",))
    assert "rank 5 ran into it" in diagnosis.findings[0].detail
    assert "LS702" not in {f.code for f in diagnosis.findings}


SUMMARY = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
=======================================================
train.py FAILED
-------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
-------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-03-21_20:04:06
  host      : gpu-node002
  rank      : 5 (local_rank: 1)
  exitcode  : -9 (pid: 86390)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 86390
=======================================================
"""


def test_errors_toward_a_peer_that_died_first_are_its_cascade(tmp_path: Path) -> None:
    # A connection set up lazily after init, toward the host where rank 5 was killed.
    warn = "socketStartConnect: Connect to 10.42.0.12<4321> failed : Connection refused"
    (tmp_path / "launcher.log").write_text(SUMMARY)
    nccl = tmp_path / "nccl"
    nccl.mkdir()
    _with_warns(nccl, {0: [warn]})
    diagnosis = analyze([str(tmp_path)]).diagnosis
    assert (diagnosis.verdict.kind, diagnosis.verdict.culprit_ranks) == ("process-died", (5,))
    cascade = [f for f in diagnosis.findings if f.code == "LS701"]
    assert [(f.kind, f.severity, f.hosts) for f in cascade] == [
        ("bootstrap-failure", "warning", ("gpu-node002",))
    ]
    assert cascade[0].title.endswith("(after rank 5 (signal SIGKILL) died)")


def test_a_harmless_warn_leaves_a_healthy_run_healthy(tmp_path: Path) -> None:
    diagnosis = _with_warns(
        tmp_path, {2: ["User asked for a minimum of 32 channels, limiting to 16"]}
    )
    assert diagnosis.verdict.kind == "healthy"
    assert diagnosis.findings == ()


def test_a_fallback_is_reported_without_failing_the_run(tmp_path: Path) -> None:
    diagnosis = _with_warns(
        tmp_path, {2: ["Cannot initialize CollNet, using point-to-point network instead"]}
    )
    assert diagnosis.verdict.kind == "healthy"
    assert [(f.code, f.kind, f.severity) for f in diagnosis.findings] == [
        ("LS701", "transport-degraded", "warning")
    ]


def test_an_internal_nccl_error_is_inconclusive_under_its_own_code(tmp_path: Path) -> None:
    diagnosis = _with_warns(tmp_path, {3: ["Element 3 of pool 0 has been lost"]})
    verdict = diagnosis.verdict
    assert (verdict.kind, verdict.code, verdict.culprit_ranks) == ("inconclusive", "LS703", ())
    assert any("upstream" in s for s in diagnosis.findings[0].next_steps)


def test_a_message_a_specific_rule_reads_is_left_to_it(tmp_path: Path) -> None:
    diagnosis = _with_warns(
        tmp_path, {1: ["Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 18000"]}
    )
    assert diagnosis.verdict.code == "LS301"
    assert "LS701" not in {f.code for f in diagnosis.findings}


def test_the_nccl_warn_quoted_in_a_dist_backend_error_is_read(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text(
        "[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "/workspace/train.py", line 42, in <module>\n'
        "[rank1]:     dist.barrier()\n"
        "[rank1]: torch.distributed.DistBackendError: NCCL error in: "
        "../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, invalid usage (run with "
        "NCCL_DEBUG=WARN for details), NCCL version 2.20.5\n"
        "[rank1]: ncclInvalidUsage: This usually reflects invalid usage of NCCL library.\n"
        "[rank1]: Last error:\n"
        "[rank1]: Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1b000\n"
    )
    verdict = analyze([str(log)]).diagnosis.verdict
    # The warning names the pair that shares the GPU: both, though only rank 1's side is here.
    assert (verdict.kind, verdict.code, verdict.culprit_ranks) == (
        "duplicate-gpu",
        "LS701",
        (0, 1),
    )
    assert verdict.summary.startswith("rank 1: ")


ROOT_CAUSE_MESSAGES = [
    ("001-horovod-duplicate-gpu-all-on-busid-1000", "duplicate-gpu", "init.duplicate-gpu", "self"),
    ("003-ci-pod-dev-shm-exhausted", "resource-exhausted", "shm.exhausted", "host"),
    ("007-roce-status12-then-status5-flush", "network-error", "ib.completion-error", "peer"),
    (
        "024-socket-broken-pipe-abort-complete-watchdog",
        "process-died",
        "result.remote-error",
        "none",
    ),
    (
        "028-bootstrap-connect-refused-foreign-ip",
        "bootstrap-failure",
        "socket.connect-failed",
        "peer",
    ),
]
"""Corpus cases whose root cause is a message NCCL or torch printed: the verdict's kind, and the
entry that reads its first evidence line (kind and culprit side)."""


@pytest.mark.parametrize(
    ("case", "kind", "entry", "side"), ROOT_CAUSE_MESSAGES, ids=lambda v: str(v)[:3]
)
def test_corpus_cases_caused_by_a_printed_message(
    case: str, kind: str, entry: str, side: str
) -> None:
    inputs = [str(p) for p in sorted((CORPUS / case).iterdir()) if not p.name.startswith("truth.")]
    diagnosis = analyze(inputs).diagnosis
    assert diagnosis.verdict.kind == kind
    hit = lookup(diagnosis.findings[0].evidence[0].text)
    assert hit is not None
    assert (hit.entry.id, hit.entry.kind, hit.entry.culprit) == (entry, kind, side)


def _message(text: str, line: int = 1, family: str = "nccl") -> LogMessage:
    return LogMessage(
        ref=SourceRef("rank0.log", line),
        text=text,
        family=family,
        level="WARN",
        catalog=None,
        message=text,
    )


def test_a_message_found_anywhere_in_a_line_is_read() -> None:
    """The parser's LogMessage (a WARN behind a foreign prefix, a framework message) counts too."""
    text = "posix_fallocate failed: No space left on device"
    diagnosis = diagnose(
        [_message(f"Error: failed to extend /dev/shm/nccl-k2 to 9637892 bytes ({text})")], [], "0"
    )
    assert (diagnosis.verdict.kind, diagnosis.verdict.code) == ("resource-exhausted", "LS701")


def test_a_connection_closed_during_bootstrap_is_a_bootstrap_failure() -> None:
    closed = _message("socketProgress: Connection closed by remote peer 10.10.1.3<36138>")
    verdict = diagnose([closed], [], "0").verdict
    assert (verdict.kind, verdict.code) == ("bootstrap-failure", "LS702")
    assert (verdict.culprit_ranks, verdict.culprit_hosts) == ((), ("10.10.1.3",))


def test_the_same_message_after_init_is_a_dead_peer() -> None:
    sources, _ = discover([str(HEALTHY / "gpu-node001.56683.log")])
    (result,) = list(read_inputs(sources, keep_ops=64))
    assert not isinstance(result, Exception)
    closed = replace(
        _message("socketProgress: Connection closed by remote peer 10.10.1.3<36138>", 999),
        origin=Origin(host="gpu-node001", pid=56683, tid=56690),
    )
    verdict = diagnose([*result.events, closed], [result.summary], "0").verdict
    assert (verdict.kind, verdict.code, verdict.culprit_hosts) == (
        "process-died",
        "LS702",
        ("10.10.1.3",),
    )


def test_a_network_transports_closed_connection_alone_is_a_dead_peer(tmp_path: Path) -> None:
    # Only the WARN of a network transport (a plugin's data path), nothing that places its
    # writer in set-up: the peer, written ``name<port>``, went away after init.
    path = tmp_path / "ticket.log"
    path.write_text(
        "a3-vm-12:3311:3502 [2] NCCL WARN NET/GPUDirectTCPX : Connection closed by remote peer "
        "a3-vm-05<43311>\n"
        "a3-vm-12:3311:3502 [2] NCCL INFO transport/net.cc:1164 -> 6\n"
    )
    verdict = analyze([str(path)]).diagnosis.verdict
    assert (verdict.kind, verdict.code, verdict.culprit_hosts) == (
        "process-died",
        "LS702",
        ("a3-vm-05",),
    )


def test_a_writer_in_set_up_that_loses_its_peer_fails_bootstrap(tmp_path: Path) -> None:
    # The same WARN from a process whose own lines show it setting a communicator up.
    name = "gpu-node001.56683.log"
    lines = (HEALTHY / name).read_text().splitlines(keepends=True)
    setup = [line for line in lines[:AFTER_INIT] if "Init COMPLETE" not in line]
    warn = nccl_line(
        "NET/IB : Connection closed by remote peer gpu-node002<43311>",
        "transport/net_ib.cc",
        "gpu-node001",
        56683,
        56690,
    )
    (tmp_path / name).write_text("".join([*setup, warn + "\n"]))
    verdict = analyze([str(tmp_path / name)]).diagnosis.verdict
    assert (verdict.kind, verdict.culprit_hosts) == ("bootstrap-failure", ("gpu-node002",))


def test_a_loggers_record_reads_the_exception_it_caught(tmp_path: Path) -> None:
    # ``logger.exception``: the record says what failed (torchrun's exit barrier), the
    # traceback under it how its code noticed (the store barrier's timeout, which alone
    # reads as ranks that never joined the init).
    path = tmp_path / "agent.log"
    path.write_text(
        "[ERROR] torch.distributed.elastic.agent.server.api: Error waiting on exit barrier. "
        "Elapsed: 300.09 seconds\n"
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3/torch/distributed/elastic/agent/server/api.py", line 924, '
        "in _exit_barrier\n"
        "    store_util.barrier(\n"
        "torch.distributed.DistStoreError: Timed out after 301 seconds waiting for clients. "
        "1/2 clients joined.\n"
    )
    verdict = analyze([str(path)]).diagnosis.verdict
    assert verdict.kind == "inconclusive"
    assert "exit barrier" in verdict.summary
    # The traceback alone is the store barrier's timeout.
    alone = tmp_path / "alone.log"
    alone.write_text("\n".join(path.read_text().splitlines()[1:]) + "\n")
    assert analyze([str(alone)]).diagnosis.verdict.kind == "init-stall"


def test_horovod_shutting_down_is_what_the_survivors_see() -> None:
    events = [
        _message(
            "Horovod has been shut down. This was caused by an exception on one of the ranks",
            2,
            "horovod",
        )
    ]
    verdict = diagnose(events, [], "0").verdict
    assert (verdict.kind, verdict.code, verdict.culprit_ranks) == ("process-died", "LS702", ())


def test_a_downgrade_reported_at_info_level_is_a_warning(tmp_path: Path) -> None:
    name = "gpu-node001.56683.log"
    lines = (HEALTHY / name).read_text().splitlines(keepends=True)
    info = (
        "gpu-node001:56683:56683 [0] NCCL INFO NET/Plugin: Failed to find ncclNetPlugin symbol "
        "(>= v5). ncclNetPlugin symbols v4 and lower are not supported.\n"
    )
    (tmp_path / name).write_text("".join([*lines[:5], info, *lines[5:]]))
    diagnosis = analyze([str(tmp_path / name)]).diagnosis
    assert diagnosis.verdict.kind == "healthy"
    assert [(f.code, f.kind, f.severity, f.hosts) for f in diagnosis.findings] == [
        ("LS701", "transport-degraded", "warning", ("gpu-node001",))
    ]


def test_info_lines_never_raise_a_failure(tmp_path: Path) -> None:
    """An INFO line that quotes a failure's words is no failure: only downgrades count there."""
    name = "gpu-node001.56683.log"
    lines = (HEALTHY / name).read_text().splitlines(keepends=True)
    info = "gpu-node001:56683:56683 [0] NCCL INFO Element 3 of pool 0 has been lost\n"
    (tmp_path / name).write_text("".join([*lines[:5], info, *lines[5:]]))
    diagnosis = analyze([str(tmp_path / name)]).diagnosis
    assert (diagnosis.verdict.kind, diagnosis.findings) == ("healthy", ())


def test_a_cuda_failure_is_left_to_ls303(tmp_path: Path) -> None:
    """LS303 must fire on NCCL's CUDA failures (no other fixture makes it fire); LS701 defers."""
    diagnosis = _with_warns(
        tmp_path, {6: ["Cuda failure 'an illegal memory access was encountered'"]}
    )
    assert (diagnosis.verdict.kind, diagnosis.verdict.code, diagnosis.verdict.culprit_ranks) == (
        "cuda-error",
        "LS303",
        (6,),
    )
    assert "LS701" not in {f.code for f in diagnosis.findings}


def test_a_heartbeat_timeout_is_left_to_ls501(tmp_path: Path) -> None:
    """LS501 must fire on the heartbeat monitor's line (no other fixture makes it fire)."""
    log = tmp_path / "train.log"
    log.write_text(
        "[rank0]:[E321 07:21:54.020569372 ProcessGroupNCCL.cpp:1458] [PG ID 0 PG GUID "
        "0(default_pg) Rank 0] Heartbeat monitor timed out! Process will be terminated after "
        "dumping debug info. workMetaList_.size()=1\n"
    )
    diagnosis = analyze([str(log)]).diagnosis
    assert (diagnosis.verdict.kind, diagnosis.verdict.code) == ("watchdog-stuck", "LS501")
    # The rank whose monitor fired waited: it is named in the title, not as the culprit.
    assert diagnosis.verdict.culprit_ranks == ()
    assert "rank(s) 0" in diagnosis.verdict.summary


@pytest.mark.parametrize(
    "line",
    [
        "[W socket.cpp:697] [c10d] The client socket has failed to connect to "
        "[master-0.train]:29500 (errno: 111 - Connection refused).",
        "[W socket.cpp:697] [c10d] The client socket has failed to connect to (master-0.train, "
        "29500) (errno: 111 - Connection refused).",
        "[W socket.cpp:697] [c10d] The client socket has failed to connect to any network "
        "address of (master-0.train, 29500).",
    ],
)
def test_the_store_a_rank_could_not_reach_is_named_by_its_host_alone(
    tmp_path: Path, line: str
) -> None:
    verdict = _pasted(tmp_path, line + "\n").verdict
    assert (verdict.kind, verdict.culprit_hosts) == ("bootstrap-failure", ("master-0.train",))


def _pasted(tmp_path: Path, text: str) -> Diagnosis:
    """The diagnosis of ``text`` pasted into one log file."""
    (tmp_path / "paste.log").write_text(text)
    return analyze([str(tmp_path)]).diagnosis


def test_every_rank_a_monitored_barrier_names_is_a_culprit(tmp_path: Path) -> None:
    """With ``wait_all_ranks=True`` rank 0 names every rank that did not arrive."""
    text = (
        "Traceback (most recent call last):\n"
        '  File "/workspace/train.py", line 211, in <module>\n'
        "    dist.monitored_barrier(timeout=timedelta(seconds=30), wait_all_ranks=True)\n"
        "RuntimeError: [Rank 0]: Ranks 1, 3 failed to pass monitoredBarrier in 30000 ms\n"
    )
    verdict = _pasted(tmp_path, text).verdict
    assert (verdict.kind, verdict.culprit_ranks) == ("missing-collective", (1, 3))


DUMP_FLAG = (
    "[rank{r}]:[W1123 12:00:0{r}.000000000 510{r} ProcessGroupNCCL.cpp:1478] [PG ID 0 PG GUID "
    '0(default_pg) Rank {r}] Failed to check the "should dump" flag on TCPStore, (maybe '
    "TCPStore server has shut down too early), with error: Broken pipe\n"
)


def test_the_store_gone_at_exit_is_reported_but_is_no_verdict(tmp_path: Path) -> None:
    """Rank 0 leaving first at the end of a run makes the others' monitors warn: no failure."""
    text = "[rank0]: Training complete, saved checkpoint\n"
    diagnosis = _pasted(tmp_path, text + "".join(DUMP_FLAG.format(r=r) for r in (1, 2, 3)))
    assert diagnosis.verdict.kind == "inconclusive"
    assert ("LS702", "warning") in [(f.code, f.severity) for f in diagnosis.findings]


def test_the_store_gone_after_a_failure_leaves_the_verdict_to_the_failure(tmp_path: Path) -> None:
    text = (
        "[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered\n"
        + "".join(DUMP_FLAG.format(r=r) for r in (1, 2, 3))
    )
    verdict = _pasted(tmp_path, text).verdict
    assert (verdict.kind, verdict.culprit_ranks) == ("cuda-error", (0,))


@pytest.mark.parametrize(
    ("reason", "code"),
    [("internal error", "LS703"), ("invalid usage", "LS702"), ("a reason never seen", "LS702")],
)
def test_a_bare_nccl_error_line_is_never_no_failure(tmp_path: Path, reason: str, code: str) -> None:
    # torch 1.x/2.0's one-line form: the result's words alone, no "(run with NCCL_DEBUG ...)".
    verdict = _pasted(
        tmp_path,
        "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1269, "
        f"{reason}, NCCL version 2.14.3\n",
    ).verdict
    assert (verdict.kind, verdict.code) == ("inconclusive", code)


def test_a_known_writer_names_the_lines_of_its_message_that_name_none(tmp_path: Path) -> None:
    verdict = _pasted(
        tmp_path,
        "[rank1]:[E1123 10:00:00.000 77 ProcessGroupNCCL.cpp:1500] [PG ID 0 PG GUID 0 Rank 1] "
        "remote error detected from rank: 3\n"
        "RuntimeError: remote error detected from rank: 3\n",
    ).verdict
    assert verdict.culprit_ranks == (3,)
    assert verdict.summary.startswith("rank 1 (pid 77): remote error")


def test_torchruns_failed_worker_is_named_by_pid_and_local_rank(tmp_path: Path) -> None:
    diagnosis = _pasted(
        tmp_path,
        "[2024-05-01 10:00:00,124] torch.distributed.elastic.multiprocessing.api: [ERROR] failed "
        "(exitcode: -11) local_rank: 2 (pid: 4521) of binary: /usr/bin/python\n",
    )
    assert (diagnosis.verdict.kind, diagnosis.verdict.culprit_pids) == ("process-died", (4521,))
    assert "pid 4521 (local rank 2)" in diagnosis.findings[0].detail


@pytest.mark.parametrize(
    ("message", "code", "kind"),
    [
        # A lone notice that the watchdog takes the process down proves a failure.
        (
            "Some NCCL operations have failed or timed out. Due to the asynchronous nature of "
            "CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.",
            "LS702",
            "inconclusive",
        ),
        (
            "[c10d] TCP client failed to connect/validate to host node1:29500 - timed out "
            "(try=3, timeout=600000ms): Connection timed out",
            "LS701",
            "bootstrap-failure",
        ),
        # c10's own error line that no entry knows is still an error.
        (
            "[c10d] TCPStoreMasterDaemon::run() failed with exception: boom",
            "LS001",
            "inconclusive",
        ),
    ],
    ids=["taken-down", "tcp-client", "unknown-c10-error"],
)
def test_c10_error_lines_are_never_no_failure(
    tmp_path: Path, message: str, code: str, kind: str
) -> None:
    verdict = _pasted(tmp_path, f"[E1125 10:00:00.000000 42 TCPStore.cpp:100] {message}\n").verdict
    assert (verdict.code, verdict.kind) == (code, kind)


def test_an_error_record_of_an_unknown_program_is_evidence(tmp_path: Path) -> None:
    # absl/glog's prefix at ERROR, a message no catalog holds: an error, never "no line".
    line = "E0502 11:03:12.221000 140213 collective_pipeliner.cc:38] Frobnication failed\n"
    diagnosis = _pasted(tmp_path, line * 2)
    assert [i.recognized for i in diagnosis.inputs] == [2]
    assert (diagnosis.verdict.code, diagnosis.verdict.kind) == ("LS001", "inconclusive")
    # The same record at INFO is evidence too, of no failure: what is missing is said.
    quiet = _pasted(tmp_path, line.replace("E0502", "I0502"))
    assert [i.recognized for i in quiet.inputs] == [1]
    assert (quiet.verdict.code, quiet.verdict.kind) == ("LS002", "inconclusive")


def test_a_framework_logger_record_of_an_unknown_message_is_evidence(tmp_path: Path) -> None:
    # DeepSpeed's header (time, level, file:line:function) makes the line its record.
    line = (
        "[2024-05-02 10:27:10,778] [WARNING] [stage3.py:1991:step] 3 pytorch allocator cache "
        "flushes since last step. this happens when there is high memory pressure\n"
    )
    diagnosis = _pasted(tmp_path, line * 2)
    assert [i.recognized for i in diagnosis.inputs] == [2]
    assert (diagnosis.verdict.code, diagnosis.verdict.kind) == ("LS002", "inconclusive")
    # A collector's prefix alone (a CRI stream, no level) is no record.
    with pytest.raises(NoAnalysableInput, match="no line was recognized"):
        _pasted(tmp_path, "2024-05-02T10:27:10.778Z stdout F frobnicating the quux\n")


def test_xlas_rendezvous_wait_is_a_collective_symptom(tmp_path: Path) -> None:
    line = (
        "E0502 11:03:12.221000 140213 rendezvous.cc:38] This thread has been waiting for "
        "`first call to collective operation 5; run_id=12` for 20 seconds and may be stuck. "
        "Expected 8 threads to join the rendezvous, but not all of them arrived on time.\n"
    )
    lead = _pasted(tmp_path, line).findings[0]
    assert (lead.code, lead.kind, lead.ranks) == ("LS702", "collective-timeout", ())
    assert "xla.rendezvous-stuck" in lead.detail


@pytest.mark.parametrize(
    ("name", "code"),
    [("KeyboardInterrupt", "LS001"), ("MemoryError", "LS204"), ("StopIteration", "LS001")],
)
def test_a_builtin_exception_raised_without_a_message_is_read(
    tmp_path: Path, name: str, code: str
) -> None:
    # The last line of a traceback when the exception carries no message: its type alone.
    # An error is the death of the process that raised it; an interrupt or the end of an
    # iteration says nothing of the job's failure.
    diagnosis = _pasted(tmp_path, f"{name}\n")
    assert [i.recognized for i in diagnosis.inputs] == [1]
    assert diagnosis.verdict.code == code


REAL_PATH = (
    "gpu-b7:5511:5511 [0] NCCL INFO Bootstrap : Using ib0:10.2.0.7<0>\n"
    "gpu-b7:5511:5590 [0] misc/utils.cc:235 NCCL WARN Could not find real path of "
    "/sys/class/net/ib1/device\n"
)


def test_a_harmless_warn_that_nccl_failed_on_is_the_failure(tmp_path: Path) -> None:
    # What a newer NCCL skips an older one needed: the thread unwinds with `-> 2` right
    # after the WARN, and the process never completes its communicator's init.
    unwound = (
        "gpu-b7:5511:5590 [0] NCCL INFO graph/topo.cc:713 -> 2\n"
        "gpu-b7:5511:5590 [0] NCCL INFO init.cc:860 -> 2\n"
        "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1269, "
        "unhandled system error, NCCL version 2.14.3\n"
    )
    verdict = _pasted(tmp_path, REAL_PATH + unwound).verdict
    assert (verdict.code, verdict.kind, verdict.culprit_hosts, verdict.culprit_pids) == (
        "LS701",
        "init-stall",
        ("gpu-b7",),
        (5511,),
    )
    # NCCL going on from it (its init completes) keeps it harmless.
    went_on = (
        "gpu-b7:5511:5590 [0] NCCL INFO ncclCommInitRank comm 0x55d0 rank 0 nranks 1 cudaDev 0 "
        "nvmlDev 0 busId 1000 commId 0xabc - Init COMPLETE\n"
        "gpu-b7:5511:5511 [0] NCCL INFO comm 0x55d0 rank 0 nranks 1 cudaDev 0 busId 1000 - "
        "Destroy COMPLETE\n"
    )
    assert _pasted(tmp_path, REAL_PATH + went_on).verdict.kind == "healthy"


def test_a_process_without_the_network_it_was_told_to_use_is_the_culprit(tmp_path: Path) -> None:
    # NCCL_NET=IB on a node without IB: that rank fails init; its peers wait for it.
    text = (
        "[rank2]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/"
        "c10d/NCCLUtils.hpp:275, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL "
        "version 2.19.3\n"
        "[rank2]: ncclInvalidUsage: This usually reflects invalid usage of NCCL library.\n"
        "[rank2]: Last error:\n"
        "[rank2]: Error: network IB not found.\n"
    )
    verdict = _pasted(tmp_path, text).verdict
    assert (verdict.kind, verdict.culprit_ranks) == ("transport-mismatch", (2,))


def test_a_launchers_exit_1_is_read_through_the_workers_own_error(tmp_path: Path) -> None:
    # Exit status 1 is Python's end on an uncaught exception: the worker's error (the store
    # barrier's timeout) is the reading, the launcher's line its aftermath.
    path = tmp_path / "node1.log"
    path.write_text(
        "node1: RuntimeError: Timed out initializing process group in store based barrier on "
        "rank: 0, for key: store_based_barrier_key:1 (world_size=16, worker_count=15, "
        "timeout=0:30:00)\n"
        "node1: ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) "
        "local_rank: 0 (pid: 30411) of binary: /opt/conda/bin/python\n"
    )
    assert analyze([str(path)]).diagnosis.verdict.kind == "init-stall"


def test_a_rank_its_heartbeat_monitor_aborted_is_no_second_cause(tmp_path: Path) -> None:
    # srun reports the abort the heartbeat monitor announced: the stuck watchdog is the reading.
    path = tmp_path / "srun.log"
    path.write_text(
        "3: [rank3]:[E625 02:14:09.772120381 ProcessGroupNCCL.cpp:1303] [PG 0 (default_pg) "
        "Rank 3] Heartbeat monitor timed out! Process will be terminated after dumping debug "
        "info. workMetaList_.size()=2\n"
        "srun: error: nid00412: task 3: Aborted (core dumped)\n"
        "srun: error: nid00412: tasks 0-2,4-7: Terminated\n"
    )
    verdict = analyze([str(path)]).diagnosis.verdict
    assert (verdict.kind, verdict.culprit_ranks) == ("watchdog-stuck", (3,))


@pytest.mark.parametrize("error_first", [True, False])
def test_the_shells_kill_report_under_an_error_is_its_aftermath(
    tmp_path: Path, error_first: bool
) -> None:
    error = (
        "node-b:3121:3587 [3] transport/net_ib.cc:1712 NCCL WARN NET/IB : Got completion from "
        "peer 10.20.1.14<52118> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid "
        "::ffff:10.20.1.15 remoteGids::ffff:10.20.1.14 hca mlx5_3\n"
    )
    path = tmp_path / "console.log"
    path.write_text(error + "Killed\n" if error_first else "Killed\n" + error)
    kind = analyze([str(path)]).diagnosis.verdict.kind
    # Killed below the error: the server ended after it. Above it: nothing explains the kill.
    assert kind == ("network-error" if error_first else "process-died")


def test_a_line_that_names_only_its_rank_names_the_process_at_that_rank(tmp_path: Path) -> None:
    path = tmp_path / "srun.log"
    path.write_text(
        "13: gpu-node04:77121:77121 [1] NCCL INFO comm 0x55e3b0c4e2a0 rank 13 nranks 16 cudaDev 1 "
        "nvmlDev 1 busId b3000 commId 0x6f0d2a9e41c8b357 - Init COMPLETE\n"
        "13: [rank13]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 13] Process group watchdog thread "
        "terminated with exception: CUDA error: unspecified launch failure\n"
    )
    verdict = analyze([str(path)]).diagnosis.verdict
    assert (verdict.kind, verdict.culprit_ranks, verdict.culprit_hosts, verdict.culprit_pids) == (
        "cuda-error",
        (13,),
        ("gpu-node04",),
        (77121,),
    )


def test_the_vllm_worker_that_died_is_named_by_its_pid(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    path.write_text(
        "gpu-a7:48211:48211 [2] NCCL INFO comm 0x5608e7a3c2d0 rank 2 nranks 4 cudaDev 2 nvmlDev 2 "
        "busId 48000 commId 0x3f5c8a91d2e0b7a4 - Init COMPLETE\n"
        "ERROR 11-04 06:41:19 multiproc_worker_utils.py:116] Worker VllmWorkerProcess pid 48211 "
        "died, exit code: 1\n"
    )
    verdict = analyze([str(path)]).diagnosis.verdict
    assert (verdict.kind, verdict.culprit_ranks, verdict.culprit_pids) == (
        "process-died",
        (2,),
        (48211,),
    )


def test_a_pod_killed_for_memory_names_the_worker_the_kill_took(tmp_path: Path) -> None:
    # OOMKilled names the pod; torchrun's summary on that pod names the SIGKILLed worker.
    path = tmp_path / "ticket.log"
    path.write_text(
        "Name:             llm-sft-worker-1\n"
        "Namespace:        ml-train\n"
        "      Reason:       OOMKilled\n"
        "Root Cause (first observed failure):\n"
        "[0]:\n"
        "  time      : 2024-06-11_09:47:51\n"
        "  host      : llm-sft-worker-1\n"
        "  rank      : 19 (local_rank: 3)\n"
        "  exitcode  : -9 (pid: 215)\n"
        "  error_file: <N/A>\n"
        "  traceback : Signal 9 (SIGKILL) received by PID 215\n"
    )
    verdict = analyze([str(path)]).diagnosis.verdict
    assert (verdict.kind, verdict.culprit_ranks, verdict.culprit_pids) == (
        "resource-exhausted",
        (19,),
        (215,),
    )


def test_a_step_cancelled_from_outside_is_no_death_inside_the_job(tmp_path: Path) -> None:
    # scancel: every agent gets SIGTERM and srun reports each task's exit 1; the scheduler's
    # records, not the job's output, say why.
    path = tmp_path / "slurm.out"
    path.write_text(
        "slurmstepd: error: *** STEP 771203.0 ON gpu-c12 CANCELLED AT 2024-09-03T04:11:37 ***\n"
        "0: W0903 04:11:37.512000 41022 torch/distributed/elastic/agent/server/api.py:704] "
        "Received Signals.SIGTERM death signal, shutting down workers\n"
        "1: torch.distributed.elastic.multiprocessing.api.SignalException: Process 39880 got "
        "signal: 15\n"
        "srun: error: gpu-c12: task 0: Exited with exit code 1\n"
        "srun: error: gpu-c13: task 1: Exited with exit code 1\n"
    )
    verdict = analyze([str(path)]).diagnosis.verdict
    assert (verdict.kind, verdict.culprit_ranks) == ("inconclusive", ())
    assert "cancelled" in verdict.summary.lower() or "CANCELLED" in verdict.summary
