"""index.html in a real headless Chromium (Debian's /usr/bin/chromium, driven by playwright).

The page is opened from file:// with every other request refused and recorded, so a chart
or style that needed the network would show up as a failure, not as a silent gap. It is
checked at a phone's width (390 px) and a laptop's (1366 px): no sideways scrolling of the
page, and on every figure a legend, the measured-vs-published key, a heading, a text
summary and a data table.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpucompare.lake.tables import open_lake
from gpucompare.prices import published
from gpucompare.reports.build import build_reports
from gpucompare.reports.inputs import ReportInputs
from gpucompare.reports.page import render_page
from gpucompare.reports.publish import write_site
from tests.integration.reports.test_html import small_report
from tests.support.page_site import GENERATED_AT
from tests.support.system_parts import require_part

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
WIDTHS = (390, 1366)



@pytest.fixture(scope="module")
def browser():
    require_part("chromium", CHROMIUM.exists() or shutil.which("chromium"))
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield instance
        finally:
            instance.close()


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The small measured lake plus the shipped published figures (the page a user gets)."""
    root = tmp_path_factory.mktemp("browser")
    small_report(root / "lake")  # writes the measured nights into the lake
    published.import_published(open_lake(str(root / "lake")))
    report_set = build_reports(ReportInputs.from_lake(str(root / "lake")), str(root / "site"))
    write_site(report_set, str(root / "site"))
    return report_set, root / "site"


def _open(browser, site_dir: Path, width: int):
    page = browser.new_page(viewport={"width": width, "height": 900})
    errors: list[str] = []
    outside: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))

    def only_local(route):
        if route.request.url.startswith("file://"):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    page.route("**/*", only_local)
    page.goto((site_dir / "index.html").as_uri(), wait_until="load")
    return page, errors, outside


def test_page_loads_offline_without_errors_and_draws_its_charts(browser, site, tmp_path):
    report_set, site_dir = site
    expected_charts = render_page(report_set, GENERATED_AT).count("<svg")
    page, errors, outside = _open(browser, site_dir, 1400)

    assert errors == []
    assert outside == []
    assert page.title().startswith("gpucompare")
    sizes = page.eval_on_selector_all(
        "svg", "nodes => nodes.map(n => { const r = n.getBoundingClientRect(); return [r.width, r.height]; })"
    )
    drawn = [size for size in sizes if size[0] > 100 and size[1] > 50]
    assert len(drawn) == len(sizes) == expected_charts >= 5
    # the charts hold marks, not just axes: bars in the cost charts, lines and points elsewhere
    assert page.locator("#cost svg rect").count() >= 3
    assert page.locator("#scaling svg circle").count() >= 4
    assert page.locator("#regressions table tbody tr").count() == 1
    missing = report_set.missing_prices.num_rows
    assert page.locator("#missing table tbody tr").count() == missing >= 1
    assert "local laptop (NVIDIA A10G)" in page.locator("#missing table").first.inner_text()
    page.screenshot(path=str(tmp_path / "index.png"), full_page=True)
    assert (tmp_path / "index.png").stat().st_size > 10_000
    page.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_no_sideways_scrolling_and_every_figure_has_key_legend_and_table(browser, site, width):
    _report_set, site_dir = site
    page, errors, _outside = _open(browser, site_dir, width)
    assert errors == []
    # the page itself never scrolls sideways; wide content scrolls inside its own box
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    overflowing = page.evaluate(
        """() => [...document.querySelectorAll('main *')].filter(el => {
            const r = el.getBoundingClientRect();
            if (r.width === 0 || r.right <= window.innerWidth + 0.5) return false;
            // inside a box that scrolls (a table or a chart in its own scroll area) is fine
            for (let p = el.parentElement; p; p = p.parentElement) {
                const s = getComputedStyle(p);
                if (['auto', 'scroll'].includes(s.overflowX)) return false;
            }
            return true;
        }).map(el => el.tagName + '.' + el.className).slice(0, 5)"""
    )
    assert overflowing == []
    figures = page.locator("figure.chart")
    count = figures.count()
    assert count >= 8  # cost, throughput and scaling panels of the small lake and the article
    report = page.evaluate(
        """() => [...document.querySelectorAll('figure.chart')].map(f => ({
            id: f.id,
            heading: !!f.querySelector('h3'),
            key: [...f.querySelectorAll("svg g.key[data-key='origin'] text")]
                .map(t => t.textContent).join('|'),
            legend: [...f.querySelectorAll('svg g.legend-entry text')].filter(t => t.textContent).length,
            table: f.querySelectorAll('details table tbody tr').length,
            caption: !!f.querySelector('details table caption'),
            summary: (f.querySelector('p.summary') || {}).textContent || '',
            labelled: (f.querySelector('svg') || {getAttribute: () => ''}).getAttribute('aria-labelledby'),
        }))"""
    )
    for figure in report:
        assert figure["heading"], figure
        assert "measured" in figure["key"] and "published" in figure["key"], figure
        assert figure["legend"] > 0 and figure["table"] > 0 and figure["caption"], figure
        assert len(figure["summary"]) > 20, figure
        assert figure["labelled"] == f"{figure['id']}-title {figure['id']}-summary"
    scaling = [f for f in report if f["id"].startswith("scaling-")]
    assert scaling and all("ideal (linear)" in f["key"] for f in scaling)
    # tables: column headers and row headers are marked as such
    assert page.locator("th[scope=col]").count() > 20 and page.locator("tbody th[scope=row]").count() > 10
    # the data table opens and its values are readable text (no hover needed)
    first = figures.first
    first.locator("details summary").click()
    assert first.locator("details table").is_visible()
    assert "€" in first.locator("details table").inner_text()
    # links to each section's CSV and Parquet resolve to files written beside the page
    hrefs = page.eval_on_selector_all("a[href$='.csv'], a[href$='.parquet']", "as => as.map(a => a.href)")
    assert len(hrefs) >= 12
    for href in hrefs:
        assert Path(href.removeprefix("file://")).is_file(), href
    page.close()
