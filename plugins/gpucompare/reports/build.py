"""The report set: DuckDB over the lake's Parquet → report tables (Parquet and CSV) for BI tools.

Each report is one SQL file in ``sql/`` (DuckDB dialect), run in an in-memory DuckDB
connection. The lake's results files are read by DuckDB's own Parquet reader from the file
list (local disk, or any pyarrow filesystem such as S3 registered through fsspec's wrapper);
the small side tables (prices, exchange rates, published curves) are Arrow tables registered
with the connection. No DuckDB extension is loaded or downloaded.

How it stays fast on a big lake (10 million result rows in a few seconds on two cores):

* ``latest_dates.sql`` reads only the key columns of every result (DuckDB pushes the
  projection into its reader) and finds each configuration's newest date partition;
* ``latest_results.sql`` reads only those partitions and keeps each machine's latest result
  of every configuration: the small ``latest`` table every report but regressions reads;
* ``regressions.sql`` reads only the partitions of its look-back window: the file list is
  pruned by date before anything is opened, and the history is one window function and one
  hash aggregation (linear, no self-join);
* nothing goes through pandas.

Reports (columns documented in README, section "Reports", and in
``report_set.COLUMN_DOCS``, which also goes into each Parquet field's ``doc`` and the Athena
``COMMENT``s): ``cost_per_million``, ``scaling``, ``throughput`` (+ ``throughput_matrix``,
its pivot), ``best_value``, ``regressions``. Output layout under the chosen directory (local
path or s3://)::

    <report>.csv                     one per report, header row, UTF-8 (list columns ;-joined)
    <report>/<report>.parquet        one folder per report (an Athena/Glue table location)
    index.html, summary.md           the page (gpucompare.reports.page renders it from the tables)

and, when a history root is given (the DAG gives the reports root), one more copy a day::

    <history>/report_history/<report>/report_date=YYYY-MM-DD/<report>.parquet

Import direction: reports → html → report_set (the page never imports this module).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import io
import json
import os
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from bench_tasks.constants import IMAGENET_TRAIN_IMAGES
from gpucompare import resources
from gpucompare.lake import schema
from gpucompare.lake.tables import Lake, TableSnapshot, open_lake
from gpucompare.prices import tables as price_tables
from gpucompare.reports import page as html
from gpucompare.reports.campaign import build_campaign
from gpucompare.reports.report_set import (
    DERIVED,
    MATRIX_BATCHES,
    REPORTS,
    RegressionRule,
    ReportError,
    ReportOptions,
    ReportSet,
    column_doc,
    with_docs,
)

__all__ = [  # the data classes live in report_set (below the page); used from here too
    "DERIVED",
    "REPORTS",
    "RegressionRule",
    "ReportError",
    "ReportInputs",
    "ReportOptions",
    "ReportSet",
    "build_reports",
    "run_reports",
]

SQL_DIR = resources.sql_dir()
CURRENCIES: tuple[str, ...] = schema.CURRENCIES
#: Tables kept a copy of every day under report_history/ (BI charts them over time).
HISTORY_TABLES: tuple[str, ...] = (*REPORTS, *DERIVED)
T = TypeVar("T")


@dataclass
class ReportInputs:
    """What the reports read: the live results files of the lake's log and the small side tables
    (Arrow), all as of one moment (``as_of``), with the table versions they came from."""

    lake: Lake
    prices: pa.Table
    fx: pa.Table
    published_scaling: pa.Table
    #: the results table's live files at the chosen version (None: read the lake's current version)
    results: TableSnapshot | None = None
    #: table -> Delta version read (None: the table did not exist then)
    versions: dict[str, int | None] = field(default_factory=dict)
    as_of: str | None = None

    @classmethod
    def from_lake(cls, uri: str, *, as_of: int | str | dt.datetime | None = None) -> ReportInputs:
        """Open the lake at ``uri`` (local path or s3://bucket/prefix), as it was at ``as_of``: a
        version of the results table (int; the side tables then as they were at that commit's
        time) or a timestamp (every table as it was then). A URI with no lake raises NoLakeError."""
        lake = open_lake(uri).require()
        results = lake.snapshot("results", as_of)
        side_as_of: int | str | dt.datetime | None = as_of
        if isinstance(as_of, int) or (isinstance(as_of, str) and as_of.strip().isdigit()):
            side_as_of = results.timestamp  # the side tables as they were when that version was written
        snapshots = {kind: lake.snapshot(kind, side_as_of) for kind in ("prices", "fx", "published_scaling")}
        curves = (lake.published_scaling_table(as_of=side_as_of)
                  if snapshots["published_scaling"].files else None)
        if curves is None or curves.num_rows == 0:  # not imported into this lake: the shipped copy
            from gpucompare.prices import published

            curves = published.read_published_scaling(published.SHIPPED_SCALING)
        versions = {"results": results.version, **{k: v.version for k, v in snapshots.items()}}
        return cls(lake=lake, prices=price_tables.price_history(lake, as_of=side_as_of),
                   fx=price_tables.fx_history(lake, as_of=side_as_of),
                   published_scaling=curves, results=results, versions=versions,
                   as_of=None if as_of is None else str(as_of))

    def manifest(self) -> dict[str, object]:
        """What the report set was built from (manifest.json, summary.md)."""
        snap = self.results
        return {"lake": self.lake.uri, "as_of": self.as_of, "table_versions": self.versions,
                "results_files": None if snap is None else len(snap.files),
                "results_version_time": None if snap is None or snap.timestamp is None
                else snap.timestamp.isoformat()}


def load_sql(name: str) -> str:
    """The text of ``sql/<name>.sql``."""
    path = SQL_DIR / f"{name}.sql"
    if not path.is_file():
        raise ReportError(f"no SQL for report {name!r} at {path}")
    return path.read_text(encoding="utf-8")


def _timed(timings: dict[str, float], name: str, action: Callable[[], T]) -> T:
    """``action()``, its wall-clock time recorded under ``name``."""
    started = time.perf_counter()
    value = action()
    timings[name] = time.perf_counter() - started
    return value


def _connect() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(":memory:")
    # No extension may be fetched at run time (offline CI, no httpfs): fail instead of downloading.
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    # timestamps leave in UTC whatever the machine's zone (the lake stores UTC)
    con.execute("SET TimeZone = 'UTC'")
    # the first pass reads every footer; the second pass and the regressions reuse them
    con.execute("SET parquet_metadata_cache = true")
    return con


def build_reports(
    inputs: ReportInputs,
    out: str | Path | None = None,
    *,
    currency: str = "EUR",
    rule: RegressionRule | None = None,
    options: ReportOptions | None = None,
) -> ReportSet:
    """Run every report; write each as Parquet and CSV under ``out`` when given."""
    if currency not in CURRENCIES:
        raise ReportError(f"--currency {currency!r} is not one of {', '.join(CURRENCIES)}")
    rule = rule or RegressionRule()
    rule.validate()
    options = options or ReportOptions()
    options.validate()
    timings: dict[str, float] = {}
    con = _connect()
    try:
        con.register("prices", inputs.prices)
        con.register("fx", inputs.fx)
        con.register("published_scaling", inputs.published_scaling)
        files = ResultFiles.of(inputs.lake, con, inputs.results)

        def stage_latest() -> tuple[int, list[dt.date]]:
            files.register("results")
            newest = con.execute(load_sql("latest_dates")).fetchall()
            if any(row[2] for row in newest):  # results without a config_id: group by the full key
                newest = con.execute(load_sql("latest_dates_by_key")).fetchall()
            files.register("results", dates={row[0] for row in newest})
            con.execute(f"CREATE TEMP TABLE latest AS {load_sql('latest_results')}")
            return sum(int(row[1]) for row in newest), [row[0] for row in newest]

        rows_scanned, newest_dates = _timed(timings, "scan: latest results", lambda: files.run(stage_latest))
        newest = max(newest_dates, default=None)

        tables: dict[str, pa.Table] = {}
        params = {"currency": currency, "epoch_images": IMAGENET_TRAIN_IMAGES}

        def run(name: str, parameters: dict[str, object] | None = None) -> pa.Table:
            table = con.sql(load_sql(name), params=parameters or None).to_arrow_table()
            con.register(name, table)  # later reports may read it (best_value reads cost_per_million)
            return table

        tables["cost_per_million"] = _timed(
            timings, "cost_per_million", lambda: run("cost_per_million", params)
        )
        tables["scaling"] = _timed(timings, "scaling", lambda: run("scaling"))
        tables["throughput"] = _timed(timings, "throughput", lambda: run("throughput"))
        tables["throughput_matrix"] = _timed(timings, "throughput_matrix", lambda: _throughput_matrix(con))
        ranking = {
            "published_cutoff": options.published_cutoff,
            "rank_old_published": options.rank_old_published,
            "rank_flagged": options.rank_flagged,
        }
        tables["best_value"] = _timed(timings, "best_value", lambda: run("best_value", ranking))

        def regressions() -> pa.Table:
            cutoff = newest - dt.timedelta(days=rule.lookback_days) if newest else None
            files.register("recent", since=cutoff)
            return run(
                "regressions",
                {
                    "history_runs": rule.history_runs,
                    "min_history": rule.min_history,
                    "mad_factor": rule.mad_factor,
                    "min_drop": rule.min_drop,
                },
            )

        tables["regressions"] = _timed(timings, "regressions (scan + query)", lambda: files.run(regressions))
        tables["campaign"] = _timed(timings, "campaign", lambda: build_campaign(con, inputs, files, currency))
    finally:
        con.close()

    tables = {name: with_docs(table) for name, table in tables.items()}
    report_set = ReportSet(
        tables=tables,
        currency=currency,
        rule=rule,
        rows_scanned=int(rows_scanned),
        newest_date=newest,
        options=options,
    )
    report_set.timings = timings
    if out is not None:
        report_set.written = _timed(timings, "write parquet + csv", lambda: write_tables(tables, str(out)))
    return report_set


@dataclass
class ResultFiles:
    """The results table's live files (from its Delta log), by date partition, for DuckDB's reader.

    The file list and each file's partition values come from the table's log, never from a
    listing of the folder: a stray, foreign or half-written Parquet file there is never read.
    DuckDB's Parquet reader is several times faster than an Arrow dataset scan handed to
    DuckDB (it keeps dictionary-encoded strings as they are), so the files are given to
    ``read_parquet`` directly. delta-rs writes a partitioned table's files under Hive
    directories (``mode=…/date=…/``); where every file's directory agrees with the log's
    partition values, DuckDB takes ``mode`` and ``date`` from the path (one ``read_parquet``);
    otherwise each partition's files are read with its values from the log as constants.
    Partition pruning happens here, on the file list, before anything is opened. A local lake
    is read from disk; any other pyarrow filesystem (S3) is registered with DuckDB through
    fsspec's wrapper of it, so the bytes come through pyarrow.fs and no extension is needed.
    """

    con: duckdb.DuckDBPyConnection
    #: date -> [(path for DuckDB, mode)]
    by_date: dict[dt.date, list[tuple[str, str]]]
    #: columns of RESULTS_SCHEMA the table does not have (yet): read as typed NULLs
    missing: tuple[str, ...] = ()
    #: whether every file's Hive directory matches its partition values in the log
    hive_paths: bool = True
    #: Files are read against the oldest file's columns (every file of one code version has
    #: the same schema); True after a file turned out to differ in a column that is read,
    #: to match columns by name in every file.
    union_by_name: bool = False
    views: dict[str, tuple[set[dt.date] | None, dt.date | None]] = field(default_factory=dict)

    @classmethod
    def of(cls, lake: Lake, con: duckdb.DuckDBPyConnection,
           snapshot: TableSnapshot | None = None) -> ResultFiles:
        if snapshot is None:
            snapshot = lake.snapshot("results") if lake.has_table("results") else None
        if lake.is_local:
            prefix = ""
        else:
            from fsspec.implementations.arrow import ArrowFSWrapper

            wrapper = ArrowFSWrapper(lake.fs)
            con.register_filesystem(wrapper)
            protocol = wrapper.protocol if isinstance(wrapper.protocol, str) else wrapper.protocol[0]
            prefix = f"{protocol}://"
        by_date: dict[dt.date, list[tuple[str, str]]] = {}
        hive_paths = True
        missing: tuple[str, ...] = ()
        if snapshot is not None and snapshot.version is not None:
            present = set(snapshot.arrow_schema.names) if snapshot.arrow_schema is not None else set()
            missing = tuple(n for n in schema.RESULTS_SCHEMA.names if n not in present)
            for live in snapshot.files:
                date, mode = live.partition.get("date"), live.partition.get("mode")
                if date is None or mode is None:  # not a partitioned results file: not ours
                    continue
                expected = f"mode={mode}/date={date.isoformat()}/"
                hive_paths = (hive_paths and live.relative.startswith(expected)
                              and live.relative.count("=") == 2)
                by_date.setdefault(date, []).append((prefix + live.path, mode))
        return cls(con=con, by_date=by_date, missing=missing, hive_paths=hive_paths)

    def register(self, view: str, *, dates: set[dt.date] | None = None, since: dt.date | None = None) -> int:
        """(Re)define ``view`` over the files of ``dates`` (or of every date >= ``since``, or all),
        oldest first."""
        self.views[view] = (dates, since)
        chosen = [
            (path, mode, date)
            for date, paths in sorted(self.by_date.items())
            if (dates is None or date in dates) and (since is None or date >= since)
            for path, mode in paths
        ]
        if not chosen:
            self.con.register("empty_results", schema.empty_results())
            source = "SELECT * FROM empty_results"
        else:
            # paths come from the table's log; quotes are doubled, so each literal is closed
            def listing(paths: list[str]) -> str:
                return ", ".join("'" + p.replace("'", "''") + "'" for p in paths)

            options = f"union_by_name = {'true' if self.union_by_name else 'false'}"
            if self.hive_paths:
                source = (f"SELECT * FROM read_parquet([{listing([c[0] for c in chosen])}], "  # noqa: S608
                          "hive_partitioning = true, hive_types = {'mode': 'VARCHAR', 'date': 'DATE'}, "
                          f"{options})")
            else:
                groups: dict[tuple[str, dt.date], list[str]] = {}
                for path, mode, date in chosen:
                    groups.setdefault((mode, date), []).append(path)
                source = " UNION ALL BY NAME ".join(
                    f"SELECT *, '{mode}' AS mode, DATE '{date.isoformat()}' AS date "  # noqa: S608 (validated values)
                    f"FROM read_parquet([{listing(paths)}], hive_partitioning = false, {options})"
                    for (mode, date), paths in groups.items() if re.fullmatch(r"[a-z_]+", mode))
            columns = ", ".join(
                f"CAST(NULL AS {_duck_type(f.type)}) AS \"{f.name}\"" if f.name in self.missing
                else f'"{f.name}"'
                for f in schema.RESULTS_SCHEMA)
            source = f"SELECT {columns} FROM ({source})"  # noqa: S608 (column names from the schema)
        self.con.execute(f"CREATE OR REPLACE TEMP VIEW {view} AS {source}")  # noqa: S608
        return len(chosen)

    def run(self, action: Callable[[], T]) -> T:
        """``action()``; on a schema mismatch between files, again with columns matched by name
        (reading every file's footer first: slower, so only when needed)."""
        try:
            return action()
        except (duckdb.BinderException, duckdb.InvalidInputException) as exc:
            # the oldest file lacks a column that is read, or a later file lacks one of its columns
            if self.union_by_name or not ("schema mismatch" in str(exc) or "not found" in str(exc)):
                raise
        self.union_by_name = True
        for view, (dates, since) in list(self.views.items()):
            self.register(view, dates=dates, since=since)
        return action()


def _duck_type(arrow_type: pa.DataType) -> str:
    """The DuckDB type of a results column (for a column the table does not have yet)."""
    if pa.types.is_list(arrow_type):
        return f"{_duck_type(arrow_type.value_type)}[]"
    return {pa.string(): "VARCHAR", pa.int64(): "BIGINT", pa.float64(): "DOUBLE", pa.date32(): "DATE",
            schema.TIMESTAMP: "TIMESTAMPTZ"}.get(arrow_type, "VARCHAR")


def _throughput_matrix(con: duckdb.DuckDBPyConnection) -> pa.Table:
    """throughput pivoted like the published tables: a row per machine, mode, dtype, device
    count and network; per batch size two columns, ``batch_<n>_images_per_sec`` (DOUBLE, empty
    when the cell did not run) and ``batch_<n>_status`` (VARCHAR: ok, oom, ...; empty when the
    cell was not measured). Every batch size of ``MATRIX_BATCHES`` always has its pair, so
    the column types and names are the same night after night; others are appended."""
    found = {
        int(row[0])
        for row in con.execute(
            "SELECT DISTINCT batch_size FROM throughput WHERE batch_size IS NOT NULL"
        ).fetchall()
    }
    batches = sorted(set(MATRIX_BATCHES) | found)
    keys = (
        "provider, instance_type, region, market, gpu_model, device_kind, gpu_count, num_nodes, mode, "
        "dtype, network"
    )
    # batch sizes are integers (validated ones from the lake, or the constants), so safe to inline
    cells = ", ".join(
        f"max(images_per_sec) FILTER (WHERE batch_size = {b}) AS batch_{b}_images_per_sec, "
        f"any_value(status) FILTER (WHERE batch_size = {b}) AS batch_{b}_status"
        for b in batches
    )
    return con.sql(
        f"SELECT {keys}, any_value(origin) AS origin, max(result_date) AS result_date, {cells} "  # noqa: S608
        "FROM throughput GROUP BY ALL "
        "ORDER BY provider, instance_type, region, market, mode, dtype, gpu_count, num_nodes, network"
    ).to_arrow_table()


def _output_location(out: str) -> tuple[pafs.FileSystem, str]:
    location = open_lake(out)
    return location.fs, location.root


def write_bytes(out: str, name: str, data: bytes) -> str:
    """Write one file below ``out`` (local or s3://), atomically; returns its path."""
    fs, root = _output_location(out)
    return _put(fs, root, name, data)


def _put(fs: pafs.FileSystem, root: str, name: str, data: bytes) -> str:
    path = f"{root.rstrip('/')}/{name}"
    parent = path.rsplit("/", 1)[0]
    if isinstance(fs, pafs.LocalFileSystem):
        fs.create_dir(parent, recursive=True)
        # a temporary name of its own per writer: two builds of one day (a rerun while the
        # scheduled one runs) never write into each other's file; the dot hides it from readers
        temp = f"{parent}/.{path.rsplit('/', 1)[1]}.{os.getpid()}.{uuid.uuid4().hex}.tmp"
        with fs.open_output_stream(temp) as stream:
            stream.write(data)
        fs.move(temp, path)  # a rename: a reader sees the old report or the new one
    else:
        with fs.open_output_stream(path) as stream:
            stream.write(data)
    return path


def csv_ready(table: pa.Table) -> pa.Table:
    """The table as CSV can hold it: list columns (``flags``) ;-joined, everything else as is."""
    for index, column in enumerate(table.schema):
        if pa.types.is_list(column.type) or pa.types.is_large_list(column.type):
            joined = pc.binary_join(table.column(index), ";")
            as_text = pa.field(column.name, pa.string(), metadata=column.metadata)
            table = table.set_column(index, as_text, joined)
    return table


def _parquet_bytes(table: pa.Table) -> bytes:
    data = io.BytesIO()
    pq.write_table(table, data, compression="zstd")
    return data.getvalue()


def write_tables(tables: dict[str, pa.Table], out: str) -> list[str]:
    """Write every table as ``<name>.csv`` and ``<name>/<name>.parquet`` below ``out``."""
    fs, root = _output_location(out)
    written = []
    for name, table in tables.items():
        written.append(_put(fs, root, f"{name}/{name}.parquet", _parquet_bytes(table)))
        text = io.BytesIO()
        pacsv.write_csv(csv_ready(table), text)
        written.append(_put(fs, root, f"{name}.csv", text.getvalue()))
    return written


def write_history(tables: dict[str, pa.Table], history: str, report_date: dt.date) -> list[str]:
    """Keep the day's copy of each report in ``<history>/report_history/<report>/
    report_date=YYYY-MM-DD/<report>.parquet`` (Hive style: one table over time for BI).
    Building the same day again replaces that day's file."""
    fs, root = _output_location(history)
    return [
        _put(fs, root, f"report_history/{name}/report_date={report_date.isoformat()}/{name}.parquet",
             _parquet_bytes(tables[name]))
        for name in HISTORY_TABLES
    ]


def write_site(report_set: ReportSet, out: str) -> list[str]:
    """Write index.html, summary.md and (when the set knows what it was built from)
    manifest.json below ``out`` (local path or s3://); returns their paths."""
    written = [
        write_bytes(out, "index.html", html.render_page(report_set).encode("utf-8")),
        write_bytes(out, "summary.md", html.render_summary(report_set).encode("utf-8")),
    ]
    if report_set.manifest:
        manifest = json.dumps(report_set.manifest, indent=2, sort_keys=True) + "\n"
        written.append(write_bytes(out, "manifest.json", manifest.encode("utf-8")))
    return written


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
    (``GPUCOMPARE_PUBLISHED_MAX_AGE_YEARS`` …)."""
    options = options or options_from_settings()
    if report_date is not None:
        options = dataclasses.replace(options, report_date=report_date)
    inputs = ReportInputs.from_lake(lake, as_of=as_of)
    report_set = build_reports(inputs, out, currency=currency, options=options)
    report_set.manifest = inputs.manifest()
    started = time.perf_counter()
    report_set.written += write_site(report_set, out)
    report_set.timings["index.html + summary.md"] = time.perf_counter() - started
    if history is not None:
        report_set.written += _timed(
            report_set.timings,
            "report_history",
            lambda: write_history(report_set.tables, history, options.today),
        )
    return report_set


def options_from_settings() -> ReportOptions:
    """The ranking options from the settings (environment, Airflow config, defaults)."""
    from gpucompare import settings

    def flag(name: str) -> bool:
        value = settings.setting(name).strip().lower()
        if value not in ("true", "false", "1", "0", "yes", "no"):
            raise ReportError(f"GPUCOMPARE_{name.upper()} {value!r} is not one of true, false")
        return value in ("true", "1", "yes")

    age = settings.setting("published_max_age_years").strip()
    if not age.isdigit():
        raise ReportError(f"GPUCOMPARE_PUBLISHED_MAX_AGE_YEARS {age!r} must be a whole number of years >= 0")
    return ReportOptions(
        published_max_age_years=int(age),
        rank_old_published=flag("rank_old_published"),
        rank_flagged=flag("rank_flagged"),
    )


def results_table(inputs: ReportInputs) -> pa.Table:
    """Every row of the lake's results as the reports' SQL sees them (the ``results`` view)."""
    con = _connect()
    try:
        files = ResultFiles.of(inputs.lake, con)

        def read() -> pa.Table:
            files.register("results")
            return con.sql("SELECT * FROM results").to_arrow_table()

        return files.run(read)
    finally:
        con.close()


# ---- Athena / Glue DDL -----------------------------------------------------------------------
ATHENA_DIR = SQL_DIR / "athena"
#: Placeholder locations of the shipped DDL (``athena-ddl --lake … --reports …`` fills in yours).
ATHENA_LAKE = "s3://your-bucket/lake"
ATHENA_REPORTS = "s3://your-bucket/reports/latest"
ATHENA_HISTORY = "s3://your-bucket/reports"
#: Every report has a table; throughput_matrix is declared with its fixed batch columns
#: (MATRIX_BATCHES); a batch size outside them is an extra Parquet column Athena ignores.
ATHENA_REPORTS_TABLES: tuple[str, ...] = HISTORY_TABLES


def _athena_type(arrow_type: pa.DataType) -> str:
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return "string"
    if pa.types.is_int64(arrow_type):
        return "bigint"
    if pa.types.is_int32(arrow_type):
        return "int"
    if pa.types.is_floating(arrow_type):
        return "double"
    if pa.types.is_boolean(arrow_type):
        return "boolean"
    if pa.types.is_date32(arrow_type):
        return "date"
    if pa.types.is_timestamp(arrow_type):
        return "timestamp"
    if pa.types.is_list(arrow_type):
        return f"array<{_athena_type(arrow_type.value_type)}>"
    raise ReportError(f"no Athena type for Arrow type {arrow_type}")


def _athena_columns(table_schema: pa.Schema, *, comments: bool = False) -> str:
    """Column lines of a CREATE TABLE; with ``comments``, each report column's doc (units) as
    its COMMENT (the docs hold no quote, checked here so the literal always closes)."""
    lines = []
    for f in table_schema:
        line = f"  `{f.name}` {_athena_type(f.type)}"
        if comments:
            doc = column_doc(f.name)
            if doc is None or "'" in doc or "\\" in doc:
                raise ReportError(f"column {f.name!r} has no doc fit for an Athena COMMENT: {doc!r}")
            line += f" COMMENT '{doc}'"
        lines.append(line)
    return ",\n".join(lines)


def report_schemas() -> dict[str, pa.Schema]:
    """The Arrow schema of every report, as DuckDB gives it (from a run over an empty lake)."""
    import tempfile

    with tempfile.TemporaryDirectory() as empty:
        empty_inputs = ReportInputs(
            lake=open_lake(empty),
            prices=schema.PRICES_SCHEMA.empty_table(),
            fx=schema.FX_SCHEMA.empty_table(),
            published_scaling=schema.PUBLISHED_SCALING_SCHEMA.empty_table(),
        )
        built = build_reports(empty_inputs)
    return {name: built.tables[name].schema for name in ATHENA_REPORTS_TABLES}


def athena_ddl(
    database: str = "gpucompare",
    lake: str = ATHENA_LAKE,
    reports_uri: str = ATHENA_REPORTS,
    history: str = ATHENA_HISTORY,
) -> dict[str, str]:
    """CREATE EXTERNAL TABLE statements: the lake's Delta tables (``table_type = DELTA``), each
    report's Parquet folder, and each report's history (projection on report_date). Keys are
    file names under sql/athena/."""
    for name, value in (("database", database),):
        if not re.fullmatch(r"[a-z_][a-z0-9_]{0,63}", value):
            raise ReportError(f"--{name} {value!r}: use lower-case letters, digits and _")
    for name, value in (("lake", lake), ("reports", reports_uri), ("history", history)):
        if not re.fullmatch(r"s3://[a-z0-9][a-z0-9.-]{1,62}(/[A-Za-z0-9._=-]+)*/?", value):
            raise ReportError(f"--{name} {value!r} is not an s3://bucket/prefix URI")
    lake, reports_uri, history = lake.rstrip("/"), reports_uri.rstrip("/"), history.rstrip("/")
    lake_tables = "\n".join(
        f"CREATE EXTERNAL TABLE IF NOT EXISTS {database}.{kind}\n"
        f"LOCATION '{lake}/{kind}/'\n"
        "TBLPROPERTIES ('table_type' = 'DELTA');\n"
        for kind in ("results", "prices", "fx", "published_scaling"))
    results = f"""-- Athena / Glue: the lake's Delta tables, read where they live (generated by
-- `python -m gpucompare athena-ddl`; do not edit by hand). Athena reads Delta Lake tables
-- through Glue: no column list, no partitions to crawl; columns, partitions (results: mode,
-- date) and the live files come from each table's transaction log (_delta_log/), so a file
-- the log does not list is never read. Athena allows only LOCATION and table_type here.
CREATE DATABASE IF NOT EXISTS {database};

{lake_tables}"""
    statements = [
        f"""-- Athena / Glue: the report tables (generated by `python -m gpucompare athena-ddl`;
-- do not edit by hand). Each report's Parquet file lives in a folder of its own, so the
-- CSV copies beside them are never read as table data. Columns: README, section "Reports".
CREATE DATABASE IF NOT EXISTS {database};
"""
    ]
    history_statements = [
        f"""-- Athena / Glue: every report over time (generated by `python -m gpucompare athena-ddl`;
-- do not edit by hand). Each day's build leaves a copy under
-- <history>/report_history/<report>/report_date=YYYY-MM-DD/; partition projection derives
-- the partitions, so BI can chart e.g. cost_per_million by report_date without a crawler.
CREATE DATABASE IF NOT EXISTS {database};
"""
    ]
    for name, table_schema in report_schemas().items():
        statements.append(f"""CREATE EXTERNAL TABLE IF NOT EXISTS {database}.{name} (
{_athena_columns(table_schema, comments=True)}
)
STORED AS PARQUET
LOCATION '{reports_uri}/{name}/'
TBLPROPERTIES ('parquet.compression' = 'ZSTD');
""")
        history_statements.append(f"""CREATE EXTERNAL TABLE IF NOT EXISTS {database}.{name}_history (
{_athena_columns(table_schema, comments=True)}
)
PARTITIONED BY (`report_date` date COMMENT '{column_doc("report_date")}')
STORED AS PARQUET
LOCATION '{history}/report_history/{name}/'
TBLPROPERTIES (
  'parquet.compression' = 'ZSTD',
  'projection.enabled' = 'true',
  'projection.report_date.type' = 'date',
  'projection.report_date.format' = 'yyyy-MM-dd',
  'projection.report_date.range' = '2026-01-01,NOW',
  'projection.report_date.interval' = '1',
  'projection.report_date.interval.unit' = 'DAYS',
  'storage.location.template' = '{history}/report_history/{name}/report_date=${{report_date}}/'
);
""")
    return {
        "results.sql": results,
        "reports.sql": "\n".join(statements),
        "report_history.sql": "\n".join(history_statements),
    }


# ---- command line (python -m gpucompare report) -------------------------------------------
def add_cli(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``report`` subcommand to ``python -m gpucompare`` (called by gpucompare.cli)."""
    parser = subparsers.add_parser(
        "report",
        help="build every report (Parquet + CSV), index.html and summary.md from the lake",
        description="Build the report set from the lake: " + ", ".join(REPORTS) + ", index.html, summary.md.",
    )
    parser.add_argument(
        "--lake", default="./lake", help="lake URI: a local path or s3://bucket/prefix (default ./lake)"
    )
    parser.add_argument("--out", required=True, help="output directory (local path or s3://bucket/prefix)")
    parser.add_argument(
        "--currency",
        default="EUR",
        type=str.upper,
        choices=CURRENCIES,
        help="currency of every money column (default EUR)",
    )
    ranking = parser.add_argument_group(
        "ranking", "what best_value ranks (every row is shown either way); defaults from the settings"
    )
    ranking.add_argument(
        "--published-max-age-years",
        type=_age_years,
        default=None,
        metavar="N",
        help="published figures older than N years are not ranked (default "
        "GPUCOMPARE_PUBLISHED_MAX_AGE_YEARS, 3)",
    )
    ranking.add_argument(
        "--rank-old-published", action="store_true", default=None, help="rank old published figures too"
    )
    ranking.add_argument(
        "--rank-flagged", action="store_true", default=None, help="rank figures carrying flags too"
    )
    parser.add_argument(
        "--history",
        default=None,
        help="also keep the day's copy of each report under HISTORY/report_history/ (the reports root)",
    )
    parser.add_argument(
        "--as-of", default=None, metavar="VERSION|TIMESTAMP",
        help="rebuild the reports as they were: a results table version (0, 1, …) or an ISO timestamp",
    )
    parser.set_defaults(func=_run_report_command)

    ddl = subparsers.add_parser(
        "athena-ddl",
        help="write the Athena/Glue DDL of the results lake and the reports for your S3 paths",
        description="CREATE EXTERNAL TABLE statements for the lake's Delta tables and the reports.",
    )
    ddl.add_argument("--database", default="gpucompare", help="Glue database (default gpucompare)")
    ddl.add_argument("--lake", default=ATHENA_LAKE, help=f"s3:// URI of the lake (default {ATHENA_LAKE})")
    ddl.add_argument(
        "--reports",
        default=ATHENA_REPORTS,
        help=f"s3:// URI of the report folder BI reads (default {ATHENA_REPORTS})",
    )
    ddl.add_argument(
        "--history",
        default=ATHENA_HISTORY,
        help=f"s3:// URI of the reports root holding report_history/ (default {ATHENA_HISTORY})",
    )
    ddl.add_argument(
        "--out",
        type=Path,
        default=None,
        help="write results.sql, reports.sql and report_history.sql here (default: print them)",
    )
    ddl.set_defaults(func=_run_athena_command)


def _age_years(text: str) -> int:
    if not text.isdigit() or int(text) > 100:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of years between 0 and 100")
    return int(text)


def describe_provenance(report_set: ReportSet) -> str:
    """Where each section came from: measured and published rows and their newest dates."""
    lines = ["where each section came from (rows; newest result date):"]
    for name, per_origin in report_set.provenance().items():
        parts = []
        for origin, (count, newest) in per_origin.items():
            parts.append(f"{origin} {count}" + (f" (newest {newest})" if newest else ""))
        lines.append(f"  {name:<18} " + " · ".join(parts))
    options = report_set.options
    ranked = []
    if not options.rank_old_published:
        ranked.append(f"published figures before {options.published_cutoff} not ranked")
    if not options.rank_flagged:
        ranked.append("flagged figures not ranked")
    lines.append("  best_value ranking: " + ("; ".join(ranked) or "every priced figure ranked"))
    return "\n".join(lines)


def _run_report_command(args: argparse.Namespace) -> int:
    from gpucompare.errors import UsageError
    from gpucompare.lake.tables import LakeError

    try:
        defaults = options_from_settings()
        options = ReportOptions(
            published_max_age_years=(
                defaults.published_max_age_years
                if args.published_max_age_years is None
                else args.published_max_age_years
            ),
            rank_old_published=args.rank_old_published or defaults.rank_old_published,
            rank_flagged=args.rank_flagged or defaults.rank_flagged,
        )
        report_set = run_reports(
            args.lake, args.out, currency=args.currency, options=options, history=args.history,
            as_of=args.as_of,
        )
    except (ReportError, LakeError) as exc:
        raise UsageError(str(exc)) from None
    counts = ", ".join(f"{name} {table.num_rows}" for name, table in report_set.tables.items())
    print(f"reports of {report_set.rows_scanned:,} results in {args.out} ({report_set.currency}): {counts}")
    print(describe_provenance(report_set))
    missing = report_set.missing_prices.num_rows
    if missing:
        print(f"  {missing} result(s) without a price: see cost_per_million.csv (price_source missing)")
    flagged = sum(1 for value in report_set.tables["regressions"]["regression"].to_pylist() if value)
    print(f"  {flagged} regression(s) flagged; open {args.out.rstrip('/')}/index.html")
    return 0


def _run_athena_command(args: argparse.Namespace) -> int:
    from gpucompare.errors import UsageError

    try:
        files = athena_ddl(args.database, args.lake, args.reports, args.history)
    except ReportError as exc:
        raise UsageError(str(exc)) from None
    for name, text in files.items():
        if args.out is None:
            print(text)
        else:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / name).write_text(text, encoding="utf-8")
            print(f"wrote {args.out / name}")
    return 0
