"""The HTML report in a real browser: opened from file://, strict CSP, injected markup inert.

Uses Debian's chromium (``make browser`` installs it); the tests skip when it is absent.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from logsleuth.report.html import render_html
from tests.report.diagnoses import hostile, large

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1400, "height": 900}

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason=f"{CHROMIUM} not installed (run `make browser` as root)"
)

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("report") / "report.html"
    path.write_text(render_html(hostile()), encoding="utf-8")
    return path


class _Watched:
    """A page opened on the report, with everything it logged, requested or popped up."""

    def __init__(self, browser: object, report: Path, **context: object) -> None:
        self.context = browser.new_context(**context)  # type: ignore[attr-defined]
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.dialogs: list[str] = []
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda error: self.errors.append(f"pageerror: {error}"))
        self.page.on("request", lambda request: self.requests.append(request.url))
        self.page.on("dialog", self._dialog)
        self.page.goto(report.as_uri())

    def _console(self, message: object) -> None:
        if message.type in ("error", "warning"):  # type: ignore[attr-defined]
            self.errors.append(f"{message.type}: {message.text}")  # type: ignore[attr-defined]

    def _dialog(self, dialog: object) -> None:
        self.dialogs.append(dialog.message)  # type: ignore[attr-defined]
        dialog.dismiss()  # type: ignore[attr-defined]


@pytest.fixture
def watched(browser: object, report: Path) -> Iterator[_Watched]:
    opened = _Watched(browser, report, viewport=VIEWPORT)
    yield opened
    opened.context.close()


def test_opens_from_file_without_errors_or_requests(watched: _Watched, report: Path) -> None:
    assert watched.errors == []
    assert watched.requests == [report.as_uri()]


def test_injected_script_and_onerror_did_not_run(watched: _Watched) -> None:
    assert watched.page.evaluate("typeof window.__pwned") == "undefined"
    assert watched.dialogs == []
    assert watched.page.locator("img").count() == 0
    first = watched.page.locator("#evidence code").first.inner_text()
    assert first == "node-b:4105:4105 [1] NCCL WARN <script>window.__pwned = 1; alert(1)</script>"


def test_verdict_is_visible_without_scrolling(watched: _Watched) -> None:
    box = watched.page.locator("#verdict").bounding_box()
    assert box is not None
    assert box["y"] >= 0
    assert box["y"] + box["height"] <= VIEWPORT["height"]
    assert (
        watched.page.locator("#verdict-summary")
        .inner_text()
        .startswith("rank 5 (node-b pid 4105) never entered AllReduce #412")
    )
    ARTIFACTS.mkdir(exist_ok=True)
    watched.page.screenshot(path=str(ARTIFACTS / "report-1400x900.png"))
    watched.page.screenshot(path=str(ARTIFACTS / "report-full.png"), full_page=True)


def test_details_expand_on_click(watched: _Watched) -> None:
    frames = watched.page.locator("#stack-2 details.frames")
    assert frames.evaluate("el => el.open") is False
    inner = frames.get_by_text("_get_data (torch/utils/data/dataloader.py:1133)")
    assert not inner.is_visible()
    frames.locator("summary").click()
    assert frames.evaluate("el => el.open") is True
    assert inner.is_visible()


def test_expand_all_opens_every_details(watched: _Watched) -> None:
    watched.page.click("#expand-all")
    assert watched.page.eval_on_selector_all("details", "els => els.every(el => el.open)")
    watched.page.click("#collapse-all")
    assert watched.page.eval_on_selector_all("details", "els => els.every(el => !el.open)")


def test_rank_filter_accepts_ranges_and_text(watched: _Watched) -> None:
    visible = "#rank-table tbody tr:not([hidden])"
    watched.page.fill("#rank-filter", "5-6")
    assert watched.page.locator(visible).all_inner_texts()[0].split("\t")[:3] == [
        "5",
        "node-b",
        "4105",
    ]
    assert watched.page.locator(visible).count() == 2
    assert watched.page.inner_text("#rank-filter-status") == "2 of 8 shown"
    watched.page.fill("#rank-filter", "node-a")
    assert watched.page.locator(visible).count() == 4
    watched.page.fill("#rank-filter", "")
    assert watched.page.locator(visible).count() == 8


def test_readable_without_javascript(browser: object, report: Path) -> None:
    opened = _Watched(browser, report, viewport=VIEWPORT, java_script_enabled=False)
    try:
        page = opened.page
        assert page.locator("#verdict-summary").is_visible()
        assert page.locator("#rank-table").is_visible()
        assert not page.locator("#expand-all").is_visible()
        assert not page.locator("#rank-filter").is_visible()
        assert opened.errors == []
    finally:
        opened.context.close()


def test_phone_dark_mode_and_print(browser: object, report: Path) -> None:
    opened = _Watched(browser, report, viewport={"width": 390, "height": 844}, color_scheme="dark")
    try:
        page = opened.page
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390
        background = page.evaluate("getComputedStyle(document.body).backgroundColor")
        assert background == "rgb(21, 24, 28)"
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "report-phone-dark.png"))
        page.emulate_media(media="print")
        assert not page.locator("nav.toc").is_visible()
        assert opened.errors == []
    finally:
        opened.context.close()


def test_evidence_line_expands_to_its_context(watched: _Watched) -> None:
    first = watched.page.locator("#evidence details.context").first
    lines = first.locator(".context-lines li")
    assert not lines.first.is_visible()
    first.locator("summary").click()
    assert lines.first.is_visible()
    assert first.locator(".context-lines li.current .loc").inner_text() == "7"
    assert first.locator(".context-lines li.gap").all_inner_texts() == ["1 line not kept"]
    shown = first.locator(".context-lines li code").first.inner_text()
    assert (
        shown == 'node-b:4105:4105 [1] NCCL INFO <img src=x onerror="window.__pwned = 2; alert(1)">'
    )


def test_sections_for_a_reader_new_to_nccl(watched: _Watched) -> None:
    for section in ("overview", "progress", "stacks", "timeline", "findings", "config", "gaps"):
        assert watched.page.locator(f"#{section} > p.help").first.is_visible(), section
    laggard = watched.page.locator("#progress tr.laggard td").first.inner_text()
    assert laggard == "rank 5"


@pytest.fixture(scope="module")
def large_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("large") / "report.html"
    path.write_text(render_html(large()), encoding="utf-8")
    return path


def test_large_report_opens_paged_with_verdict_first(browser: object, large_report: Path) -> None:
    opened = _Watched(browser, large_report, viewport=VIEWPORT)
    try:
        page = opened.page
        page.wait_for_selector("html[data-ready='1']", state="attached")
        assert opened.errors == []
        assert opened.requests == [large_report.as_uri()]
        box = page.locator("#verdict").bounding_box()
        assert box is not None and box["y"] + box["height"] <= VIEWPORT["height"]
        page.click("#rank-details > summary")
        # The first page and the culprit's row, which every page keeps.
        assert page.locator("#rank-table tbody tr").count() == 101
        assert page.locator("#rank-table tbody tr.culprit").get_attribute("id") == "rank-1234"
        assert (
            page.inner_text(
                "#rank-table ~ .pager .pager-status, .pager[data-table='rank-table'] .pager-status"
            )
            == "rows 1-100 of 4096 (and the culprit's row)"
        )
        page.click(".pager[data-table='rank-table'] .next")
        assert page.locator("#rank-table tbody tr").first.get_attribute("data-rank") == "100"
        page.fill("#rank-filter", "1234")
        row = page.locator("#rank-table tbody tr")
        assert row.count() == 1 and row.get_attribute("class") == "culprit"
        ARTIFACTS.mkdir(exist_ok=True)
        page.fill("#rank-filter", "")
        page.screenshot(path=str(ARTIFACTS / "report-4096-1400x900.png"))
        page.locator("#progress").scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "report-4096-progress.png"))
    finally:
        opened.context.close()


def test_prints_to_pdf_with_every_section_open(watched: _Watched) -> None:
    watched.page.emulate_media(media="print")
    watched.page.evaluate("window.dispatchEvent(new Event('beforeprint'))")
    assert watched.page.eval_on_selector_all("details", "els => els.every(el => el.open)")
    ARTIFACTS.mkdir(exist_ok=True)
    pdf = watched.page.pdf(path=str(ARTIFACTS / "report.pdf"), format="A4")
    assert pdf.startswith(b"%PDF-")
    assert watched.errors == []
