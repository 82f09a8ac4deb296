"""Step 1 of ``latest`` and its report cache (reports.newest) on small lakes written through the
real ingest path: a report with the cache gives the same tables as one without it, whatever
happened to the lake in between, and reads only the files the cache does not cover."""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpucompare.lake.ingest import RunContext, results_rows
from gpucompare.lake.tables import Lake, open_lake
from gpucompare.reports import newest
from gpucompare.reports.build import build_reports
from gpucompare.reports.inputs import ReportInputs
from gpucompare.reports.report_set import ReportSet
from tests.support.reports_data import ingest, inputs, price, record

NIGHTS = [dt.date(2026, 3, 1) + dt.timedelta(days=n) for n in range(4)]
MACHINES = ("g5.xlarge", "g6.xlarge")
PRICES = [price(machine, 1.0 + i) for i, machine in enumerate(MACHINES)]


@pytest.fixture
def lake(tmp_path: Path) -> Lake:
    """Four nights of two machines, two configurations a night (one run per machine and night)."""
    target = open_lake(str(tmp_path / "lake"))
    for i, machine in enumerate(MACHINES):
        ingest(target, [record(batch_size=b, images_per_sec=100.0 * (i + 1) + n + b, night=night,
                               minute=b % 7) for n, night in enumerate(NIGHTS) for b in (16, 32)],
               instance_type=machine)
    return target


def report(lake: Lake, as_of: int | None = None) -> ReportSet:
    base = inputs(lake, PRICES, [])
    if as_of is not None:
        snapshot = ReportInputs.from_lake(lake.uri, as_of=as_of)
        base.results, base.as_of = snapshot.results, snapshot.as_of
    return build_reports(base, currency="USD")


def cache_file(lake: Lake) -> Path:
    return Path(newest.NewestCache(lake).path)


def live_files(lake: Lake) -> int:
    return len(lake.snapshot("results").files)


def assert_same_as_without_cache(lake: Lake, with_cache: ReportSet) -> None:
    """The set equals one built with no cache (removed first; that build writes it again)."""
    cache_file(lake).unlink(missing_ok=True)
    cold = report(lake)
    assert cold.files_read == live_files(lake)
    assert with_cache.rows_scanned == cold.rows_scanned and with_cache.newest_date == cold.newest_date
    assert set(with_cache.tables) == set(cold.tables)
    for name, table in cold.tables.items():
        assert with_cache.tables[name].equals(table), name


def test_the_report_after_an_ingest_reads_only_the_new_files(lake: Lake) -> None:
    first = report(lake)
    assert first.files_read == live_files(lake) == 8 and cache_file(lake).is_file()
    assert report(lake).files_read == 0  # nothing new: everything from the cache
    later = NIGHTS[-1] + dt.timedelta(days=1)
    ingest(lake, [record(batch_size=16, images_per_sec=999.0, night=later)], instance_type="g6.xlarge")
    nightly = report(lake)
    assert nightly.files_read == 1
    [row] = [r for r in nightly.tables["cost_per_million"].to_pylist()
             if r["instance_type"] == "g6.xlarge" and r["batch_size"] == 16]
    assert (row["images_per_sec"], row["result_date"]) == (999.0, later)
    assert nightly.rows_scanned == 17
    assert_same_as_without_cache(lake, nightly)


def test_a_late_run_of_an_older_night_does_not_displace_a_newer_result(lake: Lake) -> None:
    report(lake)
    earlier = NIGHTS[0] - dt.timedelta(days=3)
    ingest(lake, [record(batch_size=32, images_per_sec=1.0, night=earlier)], instance_type="g5.xlarge")
    late = report(lake)
    assert late.files_read == 1
    [row] = [r for r in late.tables["cost_per_million"].to_pylist()
             if r["instance_type"] == "g5.xlarge" and r["batch_size"] == 32]
    assert row["result_date"] == NIGHTS[-1]
    assert_same_as_without_cache(lake, late)


def test_a_replaced_run_makes_the_next_report_read_every_file(lake: Lake) -> None:
    report(lake)
    run = f"nightly-{NIGHTS[-1].isoformat()}.aws-g5.xlarge-us-east-1-on_demand-ec2"
    context = RunContext(provider="aws", instance_type="g5.xlarge", region="us-east-1", target="ec2")
    # the newest night of g5.xlarge replaced by a run that no longer has batch 32: its latest is
    # then the night before (a report that merged into the cache would still read the newest night)
    rows = results_rows([dict(record(batch_size=16, images_per_sec=5.0, night=NIGHTS[-1]), run_id=run)],
                        context)
    lake.write_results(rows, run_id=run)
    replaced = report(lake)
    assert replaced.files_read == live_files(lake)
    [row] = [r for r in replaced.tables["cost_per_million"].to_pylist()
             if r["instance_type"] == "g5.xlarge" and r["batch_size"] == 32]
    assert row["result_date"] == NIGHTS[-2]
    assert_same_as_without_cache(lake, replaced)


def test_a_compaction_is_replayed_from_the_log_reading_only_what_it_made_of_new_files(lake: Lake) -> None:
    """A compaction rewrites files without a data change: a partition rewritten from files the
    cache covered stays covered (nothing read); one rewritten from files added since is read."""
    report(lake)
    lake.compact()
    assert live_files(lake) == 4  # one file per night now
    version = lake.version("results")
    compacted = report(lake)
    assert compacted.files_read == 0
    assert newest.NewestCache(lake).load().version == version  # brought up to the compaction's version
    assert_same_as_without_cache(lake, compacted)
    later = NIGHTS[-1] + dt.timedelta(days=1)
    for i, machine in enumerate(MACHINES):  # two runs of a new night: two files in its partition
        ingest(lake, [record(batch_size=32, images_per_sec=500.0 + i, night=later)], instance_type=machine)
    lake.compact()  # the new night's partition is rewritten from files no report has read yet
    assert live_files(lake) == 5
    nightly = report(lake)
    assert nightly.files_read == 1 and nightly.newest_date == later
    assert_same_as_without_cache(lake, nightly)


def test_a_report_as_of_an_older_version_neither_reads_nor_writes_the_cache(lake: Lake) -> None:
    report(lake)
    version = lake.version("results")
    ingest(lake, [record(batch_size=16, images_per_sec=999.0, night=NIGHTS[-1] + dt.timedelta(days=1))],
           instance_type="g6.xlarge")
    report(lake)
    kept = cache_file(lake).read_bytes()
    old = report(lake, as_of=version)
    assert old.files_read == 8 and old.rows_scanned == 16
    assert cache_file(lake).read_bytes() == kept
    assert max(r["result_date"] for r in old.tables["cost_per_million"].to_pylist()) == NIGHTS[-1]


def _truncated(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:100])


def _foreign(path: Path) -> None:
    pq.write_table(pa.table({"key": [1], "newest_date": [dt.date(2020, 1, 1)]}), path)


def _claims_a_file_that_is_not_live(path: Path) -> None:
    table = pq.read_table(path)
    metadata = {**table.schema.metadata, b"gpucompare.files": b'["mode=score/date=2020-01-01/x.parquet"]'}
    pq.write_table(table.replace_schema_metadata(metadata), path)


@pytest.mark.parametrize("damage", [_truncated, _foreign, _claims_a_file_that_is_not_live])
def test_a_damaged_or_foreign_cache_is_read_as_none_and_rewritten(
        lake: Lake, damage, caplog: pytest.LogCaptureFixture) -> None:
    report(lake)
    damage(cache_file(lake))
    with caplog.at_level(logging.WARNING, logger=newest.__name__):
        again = report(lake)
    assert again.files_read == live_files(lake)
    assert_same_as_without_cache(lake, again)
    assert report(lake).files_read == 0  # rewritten whole


def test_a_cache_that_cannot_be_written_leaves_the_report_whole(lake: Lake,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    cache_file(lake).parent.parent.mkdir(parents=True, exist_ok=True)
    cache_file(lake).parent.write_text("not a folder")  # where the cache's folder would be
    with caplog.at_level(logging.WARNING, logger=newest.__name__):
        first = report(lake)
    assert "not written" in caplog.text
    assert first.files_read == 8 and not first.failures
    assert report(lake).files_read == 8  # nothing kept: every report reads every file


def test_rows_written_before_the_series_key_are_found_by_their_columns(lake: Lake) -> None:
    """Rows without the key (a lake written before it existed; Delta schema evolution reads the
    column as null): the newest partition of a series is found whether it holds keyed rows, old
    rows or both, with the cache and without."""
    context = RunContext(provider="aws", instance_type="g5.xlarge", region="us-east-1", target="ec2")
    newer = NIGHTS[-1] + dt.timedelta(days=2)
    old = results_rows([dict(record(batch_size=64, images_per_sec=640.0, night=newer), run_id="legacy")],
                       context).drop_columns(["series_key"])
    report(lake)
    lake.commit("results", lambda: old, predicate=None, partition_by=["mode", "date"])
    mixed = report(lake)
    assert mixed.files_read == 1
    got = {(r["instance_type"], r["batch_size"]): (r["images_per_sec"], r["result_date"])
           for r in mixed.tables["cost_per_million"].to_pylist()}
    assert got[("g5.xlarge", 64)] == (640.0, newer)
    assert got[("g5.xlarge", 16)][1] == NIGHTS[-1]
    assert_same_as_without_cache(lake, mixed)


def test_a_lake_from_before_the_series_key_then_its_first_keyed_ingest(tmp_path: Path) -> None:
    """A table that has no series_key column at all (every row written before it) is grouped by
    the series' columns; the first ingest after adds the column, and the cached groups of the old
    rows merge with the new rows' keys."""
    target = open_lake(str(tmp_path / "old-lake"))
    context = RunContext(provider="aws", instance_type="g5.xlarge", region="us-east-1", target="ec2")
    old = results_rows([dict(record(batch_size=b, images_per_sec=float(b), night=NIGHTS[0]), run_id="old")
                        for b in (16, 32)], context).drop_columns(["series_key"])
    target.commit("results", lambda: old, predicate=None, partition_by=["mode", "date"])
    assert "series_key" not in target.snapshot("results").arrow_schema.names
    first = report(target)
    assert (first.files_read, first.rows_scanned, first.newest_date) == (1, 2, NIGHTS[0])
    ingest(target, [record(batch_size=16, images_per_sec=160.0, night=NIGHTS[1])])
    assert "series_key" in target.snapshot("results").arrow_schema.names
    second = report(target)
    assert second.files_read == 1
    got = {r["batch_size"]: (r["images_per_sec"], r["result_date"])
           for r in second.tables["cost_per_million"].to_pylist()}
    assert got == {16: (160.0, NIGHTS[1]), 32: (32.0, NIGHTS[0])}
    assert_same_as_without_cache(target, second)


def test_a_log_entry_gone_after_a_checkpoint_makes_the_report_read_every_file(lake: Lake) -> None:
    """Delta's log clean-up removes entries older than a checkpoint: the replay cannot see what
    they did, so every file is read."""
    from deltalake import DeltaTable

    report(lake)
    version = lake.version("results")
    later = NIGHTS[-1] + dt.timedelta(days=1)
    for i, machine in enumerate(MACHINES):
        ingest(lake, [record(batch_size=32, images_per_sec=500.0 + i, night=later)], instance_type=machine)
    DeltaTable(lake.table_uri("results")).create_checkpoint()
    Path(lake.path("results", "_delta_log", f"{version + 1:020d}.json")).unlink()
    after = report(lake)
    assert after.files_read == live_files(lake) == 10
    assert_same_as_without_cache(lake, after)


def test_the_cache_is_kept_where_the_lake_is_on_s3_too(lake_uri: str) -> None:
    """The cache is written and read through the lake's own filesystem (moto's server standing in
    for S3): the second report of an S3 lake reads only the files added since the first."""
    target = open_lake(lake_uri)
    ingest(target, [record(batch_size=b, night=night) for night in NIGHTS[:2] for b in (16, 32)])
    assert report(target).files_read == 2
    assert target.fs.get_file_info(newest.NewestCache(target).path).size > 0
    ingest(target, [record(batch_size=64, images_per_sec=640.0, night=NIGHTS[2])])
    second = report(target)
    assert (second.files_read, second.rows_scanned, second.newest_date) == (1, 5, NIGHTS[2])
    target.fs.delete_file(newest.NewestCache(target).path)
    cold = report(target)
    assert cold.files_read == 3
    for name, table in cold.tables.items():
        assert second.tables[name].equals(table), name
