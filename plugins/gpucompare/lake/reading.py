"""Reading the lake's Delta tables: what each table's log says at a version, and its rows.

A table is read from its transaction log, never from a listing of its folder: the live files
(``LiveFile``) of one version, with the partition values the log records, make a
``TableSnapshot``; a stray, foreign or half-written Parquet file in the folder is never read.
``as_of`` (a version number or an ISO timestamp) reads a table as it was then (time travel), and a
table that did not exist yet at that time reads as absent.

``LakeReader`` is where a lake is (URI, filesystem, root) and everything that only reads it:
snapshots, the results as an Arrow dataset or table, the small tables (``prices``, ``fx``,
``published_scaling``) load by load, and the files and ingest keys of one run. Writing, compaction and
opening a lake are ``gpucompare.lake.tables`` (whose ``Lake`` is a ``LakeReader`` that also writes).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from gpucompare.lake import schema
from gpucompare.lake.storage import LakeError, storage_options

if TYPE_CHECKING:  # pyarrow.dataset imports pandas (~45 MB): only the readers that need it load it
    from typing import Self  # 3.11: annotations only, so the orchestrator runs on 3.10 too

    import pyarrow.dataset as ds

TABLE_KINDS: tuple[str, ...] = ("results", "prices", "fx", "published_scaling", "run_phases")
#: The column that tells apart the loads of the small tables (replaced load by load).
LOAD_COLUMN = "load_name"

#: The small tables, replaced load by load (``LOAD_COLUMN``), and their schemas.
KIND_SCHEMAS: dict[str, pa.Schema] = {
    "prices": schema.PRICES_SCHEMA,
    "fx": schema.FX_SCHEMA,
    "published_scaling": schema.PUBLISHED_SCALING_SCHEMA,
}


class NoLakeError(LakeError):
    """The URI holds no lake (no Delta table): reading commands refuse it (exit 2)."""


# ---- what the log says ---------------------------------------------------------------------
@dataclass(frozen=True)
class LiveFile:
    """One data file the table's log lists at a version, with its partition values."""

    path: str  # inside the lake's filesystem (absolute)
    relative: str  # below the table folder, as in the log
    partition: dict[str, Any]
    rows: int | None


@dataclass(frozen=True)
class RunFile:
    """A live results file that holds rows of one run: how many of its rows are the run's."""

    logged: str  # the path as the log holds it (what a remove action names)
    path: str  # inside the lake's filesystem (absolute)
    partition: dict[str, Any]
    size: int
    rows: int
    run_rows: int
    keys: dict[str | None, int]  # ingest_key -> rows of the run

    @property
    def only_the_run(self) -> bool:
        return self.rows == self.run_rows


@dataclass(frozen=True)
class TableSnapshot:
    """One table at one version: its live files and its schema (Arrow)."""

    kind: str
    version: int | None  # None: the table does not exist (at that time)
    files: tuple[LiveFile, ...]
    arrow_schema: pa.Schema | None
    timestamp: dt.datetime | None = None


def _parse_as_of(as_of: int | str | dt.datetime | None) -> int | dt.datetime | None:
    """``as_of`` as a version (int) or an aware timestamp; raises LakeError otherwise."""
    if as_of is None or isinstance(as_of, int) and not isinstance(as_of, bool):
        if isinstance(as_of, int) and as_of < 0:
            raise LakeError(f"--as-of {as_of}: a table version is >= 0")
        return as_of
    if isinstance(as_of, dt.datetime):
        return as_of if as_of.tzinfo else as_of.replace(tzinfo=dt.UTC)
    text = str(as_of).strip()
    if text.isdigit():
        return int(text)
    try:
        stamp = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise LakeError(
            f"--as-of {as_of!r} is neither a table version (0, 1, …) nor an ISO timestamp "
            "(2026-11-30T06:00:00+00:00)"
        ) from None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=dt.UTC)


def _partition_value(column: str, text: Any) -> Any:
    if text is None:
        return None
    if column == "date":
        return text if isinstance(text, dt.date) else dt.date.fromisoformat(str(text))
    return str(text)


@dataclass(frozen=True)
class LakeReader:
    """Where a lake is (a filesystem and a root path inside it) and how its tables are read."""

    uri: str
    fs: pafs.FileSystem
    root: str

    @property
    def is_local(self) -> bool:
        return isinstance(self.fs, pafs.LocalFileSystem)

    def path(self, *parts: str) -> str:
        """Absolute path (inside ``fs``) of ``parts`` below the lake root."""
        return "/".join([self.root.rstrip("/"), *parts]) if parts else self.root

    def table_uri(self, kind: str) -> str:
        """The URI delta-rs opens for one table."""
        self._check_kind(kind)
        return self.path(kind) if self.is_local else f"s3://{self.path(kind)}"

    @property
    def storage_options(self) -> dict[str, str]:
        return storage_options(self.uri)

    @staticmethod
    def _check_kind(kind: str) -> None:
        if kind not in TABLE_KINDS:
            raise LakeError(f"table {kind!r} is not one of {', '.join(TABLE_KINDS)}")

    def has_table(self, kind: str) -> bool:
        """Whether the table exists (has a transaction log)."""
        from deltalake import DeltaTable

        return DeltaTable.is_deltatable(self.table_uri(kind), storage_options=self.storage_options or None)

    def exists(self) -> bool:
        """Whether any of the lake's tables exists."""
        return any(self.has_table(kind) for kind in TABLE_KINDS)

    def require(self) -> Self:
        """Self, if a lake is there; NoLakeError naming the URI otherwise."""
        if not self.exists():
            raise NoLakeError(
                f"no lake at {self.uri}: none of the tables {', '.join(TABLE_KINDS)} has a "
                "Delta log there (ingest or import-published first, or check --lake)"
            )
        return self

    def delta(self, kind: str, as_of: int | str | dt.datetime | None = None) -> Any:
        """The ``deltalake.DeltaTable`` of one table (at ``as_of``), or None if it does not exist."""
        from deltalake import DeltaTable

        if not self.has_table(kind):
            return None
        wanted = _parse_as_of(as_of)
        options = self.storage_options or None
        table = DeltaTable(self.table_uri(kind), storage_options=options)
        if wanted is None:
            return table
        if isinstance(wanted, int):
            if wanted > table.version():
                raise LakeError(f"--as-of {wanted}: table {kind} has versions 0 to {table.version()}")
            version = wanted
        else:
            # delta-rs loads version 0 for a time before the table's first commit: check the
            # commit times here, so a table that did not exist yet reads as absent
            times = _commit_times(table)
            older = [version for version, stamp in times.items() if stamp <= wanted]
            if not older:
                if kind == "results" and times:
                    first = min(times)
                    raise LakeError(
                        f"--as-of {wanted.isoformat()} is before the results table's first version "
                        f"({first}, committed {times[first].isoformat()}): give a later time or a version"
                    )
                return None
            version = max(older)
        return self._load_readable(table, kind, version)

    def _load_readable(self, table: Any, kind: str, version: int) -> Any:
        """``table`` loaded at ``version``, if its log entry and every data file it lists are still
        there; LakeError naming the oldest version still readable otherwise (vacuum removes the
        files of old versions after the retention; log clean-up removes old log entries)."""
        try:
            table.load_as_version(version)
            missing = self._missing_files(table, kind)
        except (OSError, ValueError) as exc:  # DeltaError is an OSError/ValueError in delta-rs
            missing = [str(exc)]
        if not missing:
            return table
        oldest = self._oldest_readable(kind)
        raise LakeError(
            f"--as-of: version {version} of table {kind} can no longer be read (its files were removed "
            f"by vacuum after the retention, e.g. {missing[0]}); the oldest version still readable is "
            f"{oldest}"
        )

    def _missing_files(self, table: Any, kind: str) -> list[str]:
        from urllib.parse import unquote

        paths = pa.table(table.get_add_actions(flatten=True)).column("path").to_pylist()
        wanted = [f"{self.path(kind)}/{unquote(p)}" for p in paths]
        infos = self.fs.get_file_info(wanted) if wanted else []
        return [info.path for info in infos if info.type == pafs.FileType.NotFound]

    def _oldest_readable(self, kind: str) -> int:
        from deltalake import DeltaTable

        current = DeltaTable(self.table_uri(kind), storage_options=self.storage_options or None)
        latest = current.version()
        for version in sorted(v for v in _commit_times(current) if v <= latest):
            probe = DeltaTable(self.table_uri(kind), storage_options=self.storage_options or None)
            try:
                probe.load_as_version(version)
                if not self._missing_files(probe, kind):
                    return version
            except (OSError, ValueError):
                continue
        return latest

    def snapshot(self, kind: str, as_of: int | str | dt.datetime | None = None) -> TableSnapshot:
        """The live files of one table from its log (with partition values), at ``as_of``."""
        table = self.delta(kind, as_of)
        if table is None:
            return TableSnapshot(kind=kind, version=None, files=(), arrow_schema=None)
        actions = pa.table(table.get_add_actions(flatten=True))
        partition_columns = list(table.metadata().partition_columns)
        base = self.path(kind)
        files = []
        paths = actions.column("path").to_pylist()
        rows = (
            actions.column("num_records").to_pylist()
            if "num_records" in actions.column_names
            else [None] * len(paths)
        )
        parts = {c: actions.column(f"partition.{c}").to_pylist() for c in partition_columns}
        for index, relative in enumerate(paths):
            from urllib.parse import unquote

            relative = unquote(relative)
            partition = {c: _partition_value(c, parts[c][index]) for c in partition_columns}
            files.append(
                LiveFile(path=f"{base}/{relative}", relative=relative, partition=partition, rows=rows[index])
            )
        files.sort(key=lambda f: f.relative)
        stamp = None
        version = table.version()
        # history() of a table loaded at an older version mislabels the entries (delta-rs 1.6.6):
        # ask the current table, newest first, down to the version read
        current = (
            type(table)(self.table_uri(kind), storage_options=self.storage_options or None)
            if as_of is not None
            else table
        )
        for entry in current.history(current.version() - version + 1):
            if entry.get("version") == version and entry.get("timestamp") is not None:
                stamp = dt.datetime.fromtimestamp(entry["timestamp"] / 1000, dt.UTC)
        return TableSnapshot(
            kind=kind,
            version=table.version(),
            files=tuple(files),
            arrow_schema=_arrow_schema(table),
            timestamp=stamp,
        )

    def list_files(self, kind: str) -> list[str]:
        """Paths (relative to the lake) of the live files of one table, sorted (from the log)."""
        return [f"{kind}/{f.relative}" for f in self.snapshot(kind).files]

    def version(self, kind: str) -> int | None:
        """The table's current version (None if it does not exist)."""
        table = self.delta(kind)
        return None if table is None else table.version()

    # ---- rows ----------------------------------------------------------------------------
    def results_dataset(self, as_of: int | str | dt.datetime | None = None) -> ds.Dataset:
        """The results as an Arrow dataset over exactly the live files of the log, with the
        partition values of the log (``schema.RESULTS_SCHEMA``; empty if nothing was ingested)."""
        return self._dataset(self.snapshot("results", as_of), schema.RESULTS_SCHEMA)

    def _dataset(self, snap: TableSnapshot, wanted: pa.Schema) -> ds.Dataset:
        import pyarrow.dataset as ds

        if not snap.files:
            return ds.dataset(wanted.empty_table())
        file_schema = pa.schema([f for f in wanted if f.name not in snap.files[0].partition])
        expressions = []
        for live in snap.files:
            condition = pc.scalar(True)
            for column, value in live.partition.items():
                condition = condition & (pc.field(column) == pa.scalar(value, wanted.field(column).type))
            expressions.append(condition)
        return ds.FileSystemDataset.from_paths(
            [f.path for f in snap.files],
            schema=pa.schema(list(file_schema) + [wanted.field(c) for c in snap.files[0].partition]),
            format=ds.ParquetFileFormat(),
            filesystem=self.fs,
            partitions=expressions,
        )

    def results_table(
        self,
        filter: pc.Expression | None = None,  # noqa: A002
        columns: list[str] | None = None,
        as_of: int | str | dt.datetime | None = None,
    ) -> pa.Table:
        """The results (optionally filtered, optionally only some columns) as one table."""
        table = self.results_dataset(as_of).to_table(filter=filter, columns=columns)
        wanted = (
            schema.RESULTS_SCHEMA
            if columns is None
            else pa.schema([schema.RESULTS_SCHEMA.field(c) for c in columns])
        )
        return table.select(wanted.names).cast(wanted)

    def read_kind(self, kind: str, as_of: int | str | dt.datetime | None = None) -> pa.Table:
        """The rows of one table (``prices``, ``fx``…) as stored, at ``as_of`` (default: now).
        The price history with the shipped tables merged in is ``gpucompare.prices.tables``'."""
        wanted = KIND_SCHEMAS[kind]
        snap = self.snapshot(kind, as_of)
        if not snap.files:
            return wanted.empty_table()
        tables = [pq.read_table(f.path, filesystem=self.fs, columns=wanted.names) for f in snap.files]
        return pa.concat_tables(tables).select(wanted.names).cast(wanted)

    def published_scaling_table(self, as_of: int | str | dt.datetime | None = None) -> pa.Table:
        """Published speedup curves imported with ``import-published --scaling``."""
        return self.read_kind("published_scaling", as_of)

    def run_keys(self, run_id: str) -> dict[str | None, int]:
        """``ingest_key -> rows`` of one run's rows in the results table (empty if none)."""
        counts: dict[str | None, int] = {}
        for found in self.run_files(run_id):
            for key, rows in found.keys.items():
                counts[key] = counts.get(key, 0) + rows
        return counts

    def run_files(self, run_id: str, table: Any = None) -> list[RunFile]:
        """The live files of the results table (of ``table``, a loaded ``DeltaTable``, or the
        current one) that hold rows of ``run_id``, with how many rows of it each holds.

        Only files whose ``run_id`` statistics can hold the run are opened (their ``run_id``
        and ``ingest_key`` columns only)."""
        table = self.delta("results") if table is None else table
        if table is None:
            return []
        try:
            actions = pa.table(table.get_add_actions(flatten=True))
        except (OSError, ValueError):  # delta-rs: "Table is instantiated without files"
            return []
        partition_columns = list(table.metadata().partition_columns)
        found = []
        for index, logged in enumerate(actions.column("path").to_pylist()):
            if not _may_hold(actions, index, run_id):
                continue
            from urllib.parse import unquote

            path = f"{self.path('results')}/{unquote(logged)}"
            present = pq.read_schema(path, filesystem=self.fs).names
            # a file from before ingest_key existed (e.g. migrated) counts as a different key
            columns = ["run_id", "ingest_key"] if "ingest_key" in present else ["run_id"]
            part = pq.read_table(path, filesystem=self.fs, columns=columns)
            mine = part.filter(pc.equal(part.column("run_id"), run_id))
            if not mine.num_rows:
                continue
            keys: dict[str | None, int] = {}
            for key in (mine.column("ingest_key").to_pylist() if "ingest_key" in columns
                        else [None] * mine.num_rows):
                keys[key] = keys.get(key, 0) + 1
            partition = {
                c: _partition_value(c, actions.column(f"partition.{c}")[index].as_py())
                for c in partition_columns
            }
            found.append(RunFile(logged=logged, path=path, partition=partition,
                                 size=int(actions.column("size_bytes")[index].as_py()),
                                 rows=part.num_rows, run_rows=mine.num_rows, keys=keys))
        return found

    def loads(self, kind: str) -> list[str]:
        """The names of the loads in ``prices``, ``fx`` or ``published_scaling``, sorted."""
        snap = self.snapshot(kind)
        names: set[str] = set()
        for f in snap.files:
            names.update(
                pq.read_table(f.path, filesystem=self.fs, columns=[LOAD_COLUMN]).column(0).to_pylist()
            )
        return sorted(names)

    def _load_rows(self, kind: str, name: str) -> pa.Table | None:
        snap = self.snapshot(kind)
        if not snap.files:
            return None
        wanted = KIND_SCHEMAS[kind]
        parts = [
            pq.read_table(
                f.path, filesystem=self.fs, filters=[(LOAD_COLUMN, "=", name)], columns=wanted.names
            )
            for f in snap.files
        ]
        return pa.concat_tables(parts).cast(wanted)


def _may_hold(actions: pa.Table, index: int, run_id: str) -> bool:
    """Whether the ``run_id`` statistics of add action ``index`` leave room for ``run_id``.
    String statistics may be cut short: a prefix bound still orders below the value, so only a
    full-length min/max above/below the run excludes a file."""
    names = actions.column_names
    low = actions.column("min.run_id")[index].as_py() if "min.run_id" in names else None
    high = actions.column("max.run_id")[index].as_py() if "max.run_id" in names else None
    if low is not None and high is not None and not (low[: len(run_id)] <= run_id):
        return False
    full_length_below = high is not None and len(high) >= len(run_id) and high < run_id
    return not (full_length_below and not run_id.startswith(high))


def _commit_times(table: Any) -> dict[int, dt.datetime]:
    """Commit time of every version of a (current) DeltaTable still in its log history."""
    times = {}
    for entry in table.history():
        if entry.get("version") is not None and entry.get("timestamp") is not None:
            times[int(entry["version"])] = dt.datetime.fromtimestamp(entry["timestamp"] / 1000, dt.UTC)
    return times


def _arrow_schema(table: Any) -> pa.Schema:
    return pa.schema(table.schema().to_arrow())


def describe(lake: LakeReader) -> list[str]:
    """Human-readable lines: version, files and rows of every table, results by mode, date, target."""
    lines = [f"lake {lake.uri}"]
    for kind in TABLE_KINDS:
        snap = lake.snapshot(kind)
        if snap.version is None:
            lines.append(f"  {kind}: no table")
            continue
        rows = sum(f.rows or 0 for f in snap.files)
        lines.append(f"  {kind}: version {snap.version}, {len(snap.files)} live file(s), {rows} row(s)")
        if kind == "results" and snap.files:
            counts = (
                lake.results_table(columns=["mode", "date", "target"])
                .group_by(["mode", "date", "target"])
                .aggregate([([], "count_all")])
            )
            for row in counts.sort_by([("date", "ascending"), ("mode", "ascending")]).to_pylist():
                lines.append(
                    f"    mode={row['mode']} date={row['date']} target={row['target']}: {row['count_all']}"
                )
    return lines
