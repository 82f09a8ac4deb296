"""The statistics of the reports: intervals around a figure and tests between two sets of samples.

Pure Python and numpy (no scipy at run time); the tests check every figure against scipy's on
fixed samples (tests/unit/reports/test_stats.py). The methods, chosen to be distribution-free
because benchmark repeats are rarely normal (a slow outlier, two modes after a thermal cap):

* **Interval of a median** (:func:`median_interval`): the order-statistic confidence interval
  from the binomial distribution (the number of samples below the population median is
  Binomial(n, ½)); the same rule as ``scipy.stats.quantile_test(...).confidence_interval()``
  and as Go's benchstat (golang.org/x/perf/benchmath: "the confidence interval of the median
  is computed from order statistics"). It needs no assumption about the distribution, but
  enough samples: at 95 % at least 6 (below that it is ``None``, as benchstat prints "±∞" with
  "need >= 6 samples"). The interval of a monotone function of the figure (cost per million
  = price / throughput) is the function of the interval's ends.
* **Mann-Whitney U test** (:func:`mann_whitney`), two-sided: when either sample has at most 8
  values, the exact permutation distribution of U. Without ties it is the classic one (as
  ``scipy.stats.mannwhitneyu(method="exact")``); with ties it is the distribution of U over
  every split of the pooled values, tied values keeping their average ranks (a dynamic
  programme over the groups of tied values: :func:`_tied_u_counts`; the same p as
  ``scipy.stats.permutation_test`` with every permutation), because the normal approximation
  is wrong there: ``[1000]*3`` against ``[990]*3`` is p = 0.047 by it, but no split of six
  values into three and three can be rarer than 1 in 20 on each side (exact p = 0.1). Larger
  samples: the normal approximation with the tie correction of the variance and a continuity
  correction of 0.5 (scipy's formulas; benchstat uses the same test). The two-sided p is twice
  the smaller tail, capped at 1 (scipy's convention).
* **Interval of a ratio** (:func:`ratio_interval`): the Hodges-Lehmann interval of the shift
  between the logarithms of the samples (Bauer 1972, "Constructing confidence sets using rank
  statistics", JASA 67: the shifts the U test would not reject), exponentiated: a distribution-free
  interval of B / A that agrees with the U test (it excludes 1 exactly when p < alpha, up to the
  discreteness of U).

A difference is *significant* when p < alpha = 1 - confidence; benchstat's default 0.05.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

#: The confidence of every interval and test of the reports (alpha = 1 - CONFIDENCE).
CONFIDENCE = 0.95
#: Up to this many values in the smaller sample the U test's p is exact (with or without ties).
EXACT_MAX = 8


class StatsError(ValueError):
    """Bad input to a statistic (the message names the argument)."""


@dataclass(frozen=True)
class Interval:
    """A confidence interval ``[low, high]`` at ``confidence``."""

    low: float
    high: float
    confidence: float


@dataclass(frozen=True)
class UTest:
    """A two-sided Mann-Whitney U test: U of the first sample, the p-value, how p was found
    (``exact`` | ``normal``) and the smallest p these sample sizes can reach."""

    u: float
    p_value: float
    method: str
    min_p_value: float

    def significant(self, confidence: float = CONFIDENCE) -> bool:
        return self.p_value < 1 - confidence


def _clean(samples: Sequence[float], name: str) -> np.ndarray:
    values = np.asarray([float(v) for v in samples], dtype=float)
    if values.size and not np.all(np.isfinite(values)):
        raise StatsError(f"{name}: every sample must be a finite number")
    return values


def _check_confidence(confidence: float) -> None:
    if not 0 < confidence < 1:
        raise StatsError(f"confidence must be in (0, 1), got {confidence!r}")


def _binom_cdf(n: int) -> list[float]:
    """P(X <= k) for X ~ Binomial(n, 1/2), k = 0 … n."""
    total, out = 0, []
    for k in range(n + 1):
        total += math.comb(n, k)
        out.append(total / 2**n)
    return out


def median_interval(samples: Sequence[float], confidence: float = CONFIDENCE) -> Interval | None:
    """The distribution-free interval of the median (order statistics, binomial); ``None`` when
    there are too few samples to reach ``confidence`` (at 95 %: fewer than 6)."""
    _check_confidence(confidence)
    values = np.sort(_clean(samples, "samples"))
    n = values.size
    if n == 0:
        return None
    tail = (1 - confidence) / 2
    cdf = _binom_cdf(n)
    # scipy's quantile_test: low = x[ppf(tail) - 1], high = x[isf(tail)] (0-based), where
    # ppf(q) = min k with cdf(k) >= q and isf(q) = min k with 1 - cdf(k) <= q
    eps = 1e-12  # scipy's binom.ppf/isf compare with a relative tolerance of this order
    low_index = next(k for k in range(n + 1) if cdf[k] >= tail * (1 - eps)) - 1
    high_index = next(k for k in range(n + 1) if 1 - cdf[k] <= tail * (1 + eps))
    if low_index < 0 or high_index >= n:
        return None
    return Interval(float(values[low_index]), float(values[high_index]), confidence)


@lru_cache(maxsize=256)
def _u_counts(n1: int, n2: int) -> tuple[float, ...]:
    """How many of the C(n1 + n2, n1) orderings give U = 0 … n1·n2 (no ties)."""
    size = n1 * n2 + 1
    # ways[i] for the current n2' (columns), recurrence c(u; i, j) = c(u - j; i - 1, j) + c(u; i, j - 1)
    ways = [np.zeros(size) for _ in range(n1 + 1)]
    for i in range(n1 + 1):
        ways[i][0] = 1.0  # j = 0: one ordering, U = 0
    for j in range(1, n2 + 1):
        for i in range(1, n1 + 1):
            shifted = np.zeros(size)
            shifted[j:] = ways[i - 1][: size - j]
            ways[i] = ways[i] + shifted
    return tuple(ways[n1])


def _exact_sf(u: float, n1: int, n2: int) -> float:
    """P(U >= u) under the null hypothesis, exactly."""
    counts = np.asarray(_u_counts(n1, n2))
    return float(counts[math.ceil(u - 1e-9):].sum() / counts.sum())


def _normal_sf(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2))


def _ranks(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Average ranks (1-based) and the sizes of the groups of tied values."""
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(values.size)
    sorted_values = values[order]
    ties = []
    start = 0
    for stop in range(1, values.size + 1):
        if stop == values.size or sorted_values[stop] != sorted_values[start]:
            ranks[order[start:stop]] = (start + 1 + stop) / 2
            ties.append(stop - start)
            start = stop
    return ranks, np.asarray(ties, dtype=float)


@lru_cache(maxsize=512)
def _tied_u_counts(n_small: int, groups: tuple[int, ...]) -> tuple[float, ...]:
    """The permutation distribution of twice the rank sum of a sample of ``n_small`` drawn from
    the pooled values whose groups of tied values (in increasing order) have the sizes ``groups``:
    how many splits give each doubled rank sum 0, 1, … (index = doubled rank sum).

    Taking k values of a group of t tied values (average rank r) adds 2·k·r (an integer) to the
    doubled rank sum, in C(t, k) ways; the groups are independent, so the counts are the product
    of one polynomial per group, truncated to ``n_small`` values taken (states: values taken ×
    doubled sum)."""
    n = sum(groups)
    size = 2 * n_small * n + 1  # doubled rank sums run up to 2·n_small·n
    ways = np.zeros((n_small + 1, size))
    ways[0, 0] = 1.0
    start = 0
    for tied in groups:
        doubled_rank = 2 * start + 1 + tied  # 2 × (start + 1 + start + tied) / 2
        grown = np.zeros_like(ways)
        for k in range(min(tied, n_small) + 1):
            shift = k * doubled_rank
            if shift >= size:
                break
            grown[k:, shift:] += math.comb(tied, k) * ways[: n_small + 1 - k, : size - shift]
        ways, start = grown, start + tied
    return tuple(ways[n_small])


def _exact_tied_p(rank_sum_small: float, n_small: int, ties: np.ndarray) -> float:
    """Two-sided exact p of the observed rank sum of the smaller sample, ties included."""
    counts = np.asarray(_tied_u_counts(n_small, tuple(int(t) for t in ties)))
    observed = round(2 * rank_sum_small)
    total = counts.sum()
    lower = counts[: observed + 1].sum() / total
    upper = counts[observed:].sum() / total
    return float(min(1.0, 2 * min(lower, upper)))


def mann_whitney(a: Sequence[float], b: Sequence[float]) -> UTest:
    """Two-sided Mann-Whitney U test of ``a`` against ``b`` (U = U of ``a``)."""
    x, y = _clean(a, "a"), _clean(b, "b")
    n1, n2 = x.size, y.size
    if n1 == 0 or n2 == 0:
        raise StatsError("mann_whitney needs at least one sample on each side")
    ranks, ties = _ranks(np.concatenate([x, y]))
    u1 = float(ranks[:n1].sum() - n1 * (n1 + 1) / 2)
    u = max(u1, n1 * n2 - u1)
    min_p = min_p_value(n1, n2)
    if min(n1, n2) <= EXACT_MAX and not np.any(ties > 1):
        return UTest(u1, min(1.0, 2 * _exact_sf(u, n1, n2)), "exact", min_p)
    if min(n1, n2) <= EXACT_MAX:
        if len(ties) == 1:  # every value equal: nothing tells the samples apart
            return UTest(u1, 1.0, "exact", min_p)
        small = ranks[:n1] if n1 <= n2 else ranks[n1:]
        return UTest(u1, _exact_tied_p(float(small.sum()), min(n1, n2), ties), "exact", min_p)
    n = n1 + n2
    variance = n1 * n2 / 12 * ((n + 1) - float(np.sum(ties**3 - ties)) / (n * (n - 1)))
    if variance <= 0:  # every value equal: nothing tells the samples apart
        return UTest(u1, 1.0, "normal", min_p)
    z = (u - n1 * n2 / 2 - 0.5) / math.sqrt(variance)
    return UTest(u1, min(1.0, 2 * _normal_sf(z)), "normal", min_p)


def min_p_value(n1: int, n2: int) -> float:
    """The smallest two-sided p the U test can give samples of these sizes (every value of one
    above every value of the other, no ties): ``2 / C(n1 + n2, n1)``, at most 1."""
    return min(1.0, 2 / math.comb(n1 + n2, n1))


def _u_critical(n1: int, n2: int, confidence: float) -> int:
    """The largest c with P(U < c) <= (1 - confidence) / 2 (exact for small samples, else normal)."""
    tail = (1 - confidence) / 2
    if min(n1, n2) <= EXACT_MAX or n1 * n2 <= 400:
        counts = np.asarray(_u_counts(n1, n2))
        cdf = np.cumsum(counts) / counts.sum()  # cdf[k] = P(U <= k)
        return int(np.searchsorted(cdf, tail * (1 + 1e-12), side="right"))
    z = math.sqrt(2) * _erfinv(1 - 2 * tail)
    return max(0, math.floor(n1 * n2 / 2 - z * math.sqrt(n1 * n2 * (n1 + n2 + 1) / 12)))


def _erfinv(y: float) -> float:
    """Inverse error function by Newton's method (no scipy)."""
    x = 0.0
    for _ in range(60):
        step = (math.erf(x) - y) / (2 / math.sqrt(math.pi) * math.exp(-x * x))
        x -= step
        if abs(step) < 1e-15:
            break
    return x


def ratio_interval(a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE) -> Interval | None:
    """Interval of the ratio B / A of two positive samples (Hodges-Lehmann on the logarithms);
    ``None`` when the samples are too few for ``confidence``."""
    _check_confidence(confidence)
    x, y = _clean(a, "a"), _clean(b, "b")
    if x.size == 0 or y.size == 0:
        return None
    if np.any(x <= 0) or np.any(y <= 0):
        raise StatsError("ratio_interval needs positive samples")
    c = _u_critical(x.size, y.size, confidence)
    if c < 1:
        return None
    diffs = np.sort((np.log(y)[None, :] - np.log(x)[:, None]).ravel())
    return Interval(float(np.exp(diffs[c - 1])), float(np.exp(diffs[diffs.size - c])), confidence)


def geometric_mean(values: Sequence[float]) -> float | None:
    """Geometric mean of positive values (None for none)."""
    positive = [float(v) for v in values if v is not None and v > 0]
    if not positive:
        return None
    return math.exp(sum(math.log(v) for v in positive) / len(positive))
