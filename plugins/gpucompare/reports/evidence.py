"""The unit of evidence: what an interval of the reports covers, and how it is computed.

Repeats within one night on one instance measure that instance; nights (each a fresh instance)
measure the instance type. So the model has two levels, both on the log scale (throughput
noise is multiplicative: a CV):

* **One night** (``--nights 1``, the default): the row's interval covers *this night's
  instance*. Its centre is the mean of the logarithms of the repeats (the geometric mean); its
  width a t interval, ``± t(df) · s / √n``, where ``s`` is the noise level (SD of the log
  repeats, ≈ the CV) **pooled over the configurations that machine ran in that run**: a nightly
  sweep has dozens, so ``s`` has many degrees of freedom and 3 repeats (even 2) give a finite,
  useful interval. Pooling assumes the configurations share one noise level, so it is checked:
  each configuration's variance is F-tested against the pooled variance of the run's *other*
  configurations (one-sided, level :data:`HOMOGENEITY_ALPHA`); one that is noisier (or alone in
  its run) uses its own repeats (``noise_basis`` ``own``, df = n - 1: wide, but valid).
  Flagging only ever widens an interval. A single repeat gives no interval ("1 run: no
  interval"): nothing shows how far that one figure may be from the instance's.
* **Several nights** (``--nights N``): the night is the unit. Each night contributes the
  logarithm of its median; the interval is a t interval over those K night figures (df = K - 1)
  and covers *K nights of this type*. The night-to-night spread already holds the within-night
  noise (a floor at it would only make the interval over-cover); only when the K figures are
  identical (a spread of exactly zero) the within-night noise of one night's figure (pooled over
  the nights' repeats) stands in, so they never give a zero-width interval by accident. The
  nights are not pooled across configurations: a slow instance slows every configuration of
  its night, so the configurations' night-to-night deviations are not independent evidence.

scripts/sim_coverage.py checks the coverage of both against a two-level noise model; the
columns are documented in reports/report_set.py (``interval_covers``, ``interval_reason``,
``interval_df``, ``noise_basis``, ``noise_cv``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpucompare.reports.quantiles import f_quantile, t_quantile

#: the level of the F test that keeps a noisier configuration out of its run's pooled noise
HOMOGENEITY_ALPHA = 0.01
#: interval_covers of a one-night interval
THIS_NIGHT = "this night's instance"
#: interval_reason of the rows without an interval
ONE_RUN = "1 run: no interval"
PUBLISHED = "published figure"
NO_SAMPLES = "no samples recorded"
NOT_POSITIVE = "a sample is not positive"


def nights_of_type(count: int) -> str:
    """interval_covers of an interval over ``count`` nights."""
    return f"{count} nights of this type"


def log_moments(lengths: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row (``lengths[i]`` consecutive entries of ``values`` each): the count, the mean of the
    logarithms and their sum of squared deviations. Rows with a value <= 0 get count -1."""
    lengths = np.asarray(lengths, dtype=np.int64)
    values = np.asarray(values, dtype=float)
    rows = np.repeat(np.arange(lengths.size), lengths)
    bad = np.bincount(rows, weights=(values <= 0) | ~np.isfinite(values), minlength=lengths.size) > 0
    logs = np.log(np.where(values > 0, values, 1.0))
    count = lengths.astype(float)
    mean = np.bincount(rows, weights=logs, minlength=lengths.size) / np.maximum(count, 1.0)
    ss = np.bincount(rows, weights=(logs - mean[rows]) ** 2, minlength=lengths.size)
    return np.where(bad, -1, lengths), mean, ss


@dataclass
class Estimate:
    """Per row, on the log scale: the centre, the standard error of the centre and its degrees of
    freedom (NaN: no interval), and what the noise was estimated from."""

    centre: np.ndarray
    se: np.ndarray
    df: np.ndarray
    basis: np.ndarray  # 'run' | 'own' | 'nights' | '' (no interval)
    noise: np.ndarray  # the SD of one repeat (one night's figure, for 'nights'), log scale

    def bounds(self, confidence: float) -> tuple[np.ndarray, np.ndarray]:
        """The interval's ends at ``confidence`` (two-sided), back on the figure's scale."""
        half = t_quantile(0.5 + confidence / 2, self.df) * self.se
        return np.exp(self.centre - half), np.exp(self.centre + half)


def _homogeneous(group: np.ndarray, df: np.ndarray, ss: np.ndarray) -> np.ndarray:
    """Whether each row may join its group's pooled noise: its variance is not significantly
    above that of the group's other rows (leave-one-out F test) and it has company."""
    total_ss = np.bincount(group, weights=ss)[group]
    total_df = np.bincount(group, weights=df)[group]
    other_df = total_df - df
    other_var = np.divide(total_ss - ss, other_df, out=np.zeros_like(ss), where=other_df > 0)
    own_var = np.divide(ss, df, out=np.zeros_like(ss), where=df > 0)
    critical = f_quantile(1 - HOMOGENEITY_ALPHA, df, other_df)
    noisier = np.where(other_var > 0, own_var > critical * other_var, own_var > 0)
    return (df > 0) & (other_df > 0) & ~noisier


def night_level(group: np.ndarray, n: np.ndarray, mean_log: np.ndarray, ss_log: np.ndarray) -> Estimate:
    """One night per row: ``group`` numbers the run (machine and run) each row belongs to; ``n``
    the repeats (< 2: no interval), ``mean_log``/``ss_log`` from :func:`log_moments`."""
    group = np.asarray(group, dtype=np.int64)
    n = np.asarray(n, dtype=float)
    df = np.where(n >= 2, n - 1, 0.0)
    ss = np.where(n >= 2, ss_log, 0.0)
    joins = _homogeneous(group, df, ss)
    pooled_ss = np.bincount(group, weights=np.where(joins, ss, 0.0))[group]
    pooled_df = np.bincount(group, weights=np.where(joins, df, 0.0))[group]
    var = np.where(joins, np.divide(pooled_ss, pooled_df, out=np.zeros_like(ss), where=pooled_df > 0),
                   np.divide(ss, df, out=np.zeros_like(ss), where=df > 0))
    used_df = np.where(joins, pooled_df, df)
    has = n >= 2
    se = np.where(has, np.sqrt(var / np.maximum(n, 1.0)), np.nan)
    basis = np.where(has, np.where(joins, "run", "own"), "")
    return Estimate(centre=np.asarray(mean_log, dtype=float), se=se, df=np.where(has, used_df, np.nan),
                    basis=basis, noise=np.where(has, np.sqrt(var), np.nan))


def across_nights(row: np.ndarray, night_log: np.ndarray, night_n: np.ndarray, night_ss: np.ndarray,
                  rows: int) -> tuple[Estimate, np.ndarray]:
    """Several nights per row: each entry is one night of row ``row[j]``, its figure's logarithm
    ``night_log`` (the log of its median), its repeats ``night_n`` and their ``night_ss`` (sum
    of squared log deviations). Returns the estimate (NaN se below 2 nights) and the nights per row."""
    row = np.asarray(row, dtype=np.int64)
    k = np.bincount(row, minlength=rows).astype(float)
    centre = np.bincount(row, weights=night_log, minlength=rows) / np.maximum(k, 1.0)
    spread = np.bincount(row, weights=(night_log - centre[row]) ** 2, minlength=rows)
    between = np.divide(spread, k - 1, out=np.zeros(rows), where=k > 1)
    within_df = np.bincount(row, weights=np.maximum(night_n - 1, 0), minlength=rows)
    within_ss = np.bincount(row, weights=np.where(night_n > 1, night_ss, 0.0), minlength=rows)
    repeats = np.bincount(row, weights=night_n, minlength=rows) / np.maximum(k, 1.0)
    floor = np.divide(within_ss, within_df * repeats, out=np.zeros(rows), where=within_df > 0)
    var = np.where(between > 0, between, floor)  # identical night figures: one night's own noise
    has = k >= 2
    estimate = Estimate(centre=centre, se=np.where(has, np.sqrt(var / np.maximum(k, 1.0)), np.nan),
                        df=np.where(has, k - 1, np.nan), basis=np.where(has, "nights", ""),
                        noise=np.where(has, np.sqrt(var), np.nan))
    return estimate, k.astype(np.int64)
