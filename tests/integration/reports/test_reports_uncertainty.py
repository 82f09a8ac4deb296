"""Intervals (what they cover, or why none), nights as the unit, the spot price range and the
energy columns of the report set on small lakes written through the real ingest path and read by
the real SQL in DuckDB (stands in for a lake of nightly GPU results: the samples are chosen here,
so the expected figures are worked out here)."""

from __future__ import annotations

import datetime as dt
import statistics

import numpy as np
import pytest
from scipy import stats as scipy_stats

from bench_tasks.record import validate_record
from gpucompare.lake.tables import open_lake
from gpucompare.reports import stats
from gpucompare.reports.build import build_reports
from gpucompare.reports.report_set import ReportError, ReportOptions
from tests.support.reports_data import fx, ingest, inputs, price, record, rows

NIGHT = dt.date(2026, 3, 10)
RATES = [fx(1.0, dt.date(2025, 1, 1))]


def measured(samples: list[float], night: dt.date = NIGHT, energy: float | None = None,
             **overrides: object) -> dict:
    """A record whose repeats are ``samples`` (median = the figure), with energy if given."""
    base = record(images_per_sec=statistics.median(samples), night=night, **overrides)
    base.update(images_per_sec_samples=list(samples), repeats=len(samples),
                cv=float(np.std(samples) / np.mean(samples)), timed_batches=10 * len(samples))
    if energy is not None:
        base.update(energy_joules=energy, energy_method="nvml_energy_counter", avg_power_watts=150.0)
    else:
        base.update(energy_method="unavailable: pynvml not installed")
    return validate_record(base)


@pytest.fixture
def lake(tmp_path):
    return open_lake(str(tmp_path / "lake"))


def _machine(rng: np.random.Generator, mean: float, n: int = 10) -> list[float]:
    return [float(v) for v in rng.normal(mean, mean * 0.02, size=n)]


def _t_interval(samples: list[float], df: float, noise_sd: float) -> tuple[float, float]:
    """The one-night interval: geometric mean ± t(df) · noise / √n on the log scale."""
    centre = float(np.mean(np.log(samples)))
    half = float(scipy_stats.t.ppf(0.975, df)) * noise_sd / np.sqrt(len(samples))
    return float(np.exp(centre - half)), float(np.exp(centre + half))


def test_intervals_in_throughput_and_cost_are_the_t_interval_of_the_night(lake):
    """One configuration alone in its run: its own repeats give the noise (df = n - 1)."""
    rng = np.random.default_rng(1)
    samples = _machine(rng, 1000.0)
    ingest(lake, [measured(samples)], instance_type="g5.xlarge")
    built = build_reports(inputs(lake, [price("g5.xlarge", 1.0)], RATES), currency="EUR")
    low, high = _t_interval(samples, 9, float(np.std(np.log(samples), ddof=1)))
    [tp] = built.tables["throughput"].to_pylist()
    assert (tp["images_per_sec_low"], tp["images_per_sec_high"]) == pytest.approx((low, high), rel=1e-9)
    assert tp["samples"] == 10 and tp["nights"] == 1 and tp["interval_df"] == 9
    assert tp["interval_covers"] == "this night's instance" and tp["interval_reason"] is None
    assert tp["noise_basis"] == "own"
    assert tp["images_per_sec_low"] < tp["images_per_sec"] < tp["images_per_sec_high"]
    [cost] = built.tables["cost_per_million"].to_pylist()
    assert cost["cost_per_million_low"] == pytest.approx(1.0 * 1e6 / high / 3600)
    assert cost["cost_per_million_high"] == pytest.approx(1.0 * 1e6 / low / 3600)
    assert cost["interval_parts"] == "throughput"
    assert "sample_key" not in built.tables["cost_per_million"].column_names


def test_three_repeats_borrow_the_noise_of_the_run_and_one_repeat_says_why_not(lake):
    """Six configurations of one run at 3 repeats (each ±1 %, one noise level: none is kept out of
    the pool): the noise is pooled over them (df 12), so each has a finite interval; a single
    repeat says '1 run: no interval', never a silent empty."""
    runs = {b: [(1000.0 + b) * f for f in (0.99, 1.0, 1.01)] for b in (1, 2, 4, 8, 16, 32)}
    ingest(lake, [measured(s, batch_size=b) for b, s in runs.items()] + [measured([90.0], batch_size=64)])
    rows_by_batch = {r["batch_size"]: r for r in build_reports(inputs(lake, [], RATES)).tables["throughput"]
                     .to_pylist()}
    logs = [np.log(s) for s in runs.values()]
    pooled_sd = float(np.sqrt(sum(((x - x.mean()) ** 2).sum() for x in logs) / 12))
    for batch, samples in runs.items():
        row = rows_by_batch[batch]
        assert row["noise_basis"] == "run" and row["interval_df"] == 12 and row["samples"] == 3
        low, high = _t_interval(samples, 12, pooled_sd)
        assert (row["images_per_sec_low"], row["images_per_sec_high"]) == pytest.approx((low, high), rel=1e-9)
    one = rows_by_batch[64]
    assert one["images_per_sec_low"] is None and one["interval_reason"] == "1 run: no interval"
    assert one["interval_covers"] is None and one["samples"] == 1


def test_nights_make_the_night_the_unit(lake):
    nights = [NIGHT - dt.timedelta(days=d) for d in (2, 1, 0)]
    per_night = [[90.0, 91.0, 92.0], [100.0, 101.0, 102.0], [110.0, 111.0, 112.0]]
    ingest(lake, [measured(s, night=n) for s, n in zip(per_night, nights, strict=True)])
    one = build_reports(inputs(lake, [], RATES)).tables["throughput"].to_pylist()[0]
    assert one["images_per_sec"] == 111.0 and one["samples"] == 3 and one["nights"] == 1
    assert one["interval_covers"] == "this night's instance"
    two = build_reports(inputs(lake, [], RATES), options=ReportOptions(nights=2)).tables["throughput"]
    [row] = two.to_pylist()
    medians = np.log([101.0, 111.0])
    half = scipy_stats.t.ppf(0.975, 1) * medians.std(ddof=1) / np.sqrt(2)
    assert row["nights"] == 2 and row["samples"] == 6 and row["interval_df"] == 1
    assert row["interval_covers"] == "2 nights of this type" and row["noise_basis"] == "nights"
    assert row["images_per_sec"] == pytest.approx(np.exp(medians.mean()))
    assert (row["images_per_sec_low"], row["images_per_sec_high"]) == pytest.approx(
        (np.exp(medians.mean() - half), np.exp(medians.mean() + half)))
    every = build_reports(inputs(lake, [], RATES), options=ReportOptions(nights=30)).tables["throughput"]
    assert every.to_pylist()[0]["nights"] == 3 and every.to_pylist()[0]["samples"] == 9
    with pytest.raises(ReportError, match="nights must be a whole number from 1 to 365"):
        build_reports(inputs(lake, [], RATES), options=ReportOptions(nights=0))


def test_with_nights_each_night_is_priced_at_its_own_price(lake):
    """Spot over three nights at 1.0, 1.2 and 1.5 per hour: the cost interval is the t interval over
    the nights' own costs per image (price of that night / that night's median)."""
    nights = [NIGHT - dt.timedelta(days=d) for d in (2, 1, 0)]
    per_night = [[99.0, 100.0, 101.0], [104.0, 105.0, 106.0], [97.0, 98.0, 99.0]]
    ingest(lake, [measured(s, night=n) for s, n in zip(per_night, nights, strict=True)], market="spot")
    prices = [price("g5.xlarge", p, market="spot", effective_from=n) for p, n in zip((1.0, 1.2, 1.5), nights,
                                                                                    strict=True)]
    built = build_reports(inputs(lake, prices, RATES), currency="USD", options=ReportOptions(nights=3))
    [row] = built.tables["cost_per_million"].to_pylist()
    costs = np.log([1.0 / 100.0, 1.2 / 105.0, 1.5 / 98.0])
    half = scipy_stats.t.ppf(0.975, 2) * costs.std(ddof=1) / np.sqrt(3)
    expected = np.exp([costs.mean() - half, costs.mean() + half]) * 1e6 / 3600
    assert (row["cost_per_million_low"], row["cost_per_million_high"]) == pytest.approx(tuple(expected))
    assert (row["price_per_hour_low"], row["price_per_hour_high"]) == (1.0, 1.5)
    assert row["interval_parts"] == "throughput+price" and row["interval_covers"] == "3 nights of this type"
    [best] = built.tables["best_value"].to_pylist()
    assert best["verdict"] == "best"


def test_nights_of_single_repeats_still_give_an_interval_over_nights(lake):
    """The demo's shape (1 repeat a night) over 4 nights: the night is the unit, so it has one."""
    figures = [45.6, 26.4, 15.1, 50.4]
    nights = [NIGHT - dt.timedelta(days=d) for d in (3, 2, 1, 0)]
    ingest(lake, [measured([f], night=n) for f, n in zip(figures, nights, strict=True)])
    [one] = build_reports(inputs(lake, [], RATES)).tables["throughput"].to_pylist()
    assert one["interval_reason"] == "1 run: no interval" and one["images_per_sec_low"] is None
    built = build_reports(inputs(lake, [], RATES), options=ReportOptions(nights=4))
    [four] = built.tables["throughput"].to_pylist()
    assert four["interval_covers"] == "4 nights of this type" and four["interval_df"] == 3
    assert four["images_per_sec_low"] < min(figures) and four["images_per_sec_high"] > max(figures) * 0.9


def test_spot_cost_interval_covers_the_price_range_of_the_run_window(lake):
    """A spot run over two days while the price moved from 1.0 to 1.5: the cost interval takes the
    lowest price over the throughput's high end and the highest over its low end."""
    records = [measured(_machine(np.random.default_rng(3), 1000.0, n=3), batch_size=b, night=n)
               for b, n in ((16, NIGHT), (32, NIGHT + dt.timedelta(days=1)))]
    records = [dict(r, run_id="spot-run") for r in records]
    ingest(lake, records, market="spot")
    prices = [price("g5.xlarge", 1.0, market="spot"),
              price("g5.xlarge", 1.5, market="spot", effective_from=NIGHT + dt.timedelta(days=1)),
              price("g5.xlarge", 9.0, market="spot", effective_from=NIGHT + dt.timedelta(days=5))]
    built = build_reports(inputs(lake, prices, RATES), currency="USD")
    [row] = rows(built.tables["cost_per_million"], batch_size=16)
    assert row["price_per_hour"] == 1.0
    assert (row["price_per_hour_low"], row["price_per_hour_high"]) == (1.0, 1.5)
    assert row["interval_parts"] == "throughput+price"
    assert row["cost_per_million_low"] == pytest.approx(1.0 * 1e6 / row["images_per_sec_high"] / 3600)
    assert row["cost_per_million_high"] == pytest.approx(1.5 * 1e6 / row["images_per_sec_low"] / 3600)
    [on_demand_like] = rows(built.tables["best_value"], instance_type="g5.xlarge")
    assert on_demand_like["interval_parts"] == "throughput+price"


def test_energy_columns_and_grid_intensity(lake):
    """100 J over 10 repeats × 10 batches × 32 images; us-east-1 is 415.755 gCO2e/kWh in the
    shipped table; a machine without a measurement has empty energy columns, never 0."""
    ingest(lake, [measured([100.0] * 10, energy=100.0)], instance_type="g5.xlarge", region="us-east-1")
    ingest(lake, [measured([100.0] * 10)], instance_type="g5.2xlarge", region="us-east-1")
    ingest(lake, [measured([100.0] * 10, energy=100.0)], instance_type="g5.4xlarge", region="mars-1")
    built = build_reports(inputs(lake, [price(t, 1.0) for t in ("g5.xlarge", "g5.2xlarge")], RATES))
    joules = 100.0 / (100 * 32)
    kwh = joules * 1e6 / 3.6e6
    [measured_row] = rows(built.tables["cost_per_million"], instance_type="g5.xlarge")
    assert measured_row["joules_per_image"] == pytest.approx(joules)
    assert measured_row["kwh_per_million"] == pytest.approx(kwh)
    assert measured_row["gco2e_per_million"] == pytest.approx(kwh * 415.755)
    assert measured_row["energy_method"] == "nvml_energy_counter"
    [none] = rows(built.tables["throughput"], instance_type="g5.2xlarge")
    assert none["joules_per_image"] is None and none["gco2e_per_million"] is None
    assert none["energy_method"] == "unavailable: pynvml not installed"
    [elsewhere] = rows(built.tables["throughput"], instance_type="g5.4xlarge")
    assert elsewhere["kwh_per_million"] == pytest.approx(kwh) and elsewhere["gco2e_per_million"] is None
    [ranked] = rows(built.tables["best_value"], instance_type="g5.xlarge")
    assert ranked["gco2e_per_million"] == pytest.approx(kwh * 415.755)


@pytest.mark.parametrize(("history", "latest", "verdict", "tested"), [
    ([80.0, 100.0, 120.0], [60.0, 90.0, 125.0], "steady", True),  # 10 % below, but noise: U test says no
    ([99.0, 100.0, 101.0], [89.0, 90.0, 91.0], "regression", True),  # 10 % below and significant
    # significant and beyond the noise, but under the 5 % floor: reported, not a regression
    ([99.9, 100.0, 100.1], [97.9, 98.0, 98.1], "significant_below_floor", True),
    ([99.0, 100.0, 101.0], [109.0, 110.0, 111.0], "improvement", True),
])
def test_a_regression_needs_the_u_test_and_the_threshold(lake, history, latest, verdict, tested):
    nights = [NIGHT - dt.timedelta(days=d) for d in (3, 2, 1)]
    ingest(lake, [measured(history, night=n) for n in nights] + [measured(latest, night=NIGHT)])
    [row] = build_reports(inputs(lake, [], RATES)).tables["regressions"].to_pylist()
    assert row["verdict"] == verdict and row["regression"] is (verdict == "regression")
    assert row["samples"] == 3 and row["history_samples"] == 9
    assert (row["p_value"] is not None) is tested
    if tested:
        expected = stats.mann_whitney(latest, history * 3).p_value
        assert row["p_value"] == pytest.approx(expected)
        assert (row["p_value"] < 0.05) is (verdict != "steady")
    assert row["regression"] is (verdict == "regression")


def test_one_repeat_a_night_leaves_the_threshold_to_decide(lake):
    """1 sample against 3: the smallest two-sided U p is 0.5, so the test cannot decide and
    the existing rule (MAD and 5 % floor) flags the 20 % drop alone."""
    nights = [NIGHT - dt.timedelta(days=d) for d in (3, 2, 1)]
    ingest(lake, [measured([100.0], night=n) for n in nights] + [measured([80.0], night=NIGHT)])
    [row] = build_reports(inputs(lake, [], RATES)).tables["regressions"].to_pylist()
    assert row["verdict"] == "regression" and row["p_value"] is None


def test_rows_written_before_schema_3_read_with_empty_energy(lake):
    """A lake whose first run was written by a schema-2 worker (no energy columns in its files or
    in the table's schema then) still reads: that run's energy columns are empty, the next run's
    (schema 3, with energy) are filled, and the intervals work for both."""
    from gpucompare.lake.ingest import RunContext, results_rows

    context = RunContext(provider="aws", instance_type="g5.xlarge", region="us-east-1", market="on_demand",
                         target="ec2").validated()
    old = results_rows([dict(measured([100.0 + i for i in range(6)]), run_id="old")], context)
    old = old.drop_columns(["energy_joules", "energy_method", "avg_power_watts"])
    lake.write_results(old, run_id="old")
    ingest(lake, [measured([200.0 + i for i in range(6)], energy=10.0, batch_size=16)])
    rows_by_batch = {r["batch_size"]: r for r in build_reports(inputs(lake, [], RATES)).tables["throughput"]
                     .to_pylist()}
    assert rows_by_batch[32]["energy_method"] is None and rows_by_batch[32]["joules_per_image"] is None
    assert rows_by_batch[32]["images_per_sec_low"] < 102.5 < rows_by_batch[32]["images_per_sec_high"]
    assert rows_by_batch[32]["samples"] == 6
    assert rows_by_batch[32]["interval_covers"] == "this night's instance"
    assert rows_by_batch[16]["joules_per_image"] == pytest.approx(10.0 / (60 * 16))


def test_with_nights_each_night_is_converted_at_its_own_rate(lake):
    """Three nights at one USD price and one throughput, reported in EUR while the rate moved
    (1 EUR = 1.0, 1.25, 1.5 USD on the three nights): the nights' costs in EUR differ, so the cost
    interval is the t interval over them. Before, every night was converted at the latest night's
    rate: three equal costs and no spread at all."""
    nights = [NIGHT - dt.timedelta(days=d) for d in (2, 1, 0)]
    per_night = [[99.0, 100.0, 101.0]] * 3
    ingest(lake, [measured(s, night=n) for s, n in zip(per_night, nights, strict=True)])
    rates = [fx(r, n) for r, n in zip((1.0, 1.25, 1.5), nights, strict=True)]
    prices = [price("g5.xlarge", 1.2, effective_from=nights[0])]
    built = build_reports(inputs(lake, prices, rates), currency="EUR", options=ReportOptions(nights=3))
    [row] = built.tables["cost_per_million"].to_pylist()
    costs = np.log([1.2 / rate / 100.0 for rate in (1.0, 1.25, 1.5)])
    half = scipy_stats.t.ppf(0.975, 2) * costs.std(ddof=1) / np.sqrt(3)
    expected = np.exp([costs.mean() - half, costs.mean() + half]) * 1e6 / 3600
    assert (row["cost_per_million_low"], row["cost_per_million_high"]) == pytest.approx(tuple(expected))
    assert row["cost_per_million"] == pytest.approx(1.2 / 1.5 / 100.0 * 1e6 / 3600)  # the latest night's rate
    assert row["interval_covers"] == "3 nights of this type"
