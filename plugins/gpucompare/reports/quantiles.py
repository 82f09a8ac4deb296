"""Quantiles of Student's t and Fisher's F distributions, without scipy at run time.

The reports' intervals are t intervals on the log scale (reports/evidence.py) and their noise
pooling is checked with an F test, so they need ``t_quantile`` and ``f_quantile`` at any
(also fractional: Welch-Satterthwaite) degrees of freedom. Both invert the regularized
incomplete beta function (continued fraction of Numerical Recipes' ``betacf``, Lentz's method)
by bisection; each distinct (p, df) pair is computed once (cached) and array inputs are mapped
through their distinct values, so a report of ten thousand rows costs a handful of inversions.
The unit tests check them against scipy.
"""

from __future__ import annotations

import math
import statistics
from functools import lru_cache

import numpy as np

#: Beyond this many degrees of freedom the t distribution is taken as the normal one.
NORMAL_DF = 1e7


def _beta_cf(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        even = m * (b - m) * x / ((qam + m2) * (a + m2))
        odd = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        for aa in (even, odd):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
            last = d * c
        if abs(last - 1.0) < 1e-15:
            break
    return h


def beta_inc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_cf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_cf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    tail = 0.5 * beta_inc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def _bisect(cdf, p: float, low: float, high: float) -> float:  # noqa: ANN001 - a float -> float function
    while cdf(high) < p:  # widen until the quantile is bracketed
        high *= 2.0
    for _ in range(200):
        middle = 0.5 * (low + high)
        if cdf(middle) < p:
            low = middle
        else:
            high = middle
        if high - low <= 1e-12 * max(1.0, abs(high)):
            break
    return 0.5 * (low + high)


@lru_cache(maxsize=4096)
def _t_quantile(p: float, df: float) -> float:
    if df >= NORMAL_DF:
        return statistics.NormalDist().inv_cdf(p)
    if p < 0.5:
        return -_t_quantile(1.0 - p, df)
    return _bisect(lambda t: t_cdf(t, df), p, 0.0, 16.0)


@lru_cache(maxsize=4096)
def _f_quantile(p: float, d1: float, d2: float) -> float:
    def cdf(x: float) -> float:
        return beta_inc(d1 / 2.0, d2 / 2.0, d1 * x / (d1 * x + d2))

    return _bisect(cdf, p, 0.0, 16.0)


def _check(p: float) -> None:
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p!r}")


def t_quantile(p: float, df: float | np.ndarray) -> float | np.ndarray:
    """The p-quantile of Student's t; ``df`` a number or an array (NaN where df is NaN or < 1e-9)."""
    _check(p)
    if np.isscalar(df):
        return _t_quantile(float(p), float(df)) if df > 1e-9 else math.nan
    values = np.asarray(df, dtype=float)
    out = np.full(values.shape, np.nan)
    usable = np.isfinite(values) & (values > 1e-9)
    distinct, where = np.unique(values[usable], return_inverse=True)
    if distinct.size:
        out[usable] = np.array([_t_quantile(float(p), float(d)) for d in distinct])[where]
    return out


def f_quantile(p: float, d1: float | np.ndarray, d2: float | np.ndarray) -> np.ndarray:
    """The p-quantile of Fisher's F(d1, d2), elementwise over arrays (NaN where a df is not > 0)."""
    _check(p)
    first, second = np.broadcast_arrays(np.asarray(d1, dtype=float), np.asarray(d2, dtype=float))
    out = np.full(first.shape, np.nan)
    usable = np.isfinite(first) & np.isfinite(second) & (first > 0) & (second > 0)
    pairs = first[usable] + 1j * second[usable]  # one sortable value per pair (a row-wise unique is slow)
    distinct, where = np.unique(pairs, return_inverse=True)
    if distinct.size:
        values = np.array([_f_quantile(float(p), float(d.real), float(d.imag)) for d in distinct])
        out[usable] = values[np.ravel(where)]
    return out
