#!/usr/bin/env python3
"""Time the STAT-style merge of a large synthetic set of py-spy dumps and check its verdict.

Writes one py-spy 0.4.3 dump per rank (``--ranks``, default 1,024) into ``stacks/rank<R>.1.txt``
of a bundle with a ``manifest.json`` (rank -> host, pid). Every rank is blocked in
``all_reduce`` except ``--culprit``, whose main thread is in ``DataLoader.__next__``; both
stacks are the real ones of the captured 4-rank gloo hang (fixtures/real/stacks). Then it
times, in this process: reading the dumps, building the evidence index, merging the stacks
(classes and prefix tree) and the whole ``logsleuth analyze`` of the bundle, and checks that
the text report's first line names the culprit rank and its call site.

The issue's target: the merge takes under 5 s and the culprit is the first thing the text
summary says. The exit status is 1 when either is missed.

Example:
    python benchmarks/bench_stacks.py --ranks 1024 --culprit 517
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from logsleuth.analysis.index import build_index
from logsleuth.analysis.rules.stacks import proc_stacks
from logsleuth.analysis.stacks import build_stack_classes, build_stack_tree
from logsleuth.api import analyze
from logsleuth.model.base import Event, InputSummary
from logsleuth.parse.discover import discover
from logsleuth.parse.dispatch import read_input
from logsleuth.report.text import render_text

MERGE_LIMIT_S = 5.0
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "stacks"
HEALTHY = FIXTURES / "gloo-hang_pyspy-0.4.3_rank_pid13270.txt"
"""Rank 0 of the gloo hang: ``all_reduce`` under ``train_step (hang_dist.py:15)``."""
STUCK = FIXTURES / "gloo-hang_pyspy-0.4.3_rank_pid13273.txt"
"""Rank 3 of the gloo hang: ``DataLoader.__next__`` under ``main (hang_dist.py:23)``."""
PIDS = {HEALTHY: "13270", STUCK: "13273"}


def write_bundle(out: Path, ranks: int, culprit: int, per_host: int = 8) -> None:
    """Write ``ranks`` dumps (rank ``culprit`` in its DataLoader) and the manifest into ``out``."""
    stacks = out / "stacks"
    stacks.mkdir(parents=True)
    templates = {path: path.read_text(encoding="utf-8") for path in PIDS}
    entries: dict[str, dict[str, object]] = {}
    for rank in range(ranks):
        template = STUCK if rank == culprit else HEALTHY
        pid = 20000 + rank
        text = templates[template].replace(PIDS[template], str(pid))
        (stacks / f"rank{rank}.1.txt").write_text(text, encoding="utf-8")
        host = f"gpu-node{rank // per_host + 1:03d}"
        entries[str(rank)] = {"pid": pid, "host": host, "local_rank": rank % per_host}
    manifest = {
        "schema": "logsleuth.bundle/1",
        "command": ["torchrun", "--nproc_per_node", str(per_host), "hang_dist.py"],
        "ranks": entries,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1), encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; return 1 when a target is missed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--culprit", type=int, default=517)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bundle"
        start = time.perf_counter()
        write_bundle(out, args.ranks, args.culprit)
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
        procs = proc_stacks(index)
        indexed = time.perf_counter()
        classes = build_stack_classes(procs)
        tree = build_stack_tree(procs)
        merged = time.perf_counter()
        diagnosis = analyze([str(out)]).diagnosis
        text = render_text(diagnosis)
        analyzed = time.perf_counter()
    first = text.splitlines()[0] if text else ""
    expected = f"rank {args.culprit} is stuck in data loading at main (hang_dist.py:23)"
    print(f"ranks {args.ranks}, culprit rank {args.culprit}")
    print(f"generate {generated - start:.2f} s")
    print(f"parse {parsed - generated:.2f} s ({len(events):,} events from {len(sources)} files)")
    print(f"index + rank identity {indexed - parsed:.2f} s ({len(procs)} ranks)")
    print(
        f"merge {merged - indexed:.3f} s ({len(classes)} classes, "
        f"tree root {tree.count} processes, {len(tree.children)} outermost frame(s))"
    )
    print(f"analyze + text report, end to end {analyzed - merged:.2f} s")
    print(f"first line: {first}")
    ok = merged - indexed < MERGE_LIMIT_S and analyzed - merged < MERGE_LIMIT_S
    culprit_first = expected in first and first.startswith("VERDICT non-collective-stall:")
    if not culprit_first:
        print(f"expected the first line to say: {expected}")
    ok = ok and culprit_first
    print("targets met" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
