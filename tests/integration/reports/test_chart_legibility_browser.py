"""The page's charts read true and stay legible, measured in a real headless Chromium at a phone's width
(390 px) and a laptop's (1366 px), on two pages: the demo's (tests/support/page_site.demo_site) and one
whose scaling charts hold three runs of one machine (page_site.scaling_site: strong and weak series of
one p3.16xlarge, the case where one machine's series shared a colour and their end labels stacked).

Checked as drawn, not as modelled: every chart text is at least 11 px on screen; no two texts of a chart
overlap (tick labels, end labels, key, legend); the series of one chart are told apart by colour or marker
(not by dash alone); a bar chart's key swatches have the colours of its own bars; no label says a word
twice ("declared: declared:"); and on a log-scaled speedup chart the ideal line passes through y = x at
every GPU count drawn.
"""

from __future__ import annotations

import pytest

from tests.integration.reports.test_html_browser import WIDTHS, _open, browser  # noqa: F401 (the fixture)
from tests.support.page_site import demo_site, scaling_site

#: The smallest chart text a reader gets, in CSS pixels.
MIN_TEXT_PX = 11.0

MEASURE = """() => [...document.querySelectorAll('figure.chart svg')].map(svg => {
  const scale = svg.getScreenCTM().a;
  const texts = [...svg.querySelectorAll('text')]
    .filter(t => t.getClientRects().length && t.textContent.trim());
  const boxes = texts.map(t => [t.textContent, t.getBoundingClientRect()]);
  const overlaps = [];
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
    const a = boxes[i][1], b = boxes[j][1];
    if (a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1)
      overlaps.push(boxes[i][0] + ' / ' + boxes[j][0]);
  }
  const series = [...svg.querySelectorAll('g.legend-entry')]
    .filter(g => g.querySelector('line') && !g.dataset.marker.startsWith('none'))
    .map(g => g.dataset.marker + '|' + g.querySelector('line').getAttribute('stroke'));
  const swatch = svg.querySelector('rect.swatch[data-origin=measured]');
  const solidBars = [...svg.querySelectorAll('g.legend-entry[data-marker=solid] rect')]
    .map(r => r.getAttribute('fill'));
  return {
    id: svg.closest('figure').id,
    small: texts.map(t => [t.textContent, parseFloat(getComputedStyle(t).fontSize) * scale])
                .filter(([, px]) => px < 11).map(([text, px]) => text + ' ' + px.toFixed(1) + ' px'),
    overlaps, series,
    swatch: swatch ? swatch.getAttribute('fill') : null, solidBars,
    words: texts.map(t => t.textContent),
  };
})"""


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    _report_set, demo = demo_site(tmp_path_factory.mktemp("legible-demo"))
    return {"demo": demo, "scaling": scaling_site(tmp_path_factory.mktemp("legible-scaling"))}


@pytest.mark.parametrize("page_name", ["demo", "scaling"])
@pytest.mark.parametrize("width", WIDTHS)
def test_chart_text_is_legible_and_nothing_collides(browser, pages, page_name, width):  # noqa: F811
    page, errors, _outside = _open(browser, pages[page_name], width)
    charts = page.evaluate(MEASURE)
    page.close()
    assert errors == [] and charts
    assert [(c["id"], c["small"]) for c in charts if c["small"]] == []
    assert [(c["id"], c["overlaps"]) for c in charts if c["overlaps"]] == []
    # one chart's series: never the same marker in the same colour and fill (dash alone is not enough)
    assert [(c["id"], c["series"]) for c in charts if len(set(c["series"])) != len(c["series"])] == []
    for chart in charts:
        if chart["solidBars"]:
            assert chart["swatch"] == chart["solidBars"][0], chart["id"]
        doubled = [w for w in chart["words"] if "declared: declared" in w or "declared, declared" in w]
        assert doubled == [], chart["id"]


def test_the_scaling_page_draws_all_series_of_the_machine_apart(browser, pages):  # noqa: F811
    page, _errors, _outside = _open(browser, pages["scaling"], 390)
    ends = page.evaluate(
        """() => [...document.querySelectorAll('figure#scaling-speedup-resnet-50 g.series')]
            .map(g => g.querySelector(':scope > text')).filter(Boolean).map(t => t.textContent)""")
    page.close()
    ours = [e for e in ends if "strong" in e or "weak" in e]
    assert len(ours) >= 2 and len(set(ours)) == len(ours), ends


def test_the_ideal_line_passes_through_y_equals_x_at_every_gpu_count(browser, pages):  # noqa: F811
    """Read back from the drawn path: each vertex of the ideal line, mapped through the chart's own ticks,
    is (x, x). A chord from (1, 1) to (16, 16) on a log axis would have no vertex at 2, 4 or 8."""
    page, _errors, _outside = _open(browser, pages["demo"], 1366)
    drawn = page.evaluate(
        """() => [...document.querySelectorAll('figure[id^=scaling-speedup] svg')].map(svg => ({
            id: svg.closest('figure').id,
            ideal: svg.querySelector('g.series[data-number="0"] path').getAttribute('d'),
            xs: [...svg.querySelectorAll('g.series:not([data-number="0"]) title')].map(t => t.textContent),
        }))""")
    page.close()
    assert drawn
    for chart in drawn:
        vertices = chart["ideal"].split()
        counts = {title.rsplit(": ", 1)[1].split(" → ")[0] for title in chart["xs"]}
        assert len(vertices) >= len(counts), (chart["id"], vertices, counts)
