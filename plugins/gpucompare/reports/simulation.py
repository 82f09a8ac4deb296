"""A two-level noise model of nightly benchmarks, to check the reports' intervals and verdicts by
simulation (scripts/sim_coverage.py prints the table; tests/unit/reports/test_simulation.py
asserts on a few cells with fixed seeds).

The model, on the log scale (multiplicative noise, SD of the log ≈ CV): a machine type has a true
throughput; each night a fresh instance of it adds a *night effect* ~ N(0, between_cv), shared by
every configuration it runs that night (a slower GPU or host slows them all); each repeat adds
*within-night noise* ~ N(0, within_cv). One run measures ``configs`` configurations of the same
noise level, so the one-night interval pools its noise over them, as the reports do.

What an interval is checked against is what it says it covers: at one night, *this night's
instance* (the type's truth plus that night's effect); over several nights, the type's truth.
A verdict is judged the same way: ``dearer`` is false when the true cost ratio of what was
measured (the instances at one night, the types over nights) is within the margin.
The estimates and verdicts are computed by the reports' own code (reports/evidence.py,
reports/verdicts.py), not a copy of it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpucompare.reports import evidence, verdicts
from gpucompare.reports.stats import CONFIDENCE


@dataclass(frozen=True)
class Cell:
    """One design: the noise levels (fractions), the nights and the repeats a night."""

    within_cv: float
    between_cv: float
    nights: int
    repeats: int


@dataclass
class Measured:
    """One machine measured ``replicates`` times: the estimate of its first configuration, the
    truth of the instance measured (its last night) and of the type, all log scale."""

    estimate: evidence.Estimate
    instance_truth: np.ndarray
    type_truth: float
    cell: Cell


def measure(rng: np.random.Generator, cell: Cell, replicates: int, log_truth: float = 0.0,
            configs: int = 24) -> Measured:
    """Draw ``replicates`` independent measurements of one machine type under ``cell``."""
    night = rng.normal(0.0, cell.between_cv, (replicates, cell.nights))
    if cell.nights == 1:  # one run of `configs` configurations: the noise is pooled over them
        noise = rng.normal(0.0, cell.within_cv, (replicates, configs, cell.repeats))
        logs = log_truth + night[:, :, None] + noise
        n, mean, ss = evidence.log_moments(np.full(replicates * configs, cell.repeats), np.exp(logs).ravel())
        group = np.repeat(np.arange(replicates), configs)
        full = evidence.night_level(group, n, mean, ss)
        pick = np.arange(replicates) * configs  # the first configuration of each run
        estimate = evidence.Estimate(*(getattr(full, f)[pick] for f in ("centre", "se", "df", "basis",
                                                                         "noise")))
    else:  # the night is the unit: the first configuration's nights
        noise = rng.normal(0.0, cell.within_cv, (replicates, cell.nights, cell.repeats))
        logs = log_truth + night[:, :, None] + noise
        n, _, ss = evidence.log_moments(np.full(replicates * cell.nights, cell.repeats),
                                        np.exp(logs).ravel())
        medians = np.median(logs, axis=2).ravel()
        row = np.repeat(np.arange(replicates), cell.nights)
        estimate, _ = evidence.across_nights(row, medians, n, ss, replicates)
    return Measured(estimate=estimate, instance_truth=log_truth + night[:, -1], type_truth=log_truth,
                    cell=cell)


def coverage(measured: Measured, confidence: float = CONFIDENCE) -> float | None:
    """The share of intervals that hold what they say they cover (None: the design gives none)."""
    low, high = measured.estimate.bounds(confidence)
    if not np.all(np.isfinite(measured.estimate.se)):
        return None
    truth = measured.instance_truth if measured.cell.nights == 1 else measured.type_truth
    return float(np.mean((low <= np.exp(truth)) & (np.exp(truth) <= high)))


def median_width(measured: Measured, confidence: float = CONFIDENCE) -> float | None:
    """The median relative width of the intervals, (high - low) / centre."""
    low, high = measured.estimate.bounds(confidence)
    if not np.all(np.isfinite(measured.estimate.se)):
        return None
    return float(np.median((high - low) / np.exp(measured.estimate.centre)))


def _side(measured: Measured) -> verdicts.Side:
    size = measured.estimate.centre.size
    zeros = np.zeros(size)
    return verdicts.Side(centre=measured.estimate.centre, se=measured.estimate.se, df=measured.estimate.df,
                         log_price=zeros, price_low=zeros, price_high=zeros,
                         samples=np.full(size, measured.cell.repeats * measured.cell.nights, dtype=float),
                         nights=np.full(size, measured.cell.nights, dtype=float),
                         by_night=np.full(size, measured.cell.nights > 1))


@dataclass
class VerdictRates:
    """Shares of the replicates: dearer, equivalent, and dearer although the true ratio of what was
    measured (instances at one night, types over nights) is within the margin (false dearer); and
    false dearer judged against the types even at one night."""

    dearer: float
    equivalent: float
    false_dearer: float
    false_dearer_type: float


def verdict_rates(rng: np.random.Generator, cell: Cell, ratio: float, replicates: int,
                  margin: float = 0.03) -> VerdictRates:
    """Two machines at one price, the second ``ratio`` times dearer per image (slower by that
    factor): the verdict of whichever looks dearer against the one that looks best."""
    first = measure(rng, cell, replicates, 0.0)
    second = measure(rng, cell, replicates, -float(np.log(ratio)))
    a, b = _side(first), _side(second)
    second_dearer = b.centre < a.centre  # it costs more per image when it is slower
    index = np.arange(replicates)
    row, best = (a.take(index), b.take(index))
    for name in ("centre", "se", "df"):  # row = the dearer-looking machine, best = the other
        getattr(row, name)[:] = np.where(second_dearer, getattr(b, name), getattr(a, name))
        getattr(best, name)[:] = np.where(second_dearer, getattr(a, name), getattr(b, name))
    verdict = verdicts.decide(row, best, np.zeros(replicates, dtype=bool), margin, CONFIDENCE).verdict
    truth = (first.instance_truth, second.instance_truth) if cell.nights == 1 else (0.0, -np.log(ratio))
    true_log_ratio = np.where(second_dearer, truth[0] - truth[1], truth[1] - truth[0])
    type_log_ratio = np.where(second_dearer, np.log(ratio), -np.log(ratio))
    dearer = verdict == "dearer"
    edge = np.log1p(margin)
    return VerdictRates(dearer=float(np.mean(dearer)), equivalent=float(np.mean(verdict == "equivalent")),
                        false_dearer=float(np.mean(dearer & (true_log_ratio <= edge))),
                        false_dearer_type=float(np.mean(dearer & (type_log_ratio <= edge))))
