"""Verdicts of best_value: each ranked row against the best (cheapest) ranked row of its network,
mode and methodology, from the interval of the cost ratio row / best.

The ratio's interval is built on the log scale from the two rows' throughput intervals (their
centres, standard errors and degrees of freedom: reports/evidence.py), a Welch-Satterthwaite t
interval for the difference of the two log costs, widened by the price ranges (spot: the
cheapest and dearest price of each machine during its run window; a price range is a bound, not
noise, so it is added to the ends rather than to the variance). With the practical margin m
(``GPUCOMPARE_PRACTICAL_MARGIN``, default 3 %):

* ``dearer``: the 95 % interval's lower end is above 1 + m (the row costs more than the margin
  more than the best, at 2.5 % one-sided);
* ``equivalent``: the 90 % interval lies within [1 / (1 + m), 1 + m]: two one-sided tests at 5 %
  each (TOST), the standard equivalence test;
* ``undetermined``: neither, or a side has no interval. ``settle_with`` then says how much more
  measuring would most likely settle it: the repeats (one night) or nights (``--nights``) per
  machine at which a test of the same kind has 80 % power if the observed ratio and noise are the
  truth (the normal approximation of the usual sample-size formula, n' = n · ((z + z_power) ·
  se / gap)²), or why no amount would.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpucompare.reports.quantiles import t_quantile

VERDICTS: tuple[str, ...] = ("best", "dearer", "equivalent", "undetermined")
#: power of the settle_with calculation
POWER = 0.8
#: beyond this many more repeats or nights, settle_with says that measuring will not settle it
MAX_SETTLE = 1000


@dataclass
class Side:
    """Per row: the log throughput centre, its standard error and df (NaN: no interval), the log
    price range around the price (``price_low``/``price_high``: log(low / price), log(high /
    price)), the repeats and nights behind the figure, and whether the unit is the night."""

    centre: np.ndarray
    se: np.ndarray
    df: np.ndarray
    log_price: np.ndarray
    price_low: np.ndarray
    price_high: np.ndarray
    samples: np.ndarray
    nights: np.ndarray
    by_night: np.ndarray

    def take(self, index: np.ndarray) -> Side:
        return Side(**{name: getattr(self, name)[index] for name in self.__dataclass_fields__})


def _welch_df(row: Side, best: Side) -> np.ndarray:
    a, b = row.se**2, best.se**2
    denominator = np.where(row.df > 0, a**2 / np.where(row.df > 0, row.df, 1), 0) + np.where(
        best.df > 0, b**2 / np.where(best.df > 0, best.df, 1), 0)
    welch = np.divide((a + b) ** 2, denominator, out=np.full(a.shape, np.nan), where=denominator > 0)
    # zero noise on both sides: the ratio is exact, any df will do
    return _coarse(np.where(denominator > 0, welch, np.fmax(row.df, best.df)))


def _coarse(df: np.ndarray) -> np.ndarray:
    """Degrees of freedom rounded down (conservative) to a few distinct values, each a t quantile
    computed once: halves below 10, units below 100, tens below 1000, then 1000."""
    rounded = [np.floor(df * 2) / 2, np.floor(df), np.floor(df / 10) * 10]
    return np.where(np.isnan(df), np.nan, np.select([df < 10, df < 100, df < 1000], rounded, 1000.0))


@dataclass
class Comparison:
    """Per row: the log cost ratio, its standard error, the price shifts of its ends, the cost
    ratio's 95 % interval and the verdict (vectorised: no settle_with yet)."""

    log_ratio: np.ndarray
    se: np.ndarray
    shift_low: np.ndarray
    shift_high: np.ndarray
    ratio_low: np.ndarray
    ratio_high: np.ndarray
    verdict: np.ndarray


def decide(row: Side, best: Side, is_best: np.ndarray, margin: float, confidence: float) -> Comparison:
    """The verdict of each row against its best (``best`` holds the best's values row by row): a
    row or a best without an interval (NaN se) is ``undetermined``."""
    log_ratio = (row.log_price - row.centre) - (best.log_price - best.centre)
    se = np.sqrt(row.se**2 + best.se**2)
    df = _welch_df(row, best)
    shift_low, shift_high = row.price_low - best.price_high, row.price_high - best.price_low
    wide, narrow = t_quantile(0.5 + confidence / 2, df), t_quantile(confidence, df)  # 95 %, and 90 % for TOST
    with np.errstate(invalid="ignore"):
        low, high = np.exp(log_ratio - wide * se + shift_low), np.exp(log_ratio + wide * se + shift_high)
        low90 = np.exp(log_ratio - narrow * se + shift_low)
        high90 = np.exp(log_ratio + narrow * se + shift_high)
        dearer = low > 1 + margin
        equivalent = (low90 >= 1 / (1 + margin)) & (high90 <= 1 + margin)
    verdict = np.select([is_best, dearer, equivalent], ["best", "dearer", "equivalent"], "undetermined")
    known = np.isfinite(se) & ~is_best
    return Comparison(log_ratio=log_ratio, se=se, shift_low=shift_low, shift_high=shift_high,
                      ratio_low=np.where(known, low, np.nan), ratio_high=np.where(known, high, np.nan),
                      verdict=verdict)


def settle_with(compared: Comparison, row: Side, best: Side, missing: list[str | None], margin: float,
                confidence: float) -> list[str | None]:
    """settle_with of each row: for an undetermined one, why it has no interval or how much more
    measuring would most likely settle it; None for the others."""
    out: list[str | None] = []
    for i, verdict in enumerate(compared.verdict):
        if verdict != "undetermined":
            out.append(None)
        elif missing[i] is not None or not math.isfinite(compared.se[i]):
            out.append(f"an interval on both sides ({missing[i] or 'a side has none'})")
        else:
            ends = (float(compared.shift_low[i]), float(compared.shift_high[i]))
            out.append(_settle(float(compared.log_ratio[i]), float(compared.se[i]), *ends, row.take(i),
                               best.take(i), margin, confidence))
    return out


def _settle(log_ratio: float, se: float, shift_low: float, shift_high: float, row: Side, best: Side,
            margin: float, confidence: float) -> str:
    """How many more repeats (or nights) per machine would most likely settle an undetermined row."""
    edge = math.log1p(margin)
    normal = statistics.NormalDist()
    if log_ratio > edge:  # heading for dearer: the 95 % lower end must clear 1 + m
        gap, z = log_ratio + shift_low - edge, normal.inv_cdf(0.5 + confidence / 2)
    else:  # heading for equivalent: the 90 % interval must fit inside the margin
        gap, z = min(edge - log_ratio - shift_high, log_ratio + shift_low + edge), normal.inv_cdf(confidence)
    if gap <= 0:
        cause = "the price range alone spans the margin" if shift_high - shift_low > 0 else \
            "the difference sits on the margin"
        return f"no amount of measuring: {cause}"
    by_night = bool(row.by_night or best.by_night)
    have = float(min(row.nights, best.nights) if by_night else min(row.samples, best.samples))
    needed = math.ceil(have * ((z + normal.inv_cdf(POWER)) * se / gap) ** 2)
    more = max(1, needed - int(have))
    unit = "nights" if by_night else "repeats"
    if more > MAX_SETTLE:
        return f"more than {MAX_SETTLE} more {unit} of each: the difference sits near the margin"
    return f"about {more} more {unit} of each machine"


def _column(table: pa.Table, name: str) -> np.ndarray:
    """A numeric column as floats (NaN for empty cells)."""
    return pc.cast(table[name], pa.float64()).to_numpy(zero_copy_only=False)


def _sides(table: pa.Table, confidence: float) -> Side:
    low, high, df = (_column(table, n) for n in ("images_per_sec_low", "images_per_sec_high", "interval_df"))
    with np.errstate(divide="ignore", invalid="ignore"):
        figure = np.log(_column(table, "images_per_sec"))
        centre = np.where(np.isfinite(low), (np.log(low) + np.log(high)) / 2, figure)
        se = (np.log(high) - np.log(low)) / (2 * t_quantile(0.5 + confidence / 2, df))
        price = _column(table, "price_per_hour")
        price_low = np.log(np.fmin(_column(table, "price_per_hour_low"), price) / price)
        price_high = np.log(np.fmax(_column(table, "price_per_hour_high"), price) / price)
    basis = table["noise_basis"].to_numpy(zero_copy_only=False)
    side = Side(centre=centre, se=se, df=df, log_price=np.log(price), price_low=np.nan_to_num(price_low),
                price_high=np.nan_to_num(price_high), samples=np.nan_to_num(_column(table, "samples")),
                nights=np.nan_to_num(_column(table, "nights")), by_night=basis == "nights")
    return _nights_priced(table, side, confidence)


def _nights_priced(table: pa.Table, side: Side, confidence: float) -> Side:
    """Rows whose interval is over nights: each night was priced at its own price, so the cost
    interval (not the throughput's) is the evidence, the price moves part of its noise: centre and
    se from cost_per_million_low/high, no price shift on top."""
    low, high = _column(table, "cost_per_million_low"), _column(table, "cost_per_million_high")
    use = side.by_night & np.isfinite(low) & np.isfinite(high) & (low > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        # cost = price · 1e6 / (ips · 3600): the log price a cost of that centre stands for
        log_cost = (np.log(low) + np.log(high)) / 2 - math.log(1e6 / 3600)
        se = (np.log(high) - np.log(low)) / (2 * t_quantile(0.5 + confidence / 2, side.df))
    return dataclasses.replace(
        side, centre=np.where(use, 0.0, side.centre), log_price=np.where(use, log_cost, side.log_price),
        se=np.where(use, se, side.se), price_low=np.where(use, 0.0, side.price_low),
        price_high=np.where(use, 0.0, side.price_high))


def _floats(values: np.ndarray) -> pa.Array:
    """A float column, NaN as empty."""
    return pa.array(values, pa.float64(), from_pandas=True)


def _best_rows(table: pa.Table) -> np.ndarray:
    """Per row, the index of the cheapest ranked row of its network, mode and methodology (-1: not ranked)."""
    keys = [table[n].to_numpy(zero_copy_only=False).astype(str) for n in ("network", "mode", "methodology")]
    joined = np.char.add(np.char.add(np.char.add(keys[0], "\0"), keys[1]), np.char.add("\0", keys[2]))
    _, group = np.unique(joined, return_inverse=True)
    ranked = pc.fill_null(table["ranked"], False).to_numpy(zero_copy_only=False)
    cost = _column(table, "cost_per_million")
    order = np.lexsort((np.arange(cost.size), cost, group))
    order = order[ranked[order]]
    first = np.full(group.max(initial=-1) + 1, -1)
    starts = np.r_[True, group[order][1:] != group[order][:-1]] if order.size else np.array([], bool)
    first[group[order][starts]] = order[starts]
    return np.where(ranked, first[group] if first.size else -1, -1)


def annotate_best_value(table: pa.Table, margin: float, confidence: float) -> pa.Table:
    """best_value with ``verdict``, ``cost_ratio``, ``cost_ratio_low``/``_high`` and ``settle_with``
    after ``rank`` (ranked rows only; see the module doc)."""
    best = _best_rows(table)
    ranked = best >= 0
    index = np.where(ranked, best, 0)
    sides = _sides(table, confidence)
    reasons = table["interval_reason"].to_pylist()
    missing = [None if reasons[i] is None and reasons[index[i]] is None
               else reasons[i] or f"the best: {reasons[index[i]]}" for i in range(table.num_rows)]
    others = sides.take(index)
    compared = decide(sides, others, best == np.arange(best.size), margin, confidence)
    settle = settle_with(compared, sides, others, missing, margin, confidence)
    cost = _column(table, "cost_per_million")
    columns = {
        "verdict": pa.array(np.where(ranked, compared.verdict, None), pa.string()),
        "cost_ratio": _floats(np.where(ranked, cost / cost[index], np.nan)),
        "cost_ratio_low": _floats(np.where(ranked, compared.ratio_low, np.nan)),
        "cost_ratio_high": _floats(np.where(ranked, compared.ratio_high, np.nan)),
        "settle_with": pa.array([s if ranked[i] else None for i, s in enumerate(settle)], pa.string()),
    }
    at = table.schema.get_field_index("rank") + 1
    for offset, (name, values) in enumerate(columns.items()):
        table = table.add_column(at + offset, name, values)
    return table
