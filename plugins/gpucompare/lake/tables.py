"""The results lake: Delta Lake tables (through ``deltalake``, delta-rs) on a local folder or on S3.

A lake is a URI: a local path (default ``./lake``, or ``file:///…``) or ``s3://bucket/prefix``.
It holds four Delta tables, each a folder with its transaction log (``_delta_log/``) beside
its Parquet files; no catalog service is needed::

    LAKE/results/             partitioned by mode (string) and date (the UTC day a configuration started)
    LAKE/prices/              price history rows (+ ``load_name``: the load they came from)
    LAKE/fx/                  exchange rates (+ ``load_name``)
    LAKE/published_scaling/   published speedup curves (+ ``load_name``)
    LAKE/run_phases/          what each step of a target's run took (``lake.phases``)

For S3 the endpoint comes from ``AWS_ENDPOINT_URL`` (or ``AWS_ENDPOINT_URL_S3``) when set, e.g.
moto's server in tests or MinIO; credentials from the usual AWS environment, never from the
repository. How concurrent commits are made safe on S3 is the ``lake_s3_commit`` setting
(see ``storage_options`` and README "The lake").

Why writes are safe — every guarantee is the table format's, none is hand-written:

* one transaction per ingest: a run's rows are replaced with ``write_deltalake(mode="overwrite",
  predicate="run_id = '…'")``: the delete of the run's old rows (in whatever partitions and
  files they were, compacted or not) and the new files are one commit of the log. A reader
  sees the old run or the new one, never a mix, never both.
* idempotent: each row carries ``ingest_key``, a hash of the run's ingested data; when the
  run's rows in the table already carry the same key (and count), nothing is committed.
* concurrent writers: a commit is an atomic create-if-absent of the next log entry (a rename
  locally; a conditional PUT or a DynamoDB lock on S3). A writer that loses the race is told
  so by delta-rs, which checks for a logical conflict and commits again; a real conflict
  (a compaction rewrote a file this ingest deletes from) is retried here from the start.
* readers take the live files from the log (``live_files``) with their partition values,
  never a listing: a stray, foreign or half-written Parquet file in the folder is never read.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from gpucompare.config import patterns
from gpucompare.errors import PermanentError
from gpucompare.lake import schema
from gpucompare.lake.storage import LakeError, filesystem_for, storage_options

if TYPE_CHECKING:  # pyarrow.dataset imports pandas (~45 MB): only the readers that need it load it
    import pyarrow.dataset as ds

DEFAULT_LAKE = "./lake"
TABLE_KINDS: tuple[str, ...] = ("results", "prices", "fx", "published_scaling", "run_phases")
#: The column that tells apart the loads of the small tables (replaced load by load).
LOAD_COLUMN = "load_name"
#: How long removed files stay for time travel (vacuum keeps them this long): 7 days.
RETENTION_HOURS = 7 * 24
#: Whole-transaction attempts when a commit meets a real conflict (delta-rs retries the rest).
COMMIT_ATTEMPTS = 12
#: Rows per Arrow batch while streaming a results file into the table.
BATCH_ROWS = 2048
#: Parquet row group and file size of the writes (memory of a streamed ingest stays flat).
ROW_GROUP_ROWS = 8192
TARGET_FILE_BYTES = 32 * 1024 * 1024
#: The orchestrator's run ids (fleet.target_run_id, the worker's --run-id alphabet): safe inside
#: a SQL string literal of a Delta predicate.
_SAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]+")

_KIND_SCHEMAS: dict[str, pa.Schema] = {
    "prices": schema.PRICES_SCHEMA,
    "fx": schema.FX_SCHEMA,
    "published_scaling": schema.PUBLISHED_SCALING_SCHEMA,
}


class NoLakeError(LakeError):
    """The URI holds no lake (no Delta table): reading commands refuse it (exit 2)."""


class IngestError(PermanentError):
    """A results file refused at ingest; ``line`` (1-based) and ``field`` name the first culprit."""

    def __init__(self, message: str, *, line: int | None = None, field: str | None = None) -> None:
        super().__init__(message)
        self.line = line
        self.field = field


def open_lake(uri: str | None = None) -> Lake:
    """Open the lake at ``uri`` (default ``./lake``); nothing is created until a write."""
    uri = uri or DEFAULT_LAKE
    fs, root = filesystem_for(uri)
    return Lake(uri=uri, fs=fs, root=root)


def safe_name(text: str) -> str:
    """``text`` reduced to characters safe in a file name and a run id."""
    cleaned = _SAFE_NAME.sub("_", text).strip("._")
    return cleaned[:80] or "unnamed"


def check_run_id(run_id: Any) -> str:
    """The orchestrator's run id, checked (it goes into a Delta predicate)."""
    if not isinstance(run_id, str) or not patterns.RUN_ID.fullmatch(run_id):
        raise IngestError(
            f"run id {run_id!r} is not valid (letters, digits and . _ : + -, at most 200)", field="run_id"
        )
    return run_id


# ---- what the log says ---------------------------------------------------------------------
@dataclass(frozen=True)
class LiveFile:
    """One data file the table's log lists at a version, with its partition values."""

    path: str  # inside the lake's filesystem (absolute)
    relative: str  # below the table folder, as in the log
    partition: dict[str, Any]
    rows: int | None


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
class Lake:
    """An open lake: a filesystem and a root path inside it."""

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

    def require(self) -> Lake:
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
        if isinstance(wanted, int):
            table = DeltaTable(self.table_uri(kind), storage_options=options)
            if wanted > table.version():
                raise LakeError(f"--as-of {wanted}: table {kind} has versions 0 to {table.version()}")
            table.load_as_version(wanted)
            return table
        table = DeltaTable(self.table_uri(kind), storage_options=options)
        if wanted is not None:
            # delta-rs loads version 0 for a time before the table's first commit: check the
            # commit times here, so a table that did not exist yet reads as absent
            times = _commit_times(table)
            older = [version for version, stamp in times.items() if stamp <= wanted]
            if not older:
                return None
            table.load_as_version(max(older))
        return table

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

    # ---- reading -----------------------------------------------------------------------
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

    def _read_kind(self, kind: str, as_of: int | str | dt.datetime | None = None) -> pa.Table:
        wanted = _KIND_SCHEMAS[kind]
        snap = self.snapshot(kind, as_of)
        if not snap.files:
            return wanted.empty_table()
        tables = [pq.read_table(f.path, filesystem=self.fs, columns=wanted.names) for f in snap.files]
        return pa.concat_tables(tables).select(wanted.names).cast(wanted)

    def read_kind(self, kind: str, as_of: int | str | dt.datetime | None = None) -> pa.Table:
        """The rows of one table (``prices``, ``fx``…) as stored, at ``as_of`` (default: now).
        The price history with the shipped tables merged in is ``gpucompare.prices.tables``'."""
        return self._read_kind(kind, as_of)

    def published_scaling_table(self, as_of: int | str | dt.datetime | None = None) -> pa.Table:
        """Published speedup curves imported with ``import-published --scaling``."""
        return self._read_kind("published_scaling", as_of)

    def run_keys(self, run_id: str) -> dict[str | None, int]:
        """``ingest_key -> rows`` of one run's rows in the results table (empty if none).

        Only files whose ``run_id`` statistics can hold the run are opened."""
        table = self.delta("results")
        if table is None:
            return {}
        actions = pa.table(table.get_add_actions(flatten=True))
        names = actions.column_names
        candidates = []
        for index, relative in enumerate(actions.column("path").to_pylist()):
            low = actions.column("min.run_id")[index].as_py() if "min.run_id" in names else None
            high = actions.column("max.run_id")[index].as_py() if "max.run_id" in names else None
            # string statistics may be cut short: a prefix bound still orders below the value,
            # so only a full-length min/max above/below the run excludes a file
            if low is not None and high is not None and not (low[: len(run_id)] <= run_id):
                continue
            if (
                high is not None
                and len(high) >= len(run_id)
                and high < run_id
                and not run_id.startswith(high)
            ):
                continue
            from urllib.parse import unquote

            candidates.append(f"{self.path('results')}/{unquote(relative)}")
        counts: dict[str | None, int] = {}
        for path in candidates:
            present = pq.read_schema(path, filesystem=self.fs).names
            # a file from before ingest_key existed (e.g. migrated) counts as a different key
            columns = ["run_id", "ingest_key"] if "ingest_key" in present else ["run_id"]
            part = pq.read_table(path, filesystem=self.fs, columns=columns, filters=[("run_id", "=", run_id)])
            keys = (
                part.column("ingest_key").to_pylist() if "ingest_key" in columns else [None] * part.num_rows
            )
            for key in keys:
                counts[key] = counts.get(key, 0) + 1
        return counts

    # ---- writing -----------------------------------------------------------------------
    def commit(
        self,
        kind: str,
        data: Callable[[], pa.RecordBatchReader | pa.Table],
        *,
        predicate: str | None,
        partition_by: list[str] | None = None,
        metadata: dict[str, str] | None = None,
    ) -> int:
        """Replace the rows matching ``predicate`` by ``data()`` in ONE commit (append when no
        predicate); returns the new table version. A lost race is retried by delta-rs; a real
        conflict (a concurrent compaction or delete touched the same files) from the start here,
        with a fresh ``data()``."""
        from deltalake import CommitProperties, write_deltalake
        from deltalake.exceptions import CommitFailedError, DeltaError

        uri = self.table_uri(kind)
        if self.is_local:
            Path(uri).mkdir(parents=True, exist_ok=True)
        properties = CommitProperties(
            custom_metadata={"writer": "gpucompare", **(metadata or {})}, max_commit_retries=50
        )
        for attempt in range(COMMIT_ATTEMPTS):
            try:
                write_deltalake(
                    uri,
                    data(),
                    mode="overwrite" if predicate else "append",
                    predicate=predicate,
                    partition_by=partition_by,
                    schema_mode="merge",
                    storage_options=self.storage_options or None,
                    commit_properties=properties,
                    writer_properties=_writer_properties(),
                    target_file_size=TARGET_FILE_BYTES,
                )
                table = self.delta(kind)
                return int(table.version())
            except (CommitFailedError, DeltaError) as exc:
                if not _retryable(exc) or attempt == COMMIT_ATTEMPTS - 1:
                    raise
                time.sleep(random.uniform(0.05, 0.2) * (attempt + 1))  # apart from the other writers
        raise AssertionError("unreachable")  # pragma: no cover

    def write_results(
        self,
        table: pa.Table,
        *,
        run_id: str,
        code_hash: str | None = None,
        metadata: dict[str, str] | None = None,
    ) -> WriteSummary:
        """Replace every row of ``run_id`` by ``table`` (``schema.RESULTS_SCHEMA`` columns; its
        ``run_id`` column must be ``run_id`` throughout) in one commit; unchanged data writes
        nothing. ``ingest_key`` is filled here when the table has none."""
        check_run_id(run_id)
        runs = set(table.column("run_id").to_pylist())
        if runs - {run_id}:
            raise IngestError(
                f"rows of run {sorted(r for r in runs if r != run_id)[0]!r} given for run {run_id!r}",
                field="run_id",
            )
        table = _with_orchestrator_columns(table, code_hash=code_hash)
        key = table_key(table)
        table = table.set_column(
            table.schema.get_field_index("ingest_key"),
            "ingest_key",
            pa.array([key] * table.num_rows, pa.string()),
        )
        return self._replace_run(run_id, key, table.num_rows, lambda: table, metadata)

    def _replace_run(
        self,
        run_id: str,
        key: str,
        rows: int,
        data: Callable[[], pa.RecordBatchReader | pa.Table],
        metadata: dict[str, str] | None,
    ) -> WriteSummary:
        if self.run_keys(run_id) == {key: rows}:
            return WriteSummary(table="results", version=self.version("results"), rows=rows, changed=False)
        version = self.commit(
            "results",
            data,
            predicate=f"run_id = '{run_id}'",
            partition_by=list(schema.PARTITION_COLUMNS),
            metadata={"run_id": run_id, "ingest_key": key, **(metadata or {})},
        )
        return WriteSummary(table="results", version=version, rows=rows, changed=True)

    def write_table(self, kind: str, name: str, table: pa.Table) -> WriteSummary:
        """Replace the rows of load ``name`` in ``prices``, ``fx`` or ``published_scaling`` by
        ``table`` (that table's schema) in one commit; identical rows write nothing."""
        if kind not in _KIND_SCHEMAS:
            raise LakeError(f"table {kind!r} is not one of {', '.join(_KIND_SCHEMAS)}")
        name = safe_name(name)
        rows = table.select(_KIND_SCHEMAS[kind].names).cast(_KIND_SCHEMAS[kind])
        if kind == "prices":
            check_price_rows(rows)
        if kind == "fx":
            _check_positive(rows, "rate", "fx")
        if self.has_table(kind):
            current = self._load_rows(kind, name)
            if (
                current is not None
                and current.num_rows == rows.num_rows
                and current.sort_by([(c, "ascending") for c in rows.column_names]).equals(
                    rows.sort_by([(c, "ascending") for c in rows.column_names])
                )
            ):
                return WriteSummary(table=kind, version=self.version(kind), rows=rows.num_rows, changed=False)
        stored = rows.append_column(
            pa.field(LOAD_COLUMN, pa.string(), nullable=False), pa.array([name] * rows.num_rows, pa.string())
        )
        version = self.commit(
            kind, lambda: stored, predicate=f"{LOAD_COLUMN} = '{name}'", metadata={"load": name}
        )
        return WriteSummary(table=kind, version=version, rows=rows.num_rows, changed=True)

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
        wanted = _KIND_SCHEMAS[kind]
        parts = [
            pq.read_table(
                f.path, filesystem=self.fs, filters=[(LOAD_COLUMN, "=", name)], columns=wanted.names
            )
            for f in snap.files
        ]
        return pa.concat_tables(parts).cast(wanted)

    # ---- compaction --------------------------------------------------------------------
    def compact(
        self, before: dt.date | None = None, *, retention_hours: int = RETENTION_HOURS
    ) -> CompactionSummary:
        """The format's own compaction of ``results`` (``optimize.compact``, partitions dated
        before ``before`` or all), then ``vacuum`` of files removed more than ``retention_hours``
        ago (at least 7 days: time travel stays possible that far back)."""
        from deltalake.exceptions import CommitFailedError, DeltaError

        if retention_hours < RETENTION_HOURS:
            raise LakeError(
                f"retention of {retention_hours} h is below {RETENTION_HOURS} h (7 days of time travel)"
            )
        table = self.delta("results")
        if table is None:
            raise NoLakeError(f"no results table in the lake at {self.uri} (nothing to compact)")
        files_before = len(table.get_add_actions(flatten=False))
        filters = [("date", "<", before.isoformat())] if before is not None else None
        metrics: dict[str, Any] = {}
        for attempt in range(COMMIT_ATTEMPTS):
            try:
                table = self.delta("results")
                metrics = table.optimize.compact(
                    partition_filters=filters, max_concurrent_tasks=2, writer_properties=_writer_properties()
                )
                break
            except (CommitFailedError, DeltaError) as exc:  # an ingest rewrote a file meanwhile
                if not _retryable(exc) or attempt == COMMIT_ATTEMPTS - 1:
                    raise
                time.sleep(random.uniform(0.1, 0.3) * (attempt + 1))
        table = self.delta("results")
        vacuumed = table.vacuum(
            retention_hours=retention_hours, dry_run=False, enforce_retention_duration=True
        )
        return CompactionSummary(
            files_before=files_before,
            files_after=len(table.get_add_actions(flatten=False)),
            files_added=int(metrics.get("numFilesAdded", 0)),
            files_removed=int(metrics.get("numFilesRemoved", 0)),
            vacuumed=len(vacuumed),
            version=int(table.version()),
        )


def _writer_properties() -> Any:
    """zstd Parquet in row groups small enough that a streamed write never holds a big file's
    rows in memory (delta-rs buffers a row group before writing it out)."""
    from deltalake import WriterProperties

    return WriterProperties(compression="ZSTD", max_row_group_size=ROW_GROUP_ROWS)


def _commit_times(table: Any) -> dict[int, dt.datetime]:
    """Commit time of every version of a (current) DeltaTable still in its log history."""
    times = {}
    for entry in table.history():
        if entry.get("version") is not None and entry.get("timestamp") is not None:
            times[int(entry["version"])] = dt.datetime.fromtimestamp(entry["timestamp"] / 1000, dt.UTC)
    return times


def _retryable(exc: Exception) -> bool:
    """Whether a delta-rs error is a commit conflict (another writer got there first)."""
    from deltalake.exceptions import CommitFailedError

    text = str(exc).lower()
    return isinstance(exc, CommitFailedError) or any(
        word in text
        for word in (
            "conflict",
            "concurrent",
            "version already exists",
            "already exists",
            "transaction failed",
        )
    )


def _arrow_schema(table: Any) -> pa.Schema:
    return pa.schema(table.schema().to_arrow())


@dataclass(frozen=True)
class WriteSummary:
    """What one write did: the table, its version after it, the rows, whether anything changed."""

    table: str
    version: int | None
    rows: int
    changed: bool

    def describe(self) -> str:
        what = "committed" if self.changed else "unchanged (already in the lake)"
        return f"{self.table}: {self.rows} row(s) {what}, table version {self.version}"


@dataclass(frozen=True)
class CompactionSummary:
    """What ``Lake.compact`` did."""

    files_before: int
    files_after: int
    files_added: int
    files_removed: int
    vacuumed: int
    version: int

    @property
    def partitions_compacted(self) -> int:  # kept for the DAG's XCom summary
        return self.files_added

    def describe(self) -> str:
        return (
            f"results: {self.files_before} live file(s) -> {self.files_after} "
            f"({self.files_removed} rewritten into {self.files_added}), {self.vacuumed} file(s) "
            f"older than the 7-day retention removed, table version {self.version}"
        )


def describe(lake: Lake) -> list[str]:
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


# ---- checks of the small tables -------------------------------------------------------------
def check_price_rows(rows: pa.Table) -> None:
    """Refuse price rows no report can use: unknown units or currencies, prices <= 0."""
    for column, allowed in (
        ("unit", schema.PRICE_UNITS),
        ("currency", schema.CURRENCIES),
        ("market", schema.MARKETS),
    ):
        bad = [v for v in rows.column(column).to_pylist() if v not in allowed]
        if bad:
            raise LakeError(f"prices: {column} {bad[0]!r} is not one of {', '.join(allowed)}")
    _check_positive(rows, "price", "prices")


def _check_positive(rows: pa.Table, column: str, kind: str) -> None:
    for value in rows.column(column).to_pylist():
        if value is None or not value > 0 or value == float("inf"):
            raise LakeError(f"{kind}: {column} must be a finite number > 0, got {value!r}")


# ---- the rows of one run (written by Lake.write_results, built by lake.ingest) -------------
def _with_orchestrator_columns(table: pa.Table, *, code_hash: str | None) -> pa.Table:
    """``table`` with every column of RESULTS_SCHEMA (code_hash filled when given)."""
    for f in schema.RESULTS_SCHEMA:
        if f.name not in table.column_names:
            table = table.append_column(f, pa.nulls(table.num_rows, f.type))
    # columns this code does not know (a newer writer's) are kept: the table's schema merges them
    extra = [f for f in table.schema if f.name not in schema.RESULTS_SCHEMA.names]
    table = table.select(schema.RESULTS_SCHEMA.names + [f.name for f in extra]).cast(
        pa.schema(list(schema.RESULTS_SCHEMA) + extra)
    )
    if code_hash is not None:
        table = table.set_column(
            table.schema.get_field_index("code_hash"),
            schema.RESULTS_SCHEMA.field("code_hash"),
            pa.array([code_hash] * table.num_rows, pa.string()),
        )
    return table


def table_key(table: pa.Table) -> str:
    """Hash of a results table's data, ``ingested_at`` and ``ingest_key`` aside."""
    digest = hashlib.sha256()
    kept = table.drop_columns([c for c in ("ingested_at", "ingest_key") if c in table.column_names])
    for row in kept.to_pylist():
        digest.update(json.dumps(row, sort_keys=True, default=str).encode())
        digest.update(b"\n")
    return digest.hexdigest()[:24]
