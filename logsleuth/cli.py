"""The command line. The only place that prints or exits: ``main(argv) -> int``."""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import re
import sys
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

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

if TYPE_CHECKING:
    from logsleuth.api import Analysis
    from logsleuth.knowledge import Entry

PROG = "logsleuth"


class _HelpFormatter(argparse.HelpFormatter):
    """Wrap descriptions to the terminal; keep the epilogs' examples as they are written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors in one line with exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        sys.stderr.write(f"{PROG}: error: {message}\n")
        raise SystemExit(EXIT_USAGE)


def _global_options(parser: argparse.ArgumentParser, *, on_subcommand: bool) -> None:
    """Add the options that work before or after the subcommand.

    On a subcommand the default is SUPPRESS, so that ``logsleuth --debug analyze`` keeps
    the value the top-level parser set instead of the subcommand's default overwriting it.
    """
    default = argparse.SUPPRESS if on_subcommand else False
    parser.add_argument(
        "--debug", action="store_true", default=default, help="show tracebacks of internal errors"
    )


_EPILOGS = {
    "analyze": """examples:
  logsleuth analyze nccl/ stacks/ launcher.log --html report.html
  logsleuth analyze logsleuth-live-20250101-120000/        a bundle that live wrote
  logsleuth analyze bundle.tar.gz node2.zip                bundles as attached to a ticket
  kubectl logs job/train --prefix | logsleuth analyze -
  logsleuth analyze run/ --json - | jq .verdict
  logsleuth analyze s3://bucket/job-1234/ --scheduler tcp://sched:8786   read on a Dask cluster

exit status: 0 healthy, 1 a failure diagnosed (or inconclusive), 2 bad usage or no
analysable input, 3 internal error.""",
    "live": """examples:
  logsleuth live -- torchrun --nproc_per_node 8 train.py
  logsleuth live --stall-timeout 300 --out /scratch/$USER/hang1 -- torchrun ... train.py
  logsleuth live --capture-only -- torchrun ... train.py        snapshot, keep the job running
  srun --ntasks-per-node=1 logsleuth live --node-agent --out bundles/%h -- torchrun ...

stall rule (docs/live.md): the job makes progress while its NCCL debug files log new
collectives (COLL lines, opCount), its output or flight-recorder dumps grow (torch
SeqNums), its ranks or their DataLoader workers read or write (gloo sockets, files), a
new process of the job appears, or a rank's main-thread stack (sampled with py-spy once
no signal came for a while) changes. Silence on stdout alone is not a stall. When no
signal came for --stall-timeout seconds (default 60; set it above the job's longest
phase without any), every rank and its DataLoader workers are dumped twice; then the
job is ended (--end-on-stall, the default; what it prints then goes to teardown.log),
or left running (--capture-only).
Exit status as for analyze.""",
    "pack": """examples:
  logsleuth pack logsleuth-live-20250101-120000/          writes logsleuth-live-...tar.gz
  logsleuth pack run/ --format zip --output /tmp/run.zip

analyze reads the archive directly (tar, tar.gz, tgz, tar.bz2, tar.xz, zip); members are
read in memory, never extracted.""",
    "schema": """examples:
  logsleuth schema > diagnosis.schema.json
  logsleuth analyze run/ --json out.json && check-jsonschema --schemafile diagnosis.schema.json out.json""",
    "completion": """examples:
  logsleuth completion bash > ~/.local/share/bash-completion/completions/logsleuth
  logsleuth completion zsh > "${fpath[1]}/_logsleuth"
  eval "$(logsleuth completion bash)"                     for the current shell only""",
    "explain": """examples:
  logsleuth explain                 list every finding code
  logsleuth explain LS101
  logsleuth explain collective.missing""",
    "repro": """examples:
  logsleuth repro list
  logsleuth repro run skip-collective --nproc 4 --live    diagnose it as live would
  logsleuth repro run dataloader-stall                    runs until you press Ctrl-C""",
    "coverage": """examples:
  logsleuth coverage nccl/ launcher.log
  logsleuth coverage run/ --json | jq '.shapes[:10]'""",
}


def _subparser(
    sub: argparse._SubParsersAction[_Parser],
    name: str,
    parent: _Parser,
    **kwargs: str,
) -> _Parser:
    return sub.add_parser(
        name,
        parents=[parent],
        epilog=_EPILOGS.get(name),
        formatter_class=_HelpFormatter,
        **kwargs,  # type: ignore[arg-type]
    )


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser for every subcommand."""
    parser = _Parser(
        prog=PROG,
        description="Tell why a distributed training job hung or died, from its NCCL logs, "
        "launcher logs and stack dumps.",
        epilog="""examples:
  logsleuth analyze nccl/ stacks/ launcher.log --html report.html
  logsleuth live -- torchrun --nproc_per_node 8 train.py
  logsleuth pack logsleuth-live-20250101-120000/
  logsleuth --debug analyze bundle.tar.gz

Global options work before or after the command. Colour follows NO_COLOR and
FORCE_COLOR, width follows COLUMNS. 'logsleuth COMMAND --help' shows more.""",
        formatter_class=_HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    _global_options(parser, on_subcommand=False)
    common = _Parser(add_help=False)
    _global_options(common, on_subcommand=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    analyze = _subparser(
        sub,
        "analyze",
        common,
        help="analyse logs, stack dumps and bundles and print the verdict",
        description="Analyse NCCL debug logs, torch/launcher logs and py-spy/faulthandler dumps "
        "(files, directories, .gz, bundle archives, or - for stdin) and print the root cause.",
    )
    analyze.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="file, directory, .gz, .tar.gz/.zip, - or an s3://, gs://, https:// URL",
    )
    analyze.add_argument("--html", metavar="FILE", help="write the self-contained HTML report here")
    analyze.add_argument(
        "--json", metavar="FILE", help="write the diagnosis JSON here ('-' for stdout)"
    )
    analyze.add_argument(
        "--format",
        choices=("text", "brief", "json"),
        default="text",
        help="what to print: the full text report, the brief one (verdict, wait chain, next "
        "steps in 15 lines) or the JSON (default: text)",
    )
    analyze.add_argument(
        "--brief", dest="format", action="store_const", const="brief", help="--format brief"
    )
    analyze.add_argument(
        "--quiet",
        action="store_true",
        help="print only the one-line verdict (and no progress bar)",
    )
    analyze.add_argument(
        "--scheduler",
        metavar="ADDR",
        help="read the inputs on a Dask cluster: tcp://HOST:PORT, or local:N for N local "
        "worker processes; URL PATHs are then read by the workers themselves (needs the "
        "[cluster] extra, as URL PATHs do)",
    )

    explain = _subparser(
        sub,
        "explain",
        common,
        help="explain a finding code (LS101 ...) or a known message; without one, list them all",
        description="Print what a rule's finding or a known message means: symptom, likely "
        "causes, what to check.",
    )
    explain.add_argument(
        "code",
        nargs="?",
        help="rule code (LS101), a range (LS2xx), a rule name (collective.missing), a "
        "known message's id, or words of a message",
    )
    explain.add_argument(
        "--messages", action="store_true", help="list the known messages (the knowledge base)"
    )

    live = _subparser(
        sub,
        "live",
        common,
        help="run a job with diagnostics on; when it stalls, capture every rank and diagnose",
        description="Run COMMAND (e.g. torchrun --nproc_per_node 4 train.py) with NCCL and torch "
        "diagnostics switched on. When no rank makes progress for --stall-timeout seconds, dump "
        "every rank's stacks (and its DataLoader workers'), write a bundle into --out and print "
        "the verdict; then end the job, or leave it running with --capture-only.",
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

    repro = _subparser(
        sub,
        "repro",
        common,
        help="list or run the built-in fault scenarios (small torch.distributed jobs)",
        description="Built-in fault scenarios for demos and tests: gloo on CPU, NCCL on GPUs. "
        "Without --live a hanging scenario runs until its collective timeout or Ctrl-C.",
    )
    repro_sub = repro.add_subparsers(dest="repro_command", metavar="list|run", parser_class=_Parser)
    repro_sub.add_parser("list", parents=[common], help="list the scenarios")
    run = repro_sub.add_parser(
        "run",
        parents=[common],
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

    coverage = _subparser(
        sub,
        "coverage",
        common,
        help="count the lines logsleuth recognizes; list the ones it does not, by shape",
        description="Read logs and dumps like analyze does and report the events of each kind, "
        "the share of NCCL lines recognized, and the unrecognized lines grouped by shape.",
    )
    coverage.add_argument(
        "paths", nargs="+", metavar="PATH", help="file, directory, .gz or bundle archive"
    )
    coverage.add_argument("--json", action="store_true", help="print JSON instead of a table")

    pack = _subparser(
        sub,
        "pack",
        common,
        help="pack a bundle directory into one archive to attach to a ticket",
        description="Write DIR as a .tar.gz (or .zip) archive that analyze reads as it is.",
    )
    pack.add_argument("directory", metavar="DIR", help="the bundle directory (what live wrote)")
    pack.add_argument(
        "--output", "-o", metavar="FILE", help="archive to write (default: DIR.tar.gz beside DIR)"
    )
    pack.add_argument(
        "--format",
        choices=("tar.gz", "zip"),
        help="archive format (default: from --output's suffix, else tar.gz)",
    )

    _subparser(
        sub,
        "schema",
        common,
        help="print the JSON Schema of the diagnosis JSON (logsleuth.diagnosis/1)",
        description="Print the JSON Schema (draft 2020-12) that every --json output validates "
        "against, generated from the diagnosis model.",
    )

    completion = _subparser(
        sub,
        "completion",
        common,
        help="print a shell completion script (bash or zsh)",
        description="Print a completion script for the shell, built from this command line.",
    )
    completion.add_argument("shell", choices=("bash", "zsh"), help="the shell")
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
        "--format",
        choices=("brief", "text"),
        default="brief",
        help="what to print at the end: the brief report (verdict, wait chain, next steps in "
        "15 lines, the verdict again last) or the full text report (default: brief)",
    )
    parser.add_argument(
        "--brief", dest="format", action="store_const", const="brief", help="--format brief"
    )
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
        help="no progress signal (stall rule below) for this long is a stall (default 60; use "
        "more than the job's longest quiet phase: checkpointing, evaluation)",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--end-on-stall",
        dest="capture_only",
        action="store_false",
        default=False,
        help="on a stall, capture every rank, then end the job (the default)",
    )
    mode.add_argument(
        "--capture-only",
        dest="capture_only",
        action="store_true",
        help="on a stall, capture every rank and write the bundle, but leave the job running",
    )
    mode.add_argument(
        "--keep-running", dest="capture_only", action="store_true", help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--node-agent",
        action="store_true",
        help="one agent per node under srun/mpirun: capture only this node's ranks into one "
        "bundle per node (--out may contain %%h for the host name); analyze merges the bundles",
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


def _terminal(stream: TextIO, widest: int) -> tuple[bool, int]:
    """Return (colour, width) for ``stream`` as rich sees it.

    rich honours ``NO_COLOR``, ``FORCE_COLOR``, ``TERM=dumb`` and ``COLUMNS``; a file or a
    pipe without ``COLUMNS`` gets 100 columns, so saved output does not depend on the
    terminal it was made in.
    """
    from rich.console import Console

    console = Console(file=stream)
    color = console.is_terminal and not console.no_color and console.color_system is not None
    if console.is_terminal or os.environ.get("COLUMNS", "").isdigit():
        return color, max(80, min(widest, console.width))
    return color, 100


FULL_TEXT_HINT = "the same command with --format text (or --html FILE)"


def _terminal_text(
    diagnosis: Diagnosis, stream: TextIO, fmt: str = "text", full_report: str | None = None
) -> str:
    from logsleuth.report.brief import render_brief
    from logsleuth.report.text import render_text

    color, width = _terminal(stream, 140)
    if fmt == "brief":
        return render_brief(diagnosis, width=width, full_report=full_report)
    return render_text(diagnosis, width=width, color=color)


class _RichProgress:
    """A progress bar on standard error for reading the inputs: files, bytes, ETA."""

    def __init__(self, bar: Any) -> None:
        self.bar = bar
        self.task: Any = None

    def start(self, files: int, total_bytes: int) -> None:
        """Show the bar once reading begins (only for more than a handful of inputs)."""
        if files < _PROGRESS_MIN_FILES and total_bytes < _PROGRESS_MIN_BYTES:
            return
        self.bar.start()
        self.task = self.bar.add_task("reading", total=total_bytes or None, files=0, of=files)

    def advance(self, files: int, nbytes: int) -> None:
        """Count ``files`` more inputs and ``nbytes`` more bytes as read."""
        if self.task is not None:
            done = self.bar.tasks[0].fields["files"] + files
            self.bar.update(self.task, advance=nbytes, files=done)


_PROGRESS_MIN_FILES = 64
_PROGRESS_MIN_BYTES = 32 << 20
"""Below both, reading is quick: no bar."""


@contextlib.contextmanager
def _progress_bar(enabled: bool) -> Iterator[_RichProgress | None]:
    """Yield a progress reporter when ``enabled`` and standard error is a terminal."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[files]:,}/{task.fields[of]:,} files"),
        DownloadColumn(),
        TimeRemainingColumn(),
        console=Console(file=sys.stderr),
        transient=True,
    )
    try:
        yield _RichProgress(bar)
    finally:
        bar.stop()


def _run_analyze(args: argparse.Namespace) -> int:
    from logsleuth.api import analyze

    for target in (args.json, args.html):
        if target and target != "-" and target in args.paths:
            raise UsageError(f"{_shown(target)}: is one of the inputs; refusing to overwrite it")
    if args.scheduler is not None:
        from logsleuth.parse.cluster import check_scheduler

        check_scheduler(args.scheduler)
    with _progress_bar(enabled=not args.quiet) as progress:
        result = analyze(args.paths, scheduler=args.scheduler, progress=progress)
    # What is alive now (the diagnosis and whatever the analysis still holds) outlives the
    # reports: the cyclic collector need not walk it again while they are written (at 4,096
    # ranks its collections during rendering cost more than the rendering). Frozen for as
    # long as the reports take, so a program that calls main() repeatedly collects as usual.
    frozen = not gc.get_freeze_count()
    if frozen:
        gc.freeze()
    try:
        return _report(args, result)
    finally:
        if frozen:
            gc.unfreeze()


def _report(args: argparse.Namespace, result: Analysis) -> int:
    """Write the reports ``args`` ask for; return the exit status."""
    _refuse_inputs((args.json, args.html), result.files)
    _warn_problems(result.problems, args.debug)
    diagnosis = result.diagnosis
    json_to_stdout = args.json == "-" or args.format == "json"
    human = sys.stderr if json_to_stdout else sys.stdout
    # Each renderer is imported only when its output is asked for (jinja2 for HTML).
    if args.json and args.json != "-":
        from logsleuth.report.json import render_json

        _write(args.json, render_json(diagnosis))
    if args.html:
        from logsleuth.report.html import render_html

        _write(args.html, render_html(diagnosis))
    if json_to_stdout:
        from logsleuth.report.json import render_json

        sys.stdout.write(render_json(diagnosis))
    if args.quiet:
        verdict = diagnosis.verdict
        human.write(f"{verdict.kind}: {_shown(verdict.summary)}\n")
    elif args.format == "brief":
        human.write(_terminal_text(diagnosis, human, "brief", args.html or FULL_TEXT_HINT))
    elif not (args.format == "json" and args.json != "-"):
        human.write(_terminal_text(diagnosis, human))
    if args.html and not args.quiet and args.format != "brief":
        human.write(f"report: {args.html}\n")
    return _exit_code(diagnosis)


def _run_coverage(args: argparse.Namespace) -> int:
    from logsleuth.parse.coverage import coverage_json, measure_coverage, render_coverage

    result = measure_coverage(args.paths)
    if args.json:
        sys.stdout.write(coverage_json(result))
    else:
        _, width = _terminal(sys.stdout, 160)
        text = render_coverage(result, width=width)
        sys.stdout.write("\n".join(_shown(line) for line in text.split("\n")))
    return EXIT_OK


def _run_explain(args: argparse.Namespace) -> int:
    from logsleuth import knowledge
    from logsleuth.analysis.rules.registry import RULES, rule_by_code

    if args.messages:
        _write_entries(knowledge.entries())
        return EXIT_OK
    if not args.code or re.fullmatch(r"(?i)LS\d[x\d]x", args.code.strip()):
        prefix = (args.code or "").strip().upper().rstrip("X")
        for each in RULES:
            if each.code.startswith(prefix):
                sys.stdout.write(f"{each.code}  {each.name:<28} {each.kind:<22} {each.summary()}\n")
        return EXIT_OK
    rule = rule_by_code(args.code)
    if rule is not None:
        sys.stdout.write(rule.explain())
        return EXIT_OK
    found = knowledge.search(args.code)
    if len(found) == 1:
        sys.stdout.write(found[0].describe())
        return EXIT_OK
    if found:
        _write_entries(found)
        return EXIT_OK
    codes = ", ".join(r.code for r in RULES)
    sys.stderr.write(
        f"{PROG}: error: unknown finding code {args.code!r} (known: {codes}), "
        "and no known message matches it\n"
    )
    return EXIT_USAGE


def _write_entries(entries: Sequence[Entry]) -> None:
    for entry in entries:
        sys.stdout.write(f"{entry.id:<28} {entry.kind:<20} {entry.role:<9} {entry.meaning}\n")


_JOB_ID_VARIABLES = ("SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "FLUX_JOB_ID", "JOB_ID")
"""Where a batch system names the job; node agents of one job share their bundles' parent."""


def _job_id() -> str | None:
    for name in _JOB_ID_VARIABLES:
        value = os.environ.get(name, "").strip()
        if value and all(c.isalnum() or c in "._-" for c in value):
            return value
    return None


def _default_out(node_agent: bool) -> Path:
    from datetime import datetime

    if node_agent:
        return Path(f"logsleuth-live-{_job_id() or f'{datetime.now():%Y%m%d-%H%M}'}") / "%h"
    return Path(f"logsleuth-live-{datetime.now():%Y%m%d-%H%M%S}")


def _out_dir(args: argparse.Namespace) -> Path:
    """Return the bundle directory: ``--out`` with ``%h`` replaced by this host's name."""
    import socket

    template = args.out or str(_default_out(args.node_agent))
    return Path(template.replace("%h", socket.gethostname()))


def _live(
    args: argparse.Namespace,
    command: Sequence[str],
    extra_env: dict[str, str],
    expected_ranks: int | None,
) -> int:
    from logsleuth.api import analyze
    from logsleuth.live.display import ConsoleReporter
    from logsleuth.live.environment import job_torch_version
    from logsleuth.live.session import LiveOptions, run_live
    from logsleuth.report.html import render_html
    from logsleuth.report.json import render_json

    out = _out_dir(args)
    beacon = None
    if args.node_agent:
        # Beside the node bundles, so every agent of the job sees it on a shared file system.
        beacon = out.resolve().parent / f".logsleuth-stall-{_job_id() or 'job'}"
    reporter = ConsoleReporter(sys.stderr)
    options = LiveOptions(
        command=tuple(command),
        out_dir=out,
        stall_timeout=args.stall_timeout,
        keep_running=args.capture_only,
        stall_beacon=beacon,
        torch_version=job_torch_version(command, {**os.environ, **extra_env}),
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
    reporter.note(f"to attach the bundle to a ticket: logsleuth pack {out}")
    # The bundle is complete on disk; a terminal that is gone (SIGHUP) changes nothing.
    with contextlib.suppress(OSError):
        report = str(out / "report.html")
        if args.format == "brief":
            sys.stdout.write(_terminal_text(diagnosis, sys.stdout, "brief", report))
        else:
            sys.stdout.write(_terminal_text(diagnosis, sys.stdout))
            sys.stdout.write(f"report: {report}\n")
        sys.stdout.flush()
    if result.survivors:
        with contextlib.suppress(OSError):
            sys.stderr.write(
                f"{PROG}: warning: job process(es) still alive: "
                f"{', '.join(map(str, result.survivors))}\n"
            )
    if result.returncode is None and result.outcome == "stalled":
        with contextlib.suppress(OSError):
            sys.stderr.write(
                f"{PROG}: the job is still running (--capture-only); process group {result.pgid}\n"
            )
    return _exit_code(diagnosis)


def _run_pack(args: argparse.Namespace) -> int:
    from logsleuth.parse.archive import PACK_FORMATS, ZIP_SUFFIXES, ArchiveError, write_archive

    directory = Path(args.directory)
    if not directory.is_dir():
        raise UsageError(f"{args.directory}: not a directory")
    if args.output:
        target = Path(args.output)
        if args.format and not target.name.lower().endswith(PACK_FORMATS[args.format]):
            raise UsageError(f"{args.output}: does not end in {PACK_FORMATS[args.format]}")
        if not target.name.lower().endswith((".tar.gz", ".tgz", *ZIP_SUFFIXES)):
            raise UsageError(f"{args.output}: name it .tar.gz, .tgz or .zip")
    else:
        suffix = PACK_FORMATS[args.format or "tar.gz"]
        resolved = directory.resolve()
        target = resolved.parent / f"{resolved.name}{suffix}"
    if target.exists():
        raise UsageError(f"{target}: exists; remove it or give another --output")
    try:
        count = write_archive(directory, target)
    except ArchiveError as exc:
        raise UsageError(f"{args.directory}: {exc}") from exc
    except OSError as exc:
        raise UsageError(f"{target}: cannot write: {exc.strerror or exc}") from exc
    size = target.stat().st_size
    sys.stdout.write(f"{target}: {count} files, {size} bytes\n")
    return EXIT_OK


def _run_schema(args: argparse.Namespace) -> int:
    from logsleuth.report.schema import render_schema

    sys.stdout.write(render_schema())
    return EXIT_OK


def _run_completion(args: argparse.Namespace) -> int:
    from logsleuth.completion import render_completion

    sys.stdout.write(render_completion(build_parser(), args.shell))
    return EXIT_OK


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
        raise UsageError("the repro scenarios need torch: pip install 'nccl-logsleuth[live]'")
    command = build_command(scenario, args.nproc)
    env = build_env(args.backend, args.culprit, None)
    if args.live:
        return _live(args, command, env, args.nproc)
    sys.stderr.write(
        f"{PROG}: running {scenario.name} with {args.nproc} ranks; a scenario that hangs runs "
        "until its collective timeout or Ctrl-C (add --live to have it diagnosed)\n"
    )
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
    commands = {
        "analyze": _run_analyze,
        "live": _run_live,
        "repro": _run_repro,
        "coverage": _run_coverage,
        "explain": _run_explain,
        "pack": _run_pack,
        "schema": _run_schema,
        "completion": _run_completion,
    }
    try:
        return commands[args.command](args)
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
