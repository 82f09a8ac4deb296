"""Intervals, tie groups and energy figures of the reports: the one place the statistics of
:mod:`gpucompare.reports.stats` meet the report tables.

* :func:`annotate_latest` turns DuckDB's ``latest`` table (sql/latest_results.sql) into the same
  table with ``images_per_sec_low/high``, ``samples``, ``nights``, ``joules_per_image``,
  ``kwh_per_million``, ``gco2e_per_million`` and a ``sample_key`` (the row's samples, for the tie
  tests); the SQL of throughput, cost_per_million and best_value only carries them on.
  With ``nights`` > 1 the samples of the last N ok runs of the configuration on that machine are
  pooled (sql/pooled_samples.sql) and ``images_per_sec`` becomes their median.
* :func:`tie_groups` adds ``rank_group``, ``tied_with_best`` and ``tie_p_value`` to best_value.

Rows without samples (published figures: one number each) get no interval and take part in the
tie test by their figure alone: no p-value, tied only with an equal cost.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import duckdb
import pyarrow as pa
import pyarrow.csv as pa_csv

from gpucompare import resources
from gpucompare.reports import stats
from gpucompare.reports.inputs import load_sql

#: the hidden column that ties a report row to its samples (dropped before a report is written)
SAMPLE_KEY = "sample_key"
#: kWh in a joule
JOULES_PER_KWH = 3.6e6


def carbon_intensity() -> pa.Table:
    """The shipped grid carbon intensity per cloud region (data/carbon/grid_intensity.csv: source,
    dates and caveats in data/carbon/README.md): provider, region, gco2e_per_kwh, ..."""
    return pa_csv.read_csv(resources.data_dir("carbon") / "grid_intensity.csv")


def _pooled(con: duckdb.DuckDBPyConnection, nights: int) -> dict[int, tuple[list[float], int]]:
    """sample_key -> (the samples, the runs they came from)."""
    if nights > 1:
        rows = con.execute(load_sql("pooled_samples"), {"nights": nights}).fetchall()
    else:
        rows = con.execute(
            f"SELECT {SAMPLE_KEY}, images_per_sec_samples, 1 FROM latest "  # noqa: S608 (constant)
            "WHERE status = 'ok' AND len(images_per_sec_samples) > 0").fetchall()
    return {int(key): ([float(v) for v in samples], int(runs)) for key, samples, runs in rows if samples}


def _sample_stats(pooled: dict[int, tuple[list[float], int]], confidence: float) -> pa.Table:
    keys, medians, lows, highs, counts, nights, lists = [], [], [], [], [], [], []
    for key, (samples, runs) in sorted(pooled.items()):
        lists.append(samples)
        interval = stats.median_interval(samples, confidence)
        keys.append(key)
        medians.append(statistics.median(samples))
        lows.append(interval.low if interval else None)
        highs.append(interval.high if interval else None)
        counts.append(len(samples))
        nights.append(runs)
    return pa.table({SAMPLE_KEY: pa.array(keys, pa.int64()), "pooled_median": pa.array(medians, pa.float64()),
                     "images_per_sec_low": pa.array(lows, pa.float64()),
                     "images_per_sec_high": pa.array(highs, pa.float64()),
                     "samples": pa.array(counts, pa.int64()), "nights": pa.array(nights, pa.int64()),
                     "pooled_samples": pa.array(lists, pa.list_(pa.float64()))})


def annotate_latest(con: duckdb.DuckDBPyConnection, *, nights: int = 1,
                    confidence: float = stats.CONFIDENCE) -> None:
    """Replace ``latest`` by itself plus the interval and energy columns (see the module doc).
    Needs ``carbon_intensity`` registered, and for ``nights`` > 1 the view ``pooled`` (all results)."""
    table = _sample_stats(_pooled(con, nights), confidence)
    con.register("sample_stats", table)
    replace = "coalesce(s.pooled_median, l.images_per_sec)" if nights > 1 else "l.images_per_sec"
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE latest_annotated AS
        SELECT l.* REPLACE ({replace} AS images_per_sec,
                coalesce(s.pooled_samples, l.images_per_sec_samples) AS images_per_sec_samples),
            s.images_per_sec_low, s.images_per_sec_high, s.samples, s.nights,
            CASE WHEN l.status = 'ok' AND l.energy_joules IS NOT NULL AND l.timed_batches > 0
                 THEN l.energy_joules / (l.timed_batches * l.batch_size) END AS joules_per_image
        FROM latest AS l LEFT JOIN sample_stats AS s USING ({SAMPLE_KEY})
    """)  # noqa: S608 (constant text)
    con.execute("DROP TABLE latest")
    con.execute(f"""
        CREATE TEMP TABLE latest AS
        SELECT a.*, a.joules_per_image * 1e6 / {JOULES_PER_KWH} AS kwh_per_million,
            a.joules_per_image * 1e6 / {JOULES_PER_KWH} * c.gco2e_per_kwh AS gco2e_per_million
        FROM latest_annotated AS a
        LEFT JOIN carbon_intensity AS c ON c.provider = a.provider AND c.region = a.region
    """)  # noqa: S608 (constant text)
    con.execute("DROP TABLE latest_annotated")
    con.unregister("sample_stats")


def _samples_of(con: duckdb.DuckDBPyConnection, keys: Sequence[int]) -> dict[int, list[float]]:
    """sample_key -> the samples behind that row of ``latest`` (the pooled ones with --nights)."""
    if not keys:
        return {}
    found = con.execute(f"SELECT {SAMPLE_KEY}, images_per_sec_samples FROM latest "  # noqa: S608
                        f"WHERE {SAMPLE_KEY} IN (SELECT unnest($keys))", {"keys": list(keys)}).fetchall()
    return {int(k): [float(v) for v in s] for k, s in found if s}


def _tie(row: dict, leader: dict, samples: dict[int, list[float]]) -> tuple[bool, float | None]:
    """Whether ``row``'s cost cannot be told apart from ``leader``'s, and the U test's p-value
    (None: a side has no samples; then only an equal cost is a tie)."""
    mine, theirs = samples.get(row[SAMPLE_KEY]), samples.get(leader[SAMPLE_KEY])
    if not mine or not theirs:
        return row["cost_per_million"] == leader["cost_per_million"], None

    def costs(r: dict, s: list[float]) -> list[float]:  # cost = price / throughput, sample by sample
        return [r["cost_per_million"] * r["images_per_sec"] / v for v in s]

    test = stats.mann_whitney(costs(row, mine), costs(leader, theirs))
    return not test.significant(), test.p_value


def tie_groups(con: duckdb.DuckDBPyConnection, best_value: pa.Table) -> pa.Table:
    """best_value with ``rank_group``, ``tied_with_best`` and ``tie_p_value`` (ranked rows only).

    Per network, mode and methodology: group 1 is the cheapest ranked row and every row the U test
    over the cost samples cannot tell from it (p >= 1 - confidence); the other rows, in order of
    cost, join the current group while the test cannot tell them from its leader (its first row),
    else lead the next group.
    ``tied_with_best``: the test against the cheapest finds no difference; ``tie_p_value`` is
    that test's p (empty for the cheapest itself and where a side has no samples)."""
    rows = best_value.to_pylist()
    samples = _samples_of(con, [r[SAMPLE_KEY] for r in rows if r.get(SAMPLE_KEY) is not None])
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        row.update(rank_group=None, tied_with_best=None, tie_p_value=None)
        if row["ranked"]:
            groups.setdefault((row["network"], row["mode"], row["methodology"]), []).append(row)
    for ranked in groups.values():
        ranked.sort(key=lambda r: r["cost_per_million"])
        best, leader, group = ranked[0], None, 1
        best.update(rank_group=1, tied_with_best=True)
        for row in ranked[1:]:
            row["tied_with_best"], row["tie_p_value"] = _tie(row, best, samples)
            if row["tied_with_best"]:
                row["rank_group"] = 1
                continue
            if leader is None or not _tie(row, leader, samples)[0]:
                leader, group = row, group + 1
            row["rank_group"] = group
    extra = pa.table({"rank_group": pa.array([r["rank_group"] for r in rows], pa.int64()),
                      "tied_with_best": pa.array([r["tied_with_best"] for r in rows], pa.bool_()),
                      "tie_p_value": pa.array([r["tie_p_value"] for r in rows], pa.float64())})
    at = best_value.schema.get_field_index("rank") + 1
    for offset, name in enumerate(extra.column_names):
        best_value = best_value.add_column(at + offset, name, extra[name])
    return best_value


def without_sample_key(table: pa.Table) -> pa.Table:
    """The table as written: without the hidden ``sample_key``."""
    return table.drop_columns([SAMPLE_KEY]) if SAMPLE_KEY in table.column_names else table


#: the regressions' verdicts that need the U test's agreement
_TESTED_VERDICTS = ("regression", "improvement", "below_floor")
#: what sql/regressions.sql's candidate becomes when the U test finds the drop significant
BELOW_FLOOR = "significant_below_floor"


def test_regressions(table: pa.Table, confidence: float = stats.CONFIDENCE) -> pa.Table:
    """sql/regressions.sql's table with the U test applied: ``p_value`` (latest repeats against
    the history's), ``samples`` and ``history_samples`` (counts); a regression or improvement
    the test does not find significant becomes ``steady``. Where the sizes cannot reach
    significance at all, the thresholds alone decide (p_value empty). A drop beyond the noise
    but within the floor (``below_floor``) is reported as ``significant_below_floor`` only when
    the test finds it significant, else it is ``steady`` (never a regression either way)."""
    rows = table.to_pylist()
    alpha = 1 - confidence
    for row in rows:
        current = [float(v) for v in row.pop("current_samples") or []]
        history = [float(v) for v in row.pop("history_sample_list") or []]
        row.update(samples=len(current) or None, history_samples=len(history) or None, p_value=None)
        if row["verdict"] not in _TESTED_VERDICTS:
            continue
        if not current or not history or stats.min_p_value(len(current), len(history)) >= alpha:
            # these sizes can never show a difference: the thresholds decide alone, and a drop
            # within the floor is not claimed
            if row["verdict"] == "below_floor":
                row["verdict"] = "steady"
            continue
        test = stats.mann_whitney(current, history)
        row["p_value"] = test.p_value
        if not test.significant(confidence):
            row.update(verdict="steady", regression=False)
        elif row["verdict"] == "below_floor":
            row["verdict"] = BELOW_FLOOR
    names = [n for n in table.column_names if n not in ("current_samples", "history_sample_list")]
    names += ["samples", "history_samples", "p_value"]
    types = {"samples": pa.int64(), "history_samples": pa.int64(), "p_value": pa.float64()}
    fields = [table.schema.field(n) if n in table.column_names else pa.field(n, types[n]) for n in names]
    return pa.Table.from_pylist([{n: row[n] for n in names} for row in rows], schema=pa.schema(fields))
