"""The results lake: Parquet tables on a local folder or on S3, written atomically and idempotently.

A lake is a URI: a local path (default ``./lake``, or ``file:///…``) or ``s3://bucket/prefix``,
opened through ``pyarrow.fs``. For S3 the endpoint comes from ``AWS_ENDPOINT_URL`` (or
``AWS_ENDPOINT_URL_S3``) when set, e.g. moto's server in tests or MinIO; credentials come from
the usual AWS environment / profile chain, never from the repository.

Layout (every file zstd Parquet; on S3 each name also ends with ``-<content key>``, see below)::

    LAKE/results/mode=score|train/date=YYYY-MM-DD/<run>-<identity>.parquet   (Hive partitions)
    LAKE/prices/<name>.parquet                    price history rows
    LAKE/fx/<name>.parquet                        exchange rates
    LAKE/published_scaling/<name>.parquet         published speedup curves

Reading API (what the reports use; all return Arrow objects with the schemas of
``gpucompare.schema``)::

    lake = open_lake("./lake")                 # or "s3://bucket/prefix"
    lake.results_dataset()  -> pyarrow.dataset.Dataset   (schema.RESULTS_SCHEMA, partitions mode/date)
    lake.results_table(filter=None) -> pa.Table
    lake.prices_table()     -> pa.Table   (schema.PRICES_SCHEMA: shipped history ∪ lake prices/)
    lake.fx_table()         -> pa.Table   (schema.FX_SCHEMA: shipped rates ∪ lake fx/)
    lake.published_scaling_table() -> pa.Table (schema.PUBLISHED_SCALING_SCHEMA)

Writing API: ``lake.write_results(table)``, ``lake.write_table(kind, name, table)``, and
``ingest_results(lake, "results.jsonl", RunContext(provider=…, instance_type=…, …))`` for a
worker's JSON Lines file (every record validated with ``bench_tasks.record.validate_record``;
a bad record is refused with its line number and field, and nothing of the file is written).

Why writes are safe:

* atomic — a local file is written under a hidden temporary name (``.<name>.tmp-<uuid>``,
  which neither pyarrow's dataset discovery nor a ``*.parquet`` glob matches) and renamed
  into place; an S3 object appears only when its PUT (or multipart upload) completes.
  A batch of files is serialised in memory first, then committed; if putting one fails,
  what was put so far is undone: a failed ingest leaves the lake as it was.
* idempotent — ``<identity>`` hashes run id, provider, instance type, region, market,
  target, mode and date, and each file carries a hash of its data (``ingested_at`` aside)
  in its metadata. Ingesting the same data again writes nothing; ingesting changed data
  of the same identity replaces the previous version instead of adding a copy.
* no torn reads — locally, a new version is renamed over the old name (a reader that
  opened the old file keeps reading it; a listing always finds the name). S3 has no such
  swap and a Parquet read there is several ranged GETs, which an overwrite would tear
  apart; so on S3 files are never overwritten: a version gets its own name
  (``<run>-<identity>-<content key>.parquet``) and the versions it supersedes are deleted
  once all new files are in. Meanwhile an S3 reader may see both versions for a moment
  (the reports keep the newest result of each configuration) or miss a deleted one
  (``file_vanished(exc)``; ``Lake.results_table`` reads again by itself).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import os
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from bench_tasks.record import RecordError, validate_record
from gpucompare import schema
from gpucompare.errors import PermanentError

if TYPE_CHECKING:
    from gpucompare.compaction import CompactionSummary

DEFAULT_LAKE = "./lake"
COMPRESSION = "zstd"
READ_ATTEMPTS = 3
TABLE_KINDS: tuple[str, ...] = ("results", "prices", "fx", "published_scaling")
#: Columns that identify one ingest unit: one file per unit and partition.
RUN_IDENTITY: tuple[str, ...] = ("run_id", "provider", "instance_type", "region", "market", "target")

_SAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]+")  # no "=": it would read as a Hive key


class LakeError(PermanentError):
    """A lake URI or table that cannot be used; the message says which and why."""


@dataclass(frozen=True)
class PendingFile:
    """A file serialised in memory, waiting to be committed (see ``Lake.commit``).

    ``stem`` is its path below the lake without the ending; ``content_key`` a hash of its
    data (``ingested_at`` aside), also stored in the file's metadata."""

    stem: str
    data: bytes
    content_key: str
    #: paths (relative to the lake) whose rows this file holds: deleted once it is committed
    #: (a compacted file's originals, see ``gpucompare.compaction``)
    supersedes: tuple[str, ...] = ()


def _s3_endpoint() -> str | None:
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None


def _filesystem_for(uri: str) -> tuple[pafs.FileSystem, str]:
    if uri.startswith("s3://"):
        bucket_and_prefix = uri[len("s3://"):].strip("/")
        if not bucket_and_prefix:
            raise LakeError(f"lake URI {uri!r} names no bucket (expected s3://bucket/prefix)")
        endpoint = _s3_endpoint()
        if endpoint is None:
            fs, path = pafs.FileSystem.from_uri(uri)
            return fs, path.rstrip("/")
        scheme, _, host = endpoint.partition("://")
        if scheme not in ("http", "https") or not host:
            raise LakeError(f"AWS_ENDPOINT_URL {endpoint!r} must be http(s)://host[:port]")
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
        fs = pafs.S3FileSystem(endpoint_override=host.rstrip("/"), scheme=scheme, region=region)
        return fs, bucket_and_prefix
    if "://" in uri and not uri.startswith("file://"):
        raise LakeError(f"lake URI {uri!r}: scheme not supported (use a local path, file:// or s3://)")
    local = uri[len("file://"):] if uri.startswith("file://") else uri
    path = Path(local).expanduser().resolve()
    return pafs.LocalFileSystem(), path.as_posix()


def put_file(local_path: str | Path, uri: str) -> None:
    """Copy a local file to ``uri`` (a local path or ``s3://bucket/key``), whole or not at all."""
    fs, path = _filesystem_for(uri)
    data = Path(local_path).read_bytes()
    if isinstance(fs, pafs.LocalFileSystem):
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.partial")
        partial.write_bytes(data)
        partial.replace(target)
        return
    with fs.open_output_stream(path) as out:  # an S3 object appears only when the PUT completes
        out.write(data)


def delete_file(uri: str) -> None:
    """Remove the file at ``uri`` (local path or ``s3://``); nothing if it is already gone."""
    fs, path = _filesystem_for(uri)
    try:
        fs.delete_file(path)
    except FileNotFoundError:
        pass


def open_lake(uri: str | None = None, *, filesystem: pafs.FileSystem | None = None) -> Lake:
    """Open the lake at ``uri`` (default ``./lake``); ``filesystem`` overrides the one derived
    from the URI (``uri`` is then the root path inside that filesystem)."""
    uri = uri or DEFAULT_LAKE
    if filesystem is not None:
        return Lake(uri=uri, fs=filesystem, root=uri.rstrip("/"))
    fs, root = _filesystem_for(uri)
    return Lake(uri=uri, fs=fs, root=root)


def file_vanished(exc: BaseException) -> bool:
    """Whether a read failed because a listed file was deleted meanwhile (local or S3)."""
    text = str(exc)
    return isinstance(exc, FileNotFoundError) or any(
        marker in text for marker in ("NO_SUCH_KEY", "RESOURCE_NOT_FOUND", "does not exist"))


def safe_name(text: str) -> str:
    """``text`` reduced to characters safe in a file name and a Hive path segment."""
    cleaned = _SAFE_NAME.sub("_", text).strip("._")
    return cleaned[:80] or "unnamed"


def _to_parquet_bytes(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, compression=COMPRESSION)
    return sink.getvalue()


def _content_key(values: Iterable[object]) -> str:
    digest = hashlib.sha256("\x1f".join("" if v is None else str(v) for v in values).encode())
    return digest.hexdigest()[:16]


def _content_key_of(data: bytes) -> str | None:
    """The content key stored in a committed Parquet file's metadata, if any."""
    try:
        metadata = pq.read_schema(pa.BufferReader(data)).metadata or {}
    except pa.ArrowInvalid:
        return None
    key = metadata.get(CONTENT_KEY_METADATA)
    return key.decode() if key else None


def _table_key(table: pa.Table) -> str:
    """Hash of a table's data, ignoring ``ingested_at`` (which differs at every ingest)."""
    if "ingested_at" in table.column_names:
        table = table.drop_columns(["ingested_at"])
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table.combine_chunks())
    return hashlib.sha256(sink.getvalue()).hexdigest()[:12]


CONTENT_KEY_METADATA = b"gpucompare.content_key"


def _pending(stem: str, table: pa.Table) -> PendingFile:
    key = _table_key(table)
    metadata = {**(table.schema.metadata or {}), CONTENT_KEY_METADATA: key.encode()}
    return PendingFile(stem, _to_parquet_bytes(table.replace_schema_metadata(metadata)), key)


@dataclass(frozen=True)
class Lake:
    """An open lake: a filesystem and a root path inside it."""

    uri: str
    fs: pafs.FileSystem
    root: str

    # ---- paths -------------------------------------------------------------------------
    def path(self, *parts: str) -> str:
        """Absolute path (inside ``fs``) of ``parts`` below the lake root."""
        return "/".join([self.root.rstrip("/"), *parts]) if parts else self.root

    def _exists(self, path: str) -> bool:
        return self.fs.get_file_info(path).type != pafs.FileType.NotFound

    def list_files(self, kind: str) -> list[str]:
        """Paths (relative to the lake) of the committed Parquet files of one table, sorted.

        For ``results``, files a compacted file of their partition supersedes are left out
        (``compaction.effective_files``), so every row is listed once during a compaction."""
        self._check_kind(kind)
        base = self.path(kind)
        if not self._exists(base):
            return []
        selector = pafs.FileSelector(base, recursive=True)
        root = self.root.rstrip("/") + "/"
        found = []
        for info in self.fs.get_file_info(selector):
            name = info.base_name
            committed = name.endswith(".parquet") and not name.startswith((".", "_"))
            if info.type == pafs.FileType.File and committed:
                found.append(info.path[len(root):] if info.path.startswith(root) else info.path)
        if kind == "results":
            from gpucompare.compaction import effective_files

            return effective_files(self, sorted(found))
        return sorted(found)

    @staticmethod
    def _check_kind(kind: str) -> None:
        if kind not in TABLE_KINDS:
            raise LakeError(f"table {kind!r} is not one of {', '.join(TABLE_KINDS)}")

    # ---- reading -----------------------------------------------------------------------
    def results_dataset(self) -> ds.Dataset:
        """The results as a Hive-partitioned Arrow dataset (empty if nothing was ingested)."""
        base = self.path("results")
        # the listing, not discovery: it leaves out temporary and hidden files, and files a
        # compacted file supersedes (see gpucompare.compaction)
        files = [self.path(rel) for rel in self.list_files("results")]
        if not files:
            return ds.dataset(schema.empty_results())
        return ds.dataset(
            files,
            filesystem=self.fs,
            format="parquet",
            schema=schema.RESULTS_SCHEMA,
            partitioning=ds.partitioning(schema.PARTITION_SCHEMA, flavor="hive"),
            partition_base_dir=base,
        )

    def results_table(self, filter: pc.Expression | None = None,  # noqa: A002
                      columns: list[str] | None = None) -> pa.Table:
        """The results (optionally filtered, optionally only some columns) as one table.

        Discovers the files again if one vanished between listing and reading (a concurrent
        re-ingest deleting the version it superseded)."""
        for _ in range(READ_ATTEMPTS - 1):
            try:
                return self.results_dataset().to_table(filter=filter, columns=columns)
            except OSError as exc:
                if not file_vanished(exc):
                    raise
        return self.results_dataset().to_table(filter=filter, columns=columns)

    def _read_kind(self, kind: str, table_schema: pa.Schema) -> pa.Table:
        for attempt in range(READ_ATTEMPTS):
            try:
                tables = [pq.read_table(self.path(rel), filesystem=self.fs).cast(table_schema)
                          for rel in self.list_files(kind)]
                break
            except OSError as exc:  # a version superseded meanwhile (S3): list again
                if attempt == READ_ATTEMPTS - 1 or not file_vanished(exc):
                    raise
        return pa.concat_tables(tables) if tables else table_schema.empty_table()

    def prices_table(self, include_shipped: bool = True) -> pa.Table:
        """Price history: the shipped CSVs (``gpucompare/data/prices``) and the lake's ``prices/``."""
        from gpucompare import prices

        parts = [self._read_kind("prices", schema.PRICES_SCHEMA)]
        if include_shipped:
            parts.append(prices.shipped_prices())
        return prices.deduplicate_prices(pa.concat_tables(parts))

    def fx_table(self, include_shipped: bool = True) -> pa.Table:
        """Exchange rates: the shipped CSV (``gpucompare/data/fx``) and the lake's ``fx/``."""
        from gpucompare import prices

        parts = [self._read_kind("fx", schema.FX_SCHEMA)]
        if include_shipped:
            parts.append(prices.shipped_fx())
        return prices.deduplicate_fx(pa.concat_tables(parts))

    def published_scaling_table(self) -> pa.Table:
        """Published speedup curves imported with ``import-published --scaling``."""
        return self._read_kind("published_scaling", schema.PUBLISHED_SCALING_SCHEMA)

    # ---- writing -----------------------------------------------------------------------
    def write_results(self, table: pa.Table) -> list[str]:
        """Write result rows (``schema.RESULTS_SCHEMA`` columns incl. ``mode`` and ``date``).

        One file per run identity (``RUN_IDENTITY``) and partition; a previous version of
        the same identity is replaced (see ``commit``). All or nothing. Returns the paths.
        """
        return self.commit(self.plan_results(table))

    def plan_results(self, table: pa.Table) -> list[PendingFile]:
        """Serialise result rows into the files ``write_results`` would commit (no I/O)."""
        missing = [name for name in schema.RESULTS_SCHEMA.names if name not in table.column_names]
        if missing:
            raise LakeError(f"results table lacks columns: {', '.join(missing)}")
        table = table.select(schema.RESULTS_SCHEMA.names).cast(schema.RESULTS_SCHEMA)
        if table.num_rows == 0:
            return []
        group_columns = [*RUN_IDENTITY, *schema.PARTITION_COLUMNS]
        if table["mode"].null_count or table["date"].null_count:
            raise LakeError("every result row needs a mode and a date (the partition columns)")
        # one pass: the row numbers of each group, then one take() per file
        row_numbers = pa.array(range(table.num_rows), pa.int64())
        numbered = table.select(group_columns).append_column("_row", row_numbers)
        groups = numbered.group_by(group_columns, use_threads=False).aggregate([("_row", "list")])
        pending = []
        for key in groups.to_pylist():
            part = table.take(pa.array(key["_row_list"], pa.int64()))
            identity = _content_key(key[c] for c in group_columns)
            partition = f"results/mode={safe_name(key['mode'])}/date={key['date'].isoformat()}"
            stem = f"{partition}/{safe_name(key['run_id'] or 'run')}-{identity}"
            pending.append(_pending(stem, part.select(schema.RESULTS_FILE_SCHEMA.names)))
        return pending

    def write_table(self, kind: str, name: str, table: pa.Table) -> str:
        """Write (or replace) the table file ``LAKE/<kind>/<name>`` atomically; returns its path."""
        return self.commit(self.plan_table(kind, name, table))[0]

    def plan_table(self, kind: str, name: str, table: pa.Table) -> list[PendingFile]:
        """Serialise one unpartitioned table file (``prices``, ``fx``, ``published_scaling``)."""
        self._check_kind(kind)
        if kind == "results":
            raise LakeError("results are written with write_results (partitioned)")
        expected = {"prices": schema.PRICES_SCHEMA, "fx": schema.FX_SCHEMA,
                    "published_scaling": schema.PUBLISHED_SCALING_SCHEMA}[kind]
        try:
            table = table.select(expected.names).cast(expected)
        except (KeyError, pa.ArrowInvalid) as exc:
            raise LakeError(f"{kind} table does not match its schema: {exc}") from None
        return [_pending(f"{kind}/{safe_name(name)}", table)]

    @property
    def is_local(self) -> bool:
        return isinstance(self.fs, pafs.LocalFileSystem)

    def file_path(self, pending: PendingFile) -> str:
        """Where ``pending`` is committed, relative to the lake (see ``commit``)."""
        if self.is_local:
            return f"{pending.stem}.parquet"
        return f"{pending.stem}-{pending.content_key}.parquet"

    def commit(self, files: list[PendingFile]) -> list[str]:
        """Put every pending file in place, or none; returns their paths (relative).

        A file whose data is already committed is left alone, so committing the same data
        twice changes nothing. If putting one file fails, what was put so far is undone and
        the lake is as it was.

        How a newer version replaces an older one differs, because the two stores differ:
        locally, ``rename(2)`` over the same name swaps it whole (a reader that opened the
        old file keeps reading it, a directory listing always finds the name). S3 has no
        such swap, and a Parquet read there is several ranged GETs that an overwrite would
        tear apart, so there a version gets its own name (``<stem>-<content key>``) and the
        versions it supersedes are deleted once every new file is in; meanwhile a reader may
        see both for a moment, or miss a deleted one (``file_vanished``: read again).
        """
        from gpucompare.compaction import route_into_compacted

        # a partition already compacted takes new runs and new versions into its compacted file
        files, unchanged = route_into_compacted(self, files)
        if self.is_local:
            self._commit_replacing(files)
        else:
            self._commit_immutable(files)
        for pending in files:  # only once every file is in: a superseded file is never the sole copy
            for rel in pending.supersedes:
                self._delete_if_present(self.path(rel))
        return [self.file_path(pending) for pending in files] + unchanged

    def _delete_if_present(self, path: str) -> None:
        try:
            self.fs.delete_file(path)
        except OSError as exc:
            if not file_vanished(exc):
                raise

    def compact(self, before: dt.date | None = None) -> CompactionSummary:
        """Merge each results partition (mode, date) dated before ``before`` (default: all)
        into one compacted zstd file; see ``gpucompare.compaction`` for the guarantees."""
        from gpucompare.compaction import compact

        return compact(self, before)

    def _commit_replacing(self, files: list[PendingFile]) -> None:
        previous: list[tuple[str, bytes | None]] = []
        try:
            for pending in files:
                target = self.path(self.file_path(pending))
                old = self._read_bytes(target)
                if old is not None and _content_key_of(old) == pending.content_key:
                    continue
                previous.append((target, old))
                self._put_atomic(target, pending.data)
        except BaseException:
            for target, old in reversed(previous):
                try:
                    if old is None:
                        self.fs.delete_file(target)
                    else:
                        self._put_atomic(target, old)
                except OSError:  # pragma: no cover - best effort; the original error is re-raised
                    continue
            raise

    def _commit_immutable(self, files: list[PendingFile]) -> None:
        created: list[str] = []
        try:
            for pending in files:
                target = self.path(self.file_path(pending))
                if self._exists(target):
                    continue
                self._put_atomic(target, pending.data)
                created.append(target)
        except BaseException:
            for target in reversed(created):
                try:
                    self.fs.delete_file(target)
                except OSError:  # pragma: no cover - best effort; the original error is re-raised
                    continue
            raise
        for pending in files:
            self._delete_superseded(pending)

    def _delete_superseded(self, pending: PendingFile) -> None:
        directory, keep = self.path(self.file_path(pending)).rsplit("/", 1)
        prefix = pending.stem.rsplit("/", 1)[-1] + "-"
        for info in self.fs.get_file_info(pafs.FileSelector(directory, allow_not_found=True)):
            name = info.base_name
            if (info.type == pafs.FileType.File and name.startswith(prefix) and name != keep
                    and name.endswith(".parquet") and len(name) == len(keep)):
                self.fs.delete_file(info.path)

    def _read_bytes(self, path: str) -> bytes | None:
        if not self._exists(path):
            return None
        with self.fs.open_input_stream(path) as stream:
            return stream.read()

    def _put_atomic(self, path: str, data: bytes) -> None:
        parent = path.rsplit("/", 1)[0]
        if self.is_local:
            self.fs.create_dir(parent, recursive=True)
            base = path.rsplit("/", 1)[1]
            temp = f"{parent}/.{base}.tmp-{uuid.uuid4().hex}"
            try:
                with open(temp, "wb") as handle:
                    handle.write(data)
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(temp, path)  # rename(2): the file appears whole or not at all
            finally:
                if os.path.exists(temp):
                    os.remove(temp)
        else:
            # An S3 object becomes visible only once its PUT / multipart upload completes.
            with self.fs.open_output_stream(path) as stream:
                stream.write(data)


def describe(lake: Lake) -> list[str]:
    """Human-readable lines: files and rows of every table, results by mode, date and target."""
    lines = [f"lake {lake.uri}"]
    results = lake.results_table(columns=["mode", "date", "target"]) if lake.list_files("results") else None
    lines.append(f"  results: {len(lake.list_files('results'))} file(s), "
                 f"{0 if results is None else results.num_rows} row(s)")
    if results is not None and results.num_rows:
        counts = results.group_by(["mode", "date", "target"]).aggregate([([], "count_all")])
        for row in counts.sort_by([("date", "ascending"), ("mode", "ascending")]).to_pylist():
            partition = f"mode={row['mode']} date={row['date']} target={row['target']}"
            lines.append(f"    {partition}: {row['count_all']}")
    own = {"prices": lambda: lake.prices_table(include_shipped=False),
           "fx": lambda: lake.fx_table(include_shipped=False),
           "published_scaling": lake.published_scaling_table}
    for kind, read in own.items():
        lines.append(f"  {kind}: {len(lake.list_files(kind))} file(s), {read().num_rows} row(s)")
    return lines


# ---- ingest of worker result files --------------------------------------------------------
class IngestError(PermanentError):
    """A results file refused at ingest; ``line`` (1-based) and ``field`` name the first culprit."""

    def __init__(self, message: str, *, line: int | None = None, field: str | None = None) -> None:
        super().__init__(message)
        self.line = line
        self.field = field


PROVIDER_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]{0,39}$")
INSTANCE_TYPE_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
REGION_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]{0,31}$")
_FREE_TEXT_MAX = 250


@dataclass(frozen=True)
class RunContext:
    """The orchestrator's columns for the records of one results file."""

    provider: str
    instance_type: str
    region: str | None = None
    market: str = "on_demand"
    target: str = "local"
    source: str | None = None
    dag_run_id: str | None = None

    def validated(self) -> RunContext:
        """Self, after checking every value a user may have typed (raises IngestError)."""
        checks = (
            ("provider", self.provider, PROVIDER_PATTERN, "lower-case letters, digits, - and _ (max 40)"),
            ("instance_type", self.instance_type, INSTANCE_TYPE_PATTERN,
             "letters, digits, '.', - and _ (max 64)"),
        )
        for name, value, pattern, allowed in checks:
            if not isinstance(value, str) or not pattern.match(value):
                raise IngestError(f"{name} {value!r} is not valid (allowed: {allowed})", field=name)
        if self.region is not None and not REGION_PATTERN.match(self.region):
            raise IngestError(f"region {self.region!r} is not valid (e.g. us-east-1)", field="region")
        if self.market not in schema.MARKETS:
            raise IngestError(f"market {self.market!r} is not one of {', '.join(schema.MARKETS)}",
                              field="market")
        measured_targets = tuple(t for t in schema.TARGETS if t != "published")
        if self.target not in measured_targets:
            raise IngestError(
                f"target {self.target!r} is not one of {', '.join(measured_targets)} "
                "(published figures come in through import-published)", field="target")
        for name in ("source", "dag_run_id"):
            value = getattr(self, name)
            if value is not None and (len(value) > _FREE_TEXT_MAX or not value.isprintable()):
                raise IngestError(f"{name} must be printable text of at most {_FREE_TEXT_MAX} characters",
                                  field=name)
        return self


def _timestamp(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).astimezone(dt.UTC)


def _read_results_text(location: str | Path) -> tuple[str, str]:
    """(file name, text) of a results file: a local path or an s3:// URI."""
    text_location = str(location)
    try:
        if text_location.startswith("s3://"):
            fs, path = _filesystem_for(text_location)
            with fs.open_input_stream(path) as stream:
                return path.rsplit("/", 1)[-1], stream.read().decode("utf-8")
        return Path(location).name, Path(location).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise IngestError(f"{text_location}: cannot read results file: {exc}") from None


def parse_results(text: str, name: str = "results") -> list[dict[str, Any]]:
    """Every record of JSON Lines text, validated; raises IngestError naming the line and
    field of the first bad record (blank lines are skipped)."""
    records = []
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise IngestError(f"{name} line {line_no}: not valid JSON ({exc.msg})",
                              line=line_no, field="record") from None
        try:
            records.append(validate_record(record))
        except RecordError as exc:
            raise IngestError(f"{name} line {line_no}: field {exc.field}: {exc.message}",
                              line=line_no, field=exc.field) from None
    if not records:
        raise IngestError(f"{name}: no records (an empty results file is refused)")
    return records


def read_results_file(location: str | Path) -> list[dict[str, Any]]:
    """The validated records of a results file (local path or s3:// URI), see parse_results."""
    name, text = _read_results_text(location)
    return parse_results(text, name)


def results_rows(records: list[dict[str, Any]], context: RunContext, *,
                 ingested_at: dt.datetime | None = None) -> pa.Table:
    """Validated records plus the orchestrator's columns, as a results table."""
    ingested_at = ingested_at or dt.datetime.now(dt.UTC)
    default_source = f"gpucompare {context.target} run"
    rows = []
    for record in records:
        started = _timestamp(record["started_at"])
        row = dict(record)
        row.update(
            started_at=started,
            finished_at=_timestamp(record["finished_at"]),
            provider=context.provider,
            instance_type=context.instance_type,
            region=context.region,
            market=context.market,
            target=context.target,
            source=context.source or default_source,
            dag_run_id=context.dag_run_id,
            ingested_at=ingested_at,
            published_value=None,
            note=None,
            flags=[],
            date=started.date(),
        )
        rows.append(row)
    return pa.Table.from_pylist(rows, schema=schema.RESULTS_SCHEMA)


def ingest_results(lake: Lake, results_file: str | Path, context: RunContext) -> list[str]:
    """Validate a worker results file (local path or s3:// URI) and write it into the lake,
    all or nothing; returns the committed paths. Re-ingesting the same run replaces its files."""
    context = context.validated()
    table = results_rows(read_results_file(results_file), context)
    return lake.write_results(table)
