"""A failure torchrun restarted the worker group after is one attempt's: the verdict says so."""

from __future__ import annotations

from pathlib import Path

from logsleuth.api import analyze

ATTEMPT_1 = """\
[2024-05-02 10:00:00,000] torch.distributed.elastic.agent.server.api: [INFO] [default] Starting worker group
[rank3]: Traceback (most recent call last):
[rank3]:   File "/app/train.py", line 50, in <module>
[rank3]:     batch = next(loader)
[rank3]: OSError: [Errno 5] Input/output error: '/mnt/nfs/shard-0042.bin'
[2024-05-02 10:10:00,000] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: 1) local_rank: 3 (pid: 4524) of binary: /usr/bin/python
[2024-05-02 10:10:00,100] torch.distributed.elastic.agent.server.api: [INFO] [default] Worker group FAILED. 2/3 attempts left; will restart worker group
[2024-05-02 10:10:05,000] torch.distributed.elastic.agent.server.api: [INFO] [default] Starting worker group
"""
FINISHED = (
    "[2024-05-02 12:10:05,000] torch.distributed.elastic.agent.server.api: [INFO] [default] "
    "worker group successfully finished. Waiting 300 seconds for other agents to finish.\n"
)
HUNG = "".join(
    f"[rank{r}]:[E502 10:50:05.221000000 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
    "Timeout(ms)=600000) ran for 600044 milliseconds before timing out.\n"
    for r in range(3)
)


def _lead(tmp_path: Path, text: str) -> tuple[str, tuple[int, ...], str]:
    log = tmp_path / "torchrun.log"
    log.write_text(text, encoding="utf-8")
    lead = analyze([str(log)]).diagnosis.findings[0]
    return lead.kind, lead.ranks, lead.detail


def test_a_failure_the_run_recovered_from_says_so(tmp_path: Path) -> None:
    kind, ranks, detail = _lead(tmp_path, ATTEMPT_1 + FINISHED)
    assert (kind, ranks) == ("process-died", (3,))
    assert "torchrun restarted its worker group after it (torchrun.log:7" in detail
    assert "finished successfully (torchrun.log:9)" in detail
    assert "the run recovered" in detail


def test_a_failure_before_a_restart_that_hung_again_names_the_restart(tmp_path: Path) -> None:
    kind, ranks, detail = _lead(tmp_path, ATTEMPT_1 + HUNG)
    assert (kind, ranks) == ("process-died", (3,))
    assert "restarted its worker group after it (torchrun.log:7" in detail
    assert "after that line is a later attempt's" in detail
    assert "recovered" not in detail


def test_without_a_restart_nothing_is_said(tmp_path: Path) -> None:
    restart = ATTEMPT_1.splitlines()[6]
    kind, _, detail = _lead(tmp_path, ATTEMPT_1.replace(restart + "\n", ""))
    assert kind == "process-died" and "restarted" not in detail
