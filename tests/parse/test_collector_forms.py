"""Who wrote a line, as the tool that collected it says: container log prefixes, log-store
exports, torchelastic's error file and a kernel log's file name.

Each form is how an on-call engineer gets a job's output when there is no per-rank file:
``kubectl logs --prefix``, ``docker compose logs``, a CloudWatch Logs Insights CSV, the
``error.json`` torchrun points at, ``dmesg -T > node03-dmesg.txt``.
"""

from __future__ import annotations

import json

import pytest

from logsleuth.model.base import host_in_file_name
from logsleuth.model.stacks import StackDump
from logsleuth.model.torch import PythonTraceback
from logsleuth.parse.discover import InputSource
from logsleuth.parse.dispatch import InputResult, read_input

WATCHDOG = (
    "[rank{rank}]:[E1123 09:40:00.000000 20{rank} torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:632] "
    "[PG ID 0 PG GUID 0(default_pg) Rank {rank}] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=88, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for "
    "1800092 milliseconds before timing out."
)


def read(text: str, name: str = "paste.log") -> InputResult:
    return read_input(InputSource(name=name, path=None, data=text.encode()))


def origins(result: InputResult) -> list[tuple[str, str | None, int | None]]:
    return [(type(e).__name__, e.origin.host, e.origin.rank) for e in result.events]


def test_a_kubectl_prefix_names_the_pod_as_the_host_of_every_line() -> None:
    text = (
        "[pod/train-worker-1/pytorch] " + WATCHDOG.format(rank=2) + "\n"
        "[pod/train-worker-1/pytorch] Traceback (most recent call last):\n"
        '[pod/train-worker-1/pytorch]   File "/workspace/train.py", line 180, in main\n'
        "[pod/train-worker-1/pytorch]     batch = next(it)\n"
        "[pod/train-worker-1/pytorch] RuntimeError: DataLoader worker (pid 873) is killed by "
        "signal: Bus error.\n"
    )
    result = read(text)
    assert origins(result) == [
        ("WatchdogTimeout", "train-worker-1", 2),
        ("PythonTraceback", "train-worker-1", None),
    ]
    assert result.summary.unrecognized == 0


@pytest.mark.parametrize(
    "name", ["trainer-1", "proj-trainer-1", "trainer_1"], ids=["v2", "v2 project", "v1"]
)
def test_a_compose_prefix_names_the_container_as_the_host(name: str) -> None:
    pad = " " * (18 - len(name))
    text = (
        f"{name}{pad}| Fatal Python error: Segmentation fault\n"
        f"{name}{pad}|\n"
        f"{name}{pad}| Current thread 0x00007f2a1c9ff740 (most recent call first):\n"
        f'{name}{pad}|   File "/app/model/attention.py", line 311 in forward\n'
        f"{name} exited with code 139\n"
    )
    result = read(text)
    (dump,) = [e for e in result.events if isinstance(e, StackDump)]
    assert dump.origin.host == name
    assert [f.func for t in dump.threads for f in t.frames] == ["forward"]
    assert result.summary.unrecognized == 0


@pytest.mark.parametrize("line", ["Rank | Status | Host", "a | b", "loss 2.3 | lr 1e-4 | step 100"])
def test_a_table_row_is_no_compose_prefix(line: str) -> None:
    result = read(line + "\n")
    assert all(e.origin.host is None for e in result.events)


def test_a_cloudwatch_insights_export_reads_the_at_message_column() -> None:
    # Logs Insights names its own fields with an "@"; the message is quoted CSV ("" inside).
    text = (
        "@timestamp,@logStream,@message\n"
        '2026-11-20 10:02:10.000,algo-1,"[1,mpirank:0,algo-1]<stderr>:  File ""/opt/ml/code/'
        'train.py"", line 88, in <module>"\n'
        '2026-11-20 10:02:11.000,algo-2,"[1,mpirank:1,algo-2]<stderr>:algo-2:77:77 [0] '
        "misc/socket.cc:50 NCCL WARN Call to recv from 10.0.210.3<41034> failed : Connection "
        'reset by peer"\n'
    )
    result = read(text, "logs-insights-results.csv")
    warns = [e for e in result.events if type(e).__name__ == "NcclWarn"]
    assert [(w.origin.host, w.origin.rank, w.message) for w in warns] == [
        (
            "algo-2",
            1,
            "Call to recv from 10.0.210.3<41034> failed : Connection reset by peer",
        )
    ]


def test_torchelastic_error_file_gives_the_error_and_its_traceback() -> None:
    error = {
        "message": {
            "message": "RuntimeError: CUDA error: an illegal memory access was encountered\n",
            "extraInfo": {
                "py_callstack": (
                    "Traceback (most recent call last):\n"
                    '  File "/workspace/train.py", line 140, in main\n'
                    "    out = model(x)\n"
                    "RuntimeError: CUDA error: an illegal memory access was encountered\n"
                ),
                "timestamp": "1763892000",
            },
        }
    }
    result = read(json.dumps(error, indent=2) + "\n", "error.json")
    (trace,) = [e for e in result.events if isinstance(e, PythonTraceback)]
    assert trace.frames == (("/workspace/train.py", 140, "main"),)
    assert trace.exc_message == "CUDA error: an illegal memory access was encountered"


@pytest.mark.parametrize(
    ("name", "host"),
    [
        ("node03-dmesg.txt", "node03"),
        ("dmesg_gpu-a100-07.log", "gpu-a100-07"),
        ("logs/node03/dmesg.txt", "node03"),
        ("node7.kern.log", "node7"),
        ("journal-node12.json", "node12"),
        ("dmesg-20261123.txt", None),
        ("logs/dmesg.txt", None),
        ("kern.log", None),
        ("worker-3.log", None),
        ("trainer.log", None),
    ],
)
def test_a_kernel_logs_file_name_gives_its_host(name: str, host: str | None) -> None:
    assert host_in_file_name(name) == host


def test_a_dmesg_file_named_for_its_host_gives_the_host_of_its_lines() -> None:
    text = (
        "[Mon Nov 23 10:01:55 2026] mlx5_core 0000:3b:00.0 ibp59s0: Link down\n"
        "Nov 23 10:01:56 other-host kernel: mlx5_core 0000:3b:00.0 ibp59s0: Link up\n"
    )
    result = read(text, "node03-dmesg.txt")
    # The line's own host wins over the file name's.
    assert [e.origin.host for e in result.events] == ["node03", "other-host"]
    assert result.summary.unrecognized == 0
