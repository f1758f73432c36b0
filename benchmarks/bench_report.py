#!/usr/bin/env python3
"""Time the reports of a large synthetic incident and measure the HTML page.

Generates a ``--ranks``-rank incident with ``benchmarks/synth.py`` (missing collective, a
per-host split communicator, launcher log and stacks), analyses it, then renders the HTML,
JSON and text reports. With ``--browser`` it also opens the page in headless Chromium
(``/usr/bin/chromium`` through Playwright) and times it until the page's script is done.
The issue's targets for 4,096 ranks: the HTML renders in under 10 s into under 5 MB and
opens in under 2 s. Analysis time is printed too but is not a target of this benchmark.

Example:
    python benchmarks/bench_report.py --ranks 4096 --hosts 512 --browser
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.synth import generate
from logsleuth.api import analyze
from logsleuth.report import render_html, render_json, render_text

RENDER_LIMIT_S = 10.0
SIZE_LIMIT_BYTES = 5 * 1000 * 1000
OPEN_LIMIT_S = 2.0
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


_MARKS = """() => ({
    paint: (performance.getEntriesByName("first-contentful-paint")[0] || {}).startTime,
    ready: performance.getEntriesByName("logsleuth-ready")[0].startTime,
})"""


def _open_seconds(page: Path) -> tuple[float, dict[str, float], list[str], list[str]]:
    """Open ``page`` from file://; return seconds until ready, page marks, errors, requests.

    The wall time (from ``goto`` until the ready attribute is seen) is the target; the
    page's own marks (first contentful paint, ready) are in milliseconds since navigation.
    """
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    requests: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            tab = browser.new_page(viewport={"width": 1400, "height": 900})
            tab.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            tab.on("pageerror", lambda e: errors.append(str(e)))
            tab.on("request", lambda r: requests.append(r.url))
            start = time.perf_counter()
            tab.goto(page.as_uri())
            tab.wait_for_selector("html[data-ready='1']", state="attached")
            opened = time.perf_counter() - start
            marks = tab.evaluate(_MARKS)
        finally:
            browser.close()
    return opened, marks, errors, [r for r in requests if r != page.as_uri()]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; return 1 when a target is missed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4096)
    parser.add_argument("--hosts", type=int, default=512)
    parser.add_argument("--ops", type=int, default=40)
    parser.add_argument("--dir", type=Path, help="reuse (or keep) the incident in this directory")
    parser.add_argument("--browser", action="store_true", help="also time opening the page")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        out = args.dir or Path(tmp) / "incident"
        start = time.perf_counter()
        if not (out / "manifest.json").exists():
            generate(
                out,
                ranks=args.ranks,
                hosts=args.hosts,
                ops=args.ops,
                fault="missing-collective",
                culprit=args.ranks // 3,
                seed=7,
                comms=2,
                launcher=True,
                stacks=True,
            )
        generated = time.perf_counter()
        diagnosis = analyze([str(out)]).diagnosis
        analysed = time.perf_counter()
        html = render_html(diagnosis)
        rendered = time.perf_counter()
        json_text = render_json(diagnosis)
        json_done = time.perf_counter()
        text = render_text(diagnosis)
        text_done = time.perf_counter()
        page = Path(tmp) / "report.html"
        page.write_text(html, encoding="utf-8")
        size = len(html.encode("utf-8"))
        render_s = rendered - analysed
        print(f"ranks {args.ranks} hosts {args.hosts} ops {args.ops}")
        print(f"generate {generated - start:.2f} s, analyze {analysed - generated:.2f} s")
        print(f"html render {render_s:.2f} s, {size / 1e6:.2f} MB ({size:,} bytes)")
        print(f"json render {json_done - rendered:.2f} s, {len(json_text.encode()) / 1e6:.2f} MB")
        print(f"text render {text_done - json_done:.2f} s, {len(text.splitlines()):,} lines")
        print(f"verdict: {diagnosis.verdict.kind}: {diagnosis.verdict.summary}")
        missed = []
        if render_s > RENDER_LIMIT_S:
            missed.append(f"html render {render_s:.2f} s > {RENDER_LIMIT_S:.0f} s")
        if size > SIZE_LIMIT_BYTES:
            missed.append(f"html size {size:,} bytes > {SIZE_LIMIT_BYTES:,}")
        if args.browser:
            if not CHROMIUM.exists():
                print(f"{CHROMIUM} not installed: open time not measured")
            else:
                opened, marks, errors, requests = _open_seconds(page)
                print(
                    f"open in chromium {opened:.2f} s (first paint {marks['paint']:.0f} ms, "
                    f"tables ready {marks['ready']:.0f} ms); console errors {len(errors)}; "
                    f"other requests {len(requests)}"
                )
                if opened > OPEN_LIMIT_S:
                    missed.append(f"open {opened:.2f} s > {OPEN_LIMIT_S:.0f} s")
                if errors or requests:
                    missed.append(f"page errors {errors[:3]} / requests {requests[:3]}")
    for line in missed:
        print(f"TARGET MISSED: {line}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
