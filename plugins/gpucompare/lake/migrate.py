"""``migrate-lake``: convert a lake in the old hand-written Hive layout into the Delta tables.

The old layout (before the lake became Delta tables)::

    OLD/results/mode=score|train/date=YYYY-MM-DD/<run>-<identity>[-<content key>].parquet
    OLD/results/…/~compacted[-<key>].parquet     (metadata ``gpucompare.compaction``: files it supersedes)
    OLD/prices/<name>.parquet, OLD/fx/<name>.parquet, OLD/published_scaling/<name>.parquet

Every row counted once, as the old readers counted it: hidden and temporary files are left
out, and so is every file a compacted file of the same partition names in its ``supersedes``.
The results go into the new ``results`` table in one commit (streamed file by file, with
``mode`` and ``date`` from the old path); each old side-table file becomes one load of the new
table (``Lake.write_table``). Row counts of both sides are returned so the command can print
them; a migration into a lake that already has a results table is refused (nothing is merged
by guesswork).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from gpucompare.lake import schema
from gpucompare.lake.series import with_series_keys
from gpucompare.lake.storage import LakeError
from gpucompare.lake.tables import Lake, open_lake

_PARTITION = re.compile(r"(?:^|/)mode=([a-z_]+)/date=(\d{4}-\d{2}-\d{2})/([^/]+)$")
_COMPACTION_METADATA = b"gpucompare.compaction"


class MigrationError(LakeError):
    """An old lake that cannot be migrated (the message says why)."""


def _files(old: Lake, kind: str) -> list[str]:
    base = old.path(kind)
    infos = old.fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
    return sorted(
        i.path
        for i in infos
        if i.type == pafs.FileType.File
        and i.base_name.endswith(".parquet")
        and not i.base_name.startswith((".", "_"))
        and "/_delta_log/" not in i.path
    )


def old_results_files(old: Lake) -> list[tuple[str, str, dt.date]]:
    """(path, mode, date) of every old results file the old readers counted."""
    by_directory: dict[str, list[tuple[str, str, dt.date]]] = {}
    for path in _files(old, "results"):
        match = _PARTITION.search(path)
        if match is None:
            continue  # not in a Hive partition: the old readers never read it either
        entry = (path, match.group(1), dt.date.fromisoformat(match.group(2)))
        by_directory.setdefault(path.rsplit("/", 1)[0], []).append(entry)
    kept = []
    for directory, entries in by_directory.items():
        superseded: set[str] = set()
        for path, _, _ in entries:
            name = path.rsplit("/", 1)[1]
            if name.startswith("~compacted") and len(entries) > 1:
                metadata = pq.read_schema(path, filesystem=old.fs).metadata or {}
                manifest = json.loads(metadata.get(_COMPACTION_METADATA, b"{}") or b"{}")
                superseded.update(f"{directory}/{n}" for n in manifest.get("supersedes", []) if n != name)
        kept += [e for e in entries if e[0] not in superseded]
    return kept


def _conform(table: pa.Table, mode: str, date: dt.date) -> pa.Table:
    columns = []
    for f in schema.RESULTS_SCHEMA:
        if f.name == "mode":
            columns.append(pa.array([mode] * table.num_rows, f.type))
        elif f.name == "date":
            columns.append(pa.array([date] * table.num_rows, f.type))
        elif f.name in table.column_names:
            columns.append(table.column(f.name).cast(f.type))
        else:  # a column added since the file was written (code_hash, ingest_key…)
            columns.append(pa.nulls(table.num_rows, f.type))
    return with_series_keys(pa.Table.from_arrays(columns, schema=schema.RESULTS_SCHEMA))


#: The columns each old table keeps (every other column of an old file is dropped, and listed).
_KEPT: dict[str, pa.Schema] = {
    "results": schema.RESULTS_SCHEMA,
    "prices": schema.PRICES_SCHEMA,
    "fx": schema.FX_SCHEMA,
    "published_scaling": schema.PUBLISHED_SCALING_SCHEMA,
}


def _check_source(old: Lake, source: str) -> None:
    if old.fs.get_file_info(old.path()).type == pafs.FileType.NotFound:
        raise MigrationError(f"--from {source}: no such lake folder")
    if old.fs.get_file_info(old.path("results")).type != pafs.FileType.Directory:
        raise MigrationError(
            f"--from {source} has no results/ folder: not a lake in the old layout (give the folder "
            "that holds results/mode=…/date=…/*.parquet)"
        )


def dropped_columns(source: str) -> dict[str, list[str]]:
    """Per old table, the columns of its files that the Delta tables do not have (migrate drops
    them; the command lists them). Reads file footers only."""
    old = open_lake(source)
    _check_source(old, source)
    dropped: dict[str, list[str]] = {}
    for kind, kept in _KEPT.items():
        paths = [p for p, _, _ in old_results_files(old)] if kind == "results" else _files(old, kind)
        names: set[str] = set()
        for path in paths:
            names.update(pq.read_schema(path, filesystem=old.fs).names)
        extra = sorted(names - set(kept.names))
        if extra:
            dropped[kind] = extra
    return dropped


def migrate(source: str, target: Lake) -> dict[str, tuple[int, int]]:
    """Copy the old lake at ``source`` into ``target``; returns ``{table: (old rows, new rows)}``.
    A folder without ``results/`` is refused; columns the Delta tables do not have are dropped
    (``dropped_columns`` lists them)."""
    old = open_lake(source)
    _check_source(old, source)
    if old.has_table("results"):
        raise MigrationError(f"--from {source} is already a Delta lake")
    if target.has_table("results"):
        raise MigrationError(f"--to {target.uri} already has a results table: migrate into a new lake")
    counts: dict[str, tuple[int, int]] = {}
    files = old_results_files(old)
    old_rows = sum(pq.read_metadata(path, filesystem=old.fs).num_rows for path, _, _ in files)

    def batches() -> pa.RecordBatchReader:
        def generate() -> Iterator[pa.RecordBatch]:
            for path, mode, date in files:
                yield from _conform(pq.read_table(path, filesystem=old.fs), mode, date).to_batches()

        return pa.RecordBatchReader.from_batches(schema.RESULTS_SCHEMA, generate())

    if files:
        target.commit(
            "results",
            batches,
            predicate=None,
            partition_by=list(schema.PARTITION_COLUMNS),
            metadata={"migrated_from": source},
        )
    new_rows = target.results_table(columns=["run_id"]).num_rows if target.has_table("results") else 0
    counts["results"] = (old_rows, new_rows)
    for kind, table_schema in (
        ("prices", schema.PRICES_SCHEMA),
        ("fx", schema.FX_SCHEMA),
        ("published_scaling", schema.PUBLISHED_SCALING_SCHEMA),
    ):
        total = 0
        for path in _files(old, kind):
            table = pq.read_table(path, filesystem=old.fs).select(table_schema.names).cast(table_schema)
            total += table.num_rows
            target.write_table(kind, path.rsplit("/", 1)[1].removesuffix(".parquet"), table)
        migrated = target.read_kind(kind).num_rows if target.has_table(kind) else 0
        counts[kind] = (total, migrated)
    return counts
