"""Intervals and energy figures of the reports: where the statistics of
:mod:`gpucompare.reports.evidence` (and :mod:`~gpucompare.reports.stats`, for the regressions) meet
the report tables.

* :func:`annotate_latest` turns DuckDB's ``latest`` table (sql/latest_results.sql) into the same
  table with ``images_per_sec_low/high``, ``interval_covers``, ``interval_reason``, ``interval_df``,
  ``noise_basis``, ``noise_cv``, ``samples``, ``nights``, ``joules_per_image``, ``kwh_per_million``,
  ``gco2e_per_million`` and a hidden ``sample_key``; the SQL of throughput, cost_per_million and
  best_value only carries them on. Every row at once: one query reads the repeats of every row,
  numpy computes the estimates (no Python loop over rows or groups). One night: the noise is pooled
  over the configurations of each run (machine and run_id). With ``nights`` > 1 the last N ok runs
  of each configuration on its machine are the unit (sql/pooled_samples.sql) and ``images_per_sec``
  becomes the geometric mean of their medians.
* best_value's verdicts are :mod:`gpucompare.reports.verdicts`.

A row without an interval always says why (``interval_reason``): a single repeat, a published
figure (one number), no samples recorded, a sample that is not positive, or a cell that did not run.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv

from gpucompare import resources
from gpucompare.reports import evidence, stats
from gpucompare.reports.inputs import load_sql
from gpucompare.reports.quantiles import t_quantile

#: the hidden column that ties a report row to its samples (dropped before a report is written)
SAMPLE_KEY = "sample_key"
#: kWh in a joule
JOULES_PER_KWH = 3.6e6


def carbon_intensity() -> pa.Table:
    """The shipped grid carbon intensity per cloud region (data/carbon/grid_intensity.csv: source,
    dates and caveats in data/carbon/README.md): provider, region, gco2e_per_kwh, ..."""
    return pa_csv.read_csv(resources.data_dir("carbon") / "grid_intensity.csv")


def _moments(table: pa.Table, column: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """count, mean of the logs and their sum of squared deviations of each row's list ``column``."""
    lists = table[column]
    lengths = pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False)
    values = pc.list_flatten(lists).to_numpy(zero_copy_only=False)
    return evidence.log_moments(lengths, values)


def is_none(values: np.ndarray) -> np.ndarray:
    """Elementwise: the entry of an object array is None."""
    return np.equal(values, None)


def _reasons(base: pa.Table, n: np.ndarray) -> np.ndarray:
    """interval_reason of each row of ``latest`` as it stands after one night (None: an interval)."""
    status = base["status"].to_numpy(zero_copy_only=False)
    origin = base["origin"].to_numpy(zero_copy_only=False)
    not_run = np.array([f"not run: {s}" for s in status], dtype=object)
    return np.select(
        [origin == "published", status != "ok", n < 0, n == 0, n == 1],
        [evidence.PUBLISHED, not_run, evidence.NOT_POSITIVE, evidence.NO_SAMPLES, evidence.ONE_RUN],
        default=None)


#: the nights behind each row with an interval over nights (cost_per_million.sql prices each at its
#: own price); empty with --nights 1
NIGHT_FIGURES = "night_figures"
#: t quantiles (97.5 %) for the degrees of freedom of those intervals, df -> t975
T_QUANTILES = "t_quantiles"


def _register_nights(con: duckdb.DuckDBPyConnection, runs: pa.Table | None, keys: np.ndarray,
                     found: np.ndarray | None, confidence: float) -> None:
    """Register NIGHT_FIGURES (sample_key, night, log_figure) of the rows whose interval is over
    nights, and T_QUANTILES for their degrees of freedom."""
    if runs is None or found is None:
        figures = pa.table({SAMPLE_KEY: pa.array([], pa.int64()), "night": pa.array([], pa.date32()),
                            "log_figure": pa.array([], pa.float64())})
        dfs = np.array([], dtype=float)
    else:
        row = np.searchsorted(keys, runs[SAMPLE_KEY].to_numpy())
        keep = pa.array(found[row] >= 2)
        figures = pa.table({SAMPLE_KEY: runs[SAMPLE_KEY], "night": runs["night"],
                            "log_figure": pc.ln(pc.cast(runs["figure"], pa.float64()))}).filter(keep)
        dfs = np.unique(found[found >= 2] - 1).astype(float)
    con.register(NIGHT_FIGURES, figures)
    con.register(T_QUANTILES, pa.table({"df": pa.array(dfs.astype(np.int64), pa.int64()),
                                        "t": pa.array(np.atleast_1d(t_quantile(0.5 + confidence / 2, dfs)),
                                                      pa.float64())}))


def _over_nights(con: duckdb.DuckDBPyConnection, keys: np.ndarray, nights: int
                 ) -> tuple[evidence.Estimate, np.ndarray, np.ndarray, pa.Table]:
    """The estimate over the last ``nights`` runs of each row of ``latest`` (by ``keys``), the
    nights found, the repeats over them and the runs themselves."""
    runs = con.sql(load_sql("pooled_samples"), params={"nights": nights}).to_arrow_table()
    n, _, ss = _moments(runs, "samples")
    row = np.searchsorted(keys, runs[SAMPLE_KEY].to_numpy())
    figure = runs["figure"].to_numpy()
    estimate, found = evidence.across_nights(row, np.log(figure), np.maximum(n, 0), ss, keys.size)
    samples = np.bincount(row, weights=np.maximum(n, 0), minlength=keys.size).astype(np.int64)
    return estimate, found, samples, runs


def _sample_stats(con: duckdb.DuckDBPyConnection, nights: int, confidence: float) -> pa.Table:
    """Per row of ``latest``: the interval columns (reports/evidence.py), computed over all rows at once."""
    base = con.sql(f"""
        SELECT {SAMPLE_KEY}, status, origin, images_per_sec_samples,
            dense_rank() OVER (ORDER BY provider, instance_type, region, market,
                               coalesce(run_id, CAST(result_date AS VARCHAR))) - 1 AS run_group
        FROM latest ORDER BY {SAMPLE_KEY}""").to_arrow_table()  # noqa: S608 (constant text)
    keys = base[SAMPLE_KEY].to_numpy()
    n, mean_log, ss_log = _moments(base, "images_per_sec_samples")
    estimate = evidence.night_level(base["run_group"].to_numpy(), np.maximum(n, 0), mean_log, ss_log)
    reason = _reasons(base, n)
    covers = np.where(is_none(reason), evidence.THIS_NIGHT, None)
    count = np.where(n > 0, n, 0)
    night_count = np.where(n > 0, 1, 0)
    figure = np.full(keys.size, np.nan)
    runs = found = None
    if nights > 1:
        across, found, samples, runs = _over_nights(con, keys, nights)
        more = found >= 2
        for name in ("centre", "se", "df", "basis", "noise"):
            setattr(estimate, name, np.where(more, getattr(across, name), getattr(estimate, name)))
        figure = np.where(more, np.exp(across.centre), np.nan)
        reason = np.where(more, None, reason)
        covers = np.where(more, np.array([evidence.nights_of_type(k) for k in found], dtype=object), covers)
        count, night_count = np.where(more, samples, count), np.where(more, found, night_count)
    _register_nights(con, runs, keys, found, confidence)
    low, high = estimate.bounds(confidence)
    has = np.isfinite(estimate.se)
    return pa.table({
        SAMPLE_KEY: pa.array(keys, pa.int64()),
        "night_figure": pa.array(figure, pa.float64(), from_pandas=True),
        "images_per_sec_low": pa.array(np.where(has, low, np.nan), pa.float64(), from_pandas=True),
        "images_per_sec_high": pa.array(np.where(has, high, np.nan), pa.float64(), from_pandas=True),
        "samples": pa.array(np.where(count > 0, count, 0), pa.int64(), mask=count <= 0),
        "nights": pa.array(night_count, pa.int64(), mask=night_count <= 0),
        "interval_covers": pa.array(np.where(has, covers, None), pa.string()),
        "interval_reason": pa.array(
            np.where(has, None, np.where(is_none(reason), evidence.NO_SAMPLES, reason)), pa.string()),
        "interval_df": pa.array(np.where(has, estimate.df, np.nan), pa.float64(), from_pandas=True),
        "noise_basis": pa.array(np.where(has, estimate.basis, None), pa.string()),
        "noise_cv": pa.array(np.where(has, estimate.noise, np.nan), pa.float64(), from_pandas=True),
    })


def annotate_latest(con: duckdb.DuckDBPyConnection, *, nights: int = 1,
                    confidence: float = stats.CONFIDENCE) -> None:
    """Replace ``latest`` by itself plus the interval and energy columns (see the module doc).
    Needs ``carbon_intensity`` registered, and for ``nights`` > 1 the view ``pooled`` (all results)."""
    table = _sample_stats(con, nights, confidence)
    con.register("sample_stats", table)
    con.execute(f"""
        CREATE OR REPLACE TABLE latest_annotated AS
        SELECT l.* REPLACE (coalesce(s.night_figure, l.images_per_sec) AS images_per_sec),
            s.* EXCLUDE ({SAMPLE_KEY}, night_figure),
            CASE WHEN l.status = 'ok' AND l.energy_joules IS NOT NULL AND l.timed_batches > 0
                 THEN l.energy_joules / (l.timed_batches * l.batch_size) END AS joules_per_image
        FROM latest AS l LEFT JOIN sample_stats AS s USING ({SAMPLE_KEY})
    """)  # noqa: S608 (constant text)
    con.execute("DROP TABLE latest")
    con.execute(f"""
        CREATE TABLE latest AS
        SELECT a.*, a.joules_per_image * 1e6 / {JOULES_PER_KWH} AS kwh_per_million,
            a.joules_per_image * 1e6 / {JOULES_PER_KWH} * c.gco2e_per_kwh AS gco2e_per_million
        FROM latest_annotated AS a
        LEFT JOIN carbon_intensity AS c ON c.provider = a.provider AND c.region = a.region
    """)  # noqa: S608 (constant text)
    con.execute("DROP TABLE latest_annotated")
    con.unregister("sample_stats")


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
    the test finds it significant, else it is ``steady`` (never a regression either way).
    Column-wise: only the rows whose verdict needs the test (a handful a night) go through Python."""
    alpha = 1 - confidence
    lists = (("samples", "current_samples"), ("history_samples", "history_sample_list"))
    counts = {name: pc.fill_null(pc.list_value_length(table[column]), 0).to_numpy(zero_copy_only=False)
              for name, column in lists}
    verdict = table["verdict"].to_numpy(zero_copy_only=False).astype(object)
    regression = pc.cast(table["regression"], pa.bool_()).to_numpy(zero_copy_only=False).astype(object)
    p_value = np.full(table.num_rows, np.nan)
    for i in np.flatnonzero(np.isin(verdict, _TESTED_VERDICTS)):
        n_current, n_history = int(counts["samples"][i]), int(counts["history_samples"][i])
        if not n_current or not n_history or stats.min_p_value(n_current, n_history) >= alpha:
            # these sizes can never show a difference: the thresholds decide alone, and a drop
            # within the floor is not claimed
            if verdict[i] == "below_floor":
                verdict[i] = "steady"
            continue
        test = stats.mann_whitney(table["current_samples"][i].as_py(),
                                  table["history_sample_list"][i].as_py())
        p_value[i] = test.p_value
        if not test.significant(confidence):
            verdict[i], regression[i] = "steady", False
        elif verdict[i] == "below_floor":
            verdict[i] = BELOW_FLOOR
    out = table.drop_columns(["current_samples", "history_sample_list"])
    out = out.set_column(out.schema.get_field_index("verdict"), out.schema.field("verdict"),
                         pa.array(verdict, out.schema.field("verdict").type))
    out = out.set_column(out.schema.get_field_index("regression"), out.schema.field("regression"),
                         pa.array(regression, out.schema.field("regression").type))
    for name in ("samples", "history_samples"):
        out = out.append_column(pa.field(name, pa.int64()), pa.array(counts[name], pa.int64(),
                                                                      mask=counts[name] == 0))
    return out.append_column(pa.field("p_value", pa.float64()),
                             pa.array(p_value, pa.float64(), from_pandas=True))
