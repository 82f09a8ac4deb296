"""The lake's edges (issue 23), through ``python -m gpucompare`` as a process where it is a CLI
behaviour: every refusal exits 2 with a message that says what to do and leaves the lake's
version as it was.

Real deltalake, real files, FIFOs and devices; no mocks. Each test's docstring says what was
wrong before (the outcome on the main branch of 2026-12-01).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from gpucompare.lake import ingest as lake_ingest
from gpucompare.lake import migrate as migration
from gpucompare.lake import tables as lake
from gpucompare.lake.ingest import MAX_LINE_BYTES
from tests.support.lake_support import ingest_command, run_records, start, write_records

RUN = "r1"


def run(command: list[str]) -> subprocess.CompletedProcess[str]:
    """One product command as a process; its exit code and output."""
    process = start(command)
    out, err = process.communicate(timeout=600)
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def gpucompare(*args: str) -> subprocess.CompletedProcess[str]:
    return run([sys.executable, "-m", "gpucompare", *args])


def results_version(uri: str) -> int | None:
    return lake.open_lake(uri).version("results")


@pytest.fixture
def one_version_lake(tmp_path: Path) -> str:
    """A lake whose results table is at version 0 (one run of four records)."""
    uri = str(tmp_path / "lake")
    done = run(ingest_command(uri, write_records(tmp_path / "good.jsonl", run_records(RUN, 4)), RUN))
    assert done.returncode == 0, done.stderr
    assert results_version(uri) == 0
    return uri


def _line_with(record: dict, old: str, new: str) -> str:
    text = json.dumps(record)
    assert old in text
    return text.replace(old, new)


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (("\"host\": \"bench1\"", "\"host\": \"bench1\", \"host\": \"other\""), "field host: appears twice"),
        (("\"batch_size\": 1,", "\"batch_size\": " + "9" * 5000 + ","), "field batch_size: integer literal"),
        (("\"started_at\": \"2026-11-30T02:00:00+00:00\"", "\"started_at\": \"0001-01-01T00:30:00+01:00\""),
         "field started_at: '0001-01-01T00:30:00+01:00' is outside years 1 to 9999"),
        (("\"finished_at\": \"2026-11-30T02:00:01+00:00\"", "\"finished_at\": \"9999-12-31T23:59:59-01:00\""),
         "field finished_at: '9999-12-31T23:59:59-01:00' is outside years 1 to 9999"),
        (("\"images_per_sec\": 10.0", "\"images_per_sec\": 1e13"), "field images_per_sec: 1e+13 images/s"),
        (("\"cv\": 0.01", "\"cv\": -0.5"), "field cv: must be >= 0"),
    ],
    ids=["duplicate key", "5000-digit integer", "start before year 1 in UTC", "finish after 9999 in UTC",
         "1e13 images/s", "negative cv"],
)
def test_an_implausible_record_exits_2_naming_line_and_field_and_keeps_the_version(
    tmp_path: Path, one_version_lake: str, edit: tuple[str, str], needle: str
) -> None:
    """Before: duplicate key, 1e13 images/s and cv -0.5 were committed (exit 0, version 1); the
    5000-digit integer (ValueError) and both timestamps (OverflowError) exited 1 with a traceback."""
    first, second = run_records(RUN, 2)
    lines = [json.dumps(second), _line_with(first, *edit)]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    done = run(ingest_command(one_version_lake, bad, RUN))
    assert done.returncode == 2, done.stderr
    assert "bad.jsonl line 2:" in done.stderr and needle in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert results_version(one_version_lake) == 0


def test_a_line_over_the_limit_is_refused_naming_it_without_reading_it_whole(
    tmp_path: Path, one_version_lake: str
) -> None:
    """Before: a line of any length was read whole (a 1 GB line passed 2 GB of memory); now a
    line over MAX_LINE_BYTES is refused by number after reading MAX_LINE_BYTES + 1 bytes."""
    first = json.dumps(run_records(RUN, 1)[0])
    big = tmp_path / "big.jsonl"
    with open(big, "w", encoding="utf-8") as handle:
        handle.write(first + "\n\n")
        handle.write("x" * (MAX_LINE_BYTES + 10) + "\n")
    done = run(ingest_command(one_version_lake, big, RUN))
    assert done.returncode == 2, done.stderr
    assert f"big.jsonl line 3: longer than {MAX_LINE_BYTES} bytes" in done.stderr
    assert results_version(one_version_lake) == 0


@pytest.mark.parametrize("kind", ["directory", "fifo", "dev-zero"])
def test_results_that_are_not_a_regular_file_say_what_they_are(tmp_path: Path, kind: str) -> None:
    """Before: all three exited 2 saying "no such file"."""
    if kind == "directory":
        target, needle = tmp_path, "is a directory"
    elif kind == "fifo":
        target, needle = tmp_path / "fifo", "is not a regular file"
        os.mkfifo(target)
    else:
        target, needle = Path("/dev/zero"), "is not a regular file"
    done = run(ingest_command(str(tmp_path / "lake"), target, RUN))
    assert done.returncode == 2 and needle in done.stderr, done.stderr
    assert not (tmp_path / "lake").exists()


def test_lake_naming_a_regular_file_exits_2(tmp_path: Path) -> None:
    """Before: ingest exited 1 (NotADirectoryError traceback)."""
    a_file = tmp_path / "afile"
    a_file.write_text("not a lake\n")
    results = write_records(tmp_path / "good.jsonl", run_records(RUN, 2))
    for command in (ingest_command(str(a_file), results, RUN),
                    ingest_command(str(a_file / "below"), results, RUN)):
        done = run(command)
        assert done.returncode == 2, done.stderr
        assert f"{a_file} is a file, not a folder" in done.stderr, done.stderr
    assert a_file.read_text() == "not a lake\n"


def test_a_percent_in_the_lake_path_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    """Before: the first ingest into .../pct%41/lake committed version 0 (delta-rs decoded %41
    as A) and exited 1; every later command failed with "File not found .../pctA/..."."""
    results = write_records(tmp_path / "good.jsonl", run_records(RUN, 2))
    done = run(ingest_command(str(tmp_path / "pct%41" / "lake"), results, RUN))
    assert done.returncode == 2, done.stderr
    assert "'%'" in done.stderr and "choose a folder name without it" in done.stderr
    assert not (tmp_path / "pct%41").exists() and not (tmp_path / "pctA").exists()


@pytest.mark.parametrize("folder", ["hash#x", "sp ace", "nön-ascii ü"])
def test_lake_paths_with_hash_space_and_non_ascii_work(tmp_path: Path, folder: str) -> None:
    """These worked before too; kept working (the refusal is only for '%')."""
    uri = str(tmp_path / folder / "lake")
    results = write_records(tmp_path / "good.jsonl", run_records(RUN, 2))
    assert run(ingest_command(uri, results, RUN)).returncode == 0
    info = gpucompare("lake-info", "--lake", uri)
    assert info.returncode == 0 and "results: version 0, 2 live file(s), 2 row(s)" in info.stdout, info


def test_ingest_is_order_free(tmp_path: Path, one_version_lake: str) -> None:
    """Before: the same records in reverse line order made a new version (the key hashed the
    lines in order)."""
    reversed_file = write_records(tmp_path / "reversed.jsonl", list(reversed(run_records(RUN, 4))))
    done = run(ingest_command(one_version_lake, reversed_file, RUN))
    assert done.returncode == 0, done.stderr
    assert "unchanged (already in the lake), table version 0" in done.stdout
    assert results_version(one_version_lake) == 0


def test_the_version_printed_is_the_commit_s_own_not_the_latest(tmp_path: Path) -> None:
    """Before: ``commit`` returned the table's latest version after the write, so an ingest that
    another writer overtook printed the other's version (two concurrent ingests both printed 4).
    Here the other writer commits between this write and the version look-up."""
    target = lake.open_lake(str(tmp_path / "lake"))
    context = lake_ingest.RunContext(provider="local", instance_type="cpu")
    other = write_records(tmp_path / "other.jsonl", run_records("r2", 2))
    original = lake.Lake._committed_version

    def overtaken(self: lake.Lake, kind: str, token: str) -> int:
        lake.Lake._committed_version = original  # the other writer's commit uses the real one
        lake_ingest.ingest_results(target, other, context, run_id="r2")
        return original(self, kind, token)

    lake.Lake._committed_version = overtaken
    try:
        mine = lake_ingest.ingest_results(
            target, write_records(tmp_path / "mine.jsonl", run_records(RUN, 2)), context, run_id=RUN)
    finally:
        lake.Lake._committed_version = original
    assert target.version("results") == 1
    assert mine.write.version == 0


def test_ingest_batches_by_bytes(tmp_path: Path) -> None:
    """Records of 64 KiB each: the Arrow batches close at ``batch_bytes``, not only at
    ``batch_rows`` (before: 2,048 rows a batch whatever their size: 134 MB per batch here), and
    the Parquet files are written a batch at a time: no row group holds more than a batch."""
    target = lake.open_lake(str(tmp_path / "lake"))
    records = run_records(RUN, 40, error_bytes=64 * 1024 - 16)
    results = write_records(tmp_path / "big.jsonl", records)
    seen: list[int] = []
    original = lake.Lake.replace_run

    def counting(self: lake.Lake, run_id: str, key: str, rows: int, data, metadata):  # noqa: ANN001, ANN202
        def wrapped():  # noqa: ANN202
            for batch in data():
                seen.append(batch.num_rows)
                yield batch

        return original(self, run_id, key, rows, wrapped, metadata)

    lake.Lake.replace_run = counting
    try:
        summary = lake_ingest.ingest_results(target, results, lake_ingest.RunContext("local", "cpu"),
                                             run_id=RUN, batch_bytes=256 * 1024)
    finally:
        lake.Lake.replace_run = original
    assert summary.records == 40 and sum(seen) == 40
    assert max(seen) <= 8, seen  # 256 KiB of lines of ~32 KiB average (half carry 64 KiB errors)
    groups = [
        pq.ParquetFile(live.path).metadata.row_group(index).num_rows
        for live in target.snapshot("results").files
        for index in range(pq.ParquetFile(live.path).metadata.num_row_groups)
    ]
    assert sum(groups) == 40 and max(groups) <= max(seen), groups
    assert target.results_table().num_rows == 40


def test_as_of_a_vacuumed_version_or_before_the_first_exits_2(tmp_path: Path) -> None:
    """Before: a vacuumed version exited 1 (FileNotFoundError), a time before the table an empty
    report with exit 0."""
    from deltalake import DeltaTable

    uri = str(tmp_path / "lake")
    for speed, name in ((10.0, "a.jsonl"), (20.0, "b.jsonl")):
        done = run(ingest_command(uri, write_records(tmp_path / name, run_records(RUN, 2, speed=speed)), RUN))
        assert done.returncode == 0, done.stderr
    DeltaTable(f"{uri}/results").vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False)
    old = gpucompare("report", "--lake", uri, "--out", str(tmp_path / "o1"), "--as-of", "0")
    assert old.returncode == 2, old.stderr
    assert "version 0 of table results can no longer be read" in old.stderr
    assert "the oldest version still readable is 1" in old.stderr
    early = gpucompare("report", "--lake", uri, "--out", str(tmp_path / "o2"),
                       "--as-of", "2000-01-01T00:00:00Z")
    assert early.returncode == 2, early.stderr
    assert "is before the results table's first version (0" in early.stderr
    assert not (tmp_path / "o1").exists() and not (tmp_path / "o2").exists()


def test_migrate_lake_lists_dropped_columns_and_refuses_a_folder_without_results(tmp_path: Path) -> None:
    """Before: unknown old columns were dropped silently, and a folder without results/ was
    migrated as 0 rows with exit 0."""
    empty = tmp_path / "not-a-lake"
    (empty / "prices").mkdir(parents=True)
    done = gpucompare("migrate-lake", "--from", str(empty), "--to", str(tmp_path / "new0"))
    assert done.returncode == 2 and "has no results/ folder" in done.stderr, done.stderr

    old = tmp_path / "old"
    folder = old / "results" / "mode=score" / "date=2026-11-30"
    folder.mkdir(parents=True)
    rows = lake_ingest.results_rows(run_records(RUN, 2)[:1], lake_ingest.RunContext("local", "cpu"))
    rows = rows.drop_columns(["mode", "date", "code_hash", "ingest_key"]).append_column(
        "legacy_note", rows.column("run_id")).append_column("old_gpu_temp", rows.column("gpu_count"))
    pq.write_table(rows, folder / "run-a.parquet")
    assert migration.dropped_columns(str(old)) == {"results": ["legacy_note", "old_gpu_temp"]}
    done = gpucompare("migrate-lake", "--from", str(old), "--to", str(tmp_path / "new"))
    assert done.returncode == 0, done.stderr
    assert ("results: dropped 2 column(s) the Delta table does not have: legacy_note, old_gpu_temp"
            in done.stdout)
