"""Line cleaning and launcher/collector prefix stripping (NCCL spec sections 4.2 and 4.6)."""

from __future__ import annotations

import pytest

from logsleuth.model.base import Origin
from logsleuth.parse.clean import clean, strip_prefixes
from logsleuth.parse.numbering import detect_numbering, strip_numbering


def test_clean_removes_cr_nul_and_ansi() -> None:
    assert clean("\x1b[31mgpu:1:1 [0] NCCL INFO x\x1b[0m\r\n") == "gpu:1:1 [0] NCCL INFO x"
    assert clean("Thread 1 (idle)\x00\x00") == "Thread 1 (idle)"


def test_colour_codes_a_web_page_took_the_esc_from_are_removed() -> None:
    # Ray's coloured worker tag, copied from a rendered issue: the ESC bytes are gone.
    line = "[36m(RayTrainWorker pid=22071, ip=10.0.1.17)[0m [rank3]: RuntimeError: x"
    text, hint = strip_prefixes(clean(line))
    assert text == "RuntimeError: x"
    assert (hint.host, hint.pid, hint.rank) == ("10.0.1.17", 22071, 3)
    assert clean("[1;31mERROR[0m: failed") == "ERROR: failed"
    # Without a reset on the line, brackets and an m stay the writer's text.
    assert clean("waited [5m] for rank 3") == "waited [5m] for rank 3"
    bracketed = "failed to connect to [master-0.train]:29500 [0m"
    assert clean(bracketed) == "failed to connect to [master-0.train]:29500 "


@pytest.mark.parametrize(
    ("line", "text", "rank", "local_rank"),
    [
        (
            "[1,3]<stdout>:smc-gpu-03:29881:30401 [0] NCCL INFO init.cc:903 -> 5",
            "smc-gpu-03:29881:30401 [0] NCCL INFO init.cc:903 -> 5",
            3,
            None,
        ),
        (
            "[rank5]:[E207 19:37:09.983 ProcessGroupNCCL.cpp:681] [Rank 5] x",
            "[E207 19:37:09.983 ProcessGroupNCCL.cpp:681] [Rank 5] x",
            5,
            None,
        ),
        ("[default3]:python: boom", "python: boom", None, 3),
        (
            "[rank1]: torch.distributed.DistBackendError: NCCL error",
            "torch.distributed.DistBackendError: NCCL error",
            1,
            None,
        ),
    ],
)
def test_launcher_prefixes_become_hints(
    line: str, text: str, rank: int | None, local_rank: int | None
) -> None:
    stripped, hint = strip_prefixes(line)
    assert stripped == text
    assert hint.rank == rank
    assert hint.local_rank == local_rank


def test_sagemakers_mpi_tag_names_the_rank_and_the_host() -> None:
    text, hint = strip_prefixes("[1,mpirank:3,algo-2]<stderr>:Traceback (most recent call last):")
    assert text == "Traceback (most recent call last):"
    assert (hint.rank, hint.host) == (3, "algo-2")


def test_logurus_format_and_a_scripts_rank_tag_are_stripped() -> None:
    text, hint = strip_prefixes(
        "2024-06-11 09:12:44.902 | ERROR    | trainer.loop:run:240 - [rank 3] step failed"
    )
    assert text == "step failed"
    assert hint.rank == 3
    assert hint.time is not None


@pytest.mark.parametrize(
    "stamp",
    ["[2024-05-14, 03:12:40 UTC]", "[2024-05-14 03:12:40,118]", "[2023-01-05T10:44:37.355+0000]"],
)
def test_airflows_task_log_prefix_is_stripped(stamp: str) -> None:
    text, hint = strip_prefixes(f"{stamp} {{subprocess.py:93}} INFO - [rank5]: RuntimeError: x")
    assert text == "RuntimeError: x"
    assert hint.rank == 5
    assert hint.time is not None


@pytest.mark.parametrize(
    "head", ["2024-07-01 10:00:01,402 ERROR ", "2024-07-01 10:00:01,402 - train.loop - ERROR - "]
)
def test_python_loggings_usual_formats_are_stripped(head: str) -> None:
    text, hint = strip_prefixes(head + "[rank 5] Training step failed")
    assert text == "Training step failed"
    assert hint.rank == 5
    assert hint.time is not None


def test_collector_timestamps_are_stripped_and_kept() -> None:
    text, hint = strip_prefixes(
        "[2026-04-22 21:34:20] host:1:2 [0] misc/shmutils.cc:88 NCCL WARN Error"
    )
    assert text == "host:1:2 [0] misc/shmutils.cc:88 NCCL WARN Error"
    assert hint.time is not None
    text, hint = strip_prefixes(
        "2024-05-01T12:00:00.123456789Z gpu:1:1 [0] NCCL INFO Using network IB"
    )
    assert text == "gpu:1:1 [0] NCCL INFO Using network IB"
    assert hint.time is not None


def test_ray_prefix_and_repeat_suffix() -> None:
    text, hint = strip_prefixes(
        "(RayWorkerWrapper pid=1019) gpu:1019:1 [0] NCCL INFO x [repeated 12x across cluster]"
    )
    assert text == "gpu:1019:1 [0] NCCL INFO x"
    assert hint.pid == 1019


@pytest.mark.parametrize(
    ("line", "rank"),
    [
        ("[2023-09-14T10:31:02.551302Z] 6ad8a0d6 [rank=3] || RuntimeError: boom", 3),
        ("[2023-09-14T10:12:13.574297Z] 6ad8a0d6 || RuntimeError: boom", None),
    ],
)
def test_determineds_task_log_prefix_names_the_workers_rank(line: str, rank: int | None) -> None:
    text, hint = strip_prefixes(line)
    assert text == "RuntimeError: boom"
    assert hint.rank == rank
    assert hint.time is not None


def test_skypilot_prefix_is_stripped_without_its_shells_pid() -> None:
    # SkyPilot's rank is the node's and its pid the task shell's: neither is the writer's.
    # Its address is the node's: the host of the line.
    text, hint = strip_prefixes(
        "(worker1, rank=1, pid=2311, ip=10.0.0.5) gpu-w1:2390:2401 [7] NCCL INFO NET/IB : No "
        "device found."
    )
    assert text == "gpu-w1:2390:2401 [7] NCCL INFO NET/IB : No device found."
    assert (hint.pid, hint.rank, hint.host) == (None, None, "10.0.0.5")
    assert strip_prefixes("(head, rank=0, pid=2211) boom")[1].host == "head"


@pytest.mark.parametrize(
    ("line", "rank", "pid"),
    [
        (
            "(VllmWorker rank=1 pid=2302) ERROR 11-24 02:11:09 [multiproc_executor.py:470] boom",
            1,
            2302,
        ),
        ("(VllmWorker TP3 pid=2304) INFO 11-24 02:11:09 [gpu_worker.py:88] boom", 3, 2304),
        ("(Worker_TP2 pid=2303) WARNING 11-24 02:11:09 [utils.py:12] boom", 2, 2303),
        ("(Worker_PP1_TP2 pid=2303) WARNING 11-24 02:11:09 [utils.py:12] boom", None, 2303),
        ("INFO 05-14 10:00:00 llm_engine.py:161] boom", None, None),  # vLLM before 0.8
    ],
)
def test_vllms_worker_tag_and_logger_prefix_are_stripped(
    line: str, rank: int | None, pid: int | None
) -> None:
    text, hint = strip_prefixes(line)
    assert (text, hint.rank, hint.pid) == ("boom", rank, pid)
    assert hint.time is not None


def test_a_vllm_prefix_with_an_impossible_date_has_no_time() -> None:
    assert strip_prefixes("ERROR 13-45 02:11:09 [core.py:396] boom") == ("boom", Origin())


@pytest.mark.parametrize(
    ("prefix", "rank"),
    [
        ("[2025-02-24 14:09:34 TP5] ", 5),
        ("[2025-02-24 14:09:34 TP5 EP5] ", 5),
        ("[2025-02-24 14:09:34 PP1 TP5] ", None),
    ],
)
def test_sglangs_prefix_names_the_rank_when_tensor_parallel_alone(
    prefix: str, rank: int | None
) -> None:
    # With pipeline stages a TP rank repeats on every stage: it is no rank of the job.
    text, hint = strip_prefixes(prefix + "Scheduler hit an exception:")
    assert (text, hint.rank) == ("Scheduler hit an exception:", rank)
    assert hint.time is not None


def test_lokis_labels_after_the_time_are_stripped() -> None:
    text, hint = strip_prefixes(
        '2024-11-24T02:11:09.118Z {container="pytorch", pod="train-worker-0"} [rank1]: boom'
    )
    assert (text, hint.rank) == ("boom", 1)
    assert hint.time is not None


def test_viewer_line_numbers_only_when_the_file_is_numbered() -> None:
    numbered = [
        "-" * 20,
        "451 host:1:1 [6] NCCL INFO a",
        "452 host:1:1 [6] NCCL INFO b",
        "453 NCCL version 2.4.8+cuda10.0",
    ]
    assert detect_numbering(numbered) == "viewer"
    assert strip_prefixes(numbered[3], "viewer")[0] == "NCCL version 2.4.8+cuda10.0"
    # nccl-tests result rows start with numbers too, but they do not count up by one.
    rows = [
        "           8             2     float     sum",
        "          16             4     float     sum",
        "          32             8     float     sum",
    ]
    assert detect_numbering(rows) is None


def test_bracket_line_numbers_then_torchrun_prefix() -> None:
    lines = [
        "[80746] [rank0]:[E321 02:07:08.408 x.cpp:607] a",
        "[80747] [rank4]:[E321 02:07:08.414 x.cpp:607] b",
    ]
    assert detect_numbering(lines) == "bracket"
    text, hint = strip_prefixes(lines[1], "bracket")
    assert text == "[E321 02:07:08.414 x.cpp:607] b"
    assert hint.rank == 4


def test_a_loggers_stamp_on_every_line_goes_with_its_name_and_level() -> None:
    # A file logged through Python's logging: its time numbers the file, and the logger's
    # name and level behind it are part of the prefix (a stack dump's lines start after).
    lines = [
        f"2026-03-21 02:07:0{n},123 - trainer - INFO - {text}"
        for n, text in enumerate(
            ["Process 42: python train.py", "Thread 42 (idle)", "    f (x.py:3)"]
        )
    ]
    assert detect_numbering(lines) == "stamp"
    assert strip_numbering(lines[2], "stamp")[0] == "    f (x.py:3)"
    assert strip_numbering("2026-03-21 02:07:00 plain", "stamp")[0] == "plain"
    # A level column alone (``| INFO | ``), and Grafana/Loki's labels after a tab.
    assert strip_numbering("2026-03-21 02:07:00.123 | INFO |     f (x.py:3)", "stamp")[0] == (
        "    f (x.py:3)"
    )
    loki = '2026-03-21 02:07:00.123\t{container="trainer", pod="w-0"}\tThread 42 (idle)'
    assert strip_numbering(loki, "stamp")[0] == "Thread 42 (idle)"


def test_srun_labels() -> None:
    lines = [
        "3: gpu-a01:4721:4721 [0] NCCL INFO a",
        " 12: gpu-a02:4722:4722 [0] NCCL INFO b",
        "3: plain text",
    ]
    assert detect_numbering(lines) == "srun"
    text, hint = strip_prefixes(lines[1], "srun")
    assert text == "gpu-a02:4722:4722 [0] NCCL INFO b"
    assert hint.rank == 12


def test_a_viewers_wider_separator_keeps_the_texts_own_indentation() -> None:
    # vim's and many web viewers' numbers: right-aligned, then two blanks; a stack frame's
    # own indentation follows them.
    numbered = [
        '  1  Thread 4411 (active): "MainThread"',
        "  2      all_reduce (torch/distributed/distributed_c10d.py:2050)",
        "  3      train (train.py:88)",
        "  4  ",
    ]
    assert detect_numbering(numbered) == "viewer2"
    assert strip_prefixes(numbered[1], "viewer2")[0] == (
        "    all_reduce (torch/distributed/distributed_c10d.py:2050)"
    )
    assert detect_numbering([f"{n:>7} line {n}" for n in range(1, 5)]) == "viewer"


def test_grep_line_numbers_rise_with_gaps_and_name_the_file() -> None:
    grepped = [
        "logs/rank0.log:1523:[E1123 10:50:00.000 900 ProcessGroupNCCL.cpp:632] timeout",
        "logs/rank3.log:1401:Traceback (most recent call last):",
        'logs/rank3.log:1402-  File "train.py", line 212, in <module>',
        "logs/rank3.log:1410:torch.OutOfMemoryError: CUDA out of memory.",
    ]
    assert detect_numbering(grepped) == "grep"
    text, hint = strip_prefixes(grepped[3], "grep")
    assert (text, hint.rank) == ("torch.OutOfMemoryError: CUDA out of memory.", 3)
    assert detect_numbering(["1733:a", "1734:b", "2210:c"]) == "grep"
    # An NCCL line's host and pid after a dotted host name are no file and line number.
    nccl = [f"node1.cluster:4411:{4460 + n} [0] NCCL INFO line {n}" for n in range(4)]
    assert detect_numbering(nccl) is None


def test_srun_labels_repeat_line_numbers_do_not() -> None:
    assert detect_numbering(["3: a", "3: b", "0: c", "1: d"]) == "srun"
    assert detect_numbering(["101: a", "102: b", "140: c", "141: d"]) != "srun"
