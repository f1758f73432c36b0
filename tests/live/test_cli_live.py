"""How ``logsleuth live`` reads its command line: the job's own options stay the job's."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from logsleuth.cli import _out_dir, build_parser, main


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
    assert (args.out, args.stall_timeout, args.capture_only, args.node_agent) == (
        None,
        60.0,
        False,
        False,
    )
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


def test_capture_only_and_end_on_stall_are_explicit_and_exclusive() -> None:
    parse = build_parser().parse_args
    assert parse(["live", "--capture-only", "--", "python", "t.py"]).capture_only is True
    assert parse(["live", "--end-on-stall", "--", "python", "t.py"]).capture_only is False
    # The older name stays for scripts that used it.
    assert parse(["live", "--keep-running", "--", "python", "t.py"]).capture_only is True


def test_capture_only_with_end_on_stall_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["live", "--capture-only", "--end-on-stall", "--", "python", "t.py"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_node_agent_bundle_is_named_for_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    args = build_parser().parse_args(["live", "--node-agent", "--", "torchrun", "t.py"])
    assert _out_dir(args) == Path("logsleuth-live-4242") / socket.gethostname()
    args = build_parser().parse_args(["live", "--node-agent", "--out", "b/%h/x", "--", "t"])
    assert _out_dir(args) == Path("b") / socket.gethostname() / "x"
