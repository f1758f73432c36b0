"""torchrun failure summaries whose layout a copy broke: the fields are still read."""

from __future__ import annotations

from logsleuth.model.torch import ChildFailure
from logsleuth.parse.discover import InputSource
from logsleuth.parse.dispatch import read_input

OCR = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
train.py FAILED
Failures:
<NO OTHER FAILURES>
Root Cause (first observed failure) :
[0]:
time
host
2023-09-14 01:45:50
node-a7
rank2 (local rank: 2)exitcode: -9 (pid: 36071)error file: <N/A>
traceback : signal 9 (SIGKILL) received by PID 36071
"""

RUN_TOGETHER = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
Root Cause (first observed failure):
[0]:  time : 2024-01-02_03:04:05  host : gpu-b03  rank : 5 (local_rank: 1)  exitcode : 1 (pid: 777)  error_file: <N/A>  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
"""


def _failures(text: str) -> list[ChildFailure]:
    result = read_input(InputSource(name="summary.log", path=None, data=text.encode()))
    return [e for e in result.events if isinstance(e, ChildFailure)]


def test_an_ocr_flattened_summary_names_rank_host_pid_and_signal() -> None:
    (failure,) = _failures(OCR)
    assert (failure.rank, failure.local_rank, failure.host, failure.pid) == (2, 2, "node-a7", 36071)
    assert (failure.exitcode, failure.signal, failure.root_cause) == (-9, "SIGKILL", True)
    assert failure.time == "2023-09-14 01:45:50"


def test_every_line_of_the_broken_summary_is_recognized() -> None:
    result = read_input(InputSource(name="summary.log", path=None, data=OCR.encode()))
    assert result.summary.unrecognized == 0, result.unrecognized_samples


def test_fields_without_a_summary_around_them_are_not_taken() -> None:
    text = "host\nnode-a7\nrank2 (local rank: 2)exitcode: -9 (pid: 36071)\n"
    assert _failures(text) == []


def test_a_summary_entry_on_one_line_is_read() -> None:
    failures = _failures(RUN_TOGETHER)
    assert [(f.rank, f.host, f.pid, f.exitcode) for f in failures] == [(5, "gpu-b03", 777, 1)]
