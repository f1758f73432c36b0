"""The command line. The only place that prints or exits: ``main(argv) -> int``."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

from logsleuth import __version__
from logsleuth.errors import (
    EXIT_FINDINGS,
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_USAGE,
    LogsleuthError,
    UsageError,
)
from logsleuth.model.diagnosis import Diagnosis

PROG = "logsleuth"


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors in one line with exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        sys.stderr.write(f"{PROG}: error: {message}\n")
        raise SystemExit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser for every subcommand."""
    parser = _Parser(
        prog=PROG,
        description="Tell why a distributed training job hung or died, from its NCCL logs, "
        "launcher logs and stack dumps.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of internal errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    analyze = sub.add_parser(
        "analyze",
        help="analyse logs and stack dumps and print the verdict",
        description="Analyse NCCL debug logs, torch/launcher logs and py-spy/faulthandler dumps "
        "(files, directories, .gz, or - for stdin) and print the root cause.",
    )
    analyze.add_argument("paths", nargs="+", metavar="PATH", help="file, directory, .gz file or -")
    analyze.add_argument("--html", metavar="FILE", help="write the self-contained HTML report here")
    analyze.add_argument(
        "--json", metavar="FILE", help="write the diagnosis JSON here ('-' for stdout)"
    )
    analyze.add_argument(
        "--format", choices=("text", "json"), default="text", help="what to print (default: text)"
    )
    analyze.add_argument("--quiet", action="store_true", help="print only the one-line verdict")
    analyze.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)

    explain = sub.add_parser(
        "explain",
        help="explain a finding code (LS101 ...); without a code, list them all",
        description="Print what a rule's finding means: symptom, likely causes, what to check.",
    )
    explain.add_argument("code", nargs="?", help="rule code (LS101) or name (collective.missing)")
    explain.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    return parser


def _exit_code(diagnosis: Diagnosis) -> int:
    if diagnosis.verdict.kind == "inconclusive":
        return EXIT_FINDINGS
    if any(f.severity in ("error", "critical") for f in diagnosis.findings):
        return EXIT_FINDINGS
    return EXIT_OK


def _write(path: str, text: str) -> None:
    target = Path(path)
    try:
        if target.parent and not target.parent.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{path}: cannot write: {exc.strerror or exc}") from exc


def _run_analyze(args: argparse.Namespace) -> int:
    from logsleuth.api import analyze
    from logsleuth.report.html import render_html
    from logsleuth.report.json import render_json
    from logsleuth.report.text import render_text

    result = analyze(args.paths)
    for problem in result.problems:
        sys.stderr.write(f"{PROG}: warning: {problem.name}: {problem.reason}\n")
    diagnosis = result.diagnosis
    json_to_stdout = args.json == "-" or args.format == "json"
    human = sys.stderr if json_to_stdout else sys.stdout
    if args.json and args.json != "-":
        _write(args.json, render_json(diagnosis))
    if args.html:
        _write(args.html, render_html(diagnosis))
    if json_to_stdout:
        sys.stdout.write(render_json(diagnosis))
    if args.quiet:
        verdict = diagnosis.verdict
        human.write(f"{verdict.kind}: {verdict.summary}\n")
    elif not (args.format == "json" and args.json != "-"):
        color = human.isatty() and "NO_COLOR" not in os.environ
        width = 100
        with contextlib.suppress(OSError, ValueError, AttributeError):
            width = max(80, min(140, os.get_terminal_size(human.fileno()).columns))
        human.write(render_text(diagnosis, width=width, color=color))
    if args.html and not args.quiet:
        human.write(f"report: {args.html}\n")
    return _exit_code(diagnosis)


def _run_explain(args: argparse.Namespace) -> int:
    from logsleuth.analysis.rules.registry import RULES, rule_by_code

    if not args.code:
        for each in RULES:
            sys.stdout.write(f"{each.code}  {each.name:<28} {each.kind:<22} {each.summary()}\n")
        return EXIT_OK
    rule = rule_by_code(args.code)
    if rule is None:
        codes = ", ".join(r.code for r in RULES)
        sys.stderr.write(f"{PROG}: error: unknown finding code {args.code!r} (known: {codes})\n")
        return EXIT_USAGE
    sys.stdout.write(rule.explain())
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the process exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code) if isinstance(exc.code, int) else EXIT_USAGE
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        if args.command == "analyze":
            return _run_analyze(args)
        return _run_explain(args)
    except LogsleuthError as exc:
        sys.stderr.write(f"{PROG}: error: {exc}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write(f"{PROG}: interrupted\n")
        return 130
    except Exception as exc:  # a bug: one line, the traceback only on request
        if args.debug:
            traceback.print_exc()
        sys.stderr.write(
            f"{PROG}: internal error: {type(exc).__name__}: {exc} (run with --debug for the traceback)\n"
        )
        return EXIT_INTERNAL
