#!/usr/bin/env python3
"""Benchmark ``logsleuth analyze`` against a one-regex Python scan of the same files.

Generates (or reuses) a synthetic incident with :func:`benchmarks.synth.generate`, then runs,
each in a fresh process and side by side:

* ``regex scan``: the reference floor, one compiled regex (NCCL prefix and COLL opCount)
  matched against every line of every file, in one Python process;
* ``logsleuth analyze``: the full command line, reading, parsing, analysing and printing.

For each it reports wall time, lines/s, MB/s and peak RSS (the largest single process, from
``getrusage``, and the sum over the process tree, sampled from ``/proc``), then the ratio.

Example:
    python benchmarks/bench_parse.py --ranks 64 --ops 20000
    python benchmarks/bench_parse.py --ranks 512 --ops 20000 --dir /data/bench512
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.synth import generate  # noqa: E402

REGEX_SCAN = r"""
import re, sys
PATTERN = re.compile(r"(\S+):(\d+):(\d+) \[(-?\d+)\] NCCL (INFO|WARN|TRACE) (?:(\w+): opCount ([0-9a-f]+))?")
lines = matched = 0
for path in sys.argv[1:]:
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            lines += 1
            if PATTERN.match(line):
                matched += 1
print(lines, matched)
"""
"""The floor: what reading every line and matching one regex costs in Python."""


@dataclass(frozen=True, slots=True)
class Run:
    """One measured command."""

    name: str
    seconds: float
    peak_rss_mb: float
    """Largest single process (``ru_maxrss`` of the children)."""
    tree_rss_mb: float
    """Largest sum of RSS over the command's process tree, sampled every 10 ms."""
    exit_code: int
    cpu_seconds: float = 0.0
    """User + system CPU time of the command and its worker processes: unlike wall time,
    hardly changed by other jobs competing for the cores."""


def _tree_rss(pid: int) -> int:
    """Return the summed RSS in bytes of ``pid`` and its descendants (0 when gone)."""
    total, todo, page = 0, [pid], os.sysconf("SC_PAGE_SIZE")
    while todo:
        current = todo.pop()
        try:
            with open(f"/proc/{current}/statm") as handle:
                total += int(handle.read().split()[1]) * page
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as handle:
                    todo.extend(int(c) for c in handle.read().split())
        except (OSError, ValueError):
            continue
    return total


def measure(name: str, argv: Sequence[str]) -> Run:
    """Run ``argv`` in a wrapper process so its peak RSS is its own; time it."""
    wrapper = (
        "import resource, subprocess, sys\n"
        "code = subprocess.call(sys.argv[1:], stdout=subprocess.DEVNULL)\n"
        "use = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(use.ru_maxrss, code, use.ru_utime + use.ru_stime)\n"
    )
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", wrapper, *argv], stdout=subprocess.PIPE, text=True
    )
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _tree_rss(proc.pid))
            time.sleep(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, _ = proc.communicate()
    seconds = time.perf_counter() - start
    done.set()
    sampler.join()
    maxrss_kb, code, cpu = out.split()
    # The wrapper interpreter itself is in the tree sample; it is small and always there.
    return Run(name, seconds, int(maxrss_kb) / 1024, peak / 2**20, int(code), float(cpu))


def main(argv: Sequence[str] | None = None) -> int:
    """Generate the incident, run both measurements, print the table (and JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--hosts", type=int, default=None, help="default: ranks / 8")
    parser.add_argument("--ops", type=int, default=20000, help="AllReduce lines per rank")
    parser.add_argument("--dir", type=Path, help="incident directory (reused if it exists)")
    parser.add_argument(
        "--analyze",
        default=f"{sys.executable} -m logsleuth analyze",
        help="the analyze command to time (default: this interpreter's logsleuth)",
    )
    parser.add_argument("--json", action="store_true", help="also print the results as JSON")
    parser.add_argument(
        "--repeat", type=int, default=1, help="alternate the two runs N times; report medians"
    )
    args = parser.parse_args(argv)
    hosts = args.hosts or max(1, args.ranks // 8)
    scratch = None
    directory = args.dir
    if directory is None:
        scratch = tempfile.TemporaryDirectory(prefix="logsleuth-bench-")
        directory = Path(scratch.name)
    if not (directory / "manifest.json").exists():
        started = time.perf_counter()
        generate(directory, ranks=args.ranks, hosts=hosts, ops=args.ops, fault="missing-collective")
        print(f"generated {directory} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    files = sorted(str(p) for p in directory.rglob("*.log"))
    size = sum(os.path.getsize(f) for f in files)
    lines = 0
    for name in files:
        with open(name, "rb") as handle:
            lines += sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 20), b""))
    pairs: list[tuple[Run, Run]] = []
    try:
        for _ in range(max(1, args.repeat)):
            scan = measure("regex scan", [sys.executable, "-c", REGEX_SCAN, *files])
            full = measure("logsleuth analyze", [*args.analyze.split(), str(directory), "--quiet"])
            pairs.append((scan, full))
    finally:
        if scratch is not None:
            scratch.cleanup()
    print(
        f"{args.ranks} ranks, {hosts} hosts, {args.ops} ops/rank: {len(files)} files, "
        f"{lines:,} lines, {size / 2**20:.0f} MB, {os.cpu_count()} cores"
    )
    print(
        f"{'':20} {'wall s':>8} {'cpu s':>8} {'lines/s':>12} {'MB/s':>8} {'RSS MB':>8}"
        f" {'tree RSS MB':>12}"
    )
    for scan, full in pairs:
        for run in (scan, full):
            print(
                f"{run.name:20} {run.seconds:8.2f} {run.cpu_seconds:8.2f}"
                f" {lines / run.seconds:12,.0f} {size / 2**20 / run.seconds:8.1f}"
                f" {run.peak_rss_mb:8.0f} {run.tree_rss_mb:12.0f}"
                + (f"  (exit {run.exit_code})" if run.name != "regex scan" else "")
            )
    ratios = sorted(full.seconds / scan.seconds for scan, full in pairs)
    cpu_ratios = sorted(full.cpu_seconds / scan.cpu_seconds for scan, full in pairs)
    ratio = ratios[len(ratios) // 2]
    cpu_ratio = cpu_ratios[len(cpu_ratios) // 2]
    print(f"analyze / regex scan: {ratio:.2f}x wall, {cpu_ratio:.2f}x cpu (median of {len(pairs)})")
    if args.json:
        result = {
            "ranks": args.ranks,
            "hosts": hosts,
            "ops": args.ops,
            "files": len(files),
            "lines": lines,
            "bytes": size,
            "cores": os.cpu_count(),
            "runs": [asdict(run) for pair in pairs for run in pair],
            "ratio": ratio,
            "cpu_ratio": cpu_ratio,
        }
        print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
