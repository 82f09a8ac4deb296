"""Step 1 of the reports' ``latest`` table: every series' newest date partition, kept between reports.

``latest`` (each machine's latest result of every configuration) is built in two steps: this one
finds, for every series, the date partition of its newest result; step 2
(``sql/latest_results.sql``) then reads only those partitions. Step 1 is the one that touches
every result of the lake, so it reads as little as it can and remembers what it found:

* **by series key**: ``sql/newest_by_series.sql`` groups every result by its ``series_key``
  (``lake.series``; one integer column read). Rows written before the key existed (key null) are
  grouped by their own columns instead (``newest_by_config.sql``, or ``newest_by_key.sql`` where
  some have no config_id either), over those rows only;
* **kept between reports** (:class:`NewestCache`, at :data:`CACHE_PATH` below the lake root): the
  groups found (a key and its newest date: one row per series), the table version and the files
  they were found in. The next report replays the table's log from that version
  (:func:`files_to_read`): files added since are read and their groups merged in (a newest date
  can only move forward when rows are added); files rewritten without a data change (a compaction:
  the same rows in fewer files) are covered when everything they replace was; anything else (rows
  removed: a replaced run, a delete), a log entry that is gone, or a cache newer than the version
  read, and every file is read again. The nightly report after an ingest and a compaction reads the
  night's new files only. The number of results comes from the log's per-file counts.

Only a report of the table's current version writes the cache (never one ``--as-of`` an older
one); it is written under a temporary name and renamed (one PUT on S3), so a reader sees a whole
cache or none; an unreadable or foreign cache is read as none, and one that cannot be written is
left (the report does not depend on it). Every group's newest date is kept, so the dates found are
a superset of those step 2 needs even where one series is split over two groups (part of its rows
keyed, part not; or legacy groups hashed by another DuckDB version): its own newest date is the
newest of its groups'. Two series share a group only if their 64-bit keys collide (about 1 in
10^11 for 12,000 series).
"""

from __future__ import annotations

import datetime as dt
import io
import json
import logging
from dataclasses import dataclass, replace
from urllib.parse import unquote

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from gpucompare.lake import series
from gpucompare.lake.storage import put_bytes
from gpucompare.lake.tables import Lake
from gpucompare.reports.inputs import ResultFiles, load_sql

log = logging.getLogger(__name__)

#: Where the cache is kept, below the lake root (the ``v1`` is the format: a change of what a
#: group means gets a new name, so an older cache is never misread)
CACHE_PATH = "_report_cache/results_newest.v1.parquet"
#: A group: a series key (or a legacy group's hash) and the newest date partition of its results
GROUPS_SCHEMA = pa.schema([pa.field("key", pa.int64()), pa.field("newest_date", pa.date32())])
#: The cache file's metadata: the table version and the files its groups were found in (JSON)
_VERSION_KEY, _FILES_KEY = b"gpucompare.version", b"gpucompare.files"


@dataclass(frozen=True)
class Newest:
    """Step 1's answer: one row per group (:data:`GROUPS_SCHEMA`), the table version and files it
    covers (relative paths), the results in them, and how many files were read this time (the
    others came from the cache)."""

    groups: pa.Table
    files: frozenset[str]
    version: int | None
    results: int
    files_read: int

    @property
    def dates(self) -> set[dt.date]:
        """Every group's newest date partition: what step 2 reads."""
        return set(pc.unique(self.groups.column("newest_date")).to_pylist())


@dataclass(frozen=True)
class NewestCache:
    """The groups of step 1, their version and files, kept at :data:`CACHE_PATH` in ``lake``."""

    lake: Lake

    @property
    def path(self) -> str:
        return self.lake.path(CACHE_PATH)

    def load(self) -> Newest | None:
        """The cached answer (``results`` 0: the log counts them), or None when there is none or
        it cannot be read as one (any reason: a missing, truncated or foreign file is no cache)."""
        try:
            with self.lake.fs.open_input_file(self.path) as source:
                table = pq.read_table(source)
            metadata = table.schema.metadata or {}
            version, files = int(metadata[_VERSION_KEY]), json.loads(metadata[_FILES_KEY])
            if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
                raise ValueError("the file list is not a list of paths")
            groups = table.select(GROUPS_SCHEMA.names).cast(GROUPS_SCHEMA).replace_schema_metadata(None)
        except FileNotFoundError:
            return None
        except Exception as exc:  # noqa: BLE001 - a cache that cannot be read is no cache
            log.warning("report cache %s not used (%s): every results file is read", self.path, exc)
            return None
        return Newest(groups=groups, files=frozenset(files), version=version, results=0, files_read=0)

    def save(self, newest: Newest) -> None:
        """Keep ``newest``, written whole (``storage.put_bytes``): a reader sees the old cache or
        the new one. A failure is logged and left: the next report reads every file again."""
        metadata = {_VERSION_KEY: str(newest.version).encode(),
                    _FILES_KEY: json.dumps(sorted(newest.files)).encode()}
        data = io.BytesIO()
        pq.write_table(newest.groups.replace_schema_metadata(metadata), data, compression="zstd")
        try:
            put_bytes(self.lake.fs, self.path, data.getvalue())
        except Exception as exc:  # noqa: BLE001 - the report does not depend on its cache
            log.warning("report cache %s not written (%s)", self.path, exc)


def find_newest(con: duckdb.DuckDBPyConnection, files: ResultFiles, cache: NewestCache | None) -> Newest:
    """Step 1 over the live ``files``: from ``cache`` where its log replay allows (only the files
    it does not cover are read), else from every file; the cache is written when it changed (files
    read, or a newer version: a compaction's files)."""
    live = frozenset(files.relative.values())
    cached = cache.load() if cache is not None else None
    pending = files_to_read(cache.lake, cached, files) if cache is not None and cached is not None else None
    if pending is None or files.rows is None:
        found = scan(con, files, None)
    elif not pending:
        found = replace(cached, files=live, version=files.version, results=files.rows)
        if cached.version == files.version:
            return found
    else:
        added = scan(con, files, pending)
        merged = pa.concat_tables([cached.groups, added.groups]).group_by("key").aggregate(
            [("newest_date", "max")]).select(["key", "newest_date_max"])
        found = Newest(groups=merged.rename_columns(GROUPS_SCHEMA.names).cast(GROUPS_SCHEMA), files=live,
                       version=files.version, results=files.rows, files_read=added.files_read)
    if cache is not None and live:
        cache.save(found)
    return found


def files_to_read(lake: Lake, cached: Newest, files: ResultFiles) -> frozenset[str] | None:
    """The live files whose rows the cached groups may lack, from the results table's log between
    the cached version and ``files``'s: files added with a data change, and files a rewrite without
    one (a compaction) made from some of them. None where the cache cannot be brought up to date:
    rows were removed (a remove with a data change), a log entry is gone, or the cache is of
    another (newer) version or files."""
    if cached.version is None or files.version is None or cached.version > files.version:
        return None
    covered, pending = set(cached.files), set()
    for version in range(cached.version + 1, files.version + 1):
        actions = _log_entry(lake, version)
        if actions is None or any(a.kind == "remove" and a.data_change for a in actions):
            return None
        # a rewrite without a data change keeps a partition's rows in new files: covered where it
        # removed files from that partition and every one of them was covered
        removed_from = {a.partition for a in actions if a.kind == "remove"}
        uncovered = {a.partition for a in actions if a.kind == "remove" and a.path not in covered}
        for action in actions:
            if action.kind == "remove":
                covered.discard(action.path)
                pending.discard(action.path)
            elif action.data_change or action.partition not in removed_from - uncovered:
                pending.add(action.path)
            else:
                covered.add(action.path)
    if covered | pending != set(files.relative.values()):
        return None  # not the files of that version: another table, or a cache of other files
    return frozenset(pending)


@dataclass(frozen=True)
class _FileAction:
    kind: str  # add | remove
    path: str  # below the table folder
    data_change: bool
    partition: str  # the partition values, as one text


def _log_entry(lake: Lake, version: int) -> list[_FileAction] | None:
    """Every file action of one commit of the results table; None when the entry cannot be read
    (removed by the log's clean-up after a checkpoint)."""
    try:
        with lake.fs.open_input_stream(lake.path("results", "_delta_log", f"{version:020d}.json")) as stream:
            lines = stream.read().decode("utf-8").splitlines()
    except (FileNotFoundError, OSError):
        return None
    actions = []
    for line in lines:
        if not line.strip():
            continue
        entry = json.loads(line)
        for kind in ("add", "remove"):
            if kind in entry:
                # Delta: the path is a URI-encoded relative path; dataChange is required
                action = entry[kind]
                partition = json.dumps(action.get("partitionValues"), sort_keys=True)
                data_change = bool(action.get("dataChange", True))
                actions.append(_FileAction(kind=kind, path=unquote(action["path"]), data_change=data_change,
                                           partition=partition))
    return actions


def scan(con: duckdb.DuckDBPyConnection, files: ResultFiles, only: frozenset[str] | None) -> Newest:
    """Step 1 over the files ``only`` (all when None): by series key where the table has one, the
    rows without a key by their columns."""
    read = files.register("results", only=only)
    parts = []
    if series.COLUMN not in files.missing:
        by_series = con.sql(load_sql("newest_by_series")).to_arrow_table()
        parts.append(by_series.filter(pc.is_valid(by_series.column("key"))))
        if parts[0].num_rows < by_series.num_rows:  # rows without a key: by their columns
            files.register("results", only=only, unkeyed=True)
            parts.append(_by_columns(con))
    else:
        parts.append(_by_columns(con))
    results = sum(int(pc.sum(part.column("results")).as_py() or 0) for part in parts)
    groups = pa.concat_tables([part.select(GROUPS_SCHEMA.names).cast(GROUPS_SCHEMA) for part in parts])
    return Newest(groups=groups, files=frozenset(files.relative.values()) if only is None else only,
                  version=files.version, results=results, files_read=read)


def _by_columns(con: duckdb.DuckDBPyConnection) -> pa.Table:
    """Groups of the ``results`` view by the series' columns: by config_id (3 columns read), or by
    the full key where some rows have no config_id."""
    groups = con.sql(load_sql("newest_by_config")).to_arrow_table()
    if pc.sum(groups.column("unkeyed")).as_py():
        groups = con.sql(load_sql("newest_by_key")).to_arrow_table()
    return groups
