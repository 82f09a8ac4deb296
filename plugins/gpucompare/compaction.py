"""Compaction of the results lake: one Parquet file per (mode, date) partition instead of one per run.

Ingest writes one file per run and partition (see ``gpucompare.lake``). A lake written night
by night, machine by machine, ends up with tens of thousands of small files, and opening a
file costs the reports about half a millisecond of CPU whatever its size. ``Lake.compact``
(``python -m gpucompare compact``) merges the files of each partition into one zstd file,
``~compacted.parquet`` (``~compacted-<content key>.parquet`` on S3, where files are never
overwritten). ``~`` never occurs in a run's file name (``lake.safe_name``), so no run file can
be taken for a compacted one.

The compacted file's metadata is its **manifest** (``gpucompare.compaction``, JSON):

* ``runs``: for every run it holds (by the run's file name without ending, ``<run>-<identity>``),
  the content key of the run's data and the rows it occupies (offset, count);
* ``supersedes``: the base names of every file whose rows it holds (the originals it merged,
  an older compacted version, and what those superseded in turn).

**At most one copy, never none.** The compacted file is committed first (atomically: a rename
locally, a completed PUT on S3), then the files it supersedes are deleted. In between, and
after a failure in between, both are on disk; the lake's readers (``Lake.list_files``, hence
``Lake.results_dataset`` and the reports) drop every file named in the ``supersedes`` of a
compacted file of the same partition, so they count each row exactly once at every moment.
The manifest is read only in partitions holding a compacted file *and* another file, which
after a completed compaction is none of them. A reader listing just before the deletions
and opening a deleted original afterwards gets a vanished file (``lake.file_vanished``) and
reads again, as for a re-ingest on S3. Readers that glob the Parquet files directly (Athena,
a DuckDB ``read_parquet('**/*.parquet')``) may count a partition twice in that window of a
few milliseconds, or for good after a failure in it until the next compaction finishes it.

**Idempotent ingest afterwards.** Once a partition holds a compacted file, an ingest into it
goes into that file (``route_into_compacted``, called by ``Lake.commit``): a run already in
it with the same content key writes nothing; changed data of a run replaces its rows in a
new version of the compacted file; a new run is added to it. Compaction and ingest into the
same partition must not run at the same time (the reports DAG compacts only partitions older
than a few days, which nightly ingests do not write).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from gpucompare import schema

if TYPE_CHECKING:
    from gpucompare.lake import Lake, PendingFile

COMPACTED_BASE = "~compacted"
COMPACTION_METADATA = b"gpucompare.compaction"
_DATE_SEGMENT = re.compile(r"(?:^|/)date=(\d{4}-\d{2}-\d{2})$")


def is_compacted(name: str) -> bool:
    """Whether a file's base name is a compacted file's (local or S3 naming)."""
    return name.startswith(COMPACTED_BASE) and name.endswith(".parquet")


@dataclass(frozen=True)
class RunSpan:
    """Where one run's rows sit in a compacted file, and the content key of its data."""

    content_key: str
    offset: int
    rows: int


@dataclass(frozen=True)
class Manifest:
    """The runs a compacted file holds and the files it supersedes (see module docstring)."""

    runs: dict[str, RunSpan]
    supersedes: frozenset[str]

    def to_json(self) -> bytes:
        return json.dumps({
            "runs": {name: [span.content_key, span.offset, span.rows]
                     for name, span in sorted(self.runs.items())},
            "supersedes": sorted(self.supersedes),
        }, separators=(",", ":")).encode()

    @classmethod
    def from_metadata(cls, metadata: dict[bytes, bytes] | None) -> Manifest | None:
        raw = (metadata or {}).get(COMPACTION_METADATA)
        if raw is None:
            return None
        data = json.loads(raw)
        runs = {name: RunSpan(key, int(offset), int(rows))
                for name, (key, offset, rows) in data["runs"].items()}
        return cls(runs=runs, supersedes=frozenset(data["supersedes"]))


def _split(path: str) -> tuple[str, str]:
    directory, _, name = path.rpartition("/")
    return directory, name


def _manifest_at(lake: Lake, path: str) -> Manifest | None:
    """The manifest of a committed compacted file (None if it vanished meanwhile)."""
    from gpucompare.lake import file_vanished

    try:
        with lake.fs.open_input_file(lake.path(path)) as handle:
            return Manifest.from_metadata(pq.read_schema(handle).metadata)
    except OSError as exc:
        if file_vanished(exc):  # superseded by a newer compacted version, which names what it holds
            return None
        raise


def effective_files(lake: Lake, paths: list[str]) -> list[str]:
    """``paths`` (results files relative to the lake) without those a compacted file of the
    same partition supersedes: every row once, whatever stage a compaction is at."""
    by_directory: dict[str, list[str]] = defaultdict(list)
    for path in paths:
        by_directory[_split(path)[0]].append(path)
    superseded: set[str] = set()
    for directory, files in by_directory.items():
        compacted = [p for p in files if is_compacted(_split(p)[1])]
        if not compacted or len(files) == 1:
            continue
        for path in compacted:
            manifest = _manifest_at(lake, path)
            if manifest is not None:
                superseded.update(f"{directory}/{name}" for name in manifest.supersedes
                                  if name != _split(path)[1])
    return [p for p in paths if p not in superseded]


def run_name(lake: Lake, file_name: str) -> str:
    """A run file's name without its ending (and, on S3, without its content key)."""
    stem = file_name.removesuffix(".parquet")
    return stem if lake.is_local else stem.rsplit("-", 1)[0]


@dataclass
class _RunRows:
    table: pa.Table
    content_key: str

    @property
    def newest_ingest(self) -> object:
        if "ingested_at" not in self.table.column_names or self.table.num_rows == 0:
            return None
        return pc.max(self.table["ingested_at"]).as_py()


def _conform(table: pa.Table) -> pa.Table:
    """A file's table with exactly the columns of ``RESULTS_FILE_SCHEMA`` (older files may
    lack a column added since: it is null there)."""
    columns = []
    for fld in schema.RESULTS_FILE_SCHEMA:
        if fld.name in table.column_names:
            columns.append(table[fld.name].cast(fld.type))
        else:
            columns.append(pa.nulls(table.num_rows, fld.type))
    return pa.Table.from_arrays(columns, schema=schema.RESULTS_FILE_SCHEMA)


def _read_file(lake: Lake, path: str) -> tuple[pa.Table, dict[bytes, bytes]]:
    # ParquetFile, not pq.read_table: no partition columns guessed from the path
    with lake.fs.open_input_file(lake.path(path)) as handle:
        parquet = pq.ParquetFile(handle)
        return _conform(parquet.read()), parquet.schema_arrow.metadata or {}


def _runs_of(lake: Lake, path: str) -> tuple[dict[str, _RunRows], frozenset[str]]:
    """The runs held by one results file, and (for a compacted file) what it supersedes."""
    from gpucompare.lake import CONTENT_KEY_METADATA

    table, metadata = _read_file(lake, path)
    name = _split(path)[1]
    manifest = Manifest.from_metadata(metadata)
    if manifest is None:
        key = metadata.get(CONTENT_KEY_METADATA, b"").decode()
        return {run_name(lake, name): _RunRows(table, key)}, frozenset()
    runs = {run: _RunRows(table.slice(span.offset, span.rows), span.content_key)
            for run, span in manifest.runs.items()}
    return runs, manifest.supersedes


def _keep_newest(runs: dict[str, _RunRows], run: str, rows: _RunRows) -> None:
    """Add a run; if two files hold it (a version whose superseded copy was not deleted),
    keep the one ingested last."""
    current = runs.get(run)
    if current is None or (rows.newest_ingest or dt.datetime.min.replace(tzinfo=dt.UTC)) > (
            current.newest_ingest or dt.datetime.min.replace(tzinfo=dt.UTC)):
        runs[run] = rows


def _compacted_pending(lake: Lake, directory: str, runs: dict[str, _RunRows],
                       superseded_names: set[str], read_paths: list[str]) -> PendingFile:
    """The compacted file of one partition holding ``runs`` (in name order), as a PendingFile
    whose commit deletes ``read_paths`` (the files merged) afterwards."""
    from gpucompare.lake import COMPRESSION, CONTENT_KEY_METADATA, PendingFile

    ordered = sorted(runs)
    spans: dict[str, RunSpan] = {}
    offset = 0
    for run in ordered:
        rows = runs[run].table.num_rows
        spans[run] = RunSpan(runs[run].content_key, offset, rows)
        offset += rows
    key = hashlib.sha256("\n".join(f"{run}\x1f{spans[run].content_key}" for run in ordered).encode())
    content_key = key.hexdigest()[:12]
    stem = f"{directory}/{COMPACTED_BASE}"
    own_name = _split(lake.file_path(PendingFile(stem, b"", content_key)))[1]
    manifest = Manifest(runs=spans, supersedes=frozenset(superseded_names - {own_name}))
    tables = [runs[run].table for run in ordered]
    table = pa.concat_tables(tables) if tables else schema.RESULTS_FILE_SCHEMA.empty_table()
    metadata = {**(schema.RESULTS_FILE_SCHEMA.metadata or {}), CONTENT_KEY_METADATA: content_key.encode(),
                COMPACTION_METADATA: manifest.to_json()}
    sink = pa.BufferOutputStream()
    pq.write_table(table.replace_schema_metadata(metadata), sink, compression=COMPRESSION)
    own_path = f"{stem}.parquet" if lake.is_local else f"{stem}-{content_key}.parquet"
    return PendingFile(stem, sink.getvalue().to_pybytes(), content_key,
                       supersedes=tuple(p for p in read_paths if p != own_path))


def _merge_partition(lake: Lake, directory: str, paths: list[str],
                     overrides: dict[str, _RunRows] | None = None) -> PendingFile:
    """One compacted file for a partition: every run of ``paths`` (effective files), with
    ``overrides`` replacing or adding runs."""
    runs: dict[str, _RunRows] = {}
    superseded: set[str] = set()
    for path in paths:
        held, inherited = _runs_of(lake, path)
        superseded.add(_split(path)[1])
        superseded.update(inherited)
        for run, rows in held.items():
            _keep_newest(runs, run, rows)
    runs.update(overrides or {})
    return _compacted_pending(lake, directory, runs, superseded, paths)


def _partition_files(lake: Lake, directory: str) -> list[str]:
    """The effective committed results files of one partition folder (relative paths)."""
    root = lake.root.rstrip("/") + "/"
    found = []
    for info in lake.fs.get_file_info(pafs.FileSelector(lake.path(directory), allow_not_found=True)):
        name = info.base_name
        if info.type == pafs.FileType.File and name.endswith(".parquet") and not name.startswith((".", "_")):
            found.append(info.path[len(root):] if info.path.startswith(root) else info.path)
    return effective_files(lake, sorted(found))


def route_into_compacted(lake: Lake, files: list[PendingFile]) -> tuple[list[PendingFile], list[str]]:
    """Pending results files aimed at compacted partitions, turned into new versions of those
    partitions' compacted files. Returns (files to commit, paths already holding their data)."""
    out: list[PendingFile] = []
    unchanged: list[str] = []
    by_directory: dict[str, list[PendingFile]] = defaultdict(list)
    for pending in files:
        directory, base = _split(pending.stem)
        if pending.stem.startswith("results/") and not base.startswith(COMPACTED_BASE):
            by_directory[directory].append(pending)
        else:
            out.append(pending)
    for directory, pendings in by_directory.items():
        present = _partition_files(lake, directory)
        compacted = [p for p in present if is_compacted(_split(p)[1])]
        if not compacted:
            out.extend(pendings)
            continue
        held: dict[str, RunSpan] = {}
        for path in compacted:
            manifest = _manifest_at(lake, path)
            held.update(manifest.runs if manifest else {})
        overrides = {}
        for pending in pendings:
            run = _split(pending.stem)[1]
            if run in held and held[run].content_key == pending.content_key:
                continue
            table = pq.ParquetFile(pa.BufferReader(pending.data)).read()
            overrides[run] = _RunRows(_conform(table), pending.content_key)
        if overrides:
            out.append(_merge_partition(lake, directory, present, overrides))
        else:
            unchanged.extend(compacted)
    return out, unchanged


@dataclass
class CompactionSummary:
    """What ``Lake.compact`` did."""

    partitions_compacted: int = 0
    partitions_left: int = 0
    files_before: int = 0
    files_after: int = 0
    rows: int = 0
    written: list[str] = field(default_factory=list)

    def describe(self) -> str:
        return (f"compacted {self.partitions_compacted} partition(s): {self.files_before} file(s) → "
                f"{self.files_after}, {self.rows} row(s); "
                f"{self.partitions_left} partition(s) left as they were")


def compact(lake: Lake, before: dt.date | None = None) -> CompactionSummary:
    """Merge the files of every results partition dated before ``before`` (all if None) into
    one compacted file each; a partition is committed whole before the next one starts."""
    summary = CompactionSummary()
    by_directory: dict[str, list[str]] = defaultdict(list)
    for path in lake.list_files("results"):  # already without superseded files
        by_directory[_split(path)[0]].append(path)
    for directory, paths in sorted(by_directory.items()):
        match = _DATE_SEGMENT.search(directory)
        too_new = match is not None and before is not None and dt.date.fromisoformat(match.group(1)) >= before
        if match is None or too_new or len(paths) < 2:
            summary.partitions_left += 1
            continue
        pending = _merge_partition(lake, directory, paths)
        summary.written.extend(lake.commit([pending]))
        summary.partitions_compacted += 1
        summary.files_before += len(paths)
        summary.files_after += 1
        summary.rows += pq.ParquetFile(pa.BufferReader(pending.data)).metadata.num_rows
    return summary
