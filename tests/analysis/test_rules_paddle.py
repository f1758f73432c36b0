"""PaddlePaddle's launchers name the worker that failed by its rank."""

from __future__ import annotations

from pathlib import Path

import pytest

from logsleuth.api import analyze

LAUNCH = """LAUNCH INFO 2023-03-01 10:00:00,131 Run Pod: kzqwhp, replicas 4, status ready
LAUNCH INFO 2023-03-01 10:00:00,170 Watching Pod: kzqwhp, replicas 4, status running
LAUNCH ERROR 2023-03-01 10:04:12,112 Pod failed
LAUNCH ERROR 2023-03-01 10:04:12,112 Container failed !!!
Container rank 2 status failed cmd ['/usr/bin/python', '-u', 'train.py'] code 1 log log/workerlog.2
LAUNCH INFO 2023-03-01 10:04:12,113 ------------------------- ERROR LOG DETAIL -------------------------
LAUNCH INFO 2023-03-01 10:04:12,446 Exit code 1
"""
FLEET = (
    "INFO 2022-05-11 08:12:01,211 launch_utils.py:561] Local start 4 processes. First process "
    "distributed environment info (Only For Debug):\n"
    "ERROR 2022-05-11 09:40:33,873 launch_utils.py:642] ABORT!!! Out of all 4 trainers, the "
    "trainer process with rank=[2] was aborted. Please check its log.\n"
)


@pytest.mark.parametrize("text", [LAUNCH, FLEET], ids=["launch", "fleetrun"])
def test_the_worker_paddles_launcher_saw_fail_is_the_culprit(tmp_path: Path, text: str) -> None:
    log = tmp_path / "launch.log"
    log.write_text(text)
    result = analyze([str(log)])
    verdict = result.diagnosis.verdict
    assert (verdict.kind, verdict.culprit_ranks) == ("process-died", (2,))
    (summary,) = result.diagnosis.inputs
    assert summary.unrecognized == 0
