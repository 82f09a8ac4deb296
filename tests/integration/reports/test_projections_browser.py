"""The page section "Where else could this run?" in a real headless Chromium (as
tests/integration/reports/test_html_browser.py).

The site is built from the small measured lake of the page tests, the shipped published figures,
the shipped price lists and exchange rates, plus other providers' catalog rows (canonical GPU model
and GPU count, as the catalog importers write them); it is opened from file:// with every other
request refused. Checked at a phone's width and a laptop's: the section, its caveat, one table per
network and mode with the measured machine marked, nothing scrolling the page sideways.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from gpucompare.lake import schema
from gpucompare.lake.tables import open_lake
from gpucompare.prices import published
from gpucompare.prices import tables as price_tables
from gpucompare.reports import build as reports
from gpucompare.reports.page_projections import CAVEAT
from gpucompare.reports.page_rows import MEASURED_MARK
from tests.integration.reports.test_html import small_report
from tests.integration.reports.test_html_browser import WIDTHS, _open, browser  # noqa: F401 (browser: the Chromium fixture)
from tests.support.reports_data import price

#: other providers' rows for the GPUs the small lake measured (A10G x 1 on aws g5.xlarge)
CATALOG = [
    {**price(instance, value, provider=provider, region=region, market=market, source="test catalog"),
     "gpu_model": "A10G"}
    for provider, instance, region, market, value in (
        ("acme", "a10g-1x", "eastus", "on_demand", 3.20),
        ("acme", "a10g-1x", "eastus", "spot", 0.90),
        ("zeta", "gpu.a10g.1", "us-west-1", "on_demand", 0.75),
    )
]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("where-else")
    small_report(root / "lake")
    lake = open_lake(str(root / "lake"))
    published.import_published(lake)
    prices = pa.concat_tables([price_tables.shipped_prices(),
                               pa.Table.from_pylist(CATALOG, schema=schema.PRICES_SCHEMA)])
    inputs = reports.ReportInputs(lake=lake, prices=prices, fx=price_tables.shipped_fx(),
                                  published_scaling=published.read_published_scaling(published.SHIPPED_SCALING))
    report_set = reports.build_reports(inputs, str(root / "site"))
    reports.write_site(report_set, str(root / "site"))
    return report_set, root / "site"


@pytest.mark.parametrize("width", WIDTHS)
def test_where_else_section_in_chromium(browser, site, width):  # noqa: F811 (the fixture)
    report_set, site_dir = site
    page, errors, outside = _open(browser, site_dir, width)
    assert errors == [] and outside == []
    section = page.locator("section#where-else")
    assert section.locator("h2").inner_text() == "Where else could this run?"
    assert page.locator("nav a[href='#where-else']").count() == 1
    note = section.locator("p.note")
    assert note.is_visible() and note.inner_text() == CAVEAT
    # one table per network and mode measured on a GPU the catalogs price
    projected = report_set.tables["projections"].to_pylist()
    expected = {(r["mode"], r["network"]) for r in projected}
    assert len(expected) >= 1
    assert section.locator("table").count() == len(expected)
    text = section.inner_text()
    for provider in ("acme", "zeta"):
        assert provider in text
    marked = section.locator("tbody th", has_text="aws g5.xlarge ★")
    assert marked.count() >= 1 and marked.first.is_visible()
    assert MEASURED_MARK in text and "projected from aws g5.xlarge" in text
    # the page never scrolls sideways; the tables reflow or scroll inside their own box
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    # the section's data links resolve to the files written beside the page
    hrefs = section.locator("a").evaluate_all("as => as.map(a => a.href)")
    assert len(hrefs) == 2
    for href in hrefs:
        assert Path(href.removeprefix("file://")).is_file(), href
    page.locator("section#where-else").screenshot(path=str(site_dir / f"where-else-{width}.png"))
    page.close()
