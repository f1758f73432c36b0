#!/usr/bin/env python3
"""Scale benchmark: ``logsleuth analyze`` against the one-regex scan at 1,024 and 4,096 ranks.

For each case it generates (or reuses, under ``--root``) a synthetic missing-collective
incident with per-host split communicators, launcher log and py-spy stacks
(``synth.generate(..., comms=2, launcher=True, stacks=True)``), then times side by side, in
fresh processes and alternating ``--repeat`` times, the regex scan of the ``.log`` files
(:data:`benchmarks.bench_parse.REGEX_SCAN`, over every file analyze reads) and ``logsleuth analyze DIR --quiet``. It
prints per case the wall and CPU ratio to the scan and the peak RSS (largest process and
process tree), then the growth of analyze's wall time from the smallest to the largest rank
count, and checks the targets of issue 16:

* 1,024 and 4,096 ranks: analyze within 2.5x of the scan; peak RSS (tree) under 1 GB at 4,096;
  wall time from 1,024 to 4,096 ranks grows at most 4.5x;
* 64 ranks x 20,000 ops (the long-log case): within 2x, under 300 MB.

Exit status 1 when a target is missed (the table is printed either way).

Example:
    python benchmarks/bench_scale.py --root /tmp/scale-bench --repeat 3
    python benchmarks/bench_scale.py --cases 1024,4096 --json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_parse import REGEX_SCAN, Run, measure  # noqa: E402
from benchmarks.synth import generate  # noqa: E402

LONG_LOG = "64x20000"
"""The long-log case: 64 ranks, 20,000 ops each, one communicator (bench_parse's)."""


@dataclass(frozen=True, slots=True)
class Case:
    """One incident and its measured runs."""

    name: str
    ranks: int
    files: int
    lines: int
    bytes: int
    scans: tuple[Run, ...]
    analyses: tuple[Run, ...]

    @staticmethod
    def _median(values: Sequence[float]) -> float:
        ordered = sorted(values)
        return ordered[len(ordered) // 2]

    @property
    def ratio(self) -> float:
        """Median of analyze / scan wall time over the side-by-side pairs."""
        return self._median(
            [a.seconds / s.seconds for s, a in zip(self.scans, self.analyses, strict=True)]
        )

    @property
    def cpu_ratio(self) -> float:
        """Median of analyze / scan CPU time."""
        return self._median(
            [a.cpu_seconds / s.cpu_seconds for s, a in zip(self.scans, self.analyses, strict=True)]
        )

    @property
    def wall(self) -> float:
        """Median wall seconds of analyze."""
        return self._median([a.seconds for a in self.analyses])

    @property
    def rss(self) -> float:
        """Largest tree RSS of analyze, MB."""
        return max(a.tree_rss_mb for a in self.analyses)


def _incident(root: Path, name: str) -> Path:
    directory = root / name
    if (directory / "manifest.json").exists():
        return directory
    started = time.perf_counter()
    if name == LONG_LOG:
        generate(directory, ranks=64, hosts=8, ops=20000, fault="missing-collective")
    else:
        ranks = int(name)
        generate(
            directory,
            ranks=ranks,
            hosts=max(1, ranks // 8),
            ops=50,
            fault="missing-collective",
            comms=2,
            launcher=True,
            stacks=True,
        )
    print(f"generated {directory} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return directory


def run_case(root: Path, name: str, repeat: int, analyze: Sequence[str]) -> Case:
    """Generate (or reuse) the incident ``name`` and measure scan and analyze side by side."""
    directory = _incident(root, name)
    every = sorted(p for p in directory.rglob("*") if p.is_file())
    size = sum(p.stat().st_size for p in every)
    lines = 0
    for path in every:
        with open(path, "rb") as handle:
            lines += sum(c.count(b"\n") for c in iter(lambda h=handle: h.read(1 << 20), b""))
    scans: list[Run] = []
    analyses: list[Run] = []
    for _ in range(max(1, repeat)):
        scans.append(measure("regex scan", [sys.executable, "-c", REGEX_SCAN, *map(str, every)]))
        analyses.append(measure("logsleuth analyze", [*analyze, str(directory), "--quiet"]))
    ranks = 64 if name == LONG_LOG else int(name)
    return Case(name, ranks, len(every), lines, size, tuple(scans), tuple(analyses))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the cases, print the table and the targets; exit 1 when a target is missed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, help="where incidents are kept (default: a temp dir)")
    parser.add_argument(
        "--cases", default=f"1024,4096,{LONG_LOG}", help="rank counts and/or 64x20000"
    )
    parser.add_argument("--repeat", type=int, default=1, help="side-by-side pairs per case")
    parser.add_argument(
        "--analyze",
        default=f"{sys.executable} -m logsleuth analyze",
        help="the analyze command to time",
    )
    parser.add_argument("--json", action="store_true", help="also print the results as JSON")
    args = parser.parse_args(argv)
    import tempfile

    scratch = None
    root = args.root
    if root is None:
        scratch = tempfile.TemporaryDirectory(prefix="logsleuth-scale-")
        root = Path(scratch.name)
    root.mkdir(parents=True, exist_ok=True)
    try:
        cases = [
            run_case(root, name.strip(), args.repeat, args.analyze.split())
            for name in args.cases.split(",")
            if name.strip()
        ]
    finally:
        if scratch is not None:
            scratch.cleanup()
    print(f"{os.cpu_count()} cores, median of {max(1, args.repeat)} side-by-side pair(s)")
    header = (
        f"{'case':>10} {'files':>6} {'MB':>6} {'scan s':>7} {'analyze s':>9} {'wall x':>7}"
        f" {'cpu x':>6} {'RSS MB':>7} {'tree MB':>8}"
    )
    print(header)
    for case in cases:
        scan = sorted(s.seconds for s in case.scans)[len(case.scans) // 2]
        print(
            f"{case.name:>10} {case.files:>6} {case.bytes / 2**20:>6.0f} {scan:>7.2f}"
            f" {case.wall:>9.2f} {case.ratio:>7.2f} {case.cpu_ratio:>6.2f}"
            f" {max(a.peak_rss_mb for a in case.analyses):>7.0f} {case.rss:>8.0f}"
        )
    missed: list[str] = []
    by_name = {c.name: c for c in cases}
    for name in ("1024", "4096"):
        case = by_name.get(name)
        if case is not None and case.ratio > 2.5:
            missed.append(f"{name} ranks: {case.ratio:.2f}x the scan (target <= 2.5x)")
    if "4096" in by_name and by_name["4096"].rss >= 1024:
        missed.append(f"4096 ranks: {by_name['4096'].rss:.0f} MB (target < 1 GB)")
    if "1024" in by_name and "4096" in by_name:
        growth = by_name["4096"].wall / by_name["1024"].wall
        print(f"growth 1,024 -> 4,096 ranks: {growth:.2f}x wall (target <= 4.5x)")
        if growth > 4.5:
            missed.append(f"growth {growth:.2f}x (target <= 4.5x)")
    if LONG_LOG in by_name:
        case = by_name[LONG_LOG]
        if case.ratio > 2.0:
            missed.append(f"64x20000: {case.ratio:.2f}x the scan (target <= 2x)")
        if case.rss > 300:
            missed.append(f"64x20000: {case.rss:.0f} MB (target <= 300 MB)")
    for line in missed:
        print(f"MISSED {line}")
    if args.json:
        print(
            json.dumps(
                [
                    {
                        **{k: v for k, v in asdict(c).items() if k not in ("scans", "analyses")},
                        "runs": [asdict(r) for r in (*c.scans, *c.analyses)],
                        "ratio": c.ratio,
                        "cpu_ratio": c.cpu_ratio,
                    }
                    for c in cases
                ],
                indent=2,
            )
        )
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
