"""The command line's shape: global options anywhere, completion, colour and width, help."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from logsleuth.cli import build_parser, main

ROOT = Path(__file__).resolve().parent.parent
CASE = ROOT / "fixtures" / "real" / "corpus" / "003-ci-pod-dev-shm-exhausted" / "combined.log"


@pytest.mark.parametrize(
    "argv",
    [
        ["--debug", "analyze", "x.log"],
        ["analyze", "--debug", "x.log"],
        ["analyze", "x.log", "--debug"],
    ],
)
def test_debug_works_before_or_after_the_subcommand(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    assert (args.command, args.debug, args.paths) == ("analyze", True, ["x.log"])


def test_debug_is_off_unless_given() -> None:
    for argv in (["analyze", "x.log"], ["explain"], ["repro", "list"], ["schema"]):
        assert build_parser().parse_args(argv).debug is False


def test_global_debug_reaches_the_error_handler(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``logsleuth --debug analyze`` (the form --help shows) prints the traceback of a bug."""
    import logsleuth.api

    def broken(paths: object, stdin: object = None, **options: object) -> object:
        raise RuntimeError("boom")

    monkeypatch.setattr(logsleuth.api, "analyze", broken)
    assert main(["--debug", "analyze", str(CASE)]) == 3
    err = capsys.readouterr().err
    assert "Traceback" in err and "RuntimeError: boom" in err
    assert main(["analyze", str(CASE)]) == 3
    assert "Traceback" not in capsys.readouterr().err


def test_every_subcommand_help_has_examples() -> None:
    parser = build_parser()
    assert "examples:" in parser.format_help()
    for action in parser._subparsers._group_actions:  # type: ignore[union-attr]
        for name, sub in action.choices.items():  # type: ignore[union-attr]
            assert "examples:" in sub.format_help(), name


def _bash_complete(script: str, line: str) -> list[str]:
    words = line.split(" ")
    program = (
        f"{script}\nCOMP_WORDS=({' '.join(repr(w) for w in words)}); "
        f"COMP_CWORD={len(words) - 1}; _logsleuth_complete; printf '%s\\n' \"${{COMPREPLY[@]}}\""
    )
    done = subprocess.run(
        ["bash", "-c", program], capture_output=True, text=True, check=True, cwd=ROOT
    )
    return done.stdout.split()


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_completion_follows_the_parser(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", "bash"]) == 0
    script = capsys.readouterr().out
    assert _bash_complete(script, "logsleuth ") == [
        "analyze", "completion", "coverage", "explain", "live", "pack", "repro", "schema",
    ]  # fmt: skip
    assert _bash_complete(script, "logsleuth analyze --fo") == ["--format"]
    assert _bash_complete(script, "logsleuth --debug analyze --format ") == [
        "text",
        "brief",
        "json",
    ]
    assert _bash_complete(script, "logsleuth repro ") == ["list", "run"]
    assert _bash_complete(script, "logsleuth live --capture") == ["--capture-only"]
    assert _bash_complete(script, "logsleuth analyze fixtures/de") == ["fixtures/demo"]


def test_zsh_completion_names_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", "zsh"]) == 0
    script = capsys.readouterr().out
    assert script.startswith("#compdef logsleuth\n")
    assert '"repro run") _arguments -s' in script
    assert "'--format[]:value:(text brief json)'" in script
    assert "local path" not in script  # zsh ties $path to $PATH: it would lose every command
    if shutil.which("zsh"):
        subprocess.run(["zsh", "-n"], input=script, text=True, check=True)


def _analyze(env: dict[str, str]) -> str:
    """Run analyze with a pseudo-terminal-free stdout and ``env`` on top of a clean one."""
    base = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "COLUMNS")}
    done = subprocess.run(
        [sys.executable, "-m", "logsleuth", "analyze", str(CASE)],
        capture_output=True,
        text=True,
        env={**base, "TERM": "xterm-256color", **env},
        check=False,
    )
    assert done.returncode == 1, done.stderr
    return done.stdout


def test_colour_and_width_follow_the_environment() -> None:
    plain = _analyze({})
    assert "\x1b[" not in plain
    assert max(map(len, plain.splitlines())) <= 100
    forced = _analyze({"FORCE_COLOR": "1"})
    assert "\x1b[" in forced
    assert "\x1b[" not in _analyze({"FORCE_COLOR": "1", "NO_COLOR": "1"})
    narrow = _analyze({"COLUMNS": "80"})
    assert max(map(len, narrow.splitlines())) <= 80 < max(map(len, plain.splitlines()))
