"""Lines a log collector exported inside JSON or CSV read as the lines they hold.

Docker's json-file driver, ``journalctl -o json``, ``gcloud logging read --format json`` and
Datadog's CSV export each wrap a log line in quotes and fields of their own; the readers
must see the line, and the collector's fields (time, host, pid) must say who wrote it.
"""

from __future__ import annotations

import csv
import io
import json

import pytest

from logsleuth.model.stacks import StackDump
from logsleuth.model.torch import LauncherEvent, PythonTraceback, WatchdogProgress
from logsleuth.parse.discover import InputSource
from logsleuth.parse.dispatch import InputResult, read_input
from logsleuth.parse.envelope import Envelope, detect_envelope

PROGRESS = (
    "[rank{rank}]:[E1124 02:11:09.118344412 ProcessGroupNCCL.cpp:1576] [PG ID 0 PG GUID "
    "0(default_pg) Rank {rank}] Exception (either an error or timeout) detected by watchdog "
    "at work: {work}, last enqueued NCCL work: {work}, last completed NCCL work: {done}.\n"
)


def read(text: str, name: str = "export") -> InputResult:
    return read_input(InputSource(name=name, path=None, data=text.encode()))


def docker(line: str, when: str = "2024-11-24T02:11:09.118344Z") -> str:
    """One record of Docker's json-file log driver."""
    return json.dumps({"log": line, "stream": "stderr", "time": when}, separators=(",", ":"))


def test_dockers_json_file_log_reads_as_the_lines_it_holds() -> None:
    records = [
        docker(PROGRESS.format(rank=rank, work=work, done=work - 1))
        for rank, work in ((0, 5001), (1, 5001), (2, 5000))
    ]
    result = read("\n".join(records) + "\n")
    progress = [e for e in result.events if isinstance(e, WatchdogProgress)]
    assert [(e.rank, e.last_enqueued) for e in progress] == [(0, 5001), (1, 5001), (2, 5000)]
    # The record's time is the line's when the line has none of its own.
    assert progress[0].origin.time == pytest.approx(1732414269.118344)
    summary = result.summary
    assert (summary.lines, summary.recognized + summary.unrecognized + summary.blank) == (3, 3)


def test_a_record_holding_several_lines_is_read_whole_and_counted_once() -> None:
    # fluent-bit's multiline parser joins a traceback into one record; journald keeps the
    # writer's host and pid in fields of its own.
    traceback = (
        "Traceback (most recent call last):\n"
        '  File "/app/train.py", line 211, in <module>\n'
        "    loss = model(batch).loss\n"
        "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    )
    record = {
        "MESSAGE": traceback,
        "_HOSTNAME": "gpu-node-4",
        "_PID": "4242",
        "__REALTIME_TIMESTAMP": "1732414269118344",
    }
    result = read(json.dumps(record) + "\n" + json.dumps({**record, "MESSAGE": ""}) + "\n")
    (raised,) = [e for e in result.events if type(e).__name__ == "PythonTraceback"]
    assert raised.exc_type == "RuntimeError"
    assert (raised.origin.host, raised.origin.pid, raised.ref.line) == ("gpu-node-4", 4242, 1)
    assert raised.origin.time == pytest.approx(1732414269.118344)
    summary = result.summary
    assert (summary.lines, summary.recognized, summary.blank) == (2, 1, 1)


def test_a_pretty_printed_export_reads_its_message_fields() -> None:
    entries = [
        {
            "resource": {"labels": {"pod_name": "llm-worker-0"}},
            "severity": "ERROR",
            "textPayload": '[rank3]:   File "/app/train.py", line 211, in <module>',
        },
        {"severity": "ERROR", "textPayload": "[rank3]: Fatal Python error: Segmentation fault"},
    ]
    result = read(json.dumps(entries, indent=2) + "\n")
    (dump,) = [e for e in result.events if isinstance(e, StackDump)]
    assert (dump.origin.rank, dump.reason) == (3, "Fatal Python error: Segmentation fault")
    # The escaped quotes of the frame line are the program's quotes again.
    assert any('File "/app/train.py"' in e.text for e in result.events)
    summary = result.summary
    assert summary.lines == summary.recognized + summary.unrecognized + summary.blank


def test_a_json_array_of_lines_reads_as_the_lines() -> None:
    # A notebook's stream output (``"text": [...]``), or a script's json.dumps of its lines.
    lines = [
        "Traceback (most recent call last):\n",
        '  File "/workspace/train.py", line 88, in main\n',
        "    dist.all_reduce(t)\n",
        "RuntimeError: NCCL communicator was aborted on rank 3.\n",
    ]
    text = '   "text": [\n' + ",\n".join(f"    {json.dumps(line)}" for line in lines) + "\n   ]\n"
    assert detect_envelope(text.splitlines()) == Envelope("json-fields")
    result = read(text)
    (traceback,) = [e for e in result.events if isinstance(e, PythonTraceback)]
    assert traceback.exc_type == "RuntimeError"
    assert traceback.frames == (("/workspace/train.py", 88, "main"),)
    summary = result.summary
    assert summary.lines == summary.recognized + summary.unrecognized + summary.blank


ROWS = [
    ("Date", "Host", "Service", "Message"),
    (
        "2024-11-24T02:10:58.001Z",
        "gpu-node-3",
        "trainer",
        "[rank27]: Fatal Python error: Segmentation fault",
    ),
    (
        "2024-11-24T02:11:01.500Z",
        "gpu-node-3",
        "trainer",
        "[2024-11-24 02:11:01,500] torch.distributed.elastic.multiprocessing.api: [ERROR] "
        "failed (exitcode: -11) local_rank: 3 (pid: 4242) of binary: /usr/bin/python3",
    ),
    ("2024-11-24T02:11:09.118Z", "gpu-node-6", "trainer", '[rank48]: RuntimeError: said "no"'),
]


@pytest.mark.parametrize("delimiter", [",", "\t"])
def test_a_csv_export_reads_its_message_column_and_its_host(delimiter: str) -> None:
    out = io.StringIO()
    csv.writer(out, delimiter=delimiter, lineterminator="\n").writerows(ROWS)
    text = out.getvalue()
    assert '""no""' in text  # the export doubles the quotes inside a field
    result = read(text)
    (failed,) = [e for e in result.events if isinstance(e, LauncherEvent)]
    assert (failed.action, failed.exitcode, failed.local_rank, failed.pid) == (
        "failed",
        -11,
        3,
        4242,
    )
    assert failed.origin.host == "gpu-node-3"
    (dump,) = [e for e in result.events if isinstance(e, StackDump)]
    assert (dump.origin.rank, dump.origin.host) == (27, "gpu-node-3")
    # A doubled quote inside a field is one quote of the message.
    assert any(e.text.endswith('RuntimeError: said "no"') for e in result.events)


@pytest.mark.parametrize(
    ("sample", "form"),
    [
        ([docker("x\n"), docker("y\n")], "json-lines"),
        (['{"level":"info","msg":"step 4"}', "a plain line", '{"msg":"step 5"}'], "json-lines"),
        (["[", "  {", '    "textPayload": "x",', "  }", "]"], "json-fields"),
        (["time,host,message", "1,a,x"], "csv"),
        (["Date\tHost\tMessage", "1\ta\tx"], "csv"),
        (['time="2024-09-02T10:14:02Z" level=info msg="Reconciling" job=a/b'], "logfmt"),
    ],
)
def test_an_envelope_is_found_by_its_shape(sample: list[str], form: str) -> None:
    found = detect_envelope(sample)
    assert found is not None and found.form == form


@pytest.mark.parametrize(
    "sample",
    [
        ["gpu-a01:4721:4790 [0] NCCL INFO Channel 00/02 : 0 1", "NCCL version 2.21.5+cuda12.4"],
        ['{"step": 4, "loss": 2.1}', '{"step": 5, "loss": 2.0}'],  # metrics, no message
        ["[", "  1,", "  2", "]"],
        ["rank,loss", "0,2.1"],  # a table without a message column
        ["a, b, message", "RuntimeError: x, y"],  # prose that only looks like a header
        ["NCCL_DEBUG=INFO NCCL_SOCKET_IFNAME=eth0", "NCCL_IB_HCA=mlx5"],  # settings, no message
    ],
)
def test_a_log_that_is_no_envelope_is_left_as_it_is(sample: list[str]) -> None:
    assert detect_envelope(sample) is None


def test_a_line_outside_the_envelope_is_read_as_it_stands() -> None:
    envelope = Envelope("json-lines")
    assert envelope.open("NCCL WARN not json") is None
    assert envelope.open('{"no": "message"}') is None
    csv = Envelope("csv", ("date", "message"))
    assert csv.open("date,message") is None  # the header itself
    assert csv.open('2024,"a field that goes on') is None


def test_a_logfmt_line_reads_as_its_message_and_names_its_host() -> None:
    line = (
        'time="2024-11-24T02:11:09Z" level=error host=gpu-b07 pid=4242 msg="'
        + PROGRESS.format(rank=3, work=41, done=40).rstrip("\n").replace('"', '\\"')
        + '" component=trainer\n'
    )
    result = read(line * 2)
    progress = [e for e in result.events if isinstance(e, WatchdogProgress)]
    assert [(p.rank, p.last_enqueued) for p in progress] == [(3, 41), (3, 41)]
    assert {(p.origin.host, p.origin.pid) for p in progress} == {("gpu-b07", 4242)}
    assert result.summary.unrecognized == 0


def test_a_structlog_record_reads_as_its_event_and_the_traceback_it_logged() -> None:
    # structlog's JSON renderer puts the message in "event" and format_exc_info the
    # traceback in "exception"; the rank is a field the job binds to its logger.
    record = {
        "timestamp": "2024-07-19T08:12:44.882Z",
        "level": "error",
        "rank": 3,
        "event": "train step failed",
        "exception": "Traceback (most recent call last):\n"
        '  File "/app/trainer/loop.py", line 211, in run\n'
        "    loss = self.step(batch)\n"
        "RuntimeError: CUDA error: an illegal memory access was encountered",
    }
    other = {"timestamp": "2024-07-19T08:00:01.002Z", "level": "info", "rank": 0, "event": "go"}
    result = read("\n".join(json.dumps(r) for r in (other, record)) + "\n")
    (traceback,) = [e for e in result.events if type(e).__name__ == "PythonTraceback"]
    assert traceback.origin.rank == 3
    assert "illegal memory access" in traceback.exc_message
