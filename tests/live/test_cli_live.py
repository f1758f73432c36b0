"""How ``logsleuth live`` reads its command line: the job's own options stay the job's."""

from __future__ import annotations

from logsleuth.cli import build_parser


def test_everything_after_the_double_dash_is_the_job() -> None:
    args = build_parser().parse_args(
        ["live", "--out", "b", "--stall-timeout", "30", "--", "torchrun", "--nproc_per_node",
         "4", "train.py", "--out", "ckpt"]
    )  # fmt: skip
    assert (args.out, args.stall_timeout) == ("b", 30.0)
    assert args.job == ["--", "torchrun", "--nproc_per_node", "4", "train.py", "--out", "ckpt"]


def test_live_defaults() -> None:
    args = build_parser().parse_args(["live", "torchrun", "train.py"])
    assert args.job == ["torchrun", "train.py"]
    assert (args.out, args.stall_timeout, args.keep_running) == (None, 60.0, False)
    assert (args.nccl_subsys, args.distributed_debug, args.nproc, args.backend) == (
        "INIT,COLL,NET",
        False,
        None,
        None,
    )


def test_the_dump_hook_is_on_unless_switched_off() -> None:
    assert build_parser().parse_args(["live", "python", "t.py"]).no_dump_hook is False
    args = build_parser().parse_args(["live", "--no-dump-hook", "--", "python", "t.py"])
    assert (args.no_dump_hook, args.job) == (True, ["--", "python", "t.py"])
