"""The command line. The only place that prints or exits: ``main(argv) -> int``."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

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
from logsleuth.parse.discover import Problem

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
    analyze.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS
    )

    explain = sub.add_parser(
        "explain",
        help="explain a finding code (LS101 ...); without a code, list them all",
        description="Print what a rule's finding means: symptom, likely causes, what to check.",
    )
    explain.add_argument("code", nargs="?", help="rule code (LS101) or name (collective.missing)")
    explain.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS
    )

    live = sub.add_parser(
        "live",
        help="run a job with diagnostics on; when it stalls, capture every rank and diagnose",
        description="Run COMMAND (e.g. torchrun --nproc_per_node 4 train.py) with NCCL and torch "
        "diagnostics switched on. When no rank makes progress for --stall-timeout seconds, dump "
        "every rank's stacks, end the job, write a bundle into --out and print the verdict.",
        epilog="Progress is new output, growing NCCL debug files, a new process, a rank's "
        "main-thread stack that changed between py-spy samples (taken once the output has "
        "been quiet for a while), or CPU used by a process that is still starting up. "
        "Exit status as for analyze.",
    )
    _add_live_options(live)
    live.add_argument(
        "--nproc",
        type=_positive_int,
        metavar="N",
        help="run a plain .py COMMAND under torch.distributed.run with N ranks",
    )
    live.add_argument(
        "--backend",
        choices=("nccl", "gloo"),
        help="backend for the built-in repro scenarios (exported as LOGSLEUTH_BACKEND)",
    )
    live.add_argument("job", nargs=argparse.REMAINDER, metavar="-- COMMAND...")
    live.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS
    )

    repro = sub.add_parser(
        "repro",
        help="list or run the built-in fault scenarios (small torch.distributed jobs)",
        description="Built-in fault scenarios for demos and tests: gloo on CPU, NCCL on GPUs.",
    )
    repro_sub = repro.add_subparsers(dest="repro_command", metavar="list|run", parser_class=_Parser)
    repro_sub.add_parser("list", help="list the scenarios with one-line descriptions")
    run = repro_sub.add_parser(
        "run",
        help="run one scenario under torch.distributed.run (or under live mode with --live)",
        description="Run a scenario with --nproc ranks on this host.",
    )
    run.add_argument("name", metavar="NAME", help="scenario name (see: logsleuth repro list)")
    run.add_argument(
        "--nproc", type=_positive_int, default=4, metavar="N", help="ranks (default 4)"
    )
    run.add_argument(
        "--backend",
        choices=("nccl", "gloo"),
        help="default: nccl when CUDA is available, else gloo",
    )
    run.add_argument(
        "--culprit", type=int, default=None, metavar="RANK", help="the rank that misbehaves (1)"
    )
    run.add_argument("--live", action="store_true", help="run it under logsleuth live")
    _add_live_options(run)
    repro.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS
    )

    coverage = sub.add_parser(
        "coverage",
        help="count the lines logsleuth recognizes; list the ones it does not, by shape",
        description="Read logs and dumps like analyze does and report the events of each kind, "
        "the share of NCCL lines recognized, and the unrecognized lines grouped by shape.",
    )
    coverage.add_argument("paths", nargs="+", metavar="PATH", help="file, directory or .gz file")
    coverage.add_argument("--json", action="store_true", help="print JSON instead of a table")
    coverage.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS
    )
    return parser


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, not {text}")
    return value


def _add_live_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="bundle directory, new or empty (default: logsleuth-live-DATE-TIME)",
    )
    parser.add_argument(
        "--stall-timeout",
        type=_positive_float,
        default=60.0,
        metavar="SECONDS",
        help="no progress for this long is a stall (default 60)",
    )
    parser.add_argument(
        "--keep-running",
        action="store_true",
        help="leave the job running after the capture instead of ending it",
    )
    parser.add_argument(
        "--no-dump-hook",
        action="store_true",
        help="do not put logsleuth's start-up module on the job's PYTHONPATH (it makes a rank "
        "that dies of an exception or SIGTERM dump its flight recorder into OUT/fr/)",
    )
    parser.add_argument(
        "--nccl-subsys",
        default="INIT,COLL,NET",
        metavar="LIST",
        help="NCCL_DEBUG_SUBSYS for the job (default INIT,COLL,NET)",
    )
    parser.add_argument(
        "--distributed-debug",
        action="store_true",
        help="also set TORCH_DISTRIBUTED_DEBUG=DETAIL (slower; reports collective desyncs)",
    )


def _exit_code(diagnosis: Diagnosis) -> int:
    if diagnosis.verdict.kind == "inconclusive":
        return EXIT_FINDINGS
    if any(f.severity in ("error", "critical") for f in diagnosis.findings):
        return EXIT_FINDINGS
    return EXIT_OK


def _write(path: str, text: str) -> None:
    """Write ``text`` whole or not at all: a failed write leaves no half-written file."""
    target = Path(path)
    partial = target.with_name(f".{target.name}.partial")
    try:
        if target.parent and not target.parent.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(text, encoding="utf-8", errors="backslashreplace")
        partial.replace(target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            partial.unlink()
        raise UsageError(f"{_shown(path)}: cannot write: {exc.strerror or exc}") from exc


def _shown(text: str) -> str:
    """Return ``text`` fit for one terminal line: control characters made visible."""
    from logsleuth.parse.discover import display_name

    return display_name(text)


def _refuse_inputs(targets: Sequence[str | None], files: Sequence[Path]) -> None:
    """Refuse an output path that names one of the inputs: it would be overwritten."""
    for target in targets:
        if not target or target == "-" or not os.path.exists(target):
            continue
        for path in files:
            with contextlib.suppress(OSError):
                if os.path.samefile(target, path):
                    raise UsageError(
                        f"{_shown(target)}: is one of the inputs; refusing to overwrite it"
                    )


def _warn_problems(problems: Sequence[Problem], debug: bool) -> None:
    for problem in problems:
        if debug and problem.trace:
            sys.stderr.write(problem.trace)
        sys.stderr.write(f"{PROG}: warning: {_shown(problem.name)}: {_shown(problem.reason)}\n")


def _terminal_text(diagnosis: Diagnosis, stream: TextIO) -> str:
    from logsleuth.report.text import render_text

    color = stream.isatty() and "NO_COLOR" not in os.environ
    width = 100
    with contextlib.suppress(OSError, ValueError, AttributeError):
        width = max(80, min(140, os.get_terminal_size(stream.fileno()).columns))
    return render_text(diagnosis, width=width, color=color)


def _run_analyze(args: argparse.Namespace) -> int:
    from logsleuth.api import analyze
    from logsleuth.report.html import render_html
    from logsleuth.report.json import render_json

    for target in (args.json, args.html):
        if target and target != "-" and target in args.paths:
            raise UsageError(f"{_shown(target)}: is one of the inputs; refusing to overwrite it")
    result = analyze(args.paths)
    _refuse_inputs((args.json, args.html), result.files)
    _warn_problems(result.problems, args.debug)
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
        human.write(f"{verdict.kind}: {_shown(verdict.summary)}\n")
    elif not (args.format == "json" and args.json != "-"):
        human.write(_terminal_text(diagnosis, human))
    if args.html and not args.quiet:
        human.write(f"report: {args.html}\n")
    return _exit_code(diagnosis)


def _run_coverage(args: argparse.Namespace) -> int:
    from logsleuth.parse.coverage import coverage_json, measure_coverage, render_coverage

    result = measure_coverage(args.paths)
    if args.json:
        sys.stdout.write(coverage_json(result))
    else:
        width = 100
        with contextlib.suppress(OSError, ValueError, AttributeError):
            width = max(80, min(160, os.get_terminal_size(sys.stdout.fileno()).columns))
        text = render_coverage(result, width=width)
        sys.stdout.write("\n".join(_shown(line) for line in text.split("\n")))
    return EXIT_OK


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


def _default_out() -> Path:
    from datetime import datetime

    return Path(f"logsleuth-live-{datetime.now():%Y%m%d-%H%M%S}")


def _live(
    args: argparse.Namespace,
    command: Sequence[str],
    extra_env: dict[str, str],
    expected_ranks: int | None,
) -> int:
    from logsleuth.api import analyze
    from logsleuth.live.display import ConsoleReporter
    from logsleuth.live.session import LiveOptions, run_live
    from logsleuth.report.html import render_html
    from logsleuth.report.json import render_json

    out = Path(args.out) if args.out else _default_out()
    reporter = ConsoleReporter(sys.stderr, color=None if sys.stderr.isatty() else False)
    options = LiveOptions(
        command=tuple(command),
        out_dir=out,
        stall_timeout=args.stall_timeout,
        keep_running=args.keep_running,
        exception_dumps=not args.no_dump_hook,
        nccl_subsys=args.nccl_subsys,
        distributed_debug=args.distributed_debug,
        expected_ranks=expected_ranks,
        extra_env=tuple(sorted(extra_env.items())),
    )
    result = run_live(options, reporter, sys.stdout.buffer)
    reporter.note(f"analysing the bundle in {out}")
    analysis = analyze([str(out)])
    _warn_problems(analysis.problems, args.debug)
    diagnosis = analysis.diagnosis
    _write(str(out / "diagnosis.json"), render_json(diagnosis))
    _write(str(out / "report.html"), render_html(diagnosis))
    # The bundle is complete on disk; a terminal that is gone (SIGHUP) changes nothing.
    with contextlib.suppress(OSError):
        sys.stdout.write(_terminal_text(diagnosis, sys.stdout))
        sys.stdout.write(f"report: {out / 'report.html'}\n")
        sys.stdout.flush()
    if result.survivors:
        with contextlib.suppress(OSError):
            sys.stderr.write(
                f"{PROG}: warning: job process(es) still alive: "
                f"{', '.join(map(str, result.survivors))}\n"
            )
    return _exit_code(diagnosis)


def _run_live(args: argparse.Namespace) -> int:
    command = list(args.job)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageError(
            "live needs the job's command after --, e.g. logsleuth live -- torchrun ..."
        )
    if args.nproc and command[0].endswith(".py"):
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={args.nproc}",
            *command,
        ]
    extra = {"LOGSLEUTH_BACKEND": args.backend} if args.backend else {}
    return _live(args, command, extra, args.nproc)


def _run_repro(args: argparse.Namespace) -> int:
    import importlib.util
    import subprocess

    from logsleuth.repro import SCENARIOS, build_command, build_env, find_scenario

    if args.repro_command in (None, "list"):
        width = max(len(s.name) for s in SCENARIOS)
        for each in SCENARIOS:
            sys.stdout.write(f"{each.name:<{width}}  {each.description}\n")
        return EXIT_OK
    scenario = find_scenario(args.name)
    if importlib.util.find_spec("torch") is None:
        raise UsageError("the repro scenarios need torch: pip install 'logsleuth[live]'")
    command = build_command(scenario, args.nproc)
    env = build_env(args.backend, args.culprit, None)
    if args.live:
        return _live(args, command, env, args.nproc)
    try:
        return subprocess.run(command, env={**os.environ, **env}, check=False).returncode
    except OSError as exc:
        raise UsageError(f"{command[0]}: cannot run: {exc.strerror or exc}") from exc


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
        if args.command == "live":
            return _run_live(args)
        if args.command == "repro":
            return _run_repro(args)
        if args.command == "coverage":
            return _run_coverage(args)
        return _run_explain(args)
    except LogsleuthError as exc:
        if args.debug:
            for problem in getattr(exc, "problems", ()):
                sys.stderr.write(problem.trace)
        sys.stderr.write(f"{PROG}: error: {_shown(str(exc))}\n")
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
