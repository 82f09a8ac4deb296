"""Data files of a Delta table written here with pyarrow, for delta-rs to commit.

delta-rs's ``write_deltalake`` holds everything it writes until its commit (a 206 MB results
file of 64 KiB records peaked at 1.1 GB), so the results of a run are written here instead:
``DataFiles`` streams Arrow batches into Parquet files with ``pyarrow.parquet.ParquetWriter``
(one row group per batch and partition: memory is one batch, whatever the run's size), one
file per partition at a time, a new one past ``FILE_BYTES``, into the table's folder through
the lake's own filesystem (local or S3). Each finished file becomes an ``AddAction`` with its
partition values, size and statistics (``numRecords``; ``minValues``/``maxValues`` and
``nullCount`` of the first ``STATS_COLUMNS`` columns, as delta-rs keeps them), which
``lake.tables`` commits with delta-rs's ``create_write_transaction`` in one transaction.

Until that commit a file is a stray: the log does not list it, so no reader ever sees it
(``lake.reading`` reads the log's files only). A failed write deletes its files
(``DataFiles.discard``); a killed one leaves them, as delta-rs's own writes would.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from gpucompare.config import patterns
from gpucompare.lake.storage import LakeError

#: A data file is closed, and the partition's next rows go to a new one, past this many bytes.
FILE_BYTES = 32 * 1024 * 1024
#: Files open at once (one per partition being written); the least recently used is closed
#: beyond this, so a run spread over many days holds few writers (and S3 upload buffers).
OPEN_FILES = 8
#: Rows per Parquet row group at most (a batch of more rows is cut into groups of this many).
ROW_GROUP_ROWS = 8192
#: Columns with statistics: the first this many of the file (Delta's default
#: ``delta.dataSkippingNumIndexedCols``; delta-rs reads no statistics of the later ones).
STATS_COLUMNS = 32
#: String statistics longer than this are left out (the ``error`` text would bloat the log;
#: a missing min/max only means a file is not skipped).
STATS_STRING_CHARS = 64


def partition_text(value: Any) -> str:
    """A partition value as the Delta log and the folder name hold it (dates ISO)."""
    text = value.isoformat() if isinstance(value, dt.date) else str(value)
    if not patterns.PARTITION_VALUE.fullmatch(text):
        raise LakeError(f"partition value {value!r} is not allowed (letters, digits, '.', '_', '-')")
    return text


@dataclass
class _ColumnStats:
    """min/max/null count of one column over the rows of one file so far."""

    nulls: int = 0
    low: Any = None
    high: Any = None
    bounded: bool = True  # False once a value has no JSON statistic (long string, non-finite)

    def update(self, column: pa.ChunkedArray | pa.Array) -> None:
        self.nulls += column.null_count
        if not self.bounded or column.null_count == len(column):
            return
        extremes = pc.min_max(column).as_py()
        for value in (extremes["min"], extremes["max"]):
            if not _has_statistic(value):
                self.bounded = False
                return
        self.low = extremes["min"] if self.low is None else min(self.low, extremes["min"])
        self.high = extremes["max"] if self.high is None else max(self.high, extremes["max"])


def _has_statistic(value: Any) -> bool:
    if isinstance(value, str):
        return len(value) <= STATS_STRING_CHARS
    if isinstance(value, float):
        return math.isfinite(value)
    return True


def _stat_json(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if isinstance(value, dt.date):
        return value.isoformat()
    return value


def _has_stats(data_type: pa.DataType) -> bool:
    """Whether Delta keeps min/max for a column of this type (delta-rs: primitive leaves)."""
    if pa.types.is_timestamp(data_type):
        return data_type.tz is not None  # a naive timestamp would need timestamp_ntz: none here
    return (
        pa.types.is_string(data_type)
        or pa.types.is_large_string(data_type)
        or pa.types.is_integer(data_type)
        or pa.types.is_floating(data_type)
        or pa.types.is_date32(data_type)
    )


@dataclass
class _OpenFile:
    """One Parquet file being written: its writer, output stream and statistics so far."""

    relative: str
    path: str
    partition: dict[str, str]
    sink: Any
    writer: pq.ParquetWriter
    rows: int = 0
    stats: dict[str, _ColumnStats] = field(default_factory=dict)

    def write(self, table: pa.Table) -> None:
        self.writer.write_table(table, row_group_size=min(max(1, table.num_rows), ROW_GROUP_ROWS))
        self.rows += table.num_rows
        for name in table.column_names[:STATS_COLUMNS]:
            if _has_stats(table.schema.field(name).type):
                self.stats.setdefault(name, _ColumnStats()).update(table.column(name))

    def close(self) -> Any:
        """Finish the file; its ``AddAction`` (delta-rs's) with size and statistics."""
        from deltalake.transaction import AddAction

        self.writer.close()
        size = self.sink.tell()
        self.sink.close()
        bounded = {n: s for n, s in self.stats.items() if s.bounded and s.low is not None}
        stats = {
            "numRecords": self.rows,
            "minValues": {n: _stat_json(s.low) for n, s in bounded.items()},
            "maxValues": {n: _stat_json(s.high) for n, s in bounded.items()},
            "nullCount": {n: s.nulls for n, s in self.stats.items()},
        }
        return AddAction(
            path=self.relative,
            size=size,
            partition_values=dict(self.partition),
            modification_time=int(time.time() * 1000),
            data_change=True,
            stats=json.dumps(stats, sort_keys=True),
        )


class DataFiles:
    """The Parquet files one write adds to a partitioned table, written as batches arrive.

    ``write`` takes batches that hold the partition columns (rows are routed to one file per
    partition) or, with ``partition=``, batches of one known partition without them (a file
    rewritten without some rows). ``finish`` closes every file and returns their add actions;
    ``discard`` deletes every file written so far (a write that will not be committed)."""

    def __init__(self, fs: pafs.FileSystem, table_path: str, partition_columns: list[str]) -> None:
        self.fs = fs
        self.table_path = table_path.rstrip("/")
        self.partition_columns = list(partition_columns)
        self.file_schema: pa.Schema | None = None  # the first batch's, partition columns aside
        self.adds: list[Any] = []
        self.written: list[str] = []
        self._open: OrderedDict[tuple[str, ...], _OpenFile] = OrderedDict()
        self._local = isinstance(fs, pafs.LocalFileSystem)

    @property
    def rows(self) -> int:
        """Rows written so far (finished and open files)."""
        return sum(_rows(a) for a in self.adds) + sum(f.rows for f in self._open.values())

    def write_all(self, data: pa.Table | pa.RecordBatchReader | Iterable[pa.RecordBatch]) -> None:
        """Every batch of ``data`` (a table, a reader or batches holding the partition columns)."""
        batches = data.to_batches(max_chunksize=ROW_GROUP_ROWS) if isinstance(data, pa.Table) else data
        for batch in batches:
            self.write(batch)

    def write(self, batch: pa.RecordBatch | pa.Table, partition: dict[str, Any] | None = None) -> None:
        """Write ``batch``: one row group per partition it holds."""
        table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
        if table.num_rows == 0:
            return
        if partition is not None:
            self._write_part({c: partition_text(partition[c]) for c in self.partition_columns}, table)
            return
        keys = table.select(self.partition_columns)
        for column in self.partition_columns:
            if nulls := keys.column(column).null_count:
                raise LakeError(f"partition column {column} is null in {nulls} row(s)")
        rows = table.drop_columns(self.partition_columns)
        combos = keys.group_by(self.partition_columns).aggregate([]).to_pylist()
        if len(combos) == 1:  # the usual case: no filtered copy of the batch
            self._write_part({c: partition_text(combos[0][c]) for c in self.partition_columns}, rows)
            return
        for combo in combos:
            mask = None
            for column in self.partition_columns:
                value = pa.scalar(combo[column], keys.schema.field(column).type)
                equal = pc.equal(keys.column(column), value)
                mask = equal if mask is None else pc.and_(mask, equal)
            self._write_part({c: partition_text(combo[c]) for c in self.partition_columns}, rows.filter(mask))

    def _write_part(self, partition: dict[str, str], table: pa.Table) -> None:
        if self.file_schema is None:
            self.file_schema = table.schema
        elif not table.schema.equals(self.file_schema):
            table = table.select(self.file_schema.names).cast(self.file_schema)
        key = tuple(partition[c] for c in self.partition_columns)
        handle = self._open.pop(key, None) or self._new_file(partition)
        self._open[key] = handle  # most recently used last
        handle.write(table)
        if handle.sink.tell() >= FILE_BYTES:
            self.adds.append(self._open.pop(key).close())
        while len(self._open) > OPEN_FILES:
            _, oldest = self._open.popitem(last=False)
            self.adds.append(oldest.close())

    def _new_file(self, partition: dict[str, str]) -> _OpenFile:
        folder = "/".join(f"{c}={partition[c]}" for c in self.partition_columns)
        relative = f"{folder}/part-00000-{uuid.uuid4()}-c000.zstd.parquet"
        path = f"{self.table_path}/{relative}"
        if self._local:  # S3 has no folders (creating one would leave a marker object)
            self.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        self.written.append(path)
        sink = self.fs.open_output_stream(path)
        try:
            writer = pq.ParquetWriter(sink, self.file_schema, compression="zstd")
        except BaseException:
            sink.close()
            raise
        return _OpenFile(relative=relative, path=path, partition=partition, sink=sink, writer=writer)

    def finish(self) -> list[Any]:
        """Close every open file; the add actions of every file written."""
        while self._open:
            _, handle = self._open.popitem(last=False)
            self.adds.append(handle.close())
        return list(self.adds)

    def discard(self) -> None:
        """Delete every file written (best effort: what remains is a stray no reader sees)."""
        for handle in self._open.values():
            for closing in (handle.writer.close, handle.sink.close):
                with contextlib.suppress(Exception):  # a broken stream: its file is deleted below
                    closing()
        self._open.clear()
        for path in self.written:
            try:
                self.fs.delete_file(path)
            except (FileNotFoundError, OSError):
                pass
        self.written.clear()
        self.adds.clear()


def _rows(add: Any) -> int:
    return int(json.loads(add.stats)["numRecords"])
