"""A run's data files written with pyarrow and committed with delta-rs in one transaction
(``lake.datafiles``, ``Lake.replace_run_rows``), on a local folder and on S3 (moto's server).

Real deltalake (its own reader checks every result: ``DeltaTable`` with its statistics-based
file skipping), real Parquet files, real commits; the interleavings of two writers are made
exact by running the second writer at a chosen point of the first (no mocks of the lake).
What each test would catch: statistics delta-rs misreads, a compacted file's other runs lost
or changed, a same-run race leaving the run twice, a failed write leaving files or a version.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from gpucompare.lake import datafiles, schema
from gpucompare.lake import ingest as lake_ingest
from gpucompare.lake import tables as lake
from gpucompare.lake.storage import LakeError
from tests.support.lake_support import run_records, write_records

CONTEXT = lake_ingest.RunContext(provider="local", instance_type="cpu")


def ingest(target: lake.Lake, path: Path, run_id: str) -> lake_ingest.IngestSummary:
    return lake_ingest.ingest_results(target, path, CONTEXT, run_id=run_id)


def delta(target: lake.Lake):  # noqa: ANN201 - deltalake.DeltaTable
    from deltalake import DeltaTable

    return DeltaTable(target.table_uri("results"), storage_options=target.storage_options or None)


def plain_runs(target: lake.Lake) -> Counter:
    """Rows per run as delta-rs reads the table (none of our reading code)."""
    table = pa.table(delta(target).to_pyarrow_table(columns=["run_id", "config_id"]))
    keys = list(zip(table["run_id"].to_pylist(), table["config_id"].to_pylist(), strict=True))
    assert len(keys) == len(set(keys)), "a configuration appears twice"
    return Counter(table["run_id"].to_pylist())


def parquet_files(target: lake.Lake) -> set[str]:
    """Every Parquet file in the results folder, live or not (a listing, for strays)."""
    selector = pafs.FileSelector(target.path("results"), recursive=True, allow_not_found=True)
    return {i.path for i in target.fs.get_file_info(selector) if i.path.endswith(".parquet")}


def test_our_files_carry_statistics_delta_rs_reads_and_skips_by(lake_uri: str, tmp_path: Path) -> None:
    """Row counts, min/max and null counts in the log are the data's: delta-rs's own reader,
    which skips files by them, returns exactly the rows a filter asks for."""
    target = lake.open_lake(lake_uri)
    run_a = run_records("run-a", 30, error_bytes=60_000)
    ingest(target, write_records(tmp_path / "a.jsonl", run_a), "run-a")
    ingest(target, write_records(tmp_path / "b.jsonl", run_records("run-b", 10, speed=50.0)), "run-b")
    actions = pa.table(delta(target).get_add_actions(flatten=True)).to_pylist()
    assert sum(a["num_records"] for a in actions) == 40
    assert all(a["path"].endswith(".zstd.parquet") for a in actions)
    for action in actions:
        live = f"{target.path('results')}/{action['path']}"
        columns = ["run_id", "config_id", "images_per_sec"]
        rows = pq.read_table(target.fs.open_input_file(live), columns=columns)
        assert action["num_records"] == rows.num_rows
        assert action["min.run_id"] == action["max.run_id"] == rows["run_id"][0].as_py()
        configs = sorted(rows["config_id"].to_pylist())
        assert (action["min.config_id"], action["max.config_id"]) == (configs[0], configs[-1])
        speeds = sorted(v for v in rows["images_per_sec"].to_pylist() if v is not None) or [None]
        assert (action["min.images_per_sec"], action["max.images_per_sec"]) == (speeds[0], speeds[-1])
        assert action["null_count.images_per_sec"] == rows["images_per_sec"].null_count
    assert pa.table(delta(target).to_pyarrow_table(filters=[("run_id", "=", "run-b")])).num_rows == 10
    fast = pa.table(delta(target).to_pyarrow_table(filters=[("images_per_sec", ">=", 14.0)]))
    fast_a = sum(1 for r in run_a if (r["images_per_sec"] or 0) >= 14.0)
    assert 0 < fast_a < 30 and Counter(fast["run_id"].to_pylist()) == Counter({"run-b": 10, "run-a": fast_a})
    assert plain_runs(target) == Counter({"run-a": 30, "run-b": 10})


def test_a_run_in_a_compacted_file_is_replaced_and_the_other_runs_rows_kept_exactly(
    lake_uri: str, tmp_path: Path
) -> None:
    """After compaction two runs share each file: re-ingesting one rewrites those files
    without its rows, in the same commit as its new files; the other run's rows are equal
    column by column, and the compacted files are no longer live."""
    target = lake.open_lake(lake_uri)
    ingest(target, write_records(tmp_path / "a.jsonl", run_records("run-a", 20)), "run-a")
    ingest(target, write_records(tmp_path / "b.jsonl", run_records("run-b", 20)), "run-b")
    target.compact()
    compacted = {f.relative for f in target.snapshot("results").files}
    assert len(compacted) == 2  # one file per partition, both runs in each
    before_b = target.results_table().filter(pa.compute.field("run_id") == "run-b").sort_by("config_id")
    version = target.version("results")
    changed = write_records(tmp_path / "a2.jsonl", run_records("run-a", 6, speed=99.0))
    summary = ingest(target, changed, "run-a")
    assert summary.changed and summary.write.version == version + 1 == target.version("results")
    after = target.results_table()
    assert after.filter(pa.compute.field("run_id") == "run-b").sort_by("config_id").equals(before_b)
    speeds = after.filter(pa.compute.field("run_id") == "run-a")["images_per_sec"].to_pylist()
    assert len(speeds) == 6 and min(speeds) >= 99.0
    assert not compacted & {f.relative for f in target.snapshot("results").files}
    assert plain_runs(target) == Counter({"run-a": 6, "run-b": 20})


def test_a_writer_of_the_same_run_that_commits_first_is_not_duplicated(tmp_path: Path) -> None:
    """Writer A has read the log and written its files; writer B replaces the same run and
    commits first (between A's look at the run's files and A's commit). A's commit carries
    the run's transaction id, so delta-rs refuses it; A retries from the new log, removes B's
    files and commits: the run is there once, with A's rows, each writer its own version."""
    uri = str(tmp_path / "lake")
    target = lake.open_lake(uri)
    ingest(target, write_records(tmp_path / "other.jsonl", run_records("other", 4)), "other")
    mine = write_records(tmp_path / "mine.jsonl", run_records("run-x", 8, speed=70.0))
    theirs = write_records(tmp_path / "theirs.jsonl", run_records("run-x", 12, speed=20.0))
    original = lake.Lake.run_files
    calls: list[int] = []

    def b_commits_first(self: lake.Lake, run_id: str, table=None):  # noqa: ANN001, ANN202
        calls.append(1)
        if len(calls) == 1:  # A's first attempt: B's whole ingest happens now
            lake.Lake.run_files = original
            try:
                ingest(lake.open_lake(uri), theirs, "run-x")
            finally:
                lake.Lake.run_files = b_commits_first
        return original(self, run_id, table)

    lake.Lake.run_files = b_commits_first
    try:
        summary = ingest(target, mine, "run-x")
    finally:
        lake.Lake.run_files = original
    assert summary.write.version == 2 and target.version("results") == 2  # B made 1, A 2
    assert plain_runs(target) == Counter({"run-x": 8, "other": 4})
    speeds = target.results_table().filter(pa.compute.field("run_id") == "run-x")["images_per_sec"]
    assert min(speeds.to_pylist()) >= 70.0


def test_two_first_writers_create_the_table_once(tmp_path: Path) -> None:
    """No table yet: writer B creates it (version 0) between A's look and A's create; A's
    create fails, A appends instead and replaces B's rows of the same run."""
    uri = str(tmp_path / "lake")
    target = lake.open_lake(uri)
    mine = write_records(tmp_path / "mine.jsonl", run_records("run-x", 6, speed=70.0))
    theirs = write_records(tmp_path / "theirs.jsonl", run_records("run-x", 10, speed=20.0))
    original = lake.Lake._create_results

    def b_creates_first(self: lake.Lake, *args):  # noqa: ANN002, ANN202
        lake.Lake._create_results = original
        ingest(lake.open_lake(uri), theirs, "run-x")
        return original(self, *args)

    lake.Lake._create_results = b_creates_first
    try:
        summary = ingest(target, mine, "run-x")
    finally:
        lake.Lake._create_results = original
    assert summary.write.version == 1 and target.version("results") == 1
    assert plain_runs(target) == Counter({"run-x": 6})


def test_a_failed_commit_leaves_the_table_and_its_folder_as_they_were(lake_uri: str, tmp_path: Path) -> None:
    """The store refuses the commit (not a conflict): the ingest fails, the version and rows
    are unchanged, and neither the new files nor the rewritten compacted ones stay behind."""
    from deltalake import DeltaTable

    target = lake.open_lake(lake_uri)
    ingest(target, write_records(tmp_path / "a.jsonl", run_records("run-a", 10)), "run-a")
    ingest(target, write_records(tmp_path / "b.jsonl", run_records("run-b", 10)), "run-b")
    target.compact()
    version, files = target.version("results"), parquet_files(target)
    original = DeltaTable.create_write_transaction

    def refused(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        raise OSError("the store refused the commit")

    DeltaTable.create_write_transaction = refused
    try:
        with pytest.raises(OSError, match="refused"):
            ingest(target, write_records(tmp_path / "a2.jsonl", run_records("run-a", 4, speed=99.0)), "run-a")
    finally:
        DeltaTable.create_write_transaction = original
    assert target.version("results") == version
    assert parquet_files(target) == files
    assert plain_runs(target) == Counter({"run-a": 10, "run-b": 10})


def test_a_failed_first_commit_leaves_no_table_and_no_files(tmp_path: Path) -> None:
    from deltalake import transaction

    target = lake.open_lake(str(tmp_path / "lake"))
    original = transaction.create_table_with_add_actions

    def refused(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise OSError("the store refused the commit")

    transaction.create_table_with_add_actions = refused
    try:
        with pytest.raises(OSError, match="refused"):
            ingest(target, write_records(tmp_path / "a.jsonl", run_records("run-a", 6)), "run-a")
    finally:
        transaction.create_table_with_add_actions = original
    assert not target.has_table("results")
    assert parquet_files(target) == set()


def test_an_empty_replacement_removes_the_run_and_keeps_the_others(tmp_path: Path) -> None:
    """``write_results`` of no rows replaces the run by nothing (as the predicate overwrite
    did): its rows go in one commit, another run's stay; on a new lake it creates the table."""
    target = lake.open_lake(str(tmp_path / "lake"))
    empty = lake_ingest.results_rows([], CONTEXT)
    assert target.write_results(empty, run_id="nothing").version == 0
    assert target.has_table("results") and target.results_table().num_rows == 0
    ingest(target, write_records(tmp_path / "a.jsonl", run_records("run-a", 6)), "run-a")
    ingest(target, write_records(tmp_path / "b.jsonl", run_records("run-b", 4)), "run-b")
    assert target.write_results(empty, run_id="run-a").version == 3
    assert plain_runs(target) == Counter({"run-b": 4})


def test_older_rows_gain_the_new_columns_as_null_and_a_clashing_type_is_refused(tmp_path: Path) -> None:
    """A lake written before some columns existed (as delta-rs wrote it then): an ingest adds
    the missing columns to the table's schema, the older rows read them as null; a column
    whose type clashes with the table's is refused and nothing is committed."""
    target = lake.open_lake(str(tmp_path / "lake"))
    newer = {"energy_joules", "energy_method", "avg_power_watts"} & set(schema.RESULTS_SCHEMA.names)
    old_rows = lake_ingest.results_rows(run_records("old", 4), CONTEXT).drop_columns(sorted(newer))
    target.commit("results", lambda: old_rows, predicate=None, partition_by=list(schema.PARTITION_COLUMNS))
    assert not newer & set(target.snapshot("results").arrow_schema.names)
    ingest(target, write_records(tmp_path / "n.jsonl", run_records("new", 4)), "new")
    assert newer <= set(target.snapshot("results").arrow_schema.names)
    table = target.results_table()
    assert Counter(table["run_id"].to_pylist()) == Counter({"old": 4, "new": 4})
    for column in newer:
        assert table[column].null_count == 8
    assert plain_runs(target) == Counter({"old": 4, "new": 4})
    version = target.version("results")
    rows = lake_ingest.results_rows(run_records("clash", 2), CONTEXT)
    target.write_results(rows.append_column("flavour", pa.array(["a", "b"])), run_id="clash")
    with pytest.raises(LakeError, match="flavour"):
        target.write_results(rows.append_column("flavour", pa.array([1, 2])), run_id="clash")
    assert target.version("results") == version + 2  # the schema change and clash's first write


def test_files_roll_over_by_size_and_few_stay_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A partition's rows go to a new file past FILE_BYTES; with more partitions than
    OPEN_FILES interleaved, the least recently used file is closed first (never more than
    OPEN_FILES open): every row is in exactly one file, each add action counting its rows."""
    monkeypatch.setattr(datafiles, "FILE_BYTES", 24_000)
    monkeypatch.setattr(datafiles, "OPEN_FILES", 3)
    open_when_created: list[int] = []
    new_file = datafiles.DataFiles._new_file

    def observed(self: datafiles.DataFiles, partition: dict) -> datafiles._OpenFile:
        open_when_created.append(len(self._open))
        return new_file(self, partition)

    monkeypatch.setattr(datafiles.DataFiles, "_new_file", observed)
    records = []
    for night in range(6):  # six dates x two modes = twelve partitions, interleaved
        records += run_records("many", 40, night=dt.date(2026, 11, 20 + night))
    records = [dict(r, config_id=f"{r['config_id']}-{i}") for i, r in enumerate(records)]
    records = records[::3] + records[1::3] + records[2::3]
    target = lake.open_lake(str(tmp_path / "lake"))
    lake_ingest.ingest_results(target, write_records(tmp_path / "m.jsonl", records), CONTEXT, run_id="many",
                               batch_rows=6)
    files = target.snapshot("results").files
    groups = [pq.ParquetFile(live.path).metadata.num_row_groups for live in files]
    assert len(files) > 12 and max(groups) > 1, groups  # rolled over inside partitions, after a few groups
    assert max(open_when_created) <= 3
    for live in files:
        assert pq.ParquetFile(live.path).metadata.num_rows == live.rows
    assert {(f.partition["mode"], f.partition["date"]) for f in files} == {
        (mode, dt.date(2026, 11, 20 + n)) for mode in ("score", "train") for n in range(6)
    }
    assert plain_runs(target) == Counter({"many": 240})
