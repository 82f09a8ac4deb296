"""Intervals, tie groups, pooled nights and energy columns of the report set on small lakes
written through the real ingest path and read by the real SQL in DuckDB (stands in for a lake of
nightly GPU results: the samples are chosen here, so the expected figures are worked out here)."""

from __future__ import annotations

import datetime as dt
import statistics

import numpy as np
import pytest

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


def test_intervals_in_throughput_and_cost_equal_the_statistics_module(lake):
    rng = np.random.default_rng(1)
    samples = _machine(rng, 1000.0)
    ingest(lake, [measured(samples)], instance_type="g5.xlarge")
    built = build_reports(inputs(lake, [price("g5.xlarge", 1.0)], RATES), currency="EUR")
    interval = stats.median_interval(samples)
    [tp] = built.tables["throughput"].to_pylist()
    assert (tp["images_per_sec_low"], tp["images_per_sec_high"]) == (interval.low, interval.high)
    assert tp["samples"] == 10 and tp["nights"] == 1
    assert tp["images_per_sec_low"] < tp["images_per_sec"] < tp["images_per_sec_high"]
    [cost] = built.tables["cost_per_million"].to_pylist()
    assert cost["cost_per_million_low"] == pytest.approx(1.0 * 1e6 / interval.high / 3600)
    assert cost["cost_per_million_high"] == pytest.approx(1.0 * 1e6 / interval.low / 3600)
    assert "sample_key" not in built.tables["cost_per_million"].column_names


def test_too_few_samples_give_no_interval_and_published_figures_none(lake):
    ingest(lake, [measured([100.0, 101.0, 99.0])])
    [tp] = build_reports(inputs(lake, [], RATES)).tables["throughput"].to_pylist()
    assert tp["samples"] == 3 and tp["images_per_sec_low"] is None and tp["images_per_sec_high"] is None


def test_best_value_ties_machines_from_one_distribution_and_separates_a_cheaper_one(lake):
    """Three machines at the same price: A and B draw from one distribution (tied), C is 10 %
    faster (cheaper, a group of its own and the best), D has 1 sample (cannot be told apart)."""
    rng = np.random.default_rng(5)
    for name, mean in (("a.x", 1000.0), ("b.x", 1000.0), ("c.x", 1100.0)):
        ingest(lake, [measured(_machine(rng, mean))], instance_type=name)
    ingest(lake, [measured(_machine(rng, 950.0, n=1))], instance_type="d.x")
    prices = [price(name, 1.0) for name in ("a.x", "b.x", "c.x", "d.x")]
    best = build_reports(inputs(lake, prices, RATES)).tables["best_value"]
    by_machine = {r["instance_type"]: r for r in best.to_pylist()}
    assert by_machine["c.x"]["rank"] == 1 and by_machine["c.x"]["rank_group"] == 1
    assert by_machine["c.x"]["tied_with_best"] is True and by_machine["c.x"]["tie_p_value"] is None
    for name in ("a.x", "b.x"):
        assert by_machine[name]["tied_with_best"] is False and by_machine[name]["tie_p_value"] < 0.05
    assert by_machine["a.x"]["rank_group"] == by_machine["b.x"]["rank_group"] == 2
    # 1 sample against 10: the U test cannot reach 5 % (smallest p = 2/11), so D stays tied with the best
    assert by_machine["d.x"]["tied_with_best"] is True and by_machine["d.x"]["rank_group"] == 1
    names = best.column_names
    assert names.index("rank_group") == names.index("rank") + 1 and "sample_key" not in names


def test_nights_pools_the_last_n_runs(lake):
    nights = [NIGHT - dt.timedelta(days=d) for d in (2, 1, 0)]
    per_night = [[90.0, 91.0, 92.0], [100.0, 101.0, 102.0], [110.0, 111.0, 112.0]]
    ingest(lake, [measured(s, night=n) for s, n in zip(per_night, nights, strict=True)])
    one = build_reports(inputs(lake, [], RATES)).tables["throughput"].to_pylist()[0]
    assert one["images_per_sec"] == 111.0 and one["samples"] == 3 and one["nights"] == 1
    two = build_reports(inputs(lake, [], RATES), options=ReportOptions(nights=2)).tables["throughput"]
    [row] = two.to_pylist()
    pooled = per_night[1] + per_night[2]
    assert row["nights"] == 2 and row["samples"] == 6
    assert row["images_per_sec"] == statistics.median(pooled)
    interval = stats.median_interval(pooled)
    assert (row["images_per_sec_low"], row["images_per_sec_high"]) == (interval.low, interval.high)
    every = build_reports(inputs(lake, [], RATES), options=ReportOptions(nights=30)).tables["throughput"]
    assert every.to_pylist()[0]["nights"] == 3 and every.to_pylist()[0]["samples"] == 9
    with pytest.raises(ReportError, match="nights must be a whole number from 1 to 365"):
        build_reports(inputs(lake, [], RATES), options=ReportOptions(nights=0))


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
    ([99.9, 100.0, 100.1], [97.9, 98.0, 98.1], "steady", False),  # significant, but under the 5 % floor
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
    assert rows_by_batch[32]["images_per_sec_low"] == 100.0 and rows_by_batch[32]["samples"] == 6
    assert rows_by_batch[16]["joules_per_image"] == pytest.approx(10.0 / (60 * 16))
