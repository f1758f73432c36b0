#!/usr/bin/env python3
"""Time the topology rebuild of a large synthetic init and measure its SVG.

Generates a healthy job (``--ranks`` ranks on ``--hosts`` hosts, eight collectives) with
``benchmarks/synth.py``, parses it, and reports how long building the communicator graphs
and their views takes and how large the SVG is. The issue's targets for 1,024 ranks: the
topology builds in under 10 s and the SVG stays under 2 MB.

Example:
    python benchmarks/bench_topology.py --ranks 1024 --hosts 128
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.synth import generate
from logsleuth.analysis.index import build_index
from logsleuth.analysis.topology import build_topologies, build_topology_views
from logsleuth.model.base import Event, InputSummary
from logsleuth.parse.discover import discover
from logsleuth.parse.dispatch import read_input
from logsleuth.report.topology_svg import render_topology_svg

BUILD_LIMIT_S = 10.0
SVG_LIMIT_BYTES = 2 * 1024 * 1024


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; return 1 when a target is missed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--hosts", type=int, default=128)
    parser.add_argument("--nccl-version", default="2.21.5")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "incident"
        start = time.perf_counter()
        generate(
            out,
            ranks=args.ranks,
            hosts=args.hosts,
            ops=8,
            fault="healthy",
            culprit=None,
            nccl_version=args.nccl_version,
            seed=1,
        )
        generated = time.perf_counter()
        sources, _problems = discover([str(out)])
        events: list[Event] = []
        summaries: list[InputSummary] = []
        for source in sources:
            result = read_input(source)
            events.extend(result.events)
            summaries.append(result.summary)
        parsed = time.perf_counter()
        index = build_index(events, summaries)
        indexed = time.perf_counter()
        topologies = build_topologies(index)
        views = build_topology_views(index)
        built = time.perf_counter()
        svgs = [render_topology_svg(v) for v in views]
        drawn = time.perf_counter()
    size = max((len(s.encode()) for s in svgs), default=0)
    conns = sum(len(t.conns) for t in topologies)
    print(f"ranks {args.ranks} hosts {args.hosts} NCCL {args.nccl_version}")
    print(
        f"generate {generated - start:.2f} s, parse {parsed - generated:.2f} s ({len(events):,} events)"
    )
    print(f"index {indexed - parsed:.2f} s")
    print(
        f"topology build {built - indexed:.2f} s ({len(topologies)} communicator(s), "
        f"{conns:,} connection lines)"
    )
    print(f"svg render {drawn - built:.2f} s, largest {size / 1024:.0f} KiB")
    ok = built - indexed < BUILD_LIMIT_S and size < SVG_LIMIT_BYTES
    print("targets met" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
