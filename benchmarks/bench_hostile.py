#!/usr/bin/env python3
"""The big cases of issue 19, too slow for the test suite: time and peak memory.

Each case is made in a temporary directory and analysed by ``logsleuth analyze`` in a
child process limited to ``--memory`` bytes of address space (RLIMIT_AS):

* ``files``: ``--files`` small NCCL logs (30,000 by default) in 100-file directories;
* ``line``: one log with a single line of ``--line-mb`` MB (1,024 by default), beside a
  good log;
* ``gzip``: a ``.gz`` of ``--gzip-mb`` MB of log lines (real budget: 4 GiB decompressed);
* ``lines``: a ``--lines-mb`` MB log whose lines all start ``[rank0]:`` (read as lines).

Reports, per case: wall seconds, exit status, the child's peak RSS (``getrusage``) and
whether it stayed within the memory limit.

Example:
    python benchmarks/bench_hostile.py --cases files line
    python benchmarks/bench_hostile.py --files 100000 --cases files
"""

from __future__ import annotations

import argparse
import gzip
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.hostile.harness import GOOD_LOG  # noqa: E402

CHILD = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
from logsleuth.cli import main
code = main(sys.argv[1:])
print("maxrss_kb", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)
sys.exit(code)
"""


def _make_files(top: Path, count: int) -> list[str]:
    for i in range(count):
        sub = top / f"host{i // 100:04d}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"rank{i}.log").write_text(GOOD_LOG.replace("node1:100:100", f"n{i // 8}:{i}:{i}"))
    return [str(top)]


def _make_line(top: Path, megabytes: int) -> list[str]:
    top.mkdir(parents=True)
    (top / "good.log").write_text(GOOD_LOG)
    with (top / "line.log").open("w") as out:
        block = "x" * (1 << 20)
        for _ in range(megabytes):
            out.write(block)
        out.write("\n")
    return [str(top)]


def _make_gzip(top: Path, megabytes: int) -> list[str]:
    top.mkdir(parents=True)
    (top / "good.log").write_text(GOOD_LOG)
    line = b"[rank0]: waiting for the others\n"
    block = line * ((1 << 20) // len(line))
    with gzip.open(top / "bomb.log.gz", "wb", compresslevel=9) as out:
        for _ in range(megabytes):
            out.write(block)
    return [str(top)]


def _make_lines(top: Path, megabytes: int) -> list[str]:
    top.mkdir(parents=True)
    (top / "good.log").write_text(GOOD_LOG)
    line = "[rank0]: epoch 1 step 1234 loss 0.4321\n"
    block = line * ((1 << 20) // len(line))
    with (top / "big.log").open("w") as out:
        for _ in range(megabytes):
            out.write(block)
    return [str(top)]


def _run(args: list[str], limit: int) -> dict[str, object]:
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", CHILD.format(limit=limit), "analyze", *args, "--quiet"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    seconds = time.monotonic() - start
    rss = [line.split()[1] for line in done.stderr.splitlines() if line.startswith("maxrss_kb")]
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {
        "seconds": round(seconds, 2),
        "exit": done.returncode,
        "peak_rss_mb": round(int(rss[0]) / 1024, 1) if rss else round(children / 1024, 1),
        "messages": [line for line in done.stderr.splitlines() if line.startswith("logsleuth")][:3],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+", default=["files", "line", "gzip", "lines"])
    parser.add_argument("--files", type=int, default=30_000)
    parser.add_argument("--line-mb", type=int, default=1024)
    parser.add_argument("--gzip-mb", type=int, default=10_240)
    parser.add_argument("--lines-mb", type=int, default=2048)
    parser.add_argument("--memory", type=int, default=1 << 30)
    parser.add_argument("--dir", type=Path, help="work here instead of a temporary directory")
    options = parser.parse_args()
    makers = {
        "files": lambda top: _make_files(top, options.files),
        "line": lambda top: _make_line(top, options.line_mb),
        "gzip": lambda top: _make_gzip(top, options.gzip_mb),
        "lines": lambda top: _make_lines(top, options.lines_mb),
    }
    with tempfile.TemporaryDirectory(dir=options.dir) as tmp:
        results = {}
        for case in options.cases:
            paths = makers[case](Path(tmp) / case)
            results[case] = _run(paths, options.memory)
            print(case, json.dumps(results[case]), flush=True)


if __name__ == "__main__":
    main()
