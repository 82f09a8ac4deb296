"""index.html and summary.md from a small lake: content, escaping, self-containedness.

The browser test (rendering, console errors, drawn charts) is in test_html_browser.py.
"""

from __future__ import annotations

import datetime as dt
import re

import pytest

from gpucompare.lake.tables import open_lake
from gpucompare.reports import formatting
from gpucompare.reports.build import build_reports
from gpucompare.reports.inputs import ReportInputs
from gpucompare.reports.page import render_page
from gpucompare.reports.page_rows import chart_rows
from gpucompare.reports.page_throughput import throughput_figures
from gpucompare.reports.report_set import ReportSet
from gpucompare.reports.summary import render_summary
from tests.support.page_site import GENERATED_AT
from tests.support.reports_data import fx, ingest, inputs, price, record

NIGHT = dt.date(2026, 3, 10)


def small_report(lake_dir) -> ReportSet:
    """Two priced machines over eight nights (one regresses tonight), an unpriced one, a 2-GPU series."""
    return build_reports(small_inputs(lake_dir), currency="EUR")


def small_inputs(lake_dir) -> ReportInputs:
    """The lake of :func:`small_report` (written at ``lake_dir``) with its prices, rate and curve."""
    lake = open_lake(str(lake_dir))
    for offset in range(8):
        night = NIGHT - dt.timedelta(days=7 - offset)
        tonight = offset == 7
        ingest(
            lake,
            [
                record(
                    network="alexnet",
                    batch_size=b,
                    images_per_sec=(600.0 if tonight and b == 32 else 1000.0) * b / 32,
                    night=night,
                    minute=i,
                )
                for i, b in enumerate((8, 16, 32))
            ],
        )
        ingest(
            lake,
            [
                record(
                    network="alexnet",
                    batch_size=32,
                    images_per_sec=1500.0,
                    night=night,
                    gpu_model="Tesla T4 <PCIe>",
                )
            ],
            instance_type="g4dn.xlarge",
        )
    ingest(
        lake,
        [
            record(mode="train", batch_size=32, images_per_sec=100.0),
            record(mode="train", batch_size=64, gpu_count=2, images_per_sec=190.0, minute=1),
        ],
        instance_type="g5.12xlarge",
    )
    ingest(
        lake,
        [record(network="alexnet", images_per_sec=40.0)],
        provider="local",
        instance_type="laptop",
        region=None,
        target="local",
    )
    curve = [
        {
            "source": "white paper",
            "framework": "MXNet",
            "network": "resnet-50",
            "gpu_model": "Tesla P100",
            "gpu_count": n,
            "speedup": s,
        }
        for n, s in ((1, 1.0), (2, 1.9), (4, 3.6))
    ]
    prices = [
        price("g5.xlarge", 1.0),
        price("g4dn.xlarge", 0.5, gpu_count=None),
        price("g5.12xlarge", 5.0, gpu_count=4),
    ]
    return inputs(lake, prices, [fx(1.1, dt.date(2025, 1, 1))], curve)


@pytest.fixture(scope="module")
def report_set(tmp_path_factory) -> ReportSet:
    return small_report(tmp_path_factory.mktemp("html") / "lake")


def test_durations_and_ticks_read_like_the_published_tables():
    assert formatting.duration(1e6 / 3295.19) == "5 min 3 s"
    assert formatting.duration(41.4) == "41 s"
    assert formatting.duration(3725) == "1 h 02 min"
    assert formatting.duration(None) == "–"
    assert formatting.money(0.30347, "EUR") == "€0.303"


def test_page_has_every_section_and_one_chart_per_panel(report_set):
    page = render_page(report_set, GENERATED_AT)
    for heading in (
        "Cost per million images",
        "Throughput against batch size",
        "Multi-GPU scaling",
        "Regressions",
        "Results without a price",
    ):
        assert f">{heading}</h2>" in page
    # cost: alexnet score + resnet-50 train; throughput: alexnet score + resnet-50 train;
    # scaling: resnet-50 speedup and efficiency
    assert page.count("<svg") == 6
    assert "resnet-50, b = 32: efficiency" in page
    assert "ideal (linear)" in page and "MXNet Tesla P100, published curve" in page


def test_page_is_self_contained(report_set):
    page = render_page(report_set, GENERATED_AT)
    assert not re.search(r"<(script|link|img|iframe)\b", page)
    assert not re.search(r"(src|href)=['\"]?(https?:)?//", page)
    # the only URL is the SVG namespace name, which nothing fetches
    assert set(re.findall(r"https?://[^\s'\"<>]+", page)) == {"http://www.w3.org/2000/svg"}


def test_regressions_and_missing_prices_are_listed(report_set):
    page = render_page(report_set, GENERATED_AT)
    regressions = page[page.index('id="regressions"') : page.index('id="missing"')]
    assert "g5.xlarge" in regressions and "-40.0 %" in regressions  # 600 against a median of 1000
    assert "g4dn.xlarge" not in regressions
    missing = page[page.index('id="missing"') :]
    assert "laptop" in missing and "no price" in missing


def test_text_from_the_lake_is_escaped(report_set):
    page = render_page(report_set, GENERATED_AT)
    assert "Tesla T4 <PCIe>" not in page
    assert "Tesla T4 &lt;PCIe&gt;" in page


def test_summary_names_the_cheapest_machine_per_network(report_set):
    summary = render_summary(report_set)
    cost = report_set.tables["best_value"].to_pylist()
    [alexnet] = [r for r in cost if r["network"] == "alexnet" and r["rank"] == 1]
    # g4dn at 0.5 USD/h and 1500 images/s beats g5 at 1 USD/h and at most 1000 images/s
    assert alexnet["instance_type"] == "g4dn.xlarge"
    line = next(line for line in summary.splitlines() if line.startswith("| score | alexnet |"))
    assert "g4dn.xlarge" in line and formatting.money(alexnet["cost_per_million"], "EUR") in line
    assert "## Regressions: 1" in summary
    assert "## Results without a price: 1" in summary


def test_training_rows_show_the_time_and_cost_of_90_imagenet_epochs(report_set):
    page = render_page(report_set, GENERATED_AT)
    # g5.12xlarge, 2 GPUs at 190 images/s, 5 USD/h = 5 / 1.1 EUR/h
    seconds = 90 * 1_281_167 / 190.0
    expected = f"{formatting.duration(seconds)}, {formatting.money(5 / 1.1 * seconds / 3600, 'EUR', 0)}"
    assert expected == "7.0 days, €766"  # 168.6 h at 4.55 €/h
    assert f">{expected}</td>" in page


def test_a_machine_has_one_colour_on_the_whole_page():
    def row(network, instance_type, region, speed, batch):
        return {
            "mode": "score",
            "network": network,
            "provider": "aws",
            "instance_type": instance_type,
            "region": region,
            "market": "on_demand",
            "gpu_model": "X",
            "device_kind": "gpu",
            "gpu_count": 1,
            "num_nodes": 1,
            "dtype": "float32",
            "batch_size": batch,
            "images_per_sec": speed,
            "target": "ec2",
            "origin": "measured",
            "result_source": "nightly",
            "result_date": NIGHT,
        }

    rows = []
    for batch in (1, 2):
        # the fastest region of p5 differs between the two networks; the colour must not
        rows += [
            row("alexnet", "p5.48xlarge", "us-east-1", 100.0 * batch, batch),
            row("alexnet", "p5.48xlarge", "eu-west-1", 90.0 * batch, batch),
            row("vgg-16", "g5.xlarge", "us-east-1", 500.0 * batch, batch),
            row("vgg-16", "p5.48xlarge", "eu-west-1", 80.0 * batch, batch),
            row("vgg-16", "p5.48xlarge", "us-east-1", 70.0 * batch, batch),
        ]
    colours = formatting.Colours()
    prepared_rows = chart_rows(rows, ("images_per_sec",))
    alexnet, vgg = (f.chart for f in throughput_figures(prepared_rows, "score", colours))

    def colour_of(chart, label):
        [match] = [line.colour for line in chart.lines if line.label == label]
        return match

    p5 = "aws p5.48xlarge (X), measured 2026-03-10"
    assert colour_of(alexnet, p5) == colour_of(vgg, p5)
    assert colour_of(vgg, "aws g5.xlarge (X), measured 2026-03-10") != colour_of(vgg, p5)
    # and the same colour object gives p5 that colour in any other chart of the page
    assert colours({"provider": "aws", "instance_type": "p5.48xlarge"}) == colour_of(vgg, p5)


def test_each_throughput_chart_draws_its_own_networks_intervals():
    """One machine measured on two networks at the same batch size: each network's chart carries
    that network's 95 % interval (they were keyed by machine only, so the last network's interval
    was drawn in both charts)."""
    def row(network: str, speed: float, low: float, high: float) -> dict:
        return {"mode": "score", "network": network, "provider": "aws", "instance_type": "g5.xlarge",
                "region": "us-east-1", "market": "on_demand", "gpu_model": "A10G", "device_kind": "gpu",
                "gpu_count": 1, "num_nodes": 1, "dtype": "float32", "batch_size": 8, "images_per_sec": speed,
                "images_per_sec_low": low, "images_per_sec_high": high, "target": "ec2", "origin": "measured",
                "result_source": "nightly", "result_date": NIGHT}

    rows = chart_rows([row("alexnet", 1000.0, 990.0, 1010.0), row("vgg-16", 100.0, 95.0, 104.0)],
                      ("images_per_sec",))
    alexnet, vgg = (f.chart for f in throughput_figures(rows, "score", formatting.Colours()))
    for chart in (alexnet, vgg):
        [point] = [p for line in chart.lines for p in line.points]
        assert point.error is not None, chart
        top, bottom = point.error  # pixels: the high end is drawn above the point, the low below
        assert top < point.y < bottom, (chart.title if hasattr(chart, "title") else chart, point)


def test_every_section_links_its_csv_and_parquet(report_set):
    page = render_page(report_set, GENERATED_AT)
    sections = re.findall(r'<section id="([\w-]+)"(.*?)</section>', page, flags=re.S)
    assert len(sections) >= 5
    for key, body in sections:
        links = re.findall(r'<p class="files">(.*?)</p>', body)
        assert links, key
        assert re.search(r'href="(\w+)\.csv"', links[0]), key
        assert re.search(r'href="(\w+)/\1\.parquet"', links[0]), key
