"""The page's first screen in a real headless Chromium (Debian's /usr/bin/chromium, driven by
playwright), at a phone's and a laptop's width, on a three-machine priced lake
(tests/support/answer_site.py): per workload the best buy, its cost with interval (or "1 run"),
the runner-up's verdict, the figures' age and the caveats, all inside the first viewport."""

from __future__ import annotations

import pytest

from gpucompare.reports.page import render_page
from tests.integration.reports.test_html_browser import _open, browser  # noqa: F401 (the fixture)
from tests.support.answer_site import answer_site
from tests.support.page_site import GENERATED_AT

#: phone and laptop viewports (width, height)
VIEWPORTS = ((390, 844), (1366, 768))


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    return answer_site(tmp_path_factory.mktemp("answer"))


def test_the_answer_names_best_buy_interval_runner_up_age_and_caveats(site):
    report_set, _ = site
    page = render_page(report_set, GENERATED_AT)
    answer = page[page.index('id="answer"'): page.index('<div class="cards">')]
    resnet = answer[answer.index("resnet-50 · score"):]
    assert "aws g5.xlarge · us-east-1 (NVIDIA A10G), 1 GPU, batch 32" in resnet
    assert "95 %: €0.2" in resnet and "this night&#39;s instance" in resnet
    assert "runner-up aws g4dn.xlarge · us-east-1: equivalent" in resnet  # within 1 % of the cost
    assert "p3.2xlarge" not in resnet  # twice as dear: not the runner-up
    assert "measured 2026-11-30 (1 day before this report)" in resnet
    alexnet = answer[answer.index("alexnet · score"): answer.index("resnet-50 · score")]
    assert "1 run: no interval" in alexnet and "1 run: a single repeat" in alexnet
    assert "device energy only (lower bound)" in alexnet
    assert "dearer" not in alexnet  # a single repeat decides nothing


@pytest.mark.parametrize(("width", "height"), VIEWPORTS)
def test_the_first_screen_holds_the_answer(browser, site, width, height, tmp_path):  # noqa: F811
    _, site_dir = site
    page, errors, outside = _open(browser, site_dir, width)
    page.set_viewport_size({"width": width, "height": height})
    assert errors == [] and outside == []
    heading = page.locator("#answer-heading").bounding_box()
    first = page.locator("#answer article").first.bounding_box()
    assert heading is not None and heading["y"] < height / 2
    # the first workload's card (best buy, cost, interval, verdict) starts on the first screen
    assert first is not None and first["y"] < height * 0.8 and first["x"] + first["width"] <= width
    assert page.evaluate("document.documentElement.scrollWidth") <= width  # nothing wider than the screen
    page.screenshot(path=str(tmp_path / f"first-screen-{width}.png"))
    page.close()
