"""The demo's page in a real headless Chromium at a phone's width (390 px) and a laptop's (1366 px).

Stands in for a FinOps engineer reading the page ``make demo`` leaves: the demo-like site of
tests/support/page_site.py (two nights of the unpriced local CPU at ~60 images/s, the 378 published
figures, the catalog samples). Checked as the reader sees it: the page never scrolls sideways, the
phone page is not a wall (under 4× the laptop page's height), no text overflows its box, every line
of every chart has its own dash/marker pair, a measured line is never drawn on the axis, no table is
cut at 1366 px, and the first screen says why nothing is ranked and what to do.
"""

from __future__ import annotations

import pytest

from tests.integration.reports.test_html_browser import WIDTHS, _open, browser  # noqa: F401 (the fixture)
from tests.support.page_site import demo_site

#: Elements whose text must fit their own box (a table cell, a card, a heading, a label).
TEXT_BOXES = "td, th, caption, .card b, .card span, h1, h2, h3, p, li, nav a, summary"


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    _report_set, site = demo_site(tmp_path_factory.mktemp("demo-page"))
    return site


@pytest.fixture(scope="module")
def heights(browser, demo):  # noqa: F811 (the fixture)
    found = {}
    for width in WIDTHS:
        page, _errors, _outside = _open(browser, demo, width)
        found[width] = page.evaluate("document.documentElement.scrollHeight")
        page.close()
    return found


def test_the_phone_page_is_under_four_times_the_laptop_page(heights):
    """Before: 49,034 px at 390 (the 155 unpriced rows as cards) against 9,572 at 1366."""
    assert heights[390] < 4 * heights[1366]


@pytest.mark.parametrize("width", WIDTHS)
def test_no_sideways_scrolling_and_no_text_overflowing_its_box(browser, demo, width):  # noqa: F811
    page, errors, outside = _open(browser, demo, width)
    assert errors == [] and outside == []
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    # open every collapsed table so its cells are laid out and measured too
    page.evaluate("() => document.querySelectorAll('details').forEach(d => d.open = true)")
    overflowing = page.evaluate(
        """(selector) => [...document.querySelectorAll(selector)]
            .filter(el => el.getClientRects().length && el.scrollWidth > el.clientWidth + 1)
            .map(el => el.tagName + ' ' + el.textContent.slice(0, 60))""",
        TEXT_BOXES,
    )
    assert overflowing == []
    # chart text stays inside its chart (SVG text cannot scroll: it would be cut)
    outside_charts = page.evaluate(
        """() => [...document.querySelectorAll('figure.chart svg')].flatMap(svg => {
            const box = svg.getBoundingClientRect();
            return [...svg.querySelectorAll('text')].filter(t => {
                const r = t.getBoundingClientRect();
                return r.width && (r.left < box.left - 1 || r.right > box.right + 1);
            }).map(t => svg.closest('figure').id + ': ' + t.textContent);
        })"""
    )
    assert outside_charts == []
    page.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_every_series_is_told_apart_without_colour_and_measured_lines_stand_off_the_axis(
    browser, demo, width  # noqa: F811
):
    page, _errors, _outside = _open(browser, demo, width)
    charts = page.evaluate(
        """() => [...document.querySelectorAll('figure.chart svg')].map(svg => ({
            id: svg.closest('figure').id,
            entries: [...svg.querySelectorAll('g.legend-entry[data-dash]')]
                .map(g => [g.dataset.dash, g.dataset.marker, g.querySelector('text').textContent].join('|')),
            axis: svg.querySelector('path.axis')
                ? svg.querySelector('path.axis').getBoundingClientRect().bottom : null,
            measured: [...svg.querySelectorAll("g.series[data-measured='yes'] :is(circle, rect, polygon)")]
                .map(m => { const r = m.getBoundingClientRect(); return r.top + r.height / 2; }),
        }))"""
    )
    lines = [c for c in charts if c["axis"] is not None]
    assert len(lines) >= 8
    for chart in lines:
        styles = [e.rsplit("|", 1)[0] for e in chart["entries"]]
        assert len(set(styles)) == len(styles), chart
        for centre in chart["measured"]:
            assert chart["axis"] - centre >= 8, chart["id"]
    # the demo's measured CPU line is drawn (the alexnet scoring chart holds it)
    alexnet = next(c for c in lines if c["id"] == "throughput-score-alexnet")
    assert len(alexnet["measured"]) == 2
    page.close()


def test_no_table_is_cut_at_1366_px(browser, demo):  # noqa: F811
    """The flagged published values' "figure" column was hidden past the box's edge: a section's
    table fits its box at 1366 px; a chart's data table (a third of the width) may scroll, and its
    box then shows a shadow at the edge that hides columns."""
    page, _errors, _outside = _open(browser, demo, 1366)
    page.evaluate("() => document.querySelectorAll('details').forEach(d => d.open = true)")
    boxes = page.evaluate(
        """() => [...document.querySelectorAll('.scroll')].filter(box => box.getClientRects().length)
            .map(box => ({label: box.getAttribute('aria-label'), inChart: !!box.closest('figure.chart'),
                          cut: box.scrollWidth > box.clientWidth + 1,
                          cue: getComputedStyle(box).backgroundImage.includes('gradient')}))"""
    )
    assert [b["label"] for b in boxes if b["cut"] and not b["inChart"]] == []
    assert all(b["cue"] for b in boxes)
    assert page.locator("#flags table tbody tr").count() >= 1
    page.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_the_first_screen_says_why_nothing_is_ranked_and_what_to_do(browser, demo, width):  # noqa: F811
    page, _errors, _outside = _open(browser, demo, width)
    answer = page.locator("#first-answer")
    assert answer.is_visible()
    top = answer.bounding_box()["y"]
    assert top < 900 * 1.5  # within the first screen and a half, before any chart
    text = answer.inner_text()
    assert "local local-cpu (CPU) has no price" in text
    assert "gpucompare add-price" in text and "fleet file" in text
    cards = page.locator(".cards").inner_text()
    assert "published figures, from 2017" in cards
    assert "your results without a price · published figures without a price: 152" in cards
    page.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_a_fresh_install_says_nothing_was_measured_and_what_to_run(browser, tmp_path, width):  # noqa: F811
    """A fresh install (reference data loaded, no night run yet): the first screen says so."""
    _report_set, site = demo_site(tmp_path, measured=False)
    page, errors, _outside = _open(browser, site, width)
    assert errors == []
    answer = page.locator("#first-answer")
    assert answer.bounding_box()["y"] < page.locator(".cards").bounding_box()["y"]  # before the cards
    text = answer.inner_text()
    assert "nothing has been measured yet" in text and "airflow dags trigger gpucompare_nightly" in text
    assert "--rank-old-published" in text
    page.close()
