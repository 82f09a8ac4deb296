"""The results lake: Delta Lake tables (through ``deltalake``, delta-rs) on a local folder or on S3.

A lake is a URI: a local path (or ``file:///…``) or ``s3://bucket/prefix``; by default the lake setting
(``gpucompare.settings.lake_uri``: ``GPUCOMPARE_LAKE`` or ``[gpucompare] lake``), the one every
command and DAG uses.
It holds five Delta tables, each a folder with its transaction log (``_delta_log/``) beside
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

* one transaction per ingest: a run's rows are replaced in ONE commit of the log that adds the
  run's new files and removes its old ones (``Lake.replace_run_rows``): a file holding only the
  run's rows is removed, a file holding other rows too (compacted) is rewritten without them
  in the same commit. A reader sees the old run or the new one, never a mix, never both. The
  new files are written by pyarrow (``lake.datafiles``: memory is one batch, not the run) and
  committed with delta-rs's ``create_write_transaction``; until then they are strays no reader
  sees, deleted again when the write fails.
* idempotent: each row carries ``ingest_key``, a hash of the run's ingested data; when the
  run's rows in the table already carry the same key (and count), nothing is committed.
* concurrent writers: a commit is an atomic create-if-absent of the next log entry (a rename
  locally; a conditional PUT on S3). A writer that loses the race is told so by delta-rs,
  which checks the winning commits for a logical conflict and commits again. Real conflicts
  fail the commit and are retried here from the log's new state: a concurrent compaction or
  replace removed a file this one removes (delta-rs's delete/delete check), or another writer
  of the same run committed first (each replace carries the run's application transaction id,
  ``run_transaction_id``: delta-rs refuses a commit whose app id a winning commit also holds).
  The smaller tables are replaced with ``write_deltalake(mode="overwrite", predicate=…)``.
* readers take the live files from the log with their partition values, never a listing
  (``gpucompare.lake.reading``: ``LakeReader``, ``TableSnapshot``).

This module is the writing side: ``open_lake``, ``Lake`` (a ``LakeReader`` that also commits,
replaces a run or a load, and compacts) and the compaction cut-off. How a commit is retried,
found again and reported is ``lake.commits``; the checks of the rows written are ``lake.rows``.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from gpucompare.lake import schema
from gpucompare.lake.commits import (
    COMMIT_ID_KEY,
    COMMIT_SEARCH,
    TARGET_FILE_BYTES,
    CompactionSummary,
    TableCreatedMeanwhile,
    WriteSummary,
    commit_conflict_retries,
    commit_token,
    remove_action,
    run_transaction_id,
    writer_properties,
)
from gpucompare.lake.datafiles import DataFiles
from gpucompare.lake.panics import rust_panics_quieted
from gpucompare.lake.reading import KIND_SCHEMAS, LOAD_COLUMN, LakeReader, NoLakeError, RunFile
from gpucompare.lake.rows import (
    IngestError,
    check_positive,
    check_price_rows,
    check_run_id,
    safe_name,
    table_key,
    with_orchestrator_columns,
)
from gpucompare.lake.storage import (
    UNSAFE_URI_CHARACTERS,
    LakeError,
    check_local_folder,
    check_uri_characters,
    filesystem_for,
)

#: How long removed files stay for time travel (vacuum keeps them this long): 7 days.
RETENTION_HOURS = 7 * 24
#: Rows per Arrow batch while streaming a results file into the table (at most; see BATCH_BYTES).
BATCH_ROWS = 2048
#: Bytes of record text per Arrow batch: a batch closes at BATCH_ROWS rows or this many bytes,
#: whichever comes first, so records of 64 KiB each do not make 128 MiB batches. A batch is the
#: unit of an ingest's memory (it costs several times its text as Python objects, Arrow arrays
#: and a Parquet row group) and one row group of the files written.
BATCH_BYTES = 4 * 1024 * 1024


def open_lake(uri: str | None = None) -> Lake:
    """Open the lake at ``uri`` (default: the lake setting); nothing is created until a write."""
    if not uri:
        from gpucompare import settings

        uri = settings.lake_uri()
    check_uri_characters(uri)
    fs, root = filesystem_for(uri)
    if isinstance(fs, pafs.LocalFileSystem):
        # the path as delta-rs will see it: symlinks and relative parts resolved (a link to a
        # `real%41/` folder, or a relative path under one, hides the `%` from the URI as typed)
        if any(c in UNSAFE_URI_CHARACTERS for c in root):
            raise LakeError(
                f"lake {uri!r} resolves to {root!r} (symlinks and relative parts followed), which holds "
                "'%': delta-rs would read it as an escape (%41 as 'A') and lose the table; choose a "
                "folder whose real path has no '%'"
            )
        check_local_folder(root)
    return Lake(uri=uri, fs=fs, root=root)


@dataclass(frozen=True)
class Lake(LakeReader):
    """An open lake: what ``LakeReader`` reads, plus the writes (one commit each) and compaction."""

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

        uri = self.table_uri(kind)
        if self.is_local:
            Path(uri).mkdir(parents=True, exist_ok=True)
        token = uuid.uuid4().hex  # finds this commit's version in the log (not the latest's)
        properties = CommitProperties(
            custom_metadata={"writer": "gpucompare", **(metadata or {}), COMMIT_ID_KEY: token},
            max_commit_retries=50,
        )
        for attempt in commit_conflict_retries():
            with attempt:
                write_deltalake(
                    uri,
                    data(),
                    mode="overwrite" if predicate else "append",
                    predicate=predicate,
                    partition_by=partition_by,
                    schema_mode="merge",
                    storage_options=self.storage_options or None,
                    commit_properties=properties,
                    writer_properties=writer_properties(),
                    target_file_size=TARGET_FILE_BYTES,
                )
        return self._committed_version(kind, token)

    def _committed_version(self, kind: str, token: str) -> int:
        """The version of the commit carrying ``token`` (another writer may have committed after
        it: the table's latest version is not this commit's), read from the log's own commit
        files, newest first. Not from ``DeltaTable.history()``: it numbers the entries down from
        the version the table was loaded at, so a commit another writer adds in between shifts
        every number by one (2 of 6 concurrent writers printed another's version)."""
        latest = int(self.delta(kind).version())
        log_folder = self.path(kind, "_delta_log")
        for version in range(latest, max(-1, latest - COMMIT_SEARCH), -1):
            try:
                with self.fs.open_input_stream(f"{log_folder}/{version:020d}.json") as stream:
                    text = stream.read().decode("utf-8")
            except FileNotFoundError:  # removed by log cleanup (after a checkpoint): older ones too
                break
            if token in text and commit_token(text) == token:
                return version
        return latest  # pragma: no cover - more than COMMIT_SEARCH commits since

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
        table = with_orchestrator_columns(table, code_hash=code_hash)
        key = table_key(table)
        table = table.set_column(
            table.schema.get_field_index("ingest_key"),
            "ingest_key",
            pa.array([key] * table.num_rows, pa.string()),
        )
        return self.replace_run(run_id, key, table.num_rows, lambda: table, metadata)

    def run_machines(self, run_id: str) -> dict[tuple[str, str, str | None], int]:
        """``(provider, instance_type, region) -> rows`` of run ``run_id`` in the results table
        (empty if none): the machine(s) the run's rows were measured on."""
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        columns = ["run_id", "provider", "instance_type", "region"]
        machines: dict[tuple[str, str, str | None], int] = {}
        for found in self.run_files(run_id):
            part = pq.read_table(found.path, filesystem=self.fs, columns=columns)
            mine = part.filter(pc.equal(part.column("run_id"), run_id))
            for row in mine.select(columns[1:]).to_pylist():
                machine = (row["provider"], row["instance_type"], row["region"])
                machines[machine] = machines.get(machine, 0) + 1
        return machines

    def replace_run(
        self,
        run_id: str,
        key: str,
        rows: int,
        data: Callable[[], pa.RecordBatchReader | pa.Table],
        metadata: dict[str, str] | None,
    ) -> WriteSummary:
        if self.run_keys(run_id) == {key: rows}:
            return WriteSummary(table="results", version=self.version("results"), rows=rows, changed=False)
        version = self.replace_run_rows(
            run_id, data, metadata={"run_id": run_id, "ingest_key": key, **(metadata or {})}
        )
        return WriteSummary(table="results", version=version, rows=rows, changed=True)

    def replace_run_rows(
        self,
        run_id: str,
        data: Callable[[], pa.RecordBatchReader | pa.Table],
        *,
        metadata: dict[str, str] | None = None,
    ) -> int:
        """Make the rows of ``data()`` (``schema.RESULTS_SCHEMA`` columns, partition columns
        included; extra columns are added to the table's schema) the rows of run ``run_id``
        in ONE commit of the results table; returns that commit's version.

        The new rows are written once, streamed into Parquet files of our own
        (``lake.datafiles.DataFiles``); each attempt then reads the run's old files from the
        log, rewrites the ones that hold other rows too and commits adds and removes together
        (``_commit_run``). A conflict is retried from the log's new state; a failure deletes
        the files written, unless the commit was made (then they are the table's)."""
        check_run_id(run_id)
        token = uuid.uuid4().hex  # finds this commit's version in the log (not the latest's)
        added = DataFiles(self.fs, self.path("results"), list(schema.PARTITION_COLUMNS))
        try:
            rows = data()
            added.write_all(rows)
            adds = added.finish()  # none: the run's rows are removed, nothing added
            columns = (
                pa.schema(list(added.file_schema) + list(schema.PARTITION_SCHEMA))
                if added.file_schema is not None
                else getattr(rows, "schema", schema.RESULTS_SCHEMA)
            )
            custom = {"writer": "gpucompare", **(metadata or {}), COMMIT_ID_KEY: token}
            for attempt in commit_conflict_retries():
                with attempt:
                    self._commit_run(run_id, adds, columns, custom)
        except BaseException:
            if not self._is_committed("results", token):
                added.discard()
            raise
        return self._committed_version("results", token)

    def _commit_run(self, run_id: str, adds: list[Any], columns: pa.Schema, custom: dict[str, str]) -> None:
        """One attempt: the run's new files ``adds``, the removal of its old files and the
        rewrite of old files that hold other rows too, committed together."""
        from deltalake import CommitProperties
        from deltalake.transaction import Transaction

        table = self.delta("results")
        run_txn = Transaction(run_transaction_id(run_id), 0 if table is None else table.version() + 1)
        properties = CommitProperties(
            custom_metadata=custom, max_commit_retries=50, app_transactions=[run_txn]
        )
        if table is None:
            self._create_results(adds, columns, properties)
            return
        table = self._evolve_schema(table, columns)
        rewritten: list[DataFiles] = []
        try:
            actions = list(adds)
            for found in self.run_files(run_id, table):
                if not found.only_the_run:
                    actions += self._without_run(found, run_id, rewritten)
                actions.append(remove_action(found))
            table.create_write_transaction(
                actions, mode="append", schema=table.schema(), partition_by=list(schema.PARTITION_COLUMNS),
                commit_properties=properties,
            )
        except BaseException:
            if not self._is_committed("results", custom[COMMIT_ID_KEY]):
                for files in rewritten:
                    files.discard()
            raise

    def _create_results(self, adds: list[Any], columns: pa.Schema, properties: Any) -> None:
        """Create the results table with its first run's files (version 0)."""
        from deltalake import Schema
        from deltalake.transaction import create_table_with_add_actions

        try:
            create_table_with_add_actions(
                self.table_uri("results"), Schema.from_arrow(columns), adds, mode="error",
                partition_by=list(schema.PARTITION_COLUMNS), storage_options=self.storage_options or None,
                commit_properties=properties,
            )
        except Exception as exc:
            if self.has_table("results"):  # another writer created it first: append to it instead
                raise TableCreatedMeanwhile(str(exc)) from exc
            raise

    def _evolve_schema(self, table: Any, columns: pa.Schema) -> Any:
        """``table`` with every column of ``columns`` (new ones added in a commit of their own,
        which changes no row: every existing row reads them as null); LakeError when a column
        exists with another type."""
        from deltalake import CommitProperties, Field

        current = {f.name: json.loads(f.to_json())["type"] for f in table.schema().fields}
        missing = []
        for column in columns:
            wanted = Field.from_arrow(column)
            if column.name not in current:
                missing.append(wanted)
            elif json.loads(wanted.to_json())["type"] != current[column.name]:
                raise LakeError(
                    f"results: column {column.name} is {current[column.name]} in the table, "
                    f"{json.loads(wanted.to_json())['type']} in the rows written"
                )
        if not missing:
            return table
        properties = CommitProperties(custom_metadata={"writer": "gpucompare"}, max_commit_retries=50)
        table.alter.add_columns(missing, commit_properties=properties)
        return self.delta("results")

    def _without_run(self, found: RunFile, run_id: str, rewritten: list[DataFiles]) -> list[Any]:
        """Add actions of ``found`` rewritten without the rows of ``run_id`` (read and written
        a batch at a time: a big compacted file is never held whole)."""
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        files = DataFiles(self.fs, self.path("results"), list(schema.PARTITION_COLUMNS))
        rewritten.append(files)
        with self.fs.open_input_file(found.path) as source:
            parquet = pq.ParquetFile(source)
            meta = parquet.metadata
            per_row = max(1, sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
                          // max(1, meta.num_rows))
            for batch in parquet.iter_batches(batch_size=max(16, min(BATCH_ROWS, BATCH_BYTES // per_row))):
                runs = batch.column("run_id")
                files.write(batch.filter(pc.or_kleene(pc.not_equal(runs, run_id), pc.is_null(runs))),
                            partition=found.partition)
        return files.finish()

    def _is_committed(self, kind: str, token: str) -> bool:
        """Whether a commit carrying ``token`` is in the log (True when that cannot be told:
        files are only deleted when surely no commit lists them)."""
        try:
            table = self.delta(kind)
            return table is not None and any(
                entry.get(COMMIT_ID_KEY) == token for entry in table.history(COMMIT_SEARCH)
            )
        except Exception:  # noqa: BLE001 - unknown: keep the files (a stray is harmless)
            return True

    def write_table(self, kind: str, name: str, table: pa.Table) -> WriteSummary:
        """Replace the rows of load ``name`` in ``prices``, ``fx`` or ``published_scaling`` by
        ``table`` (that table's schema) in one commit; identical rows write nothing."""
        if kind not in KIND_SCHEMAS:
            raise LakeError(f"table {kind!r} is not one of {', '.join(KIND_SCHEMAS)}")
        name = safe_name(name)
        rows = table.select(KIND_SCHEMAS[kind].names).cast(KIND_SCHEMAS[kind])
        if kind == "prices":
            check_price_rows(rows)
        if kind == "fx":
            check_positive(rows, "rate", "fx")
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

    # ---- compaction --------------------------------------------------------------------
    def compact(
        self, before: dt.date | None = None, *, retention_hours: int = RETENTION_HOURS
    ) -> CompactionSummary:
        """The format's own compaction of ``results`` (``optimize.compact``, partitions dated
        before ``before`` or all), then ``vacuum`` of files removed more than ``retention_hours``
        ago (at least 7 days: time travel stays possible that far back)."""

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
        with rust_panics_quieted():  # a full disk: the exit-2 message, not delta-rs's panic lines
            for attempt in commit_conflict_retries():  # an ingest may rewrite a file meanwhile
                with attempt:
                    metrics = self.delta("results").optimize.compact(
                        partition_filters=filters, max_concurrent_tasks=2,
                        writer_properties=writer_properties(),
                    )
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


def compaction_cutoff(older_than_days: int | None, today: dt.date | None = None) -> dt.date | None:
    """The first date left alone when compacting partitions older than ``older_than_days``
    (None: compact every partition); ``today`` defaults to today, UTC."""
    if older_than_days is None:
        return None
    if older_than_days < 0:
        raise LakeError(f"older_than_days must be >= 0, got {older_than_days}")
    return (today or dt.datetime.now(dt.UTC).date()) - dt.timedelta(days=older_than_days)
