"""index.html in a real headless Chromium (Debian's /usr/bin/chromium, driven by playwright).

The page is opened from file:// with every other request refused and recorded, so a chart
or style that needed the network would show up as a failure, not as a silent gap.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpucompare import html
from tests.test_html import small_report

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

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists() and shutil.which("chromium") is None:
        pytest.skip("chromium is not installed (scripts/install-system-deps.sh installs it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield instance
        finally:
            instance.close()


def test_page_loads_offline_without_errors_and_draws_its_charts(browser, tmp_path):
    report_set = small_report(tmp_path / "lake")
    out = tmp_path / "site"
    html.write_site(report_set, str(out))
    expected_charts = html.render_page(report_set).count("<svg")

    page = browser.new_page(viewport={"width": 1400, "height": 1000})
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
    page.goto((out / "index.html").as_uri(), wait_until="load")

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
    assert page.locator("#missing table tbody tr").count() == 1
    page.screenshot(path=str(tmp_path / "index.png"), full_page=True)
    assert (tmp_path / "index.png").stat().st_size > 10_000
    page.close()
