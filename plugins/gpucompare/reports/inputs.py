"""What the reports read: the lake's tables as of one moment, and DuckDB's view of the results.

:class:`ReportInputs` holds the results table's live files (from its Delta log) and the small
side tables (prices, exchange rates, published curves) as Arrow tables, all as of one version
or timestamp. :class:`ResultFiles` hands the results files to DuckDB's own Parquet reader
(local disk, or any pyarrow filesystem such as S3 registered through fsspec's wrapper),
pruned by date partition before anything is opened. :func:`connect` is the one way a DuckDB
connection for the reports is made (no extension is ever downloaded; timestamps in UTC).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import duckdb
import pyarrow as pa

from bench_tasks.constants import MODES
from gpucompare import resources
from gpucompare.config import patterns
from gpucompare.config.models.prices import DECLARED
from gpucompare.lake import schema, series
from gpucompare.lake.reading import TableSnapshot
from gpucompare.lake.tables import Lake, open_lake
from gpucompare.prices import tables as price_tables
from gpucompare.prices.declared import NOTE_PREFIX
from gpucompare.reports.report_set import ReportError

T = TypeVar("T")
#: the reports' SQL, one file per report (plus the views they share), shipped in the package
SQL_DIR = resources.sql_dir()


def connect() -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection set up for the reports."""
    con = duckdb.connect(":memory:")
    _settings(con)
    _price_source_macros(con)
    return con


def second_connection(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """Another connection to ``con``'s database, set up alike, for a report built on another
    thread (a connection is used by one thread at a time). It shares the database's macros and
    tables, not ``con``'s temporary views and registered Arrow tables."""
    cursor = con.cursor()
    _settings(cursor)
    return cursor


def _settings(con: duckdb.DuckDBPyConnection) -> None:
    # No extension may be fetched at run time (offline CI, no httpfs): fail instead of downloading.
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    # timestamps leave in UTC whatever the machine's zone (the lake stores UTC); a session setting
    con.execute("SET TimeZone = 'UTC'")
    # Parquet footers are not cached (DuckDB's default, stated): the regressions read their files
    # beside the first pass, not after it, and the second pass opens only the newest partitions, so
    # a cache of the first pass's 1,672 footers (10M-row bench) cost more than it saved: 0.09 CPU-s
    # to fill and free against none re-read
    con.execute("SET parquet_metadata_cache = false")


def _sql_text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _price_source_macros(con: duckdb.DuckDBPyConnection) -> None:
    """The one rule every report applies to a price row's ``source`` (prices.declared): a declared
    price (``declared: <label> (<basis>)``) shows ``price_source`` ``declared`` and its text in
    ``price_note``; any other source shows as it is, with no note. ``shown_price_source(source)``
    and ``declared_price_note(source)`` are the SQL of cost_per_million, campaign and projections."""
    prefix, declared = _sql_text(NOTE_PREFIX), _sql_text(DECLARED)
    con.execute(f"CREATE MACRO shown_price_source(source) AS "
                f"CASE WHEN starts_with(source, {prefix}) THEN {declared} ELSE source END")
    con.execute(f"CREATE MACRO declared_price_note(source) AS "
                f"CASE WHEN starts_with(source, {prefix}) THEN source END")


#: The column lists a SQL file names instead of writing them out (``{{machine_key}}``): one
#: definition each, in Python, so the SQL and the code that reads its rows cannot drift.
SQL_FRAGMENTS: dict[str, tuple[str, ...]] = {"machine_key": schema.MACHINE_KEY}


def load_sql(name: str) -> str:
    """The text of ``sql/<name>.sql``, its ``{{fragment}}`` / ``{{fragment alias.}}`` names
    written out from :data:`SQL_FRAGMENTS` (``{{machine_key p.}}`` → ``p.provider, p.instance_type,
    …``)."""
    path = SQL_DIR / f"{name}.sql"
    if not path.is_file():
        raise ReportError(f"no SQL for report {name!r} at {path}")
    return fill_fragments(path.read_text(encoding="utf-8"), f"{name}.sql")


def fill_fragments(text: str, where: str) -> str:
    """``text`` with every ``{{fragment}}`` written out; an unknown name is an error naming it."""
    def column_list(match: re.Match[str]) -> str:
        fragment, alias = match.group(1), match.group(2)
        if fragment not in SQL_FRAGMENTS:
            raise ReportError(f"{where}: unknown SQL fragment {{{{{fragment}}}}}; known: "
                              f"{', '.join(sorted(SQL_FRAGMENTS))}")
        return ", ".join(f"{alias}.{c}" if alias else c for c in SQL_FRAGMENTS[fragment])

    filled = patterns.SQL_FRAGMENT.sub(column_list, text)
    if "{{" in filled:
        raise ReportError(f"{where}: a '{{{{' that is not a fragment ({patterns.SQL_FRAGMENT.pattern})")
    return filled


def register_side_tables(con: duckdb.DuckDBPyConnection, inputs: ReportInputs) -> None:
    """What every report may read besides the results: ``prices``, ``fx``, ``published_scaling``
    and the view ``fx_both_ways`` (sql/fx_both_ways.sql: each rate in both directions)."""
    con.register("prices", inputs.prices)
    con.register("fx", inputs.fx)
    con.register("published_scaling", inputs.published_scaling)
    con.execute(f"CREATE OR REPLACE TEMP VIEW fx_both_ways AS {load_sql('fx_both_ways')}")


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


@dataclass(frozen=True)
class ViewSpec:
    """Which rows a view of :class:`ResultFiles` reads (see :meth:`ResultFiles.register`)."""

    dates: set[dt.date] | None = None
    since: dt.date | None = None
    only: frozenset[str] | None = None
    unkeyed: bool = False


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
    #: path for DuckDB -> the path below the table folder, as the log holds it (what names a file
    #: whatever the lake's location: reports.newest keys its cache on it)
    relative: dict[str, str] = field(default_factory=dict)
    #: the table version the files are of (None: no table)
    version: int | None = None
    #: the results in the files, from the log's per-file counts (None: some file has none)
    rows: int | None = 0
    views: dict[str, ViewSpec] = field(default_factory=dict)

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
        relative: dict[str, str] = {}
        rows: int | None = 0
        hive_paths = True
        missing: tuple[str, ...] = ()
        if snapshot is not None and snapshot.version is not None:
            present = set(snapshot.arrow_schema.names) if snapshot.arrow_schema is not None else set()
            missing = tuple(n for n in schema.RESULTS_SCHEMA.names if n not in present)
            for live in snapshot.files:
                date, mode = live.partition.get("date"), live.partition.get("mode")
                _check_partition(live.relative, mode, date)
                expected = f"mode={mode}/date={date.isoformat()}/"
                hive_paths = (hive_paths and live.relative.startswith(expected)
                              and live.relative.count("=") == 2)
                by_date.setdefault(date, []).append((prefix + live.path, mode))
                relative[prefix + live.path] = live.relative
                rows = None if rows is None or live.rows is None else rows + live.rows
        return cls(con=con, by_date=by_date, missing=missing, hive_paths=hive_paths, relative=relative,
                   version=None if snapshot is None else snapshot.version, rows=rows)

    def register(self, view: str, *, dates: set[dt.date] | None = None, since: dt.date | None = None,
                 only: frozenset[str] | None = None, unkeyed: bool = False) -> int:
        """(Re)define ``view`` over the files of ``dates`` (or of every date >= ``since``, or all),
        oldest first; with ``only``, just those files (relative paths); with ``unkeyed``, only their
        rows without a ``series_key`` (written before it existed). Returns the number of files."""
        spec = ViewSpec(dates=dates, since=since, only=only, unkeyed=unkeyed)
        self.views[view] = spec
        chosen = [
            (path, mode, date)
            for date, paths in sorted(self.by_date.items())
            if (dates is None or date in dates) and (since is None or date >= since)
            for path, mode in paths
            if only is None or self.relative[path] in only
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
                    for (mode, date), paths in groups.items())  # modes checked by _check_partition
            columns = ", ".join(
                f"CAST(NULL AS {_duck_type(f.type)}) AS \"{f.name}\"" if f.name in self.missing
                else f'"{f.name}"'
                for f in schema.RESULTS_SCHEMA)
            source = f"SELECT {columns} FROM ({source})"  # noqa: S608 (column names from the schema)
            if unkeyed:
                source += f" WHERE {series.COLUMN} IS NULL"
        self.con.execute(f"CREATE OR REPLACE TEMP VIEW {view} AS {source}")  # noqa: S608
        return len(chosen)

    def run(self, action: Callable[[], T]) -> T:
        """``action()``; when DuckDB cannot bind the files' columns together, once more with
        columns matched by name (reading every file's footer first: slower, so only when needed).

        Classified by exception type: the oldest file lacks a column that is read (a
        ``BinderException``) or a later file lacks one of its columns (``InvalidInputException``).
        Any other error of those types fails the same way on the second try and is raised then."""
        if self.union_by_name:
            return action()
        try:
            return action()
        except (duckdb.BinderException, duckdb.InvalidInputException):
            pass
        self.union_by_name = True
        for view, spec in list(self.views.items()):
            self.register(view, dates=spec.dates, since=spec.since, only=spec.only, unkeyed=spec.unkeyed)
        return action()


def _check_partition(relative: str, mode: object, date: object) -> None:
    """A results file outside the table's partitioning is refused, never skipped: a report that
    silently leaves rows out would publish wrong figures."""
    if mode not in MODES or not isinstance(date, dt.date):
        raise ReportError(f"results file {relative!r} has partition mode={mode!r}, date={date!r}: "
                          f"expected mode one of {', '.join(MODES)} and a date (is this a gpucompare lake?)")


def _duck_type(arrow_type: pa.DataType) -> str:
    """The DuckDB type of a results column (for a column the table does not have yet)."""
    if pa.types.is_list(arrow_type):
        return f"{_duck_type(arrow_type.value_type)}[]"
    return {pa.string(): "VARCHAR", pa.int64(): "BIGINT", pa.float64(): "DOUBLE", pa.date32(): "DATE",
            schema.TIMESTAMP: "TIMESTAMPTZ"}.get(arrow_type, "VARCHAR")


def results_table(inputs: ReportInputs) -> pa.Table:
    """Every row of the lake's results as the reports' SQL sees them (the ``results`` view)."""
    con = connect()
    try:
        files = ResultFiles.of(inputs.lake, con)

        def read() -> pa.Table:
            files.register("results")
            return con.sql("SELECT * FROM results").to_arrow_table()

        return files.run(read)
    finally:
        con.close()
