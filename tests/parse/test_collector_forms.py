"""Who wrote a line, as the tool that collected it says: container log prefixes, log-store
exports, torchelastic's error file and a kernel log's file name.

Each form is how an on-call engineer gets a job's output when there is no per-rank file:
``kubectl logs --prefix``, ``docker compose logs``, a CloudWatch Logs Insights CSV, the
``error.json`` torchrun points at, ``dmesg -T > node03-dmesg.txt``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from logsleuth.api import analyze
from logsleuth.model.base import host_in_file_name
from logsleuth.model.stacks import StackDump
from logsleuth.model.torch import PythonTraceback, WatchdogTimeout
from logsleuth.parse.discover import InputSource
from logsleuth.parse.dispatch import InputResult, read_input
from logsleuth.parse.hostnames import renames
from logsleuth.report.common import overview_rows
from logsleuth.report.json import build_json

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
        # A host tool's output saved per host.
        ("ibstat-gpu-node-12.txt", "gpu-node-12"),
        ("gpu-node-9/ibv_devinfo.txt", "gpu-node-9"),
        ("nvidia-smi_node3.log", "node3"),
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


WATCHDOGS = [WATCHDOG.format(rank=r) for r in (0, 1, 3)]


@pytest.mark.parametrize(
    ("lines", "name"),
    [
        ([f"10:10:0{n}  {w}" for n, w in enumerate(WATCHDOGS)], "console.txt"),
        ([f"00:00:1{n}.234 {w}" for n, w in enumerate(WATCHDOGS)], "console.txt"),
        ([f"\x1b_bk;t=17638926000{n}0\x07{w}" for n, w in enumerate(WATCHDOGS)], "build.log"),
        ([f"\x1b]8;;https://ci/x\x1b\\{w}\x1b]8;;\x1b\\" for w in WATCHDOGS], "build.log"),
        (
            ['"@timestamp";"host.name";"message"']
            + [f'"Nov 23, 2026 @ 10:10:00.000";"gpu{n}";"{w}"' for n, w in enumerate(WATCHDOGS)],
            "export.csv",
        ),
    ],
    ids=["jenkins timestamper", "elapsed time", "buildkite time", "terminal link", "csv with ;"],
)
def test_a_ci_or_export_wrapper_leaves_the_lines_it_wraps(lines: list[str], name: str) -> None:
    result = read("\n".join(lines) + "\n", name)
    assert [(type(e).__name__, e.origin.rank) for e in result.events] == [
        ("WatchdogTimeout", 0),
        ("WatchdogTimeout", 1),
        ("WatchdogTimeout", 3),
    ]
    assert result.summary.unrecognized == 0


def test_stern_names_the_pod_of_every_line() -> None:
    pods = ["train-master-0", "train-worker-0", "train-worker-1"]
    lines = [f"{pod} pytorch {WATCHDOG.format(rank=r)}" for r, pod in enumerate(pods)]
    lines += [
        "train-worker-1 pytorch Traceback (most recent call last):",
        'train-worker-1 pytorch   File "/workspace/train.py", line 180, in main',
        "train-worker-1 pytorch torch.OutOfMemoryError: CUDA out of memory.",
    ]
    result = read("\n".join(lines) + "\n")
    assert origins(result) == [
        ("WatchdogTimeout", "train-master-0", 0),
        ("WatchdogTimeout", "train-worker-0", 1),
        ("WatchdogTimeout", "train-worker-1", 2),
        ("PythonTraceback", "train-worker-1", None),
    ]


def test_sentences_are_no_stern_prefix() -> None:
    text = "loss-scale is now 1024\nloss-scale is now 512\nloss-scale is now 256\n"
    result = read(text)
    assert all(e.origin.host is None for e in result.events)


XID = (
    "[Mon Nov 23 09:59:12 2026] NVRM: Xid (PCI:0000:b5:00): 79, pid=48812, name=python, GPU "
    "has fallen off the bus."
)


@pytest.mark.parametrize(
    "headers",
    [
        ("[1] 10:00:00 [SUCCESS] node1", "[2] 10:00:00 [FAILURE] node3 Exited with error code 1"),
        ("node1 | CHANGED | rc=0 >>", "node3 | FAILED | rc=1 >>"),
    ],
    ids=["pssh -i", "ansible"],
)
def test_a_parallel_shells_host_header_names_the_host_of_the_lines_below(
    headers: tuple[str, str],
) -> None:
    first, second = headers
    text = f"{first}\n[Mon Nov 23 09:58:00 2026] NVRM: GPU at PCI:0000:3b:00: GPU-1111\n{second}\n{XID}\n"
    result = read(text)
    xid = [e for e in result.events if "Xid" in e.text]
    assert [e.origin.host for e in xid] == ["node3"]
    assert result.summary.unrecognized == 0


def test_a_word_wrapped_message_behind_a_compose_prefix_is_joined() -> None:
    # A terminal wrapped the timeout at its blanks; compose prefixed every piece.
    pieces = [
        "failure was: [Rank 0] Watchdog caught collective operation timeout: ",
        "WorkNCCL(SeqNum=2059, OpType=ALLGATHER, Timeout(ms)=1800000) ran for 1801398 ",
        "milliseconds before timing out.",
    ]
    result = read("".join(f"trainer-1  | {p}\n" for p in pieces))
    (timeout,) = [e for e in result.events if isinstance(e, WatchdogTimeout)]
    assert (timeout.rank, timeout.seq, timeout.op_type) == (0, 2059, "ALLGATHER")
    assert timeout.origin.host == "trainer-1"


@pytest.mark.parametrize(
    "header",
    ["[NeMo E 2026-11-23 10:20:00 nemo_logging:405]", "[I 10:20:00 trainer:88]"],
)
def test_a_loggers_module_and_line_in_its_header_is_no_host_and_pid(header: str) -> None:
    text = (
        f"{header} [rank2]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
        "1.50 GiB. GPU 2 has a total capacity of 79.15 GiB of which 312.00 MiB is free.\n"
    )
    (event,) = read(text).events
    assert (event.origin.host, event.origin.pid, event.origin.rank) == (None, None, 2)


def test_a_host_and_pid_before_a_message_still_name_its_writer() -> None:
    text = (
        "[gpu-node-3:41234] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB.\n"
    )
    (event,) = read(text).events
    assert (event.origin.host, event.origin.pid) == ("gpu-node-3", 41234)


NCCL_TESTS_HEAD = (
    "# nThread 1 nGpus 2 minBytes 8 maxBytes 1048576 step: 2(factor) warmup iters: 5 iters: 20\n"
    "#   Rank  0 Pid  12877 on 8c1f0a2b3d4e device  0 [0x0e] NVIDIA A100-SXM4-80GB\n"
    "8c1f0a2b3d4e:12877:12877 [0] NCCL INFO Bootstrap : Using eth0:172.18.0.3<0>\n"
    "8c1f0a2b3d4e:12877:12877 [0] NCCL INFO NET/Socket : Using [0]eth0:172.18.0.3<0>\n"
)
NCCL_TESTS_END = "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 21.3125\n"


def _composed(text: str) -> str:
    return "".join(f"trainer-1  | {line}\n" for line in text.splitlines())


def test_a_collectors_name_and_nccls_hostname_on_one_line_are_recorded_as_one_machine() -> None:
    result = read(_composed(NCCL_TESTS_HEAD))
    assert result.host_aliases == (("trainer-1", "8c1f0a2b3d4e"),)
    # A section label standing in for a host ("Rank A") is no machine's name.
    labelled = read("Rank A:\n" + NCCL_TESTS_HEAD)
    assert labelled.host_aliases == ()


def test_a_closing_summary_behind_a_collectors_prefix_proves_the_nccl_process_healthy(
    tmp_path: Path,
) -> None:
    # docker compose names the container trainer-1; its NCCL lines name the container's
    # hostname. The summary, pasted as a second excerpt, is the same machine's.
    (tmp_path / "head.log").write_text(_composed(NCCL_TESTS_HEAD))
    (tmp_path / "end.log").write_text(_composed(NCCL_TESTS_END))
    diagnosis = analyze([str(tmp_path)]).diagnosis
    assert diagnosis.verdict.kind == "healthy"
    # Without the summary nothing proves it.
    (tmp_path / "end.log").unlink()
    assert analyze([str(tmp_path)]).diagnosis.verdict.kind == "inconclusive"


@pytest.mark.parametrize(
    ("pairs", "expected"),
    [
        ([("trainer-1", "8c1f0a2b3d4e")], {"trainer-1": "8c1f0a2b3d4e"}),
        ([("trainer-1", "a"), ("trainer-1", "b")], {}),  # one container, two machines?
        ([("trainer-1", "a"), ("trainer-2", "a")], {}),  # two names claim one machine
    ],
)
def test_only_a_one_to_one_pairing_renames_a_host(
    pairs: list[tuple[str, str]], expected: dict[str, str]
) -> None:
    assert renames(pairs) == expected


def test_the_report_says_which_collector_name_a_hostname_stands_for(tmp_path: Path) -> None:
    # The verdict names NCCL's hostname; the reader may know the machine by its service only.
    (tmp_path / "compose.log").write_text(
        "trainer-1  | a1b2c3:212:212 [0] NCCL INFO Bootstrap : Using eth0:172.18.0.2<0>\n"
        "trainer-1  | a1b2c3:212:240 [0] misc/socket.cc:49 NCCL WARN socketProgress: "
        "Connection closed by remote peer d4e5f6<50321>\n"
        "trainer-1  | RuntimeError: boom\n"
    )
    diagnosis = analyze([str(tmp_path)]).diagnosis
    assert diagnosis.job.host_aliases == (("a1b2c3", ("trainer-1",)),)
    assert ("hosts also named", "a1b2c3 is trainer-1") in overview_rows(diagnosis)
    job = build_json(diagnosis)["job"]
    assert isinstance(job, dict) and job["host_aliases"] == {"a1b2c3": ["trainer-1"]}


def test_a_stream_tag_is_no_torchrun_role_when_a_line_stands_behind_it() -> None:
    # Azure ML and other collectors tag each line with its stream, as torchrun tags its
    # agent's messages with the worker role: the line behind the tag is read as itself.
    text = (
        "[stderr] 2024-06-01 10:00:00,001 [rank4]: torch.OutOfMemoryError: CUDA out of memory. "
        "Tried to allocate 20.00 MiB.\n"
        "[stderr] " + WATCHDOG.format(rank=2) + "\n"
        "[default] Starting worker group\n"
    )
    result = read(text)
    assert [type(e).__name__ for e in result.events] == [
        "LogMessage",
        "WatchdogTimeout",
        "LauncherEvent",
    ]
    assert [e.origin.rank for e in result.events[:2]] == [4, 2]
