"""The reports' statistics against scipy's (a test-only dependency) on fixed samples, and their
behaviour on seeded simulated machines (the issue's acceptance figures)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from gpucompare.reports import stats

#: fixed samples: small and large, with and without ties, skewed (a slow outlier)
SAMPLES = [
    [101.2, 99.8, 100.5, 102.1, 98.7, 100.0],
    [10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0],
    [5.0, 5.0, 5.1, 5.2, 5.2, 5.2, 5.3, 5.9, 6.0, 3.1, 5.0],
    list(np.random.default_rng(7).lognormal(3.0, 0.2, size=25)),
    list(np.random.default_rng(8).normal(1000, 20, size=60)),
]


@pytest.mark.parametrize("samples", SAMPLES)
@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.99])
def test_median_interval_equals_scipy_quantile_test(samples: list[float], confidence: float) -> None:
    test = scipy_stats.quantile_test(samples, q=float(np.median(samples)), p=0.5)
    ci = test.confidence_interval(confidence)
    ours = stats.median_interval(samples, confidence)
    if math.isnan(ci.low) or math.isnan(ci.high):
        assert ours is None
    else:
        assert ours is not None and (ours.low, ours.high) == (ci.low, ci.high)


def test_median_interval_needs_six_samples_at_95_percent() -> None:
    """As benchstat: "need >= 6 samples for confidence interval at level 0.95"."""
    assert stats.median_interval([1, 2, 3, 4, 5]) is None
    assert stats.median_interval([1, 2, 3, 4, 5, 6]) == stats.Interval(1.0, 6.0, 0.95)
    with pytest.raises(stats.StatsError, match="confidence"):
        stats.median_interval([1, 2, 3], 1.0)


PAIRS = [
    ([1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.5]),  # exact, fully separated
    ([10.1, 9.7, 10.4, 10.0, 9.9], [10.3, 10.6, 10.2, 10.8, 10.5, 11.0]),  # exact, overlapping
    ([1.0, 2.0, 2.0, 3.0, 5.0], [2.0, 4.0, 5.0, 5.0, 6.0]),  # ties: exact over the tied ranks
    (SAMPLES[3][:12], SAMPLES[3][12:]),  # 12 and 13: normal
    (SAMPLES[4][:30], [v * 1.01 for v in SAMPLES[4][30:]]),  # large, small shift
    ([3.0, 3.0, 3.0], [3.0, 3.0]),  # all equal
    ([1000.0] * 3, [990.0] * 3),  # ties within each side, none across: exact p = 0.1
    ([5.0, 5.0, 5.1, 5.2, 5.2, 5.2, 5.3, 5.9], [5.0, 5.2, 5.2, 5.4, 5.9, 6.0, 6.0, 6.0, 6.1, 6.3, 7.0]),
    ([2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 3.0], [1.0, 2.0]),  # 10 against 2, mostly one value
]
_TIED = {2, 5, 6, 7, 8}


def _rank_sum(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    ranks = scipy_stats.rankdata(np.concatenate([x, y], axis=axis), axis=axis)
    return ranks[..., : x.shape[axis]].sum(axis=axis)


@pytest.mark.parametrize("index", sorted(set(range(len(PAIRS))) - _TIED))
def test_mann_whitney_without_ties_equals_scipy(index: int) -> None:
    a, b = PAIRS[index]
    expected = scipy_stats.mannwhitneyu(a, b, alternative="two-sided", method="auto")
    ours = stats.mann_whitney(a, b)
    assert ours.u == pytest.approx(float(expected.statistic))
    assert ours.p_value == pytest.approx(float(expected.pvalue), rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("index", sorted(_TIED))
def test_mann_whitney_with_ties_equals_scipy_permutation_test(index: int) -> None:
    """With ties and a small side, p is that of every split of the pooled values (scipy's
    permutation_test with n_resamples=inf enumerates them all), not the normal approximation's."""
    a, b = PAIRS[index]
    ours = stats.mann_whitney(a, b)
    assert ours.u == pytest.approx(float(scipy_stats.mannwhitneyu(a, b).statistic))
    assert ours.method == "exact"
    if len(set(a) | set(b)) == 1:  # scipy: nan when every value is equal; ours: 1 (no difference)
        assert ours.p_value == 1.0
        return
    expected = scipy_stats.permutation_test((a, b), _rank_sum, permutation_type="independent",
                                            n_resamples=np.inf, vectorized=True, alternative="two-sided")
    assert ours.p_value == pytest.approx(float(expected.pvalue), rel=1e-9)


def _brute_force_p(a: list[float], b: list[float]) -> float:
    """Two-sided p by listing every way to split the pooled values into sizes len(a), len(b)."""
    ranks = scipy_stats.rankdata(a + b)
    observed = ranks[: len(a)].sum()
    splits = itertools.combinations(range(len(ranks)), len(a))
    sums = np.array([ranks[list(chosen)].sum() for chosen in splits])
    lower, upper = np.mean(sums <= observed + 1e-9), np.mean(sums >= observed - 1e-9)
    return min(1.0, 2 * min(lower, upper))


def test_mann_whitney_with_ties_equals_brute_force_on_200_random_tied_pairs() -> None:
    rng = np.random.default_rng(27)
    for _ in range(200):
        a = [float(v) for v in rng.integers(0, 4, rng.integers(1, 7))]
        b = [float(v) for v in rng.integers(0, 4, rng.integers(1, 9))]
        assert stats.mann_whitney(a, b).p_value == pytest.approx(_brute_force_p(a, b), rel=1e-12), (a, b)


def test_tied_three_against_three_is_not_significant() -> None:
    """The issue's case: the normal approximation gave p = 0.047 to [1000]*3 against [990]*3."""
    tied = stats.mann_whitney([1000] * 3, [990] * 3)
    assert (tied.p_value, tied.method, tied.significant()) == (pytest.approx(0.1), "exact", False)
    assert tied.p_value == stats.mann_whitney([1000, 1001, 1002], [990, 991, 992]).p_value


def test_mann_whitney_exact_when_a_side_is_small_else_normal() -> None:
    assert stats.mann_whitney(*PAIRS[0]).method == "exact"
    assert stats.mann_whitney(*PAIRS[2]).method == "exact"
    assert stats.mann_whitney(*PAIRS[3]).method == "normal"
    # 3 against 3 can never reach 5 %: the smallest two-sided p is 2 / C(6, 3) = 0.1
    assert stats.mann_whitney([1, 2, 3], [4, 5, 6]).min_p_value == pytest.approx(0.1)
    assert stats.min_p_value(3, 3) == pytest.approx(0.1) and stats.min_p_value(1, 1) == 1.0


@pytest.mark.parametrize(("a", "b"), PAIRS[:5])
def test_ratio_interval_is_the_shifts_the_u_test_keeps(a: list[float], b: list[float]) -> None:
    """Bauer's construction: a ratio inside the interval, applied to a, leaves the U test
    unable to reject at 5 %; a ratio just outside lets it reject."""
    interval = stats.ratio_interval(a, b)
    assert interval is not None and interval.low <= interval.high
    inside = math.sqrt(interval.low * interval.high)
    assert scipy_stats.mannwhitneyu([v * inside for v in a], b, method="exact").pvalue >= 0.05
    for outside in (interval.low * 0.999, interval.high * 1.001):
        shifted = [v * outside for v in a]
        assert scipy_stats.mannwhitneyu(shifted, b, method="exact").pvalue < 0.05


def test_ratio_interval_needs_enough_samples() -> None:
    assert stats.ratio_interval([1.0, 2.0], [3.0, 4.0]) is None
    with pytest.raises(stats.StatsError, match="positive"):
        stats.ratio_interval([1.0, -2.0, 3, 4, 5], [3.0, 4.0, 5, 6, 7])


def _machine(rng: np.random.Generator, mean: float, n: int = 10, cv: float = 0.02) -> list[float]:
    return list(rng.normal(mean, mean * cv, size=n))


def test_same_distribution_is_tied_in_at_least_95_percent_of_200_trials() -> None:
    rng = np.random.default_rng(20261201)
    tied = sum(not stats.mann_whitney(_machine(rng, 100.0), _machine(rng, 100.0)).significant()
               for _ in range(200))
    print(f"same distribution: tied in {tied}/200")
    assert tied >= 190


def test_ten_percent_difference_is_found_in_at_least_95_percent_of_200_trials() -> None:
    rng = np.random.default_rng(20261202)
    found = sum(stats.mann_whitney(_machine(rng, 100.0), _machine(rng, 110.0)).significant()
                for _ in range(200))
    print(f"10 % difference, n = 10, CV 2 %: found in {found}/200")
    assert found >= 190


def test_median_interval_covers_the_true_median_about_95_percent() -> None:
    """Coverage of the order-statistic interval on simulated repeats (n = 10, CV 2 %): at least
    the nominal 95 % (the binomial interval is conservative)."""
    rng = np.random.default_rng(3)
    covered = 0
    for _ in range(400):
        interval = stats.median_interval(_machine(rng, 100.0))
        assert interval is not None
        covered += interval.low <= 100.0 <= interval.high
    assert covered >= 0.95 * 400 - 8  # a binomial standard error's slack


def test_geometric_mean() -> None:
    assert stats.geometric_mean([1.0, 4.0]) == pytest.approx(2.0)
    assert stats.geometric_mean([]) is None
