"""The shipped published figures, through the real import and the real report path.

The article's cost table is built from its own scoring table (batch 32) and its per-minute
prices: time per million = 1,000,000 / images/s, cost = minutes × price per minute. The
report must give the same figures, e.g. GTX 1080, AlexNet, batch 32: 3295.19 images/s →
303.47 s (5 min 3 s) → €0.303 at €0.06 per minute. The expected values are computed here
from the shipped CSV files with the csv module, independently of the lake and of DuckDB.
"""

from __future__ import annotations

import csv

import pytest

from gpucompare.lake.tables import open_lake
from gpucompare.prices import published
from gpucompare.reports import formatting
from gpucompare.reports.build import build_reports
from gpucompare.reports.inputs import ReportInputs
from gpucompare.reports.page import render_page
from gpucompare.reports.summary import render_summary
from tests.support.page_site import GENERATED_AT
from tests.support.reports_data import rows


@pytest.fixture(scope="module")
def published_reports(tmp_path_factory):
    lake_dir = tmp_path_factory.mktemp("published") / "lake"
    lake = open_lake(str(lake_dir))
    published.import_published(
        lake,
        results_csv=published.SHIPPED_RESULTS,
        prices_csv=published.SHIPPED_PRICES,
        scaling_csv=published.SHIPPED_SCALING,
    )
    return build_reports(ReportInputs.from_lake(str(lake_dir)), currency="EUR")


def _csv(path):
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_gtx_1080_alexnet_batch_32_as_in_the_article(published_reports):
    [row] = rows(
        published_reports.tables["cost_per_million"],
        gpu_model="GTX 1080",
        gpu_count=1,
        mode="score",
        network="alexnet",
        batch_size=32,
    )
    assert row["images_per_sec"] == 3295.19
    assert round(row["seconds_per_million"], 2) == 303.47
    assert formatting.duration(row["seconds_per_million"]) == "5 min 3 s"
    assert row["price_per_hour"] == pytest.approx(0.06 * 60)
    assert round(row["cost_per_million"], 3) == 0.303
    assert row["currency"] == "EUR"
    assert row["result_source"].startswith("LeaderGPU article")
    assert row["target"] == "published"


def test_every_published_cost_row_follows_from_the_published_prices(published_reports):
    per_minute = {
        (p["provider"], p["instance_type"]): float(p["price"])
        for p in _csv(published.SHIPPED_PRICES)
        if p["unit"] == "minute" and p["currency"] == "EUR"
    }
    expected = {}
    for r in _csv(published.SHIPPED_RESULTS):
        key = (r["provider"], r["instance_type"])
        if r["mode"] == "score" and r["batch_size"] == "32" and r["gpu_count"] == "1" and key in per_minute:
            seconds = 1_000_000 / float(r["images_per_sec"])
            expected[(r["instance_type"], r["network"])] = (seconds, per_minute[key] * seconds / 60)
    assert len(expected) >= 20  # four priced machines × six networks

    table = published_reports.tables["cost_per_million"]
    got = {
        (r["instance_type"], r["network"]): r
        for r in rows(table, mode="score", batch_size=32, gpu_count=1)
        if (r["instance_type"], r["network"]) in expected
    }
    assert set(got) == set(expected)
    for key, (seconds, cost) in expected.items():
        assert got[key]["seconds_per_million"] == pytest.approx(seconds), key
        assert got[key]["cost_per_million"] == pytest.approx(cost), key
        # as the article prints them: whole seconds and euros to three decimals
        assert round(got[key]["cost_per_million"], 3) == round(cost, 3), key


def test_published_rows_without_a_price_are_listed_not_dropped(published_reports):
    table = published_reports.tables["cost_per_million"]
    shipped_ok = [r for r in _csv(published.SHIPPED_RESULTS) if r["status"] == "ok"]
    assert table.num_rows == len(shipped_ok)  # every published throughput is in the cost report
    missing = published_reports.missing_prices.to_pylist()
    # machines the article prices only for one GPU (its 2- and 4-GPU rows), and hosts it gives no price for
    assert {(r["provider"], r["gpu_count"] > 1) for r in missing} >= {("leadergpu", True), ("nvidia", False)}
    assert all(r["cost_per_million"] is None for r in missing)


def test_suspicious_published_values_stay_visible_with_their_flags(published_reports):
    throughput = published_reports.tables["throughput"].to_pylist()
    outliers = [r for r in throughput if "outlier_vs_neighbours" in (r["flags"] or "")]
    assert [r["images_per_sec"] for r in outliers] == [13341.5]  # kept as published, flagged
    commas = [r for r in throughput if "decimal_comma" in (r["flags"] or "")]
    assert len(commas) > 50


def test_published_scaling_curves_and_the_articles_multi_gpu_rows(published_reports):
    scaling = published_reports.tables["scaling"]
    curves = rows(scaling, origin="published_curve", network="inception-bn", framework="MXNet")
    assert {r["gpu_count"]: r["speedup"] for r in curves}[16] == 14.7
    article = rows(scaling, origin="published", gpu_model="Tesla P100", network="resnet-50", scaling="strong")
    assert {r["gpu_count"] for r in article} == {1, 2}
    for r in article:
        assert r["speedup"] == pytest.approx(r["images_per_sec"] / r["baseline_images_per_sec"])


def test_the_page_lists_the_suspicious_published_value(published_reports):
    page = render_page(published_reports, GENERATED_AT)
    flags = page[page.index('id="flags"'):]
    assert "13,341.50" in flags and "outlier_vs_neighbours" in flags
    assert flags.count("<tr>") == 2  # header + the one outlier


def test_summary_recomputes_the_articles_cost_table(published_reports):
    summary = render_summary(published_reports)
    line = next(row for row in summary.splitlines() if row.startswith("| GTX 1080 | alexnet |"))
    assert line == "| GTX 1080 | alexnet | 3,295.19 | 5 min 3 s | €3.60 | €0.303 |"
    # 2017 figures are over 3 years old: shown, not ranked as a best buy, and the summary says so
    assert "No ranked figure yet: published figures dated before" in summary
    best = published_reports.tables["best_value"]
    assert best.num_rows > 0 and not any(best["ranked"].to_pylist())
