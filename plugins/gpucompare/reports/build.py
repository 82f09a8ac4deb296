"""The report set: DuckDB over the lake's Parquet → report tables (Arrow), one SQL file each.

Each report is one SQL file in ``sql/`` (DuckDB dialect), run in an in-memory DuckDB
connection (:func:`gpucompare.reports.inputs.connect`). The lake's results files are read by
DuckDB's own Parquet reader from the file list of the table's log
(:class:`~gpucompare.reports.inputs.ResultFiles`); the small side tables (prices, exchange
rates, published curves) are Arrow tables registered with the connection. No DuckDB extension
is loaded or downloaded.

How it stays fast on a big lake (10 million result rows in a few seconds on two cores):

* ``reports.newest`` finds each series' newest date partition from one integer column of every
  result (``series_key``; DuckDB pushes the projection into its reader), and keeps what it found
  between reports (the lake's report cache: the next report reads only the files added since);
* ``latest_results.sql`` reads only those partitions and keeps each machine's latest result
  of every configuration and methodology: the small ``latest`` table every report but
  regressions reads;
* ``regressions.sql`` reads only the partitions of its look-back window: the file list is
  pruned by date before anything is opened, and the history is one window function over each
  series' newest results and one hash aggregation (linear, no self-join);
* the reports are built in :data:`LANES`, side by side, each on a thread and DuckDB connection of
  its own (``latest`` is a table of the build's in-memory database, so every lane reads it), and
  each table's Parquet and CSV are written on the writer's thread as soon as it is built
  (``publish.TableWriter``), while the next report is built and the page drawn;
* nothing goes through pandas.

The tables are built in the order of :data:`BUILDERS` (columns: docs/reports.md and
``report_set.COLUMN_DOCS``). Adding a report: its name in ``report_set.REPORTS``, its query in
``sql/<name>.sql`` and one line in :data:`BUILDERS`. Writing the tables, the page and the
history is :mod:`gpucompare.reports.publish`; :func:`run_reports` does all of it (the
``report`` command and the reports DAG).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import gc
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import duckdb
import pyarrow as pa

from bench_tasks.constants import IMAGENET_TRAIN_IMAGES
from gpucompare.config import patterns
from gpucompare.reports import newest, page_view, projections, stats, uncertainty, verdicts
from gpucompare.reports.campaign import build_campaign
from gpucompare.reports.inputs import (
    ReportInputs,
    ResultFiles,
    connect,
    load_sql,
    register_side_tables,
    second_connection,
)
from gpucompare.reports.publish import TableWriter, write_site
from gpucompare.reports.report_set import (
    HISTORY_TABLES,
    MATRIX_BATCHES,
    RegressionRule,
    ReportError,
    ReportOptions,
    ReportSet,
    ReportsIncomplete,
    with_docs,
)

T = TypeVar("T")


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused while a report set is built and drawn, restored
    after. Building one allocates hundreds of thousands of short-lived rows, cells and template
    objects, and each full collection it triggers walks every object of the process (an Airflow
    worker's modules, DAGs and providers included): on the 10M-row bench the page alone took 0.36 s
    with the collector on and 0.27 s with it off (``scripts/bench_reports.py``). Nothing the set
    allocates needs the collector (reference counting frees it); a cycle left is collected by the
    next collection after."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _timed(timings: dict[str, float], name: str, action: Callable[[], T]) -> T:
    """``action()``, its wall-clock time recorded under ``name``."""
    started = time.perf_counter()
    value = action()
    timings[name] = time.perf_counter() - started
    return value


@dataclass
class Build:
    """One build in progress: the connection (with ``latest`` and the side tables registered),
    the results files and the settings; what each entry of :data:`BUILDERS` is given."""

    con: duckdb.DuckDBPyConnection
    inputs: ReportInputs
    files: ResultFiles
    currency: str
    rule: RegressionRule
    options: ReportOptions
    #: the newest date partition in the results table's log (the regressions' look-back counts
    #: from it; known before the scan, and the newest date of any result unless that partition
    #: holds only empty files)
    newest: dt.date | None

    def sql(self, name: str, parameters: dict[str, object] | None = None) -> pa.Table:
        """Run ``sql/<name>.sql``; its result is registered as ``name`` for later reports."""
        table = self.con.sql(load_sql(name), params=parameters or None).to_arrow_table()
        self.con.register(name, table)  # later reports may read it (best_value reads cost_per_million)
        return table


def _cost_per_million(build: Build) -> pa.Table:
    return build.sql("cost_per_million", {"currency": build.currency, "epoch_images": IMAGENET_TRAIN_IMAGES})


def _ranking(options: ReportOptions) -> dict[str, object]:
    """The parameters of sql/best_value.sql (also the projections' optional ranking view)."""
    return {"published_cutoff": options.published_cutoff, "rank_old_published": options.rank_old_published,
            "rank_flagged": options.rank_flagged}


def _best_value(build: Build) -> pa.Table:
    table = verdicts.annotate_best_value(build.sql("best_value", _ranking(build.options)),
                                         build.options.practical_margin, stats.CONFIDENCE)
    build.con.register("best_value", table)
    return table


#: The row keys of throughput_matrix and throughput_by_batch (one machine, mode, dtype, device
#: count, network and methodology: figures timed two ways are two rows, never one cell).
_MATRIX_KEYS = (
    "provider, instance_type, region, market, gpu_model, device_kind, gpu_count, num_nodes, mode, "
    "dtype, network, methodology"
)
_MATRIX_ORDER = ("provider, instance_type, region, market, mode, dtype, gpu_count, num_nodes, network, "
                 "methodology")


def _throughput_matrix(build: Build) -> pa.Table:
    """throughput pivoted like the published tables: a row per machine, mode, dtype, device
    count, network and methodology; per batch size of ``MATRIX_BATCHES`` (and only those: the
    width is fixed) two columns, ``batch_<n>_images_per_sec`` (DOUBLE, empty when the cell did
    not run) and ``batch_<n>_status`` (VARCHAR: ok, oom, ...; empty when not measured). Every
    batch size, listed or not, is a row of ``throughput_by_batch``."""
    # the batch sizes are the constants, so safe to inline
    cells = ", ".join(
        f"max(images_per_sec) FILTER (WHERE batch_size = {b}) AS batch_{b}_images_per_sec, "
        f"any_value(status) FILTER (WHERE batch_size = {b}) AS batch_{b}_status"
        for b in MATRIX_BATCHES
    )
    return build.con.sql(
        f"SELECT {_MATRIX_KEYS}, any_value(origin) AS origin, max(result_date) AS result_date, "  # noqa: S608
        f"{cells} FROM throughput GROUP BY ALL ORDER BY {_MATRIX_ORDER}"
    ).to_arrow_table()


def _throughput_by_batch(build: Build) -> pa.Table:
    """throughput_matrix in long format: one row per machine, mode, dtype, device count,
    network, methodology and batch size (any batch size), with its images/s and status."""
    return build.con.sql(
        f"SELECT {_MATRIX_KEYS}, batch_size, max(images_per_sec) AS images_per_sec, "  # noqa: S608
        "any_value(status) AS status, any_value(origin) AS origin, max(result_date) AS result_date "
        f"FROM throughput WHERE batch_size IS NOT NULL GROUP BY ALL ORDER BY {_MATRIX_ORDER}, batch_size"
    ).to_arrow_table()


def _regressions(build: Build) -> pa.Table:
    """Reads its own files (the look-back window), not ``latest``."""
    rule = build.rule
    cutoff = build.newest - dt.timedelta(days=rule.lookback_days) if build.newest else None

    def query() -> pa.Table:
        build.files.register("recent", since=cutoff)
        table = build.sql("regressions", {"history_runs": rule.history_runs, "min_history": rule.min_history,
                                          "mad_factor": rule.mad_factor, "min_drop": rule.min_drop})
        return uncertainty.test_regressions(table)

    return build.files.run(query)


#: How each table of the set is built, in build order (a later one may read an earlier one:
#: best_value reads cost_per_million, throughput_matrix reads throughput). One line per table.
BUILDERS: dict[str, Callable[[Build], pa.Table]] = {
    "cost_per_million": _cost_per_million,
    "scaling": lambda build: build.sql("scaling"),
    "throughput": lambda build: build.sql("throughput"),
    "throughput_matrix": _throughput_matrix,
    "throughput_by_batch": _throughput_by_batch,
    "best_value": _best_value,
    "regressions": _regressions,
    "projections": lambda build: projections.build_projections(
        build.con, currency=build.currency, epoch_images=IMAGENET_TRAIN_IMAGES,
        report_date=build.options.today),
    "campaign": lambda build: build_campaign(build.con, build.inputs, build.files, build.currency),
}
if set(BUILDERS) != set(HISTORY_TABLES):  # a report named in report_set but not built, or back
    raise ReportError(f"BUILDERS {sorted(BUILDERS)} do not match the reports {sorted(HISTORY_TABLES)}")

#: The builders run side by side, each lane on a thread and DuckDB connection of its own, its tables
#: in order: a table reads only ``latest``, the side tables and earlier tables of its lane
#: (best_value reads cost_per_million; projections' ranking view both; throughput_matrix and
#: throughput_by_batch read throughput); the regressions and the campaign read their own files.
LANES: tuple[tuple[str, ...], ...] = (
    ("cost_per_million", "best_value", "projections", projections.BEST_VALUE_WITH_PROJECTIONS),
    ("scaling", "throughput", "throughput_matrix", "throughput_by_batch"),
    ("regressions", "campaign"),
)
#: The reports that read no ``latest`` (the regressions and the campaign read their own files): a
#: lane of them alone starts before the scan
WITHOUT_LATEST = frozenset({"regressions", "campaign"})
if {name for lane in LANES for name in lane} != {*BUILDERS, projections.BEST_VALUE_WITH_PROJECTIONS}:
    raise ReportError(f"LANES {LANES} do not hold every builder of {sorted(BUILDERS)} once")


@collector_paused()
def build_reports(
    inputs: ReportInputs,
    out: str | Path | None = None,
    *,
    currency: str = "EUR",
    rule: RegressionRule | None = None,
    options: ReportOptions | None = None,
    keep_going: bool = False,
) -> ReportSet:
    """Run every report; write each as Parquet and CSV under ``out`` when given (each table as soon
    as it is built, on the writer's thread; written when this returns). A report that fails is
    recorded in the set's ``failures`` and the others are still built and written; then
    ``ReportsIncomplete`` is raised, unless ``keep_going`` (the caller reports the failures)."""
    report_set = _new_set(currency, rule, options)
    writer = TableWriter(str(out), report_set.fail) if out is not None else None
    closing: Future[None] | None = None
    try:
        closing = _build_tables(report_set, inputs, writer)
    finally:
        if writer is not None:  # also after a failure: nothing is left being written
            report_set.written = writer.join()
            report_set.timings["write parquet + csv"] = writer.busy_s
        if closing is not None:
            closing.result()
    if report_set.failures and not keep_going:
        raise ReportsIncomplete(report_set)
    return report_set


@collector_paused()
def publish_reports(inputs: ReportInputs, out: str, *, currency: str = "EUR",
                    options: ReportOptions | None = None, history: str | None = None,
                    generated_at: dt.datetime | None = None) -> ReportSet:
    """The whole report set below ``out``: every table (Parquet + CSV, written on the writer's
    thread while the next report is built and the page drawn), the day's history copy under
    ``history`` when given, ``index.html``, ``summary.md`` and ``manifest.json`` (see
    :func:`run_reports`). Returns the set; ``ReportsIncomplete`` when a part failed (every other
    part written)."""
    report_set = _new_set(currency, None, options)
    writer = TableWriter(out, report_set.fail)
    closing: Future[None] | None = None
    try:
        closing = _build_tables(report_set, inputs, writer, page=True)
        report_set.manifest = inputs.manifest()
        if history is not None:
            writer.add_history(report_set.tables, history, report_set.options.today)
    except BaseException:
        writer.join()  # nothing half-written is left behind a failure
        if closing is not None:
            closing.result()
        raise
    try:
        report_set.written = _timed(report_set.timings, "index.html + summary.md", lambda: write_site(
            report_set, out, generated_at=generated_at, writer=writer))
    finally:
        closing.result()  # the build's database is closed before this returns
    if report_set.failures:
        raise ReportsIncomplete(report_set)
    return report_set


def _new_set(currency: str, rule: RegressionRule | None, options: ReportOptions | None) -> ReportSet:
    if currency not in patterns.CURRENCIES:
        raise ReportError(f"--currency {currency!r} is not one of {', '.join(patterns.CURRENCIES)}")
    return ReportSet(tables={}, currency=currency, rule=rule or RegressionRule(), rows_scanned=0,
                     newest_date=None, options=options or ReportOptions())


def _build_tables(report_set: ReportSet, inputs: ReportInputs, writer: TableWriter | None, *,
                  page: bool = False) -> Future[None]:
    """Every table of the set into ``report_set`` (each handed to ``writer`` once built), in
    :data:`LANES`: the first on this thread and connection, the others each on a thread and a
    second connection of the same database (DuckDB runs a query without the GIL, and a small
    report's query uses about one core: two lanes of them take two thirds of the time of one).
    A lane of :data:`WITHOUT_LATEST` reports alone starts before the scan; the others
    start once ``latest`` is staged. Returns the closing of the build's database, begun on a
    lane's thread (freeing its tables took 0.09 s on the 10M-row bench): the caller waits for it
    once the page is drawn. With ``page``, a lane that has built its tables writes the page's chart
    rows drawn from them (``page_view.prepare_rows``) while the other lanes are still at work."""
    options, timings = report_set.options, report_set.timings
    con = connect()
    lanes = ThreadPoolExecutor(max_workers=max(1, len(LANES) - 1), thread_name_prefix="report-lane")
    running = []
    try:
        _side_tables(con, inputs)
        files = ResultFiles.of(inputs.lake, con, inputs.results)
        build = Build(con=con, inputs=inputs, files=files, currency=report_set.currency, rule=report_set.rule,
                      options=options, newest=max(files.by_date, default=None))
        builders = dict(BUILDERS)
        if options.with_projections:  # the optional ranking view; best_value itself stays measured-only
            builders[projections.BEST_VALUE_WITH_PROJECTIONS] = (
                lambda build: verdicts.annotate_best_value(
                    projections.best_value_with_projections(build.con, _ranking(options)),
                    options.practical_margin, stats.CONFIDENCE))

        def start(lane: tuple[str, ...]) -> None:
            cursor = second_connection(con)
            _side_tables(cursor, inputs)
            lane_build = dataclasses.replace(build, con=cursor, files=dataclasses.replace(files, con=cursor,
                                                                                         views={}))
            running.append(lanes.submit(_build_lane, report_set, lane_build, lane, builders, writer, page))

        early = [lane for lane in LANES[1:] if set(lane) <= WITHOUT_LATEST]
        for lane in early:
            start(lane)
        found = _timed(timings, "scan: latest results", lambda: _stage_latest(con, files, options, inputs))
        report_set.rows_scanned, report_set.newest_date = found.results, max(found.dates, default=None)
        report_set.files_read = found.files_read
        for lane in LANES[1:]:
            if lane not in early:
                start(lane)
        _build_lane(report_set, build, LANES[0], builders, writer, page)
        for lane_done in running:
            lane_done.result()  # a lane's own error (a builder's is recorded in the set) is raised here
    except BaseException:
        # every lane has ended (its failures recorded in the set) before the database closes
        for lane_done in running:
            lane_done.exception()
        lanes.shutdown(wait=True)
        con.close()
        raise
    # the database's memory is freed on a lane's thread while the caller draws the page
    closing = lanes.submit(con.close)
    lanes.shutdown(wait=False)
    order = [name for name in builders if name in report_set.tables]  # the set in BUILDERS order
    report_set.tables = {name: report_set.tables[name] for name in order}
    return closing


def _side_tables(con: duckdb.DuckDBPyConnection, inputs: ReportInputs) -> None:
    register_side_tables(con, inputs)
    con.register("carbon_intensity", uncertainty.carbon_intensity())


def _build_lane(report_set: ReportSet, build: Build, lane: tuple[str, ...],
                builders: dict[str, Callable[[Build], pa.Table]], writer: TableWriter | None,
                page: bool) -> None:
    """The builders of one lane, in order, on ``build``'s connection (each table to ``writer``);
    then, with ``page``, the page's rows drawn from the lane's tables."""
    for name in lane:
        if name not in builders:
            continue
        _build_one(report_set, build, name, builders[name])
        if writer is not None and name in report_set.tables:
            writer.add(name, report_set.tables[name])
    if page:
        for name in lane:
            page_view.prepare_rows(report_set, name)


def _stage_latest(con: duckdb.DuckDBPyConnection, files: ResultFiles, options: ReportOptions,
                  inputs: ReportInputs) -> newest.Newest:
    """The ``latest`` table (each machine's latest result of every configuration, annotated with
    its interval), from step 1's answer (returned: the lake's results, the dates read). The report
    cache of step 1 is read and written only for the table's current version. Each step is retried
    alone when the files' columns must be matched by name (``ResultFiles.run``)."""
    cache = newest.NewestCache(inputs.lake) if inputs.as_of is None else None
    found = files.run(lambda: newest.find_newest(con, files, cache))

    def second_step() -> None:
        files.register("results", dates=found.dates)
        # a table of the database, not of this connection: every lane of the build reads it
        con.execute(f"CREATE OR REPLACE TABLE latest AS {load_sql('latest_results')}")
        if options.nights > 1:
            files.register("pooled")
        uncertainty.annotate_latest(con, nights=options.nights)

    files.run(second_step)
    return found


def _build_one(report_set: ReportSet, build: Build, name: str, builder: Callable[[Build], pa.Table]) -> None:
    """Build one table into ``report_set``; a failure is recorded there and the next one goes on
    (one bad row or report never stops the others)."""
    started = time.perf_counter()
    try:
        report_set.tables[name] = with_docs(uncertainty.without_sample_key(builder(build)))
    except Exception as exc:  # noqa: BLE001 - recorded in summary.md / manifest.json, exit non-zero
        report_set.fail(name, exc)
    report_set.timings[name] = time.perf_counter() - started


def run_reports(
    lake: str,
    out: str,
    currency: str = "EUR",
    *,
    options: ReportOptions | None = None,
    history: str | None = None,
    report_date: dt.date | None = None,
    as_of: int | str | dt.datetime | None = None,
) -> ReportSet:
    """The ``report`` command: every report and the HTML page for the lake at ``lake`` (as it
    was at ``as_of``: a results table version or a timestamp), and ``manifest.json`` naming the
    table versions read (also at the end of ``summary.md``); with ``history`` (the reports
    root), the day's copy under ``report_history/`` too, dated ``report_date`` (default today,
    UTC; ages of published figures count from it). ``options`` default to the settings
    (``GPUCOMPARE_PUBLISHED_MAX_AGE_YEARS`` …). A failing report or page part never stops the
    others: everything else is written, the failures are listed in summary.md and manifest.json
    (``failures``), then ``ReportsIncomplete`` is raised."""
    options = options or options_from_settings()
    if report_date is not None:
        options = dataclasses.replace(options, report_date=report_date)
    return publish_reports(ReportInputs.from_lake(lake, as_of=as_of), out, currency=currency, options=options,
                           history=history)


def options_from_settings() -> ReportOptions:
    """The ranking options from the settings (environment, Airflow config, defaults)."""
    from gpucompare import settings

    return ReportOptions(
        published_max_age_years=settings.published_max_age_years(),
        rank_old_published=settings.rank_old_published(),
        rank_flagged=settings.rank_flagged(),
        with_projections=settings.best_value_with_projections(),
        practical_margin=settings.practical_margin(),
    )
