"""The reports' unit of evidence (reports/evidence.py), its quantiles (reports/quantiles.py, against
scipy's, a test-only dependency) and its verdicts (reports/verdicts.py), on fixed numbers, and
the coverage and verdict rates of the two-level noise model (reports/simulation.py) on a few
representative cells with fixed seeds (scripts/sim_coverage.py prints the whole grid)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from gpucompare.reports import evidence, verdicts
from gpucompare.reports.quantiles import f_quantile, t_quantile
from gpucompare.reports.simulation import Cell, coverage, measure, verdict_rates


@pytest.mark.parametrize("df", [1, 1.5, 2, 3, 7.5, 29, 46, 1000, 1e6])
@pytest.mark.parametrize("p", [0.9, 0.95, 0.975, 0.995, 0.05])
def test_t_quantile_equals_scipy(df: float, p: float) -> None:
    assert t_quantile(p, df) == pytest.approx(scipy_stats.t.ppf(p, df), rel=1e-8)


def test_t_quantile_over_an_array_maps_each_distinct_df() -> None:
    dfs = np.array([2.0, 46.0, 2.0, np.nan, 0.0])
    out = t_quantile(0.975, dfs)
    assert out[:3] == pytest.approx(scipy_stats.t.ppf(0.975, [2, 46, 2]), rel=1e-8)
    assert np.isnan(out[3]) and np.isnan(out[4])


@pytest.mark.parametrize(("d1", "d2"), [(1, 1), (2, 2), (2, 46), (9, 200), (2, 100000), (9, 1)])
def test_f_quantile_equals_scipy(d1: float, d2: float) -> None:
    assert f_quantile(0.99, d1, d2)[()] == pytest.approx(scipy_stats.f.ppf(0.99, d1, d2), rel=1e-8)


def test_log_moments_per_row_and_a_non_positive_sample() -> None:
    values = np.array([1.0, math.e, math.e**2, 5.0, 4.0, -1.0])
    n, mean, ss = evidence.log_moments(np.array([3, 1, 2]), values)
    assert list(n) == [3, 1, -1]
    assert mean[0] == pytest.approx(1.0) and ss[0] == pytest.approx(2.0)
    assert mean[1] == pytest.approx(math.log(5.0)) and ss[1] == 0.0


def test_night_level_pools_the_run_and_keeps_a_noisier_configuration_on_its_own() -> None:
    """Run 0: ten configurations at ±1 % and one at ±20 % (kept out of the pool by the F test);
    run 1: one configuration alone (its own repeats); one single repeat: no interval."""
    rows = [[100.0, 101.0, 99.0]] * 10 + [[100.0, 120.0, 80.0]] + [[50.0, 51.0, 49.0]] + [[70.0]]
    group = np.array([0] * 11 + [1, 0])
    n, mean, ss = evidence.log_moments(np.array([len(r) for r in rows]), np.concatenate(rows))
    estimate = evidence.night_level(group, n, mean, ss)
    assert list(estimate.basis) == ["run"] * 10 + ["own", "own", ""]
    pooled_var = ss[0] * 10 / 20  # ten rows of 2 df each
    assert estimate.df[0] == 20 and estimate.se[0] == pytest.approx(math.sqrt(pooled_var / 3))
    assert estimate.df[10] == 2 and estimate.se[10] == pytest.approx(math.sqrt(ss[10] / 2 / 3))
    assert np.isnan(estimate.se[12]) and np.isnan(estimate.df[12])
    low, high = estimate.bounds(0.95)
    half = scipy_stats.t.ppf(0.975, 20) * math.sqrt(pooled_var / 3)
    assert (low[0], high[0]) == pytest.approx((math.exp(mean[0] - half), math.exp(mean[0] + half)))


def test_across_nights_is_a_t_interval_over_the_night_figures() -> None:
    figures = np.log([100.0, 104.0, 98.0])
    estimate, nights = evidence.across_nights(np.array([0, 0, 0, 1]), np.r_[figures, np.log(50.0)],
                                              np.array([3, 3, 3, 3]), np.array([1e-4] * 4), 2)
    assert list(nights) == [3, 1]
    assert estimate.centre[0] == pytest.approx(figures.mean())
    assert estimate.se[0] == pytest.approx(figures.std(ddof=1) / math.sqrt(3)) and estimate.df[0] == 2
    assert np.isnan(estimate.se[1])  # one night: no interval over nights


def _side(centre: float, se: float, df: float, price: float = 1.0) -> verdicts.Side:
    one = np.ones(1)
    return verdicts.Side(centre=np.log(1000 * one) - centre, se=se * one, df=df * one,
                         log_price=np.log(price) * one,
                         price_low=0 * one, price_high=0 * one, samples=3 * one, nights=one,
                         by_night=np.zeros(1, dtype=bool))


@pytest.mark.parametrize(("log_ratio", "se", "expected"), [
    (math.log(2.0), 0.01, "dearer"),  # twice as dear, tight
    (math.log(1.005), 0.002, "equivalent"),  # 0.5 % dearer, tight: inside the 3 % margin surely
    (math.log(1.01), 0.02, "undetermined"),  # 1 % dearer but noisy: neither
    (math.log(1.05), 0.005, "dearer"),
])
def test_decide(log_ratio: float, se: float, expected: str) -> None:
    row, best = _side(log_ratio, se / math.sqrt(2), 20), _side(0.0, se / math.sqrt(2), 20)
    compared = verdicts.decide(row, best, np.zeros(1, dtype=bool), 0.03, 0.95)
    assert compared.verdict[0] == expected
    half = scipy_stats.t.ppf(0.975, 40) * se
    assert compared.ratio_low[0] == pytest.approx(math.exp(log_ratio - half), rel=1e-6)
    settle = verdicts.settle_with(compared, row, best, [None], 0.03, 0.95)[0]
    assert (settle is None) is (expected != "undetermined")
    if settle:
        assert settle.startswith("about ") and settle.endswith(" more repeats of each machine")


def test_a_price_range_widens_the_ratio_and_can_leave_it_undetermined() -> None:
    row, best = _side(math.log(1.05), 0.001, 40), _side(0.0, 0.001, 40)
    assert verdicts.decide(row, best, np.zeros(1, dtype=bool), 0.03, 0.95).verdict[0] == "dearer"
    row.price_low[:] = math.log(0.9)  # the row's spot price went 10 % lower during its run
    compared = verdicts.decide(row, best, np.zeros(1, dtype=bool), 0.03, 0.95)
    assert compared.verdict[0] == "undetermined" and compared.ratio_low[0] < 0.95
    settle = verdicts.settle_with(compared, row, best, [None], 0.03, 0.95)[0]
    assert settle.startswith("no amount of measuring")


#: representative cells: the default (1 night, 3 repeats) at low and high noise, 2 repeats, and
#: nights as the unit with instance-to-instance noise
CELLS = [Cell(0.01, 0.0, 1, 3), Cell(0.05, 0.02, 1, 3), Cell(0.002, 0.05, 1, 2), Cell(0.005, 0.02, 2, 3),
         Cell(0.01, 0.05, 5, 3), Cell(0.05, 0.05, 3, 1)]


@pytest.mark.parametrize("cell", CELLS, ids=str)
def test_coverage_of_the_95_percent_interval_is_95_percent(cell: Cell) -> None:
    share = coverage(measure(np.random.default_rng(11), cell, 3000))
    assert 0.92 <= share <= 0.98


@pytest.mark.parametrize("cell", CELLS, ids=str)
@pytest.mark.parametrize("ratio", [1.0, 1.02])
def test_false_dearer_at_most_5_percent_inside_the_margin(cell: Cell, ratio: float) -> None:
    rates = verdict_rates(np.random.default_rng(12), cell, ratio, 3000)
    assert rates.false_dearer <= 0.05


def test_a_machine_twice_as_dear_is_dearer_at_the_default_methodology() -> None:
    rates = verdict_rates(np.random.default_rng(13), Cell(0.01, 0.0, 1, 3), 2.0, 3000)
    assert rates.dearer >= 0.99


def test_one_repeat_on_one_night_gives_no_interval() -> None:
    assert coverage(measure(np.random.default_rng(14), Cell(0.01, 0.0, 1, 1), 100)) is None
