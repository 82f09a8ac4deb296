"""The results lake as Delta tables, on a local folder and on S3 (moto's server), same tests.

Real deltalake, real DuckDB (the reports), moto's server for S3. Covers: ingest as one commit
with partition values from the log, idempotence (no new version), exact replacement of a
changed run, the orchestrator's run identity, hostile input (exit 2 naming line and field,
nothing written), stray files never read, commands on a path without a lake, time travel
(``report --as-of``, manifest.json), schema evolution, price checks, compaction (optimize +
vacuum), migration from the old Hive layout. Concurrency and SIGKILL: test_lake_concurrency.py.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from bench_tasks.record import validate_record
from bench_tasks.record_fields import empty_record
from gpucompare import cli
from gpucompare.lake import ingest as lake_ingest
from gpucompare.lake import schema
from gpucompare.lake import tables as lake
from gpucompare.lake.rows import IngestError
from gpucompare.lake.storage import LakeError
from gpucompare.reports.build import run_reports
from tests.conftest import REPO_ROOT
from tests.support.lake_support import expected_series_keys


def make_record(**overrides: object) -> dict:
    """A valid record of a finished configuration (overridable)."""
    values = dict(
        run_id="nightly-2026-11-30T0200",
        config_id="score-resnet-50-b4-cpu",
        mode="score",
        network="resnet-50",
        image_shape="3,224,224",
        dtype="float32",
        batch_size=4,
        per_device_batch=4,
        devices=["cpu:0"],
        device_kind="cpu",
        gpu_count=1,
        num_nodes=1,
        warmup_batches=5,
        timed_batches=10,
        repeats=3,
        images_per_sec=12.5,
        images_per_sec_samples=[12.4, 12.5, 12.7],
        cv=0.01,
        status="ok",
        started_at="2026-11-30T02:00:00+00:00",
        finished_at="2026-11-30T02:01:00+00:00",
        host="bench1",
    )
    values.update(overrides)
    return validate_record(empty_record(**values))


def sample_records() -> list[dict]:
    return [
        make_record(),
        make_record(
            config_id="score-alexnet-b8-cpu",
            network="alexnet",
            batch_size=8,
            per_device_batch=8,
            images_per_sec=80.0,
            images_per_sec_samples=[79.0, 80.0, 81.0],
        ),
        make_record(
            config_id="train-resnet-50-b8-cpu",
            mode="train",
            batch_size=8,
            per_device_batch=4,
            devices=["cpu:0", "cpu:1"],
            gpu_count=2,
            kvstore="device",
            scaling="strong",
            images_per_sec=3.25,
            images_per_sec_samples=[3.2, 3.25, 3.3],
            started_at="2026-12-01T00:10:00Z",
            finished_at="2026-12-01T00:12:00Z",
        ),
        make_record(
            config_id="train-resnet-152-b64-cpu",
            mode="train",
            network="resnet-152",
            batch_size=64,
            per_device_batch=64,
            kvstore="device",
            status="oom",
            images_per_sec=None,
            images_per_sec_samples=[],
            cv=None,
            error="out of memory",
            started_at="2026-12-01T00:20:00Z",
            finished_at="2026-12-01T00:20:05Z",
        ),
    ]


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


CONTEXT = lake_ingest.RunContext(
    provider="aws",
    instance_type="g5.xlarge",
    region="us-east-1",
    market="spot",
    target="ec2",
    dag_run_id="scheduled__2026-11-30T02:00:00+00:00",
)


RUN = "nightly-2026-11-30T0200"  # the orchestrator's id of the run sample_records() belong to


def ingest(
    target: lake.Lake,
    path: Path,
    run_id: str = RUN,
    context: lake_ingest.RunContext = CONTEXT,
    code_hash: str | None = "0123456789abcdef",
) -> lake_ingest.IngestSummary:
    return lake_ingest.ingest_results(target, path, context, run_id=run_id, code_hash=code_hash)


def plain_rows(target: lake.Lake) -> list[dict]:
    """The results as a plain Delta reader (deltalake itself, not our code) sees them."""
    from deltalake import DeltaTable

    table = DeltaTable(target.table_uri("results"), storage_options=target.storage_options or None)
    return pa.table(table.to_pyarrow_table()).to_pylist()


def test_ingest_is_one_commit_with_partition_values_from_the_log(lake_uri: str, tmp_path: Path) -> None:
    target = lake.open_lake(lake_uri)
    summary = ingest(target, write_jsonl(tmp_path / "r.jsonl", sample_records()))
    assert summary.changed and summary.write.version == 0 and summary.records == 4
    snap = target.snapshot("results")
    assert snap.version == 0
    assert {(f.partition["mode"], f.partition["date"]) for f in snap.files} == {
        ("score", dt.date(2026, 11, 30)),
        ("train", dt.date(2026, 12, 1)),
    }
    assert all(f.relative.endswith(".zstd.parquet") for f in snap.files)
    table = target.results_table().sort_by("config_id")
    assert table.schema.equals(schema.RESULTS_SCHEMA)
    rows = table.to_pylist()
    assert [r["date"] for r in rows] == [dt.date(2026, 11, 30)] * 2 + [dt.date(2026, 12, 1)] * 2
    assert {r["code_hash"] for r in rows} == {"0123456789abcdef"}
    assert len({r["ingest_key"] for r in rows}) == 1
    assert {(r["provider"], r["market"], r["target"], r["run_id"]) for r in rows} == {
        ("aws", "spot", "ec2", RUN)
    }
    # a plain Delta reader sees the same rows, date as a date
    plain = plain_rows(target)
    assert sorted(r["config_id"] for r in plain) == [r["config_id"] for r in rows]
    assert all(isinstance(r["date"], dt.date) for r in plain)


def test_the_same_file_twice_creates_no_new_version(lake_uri: str, tmp_path: Path) -> None:
    target = lake.open_lake(lake_uri)
    path = write_jsonl(tmp_path / "r.jsonl", sample_records())
    first = ingest(target, path)
    second = ingest(target, path)
    assert not second.changed and second.write.version == first.write.version == 0
    assert target.version("results") == 0
    assert target.results_table().num_rows == 4


def test_a_changed_file_replaces_the_run_exactly(lake_uri: str, tmp_path: Path) -> None:
    """Dropped records vanish, a corrected date moves its row, other runs stay untouched."""
    target = lake.open_lake(lake_uri)
    ingest(target, write_jsonl(tmp_path / "a.jsonl", sample_records()))
    other = [dict(r, run_id="other-run") for r in sample_records()]
    ingest(target, write_jsonl(tmp_path / "o.jsonl", other), run_id="other-run")
    changed = sample_records()[:3]  # the oom record is dropped
    changed[0] = dict(changed[0], images_per_sec=13.5, images_per_sec_samples=[13.5])
    changed[2] = dict(changed[2], started_at="2026-12-02T00:10:00Z", finished_at="2026-12-02T00:12:00Z")
    summary = ingest(target, write_jsonl(tmp_path / "b.jsonl", changed))
    assert summary.changed and summary.write.version == 2
    mine = target.results_table(filter=pc.field("run_id") == RUN).sort_by("config_id").to_pylist()
    assert [(r["config_id"], r["date"], r["images_per_sec"]) for r in mine] == [
        ("score-alexnet-b8-cpu", dt.date(2026, 11, 30), 80.0),
        ("score-resnet-50-b4-cpu", dt.date(2026, 11, 30), 13.5),
        ("train-resnet-50-b8-cpu", dt.date(2026, 12, 2), 3.25),
    ]
    assert target.results_table(filter=pc.field("run_id") == "other-run").num_rows == 4
    assert len(plain_rows(target)) == 7


def test_records_of_another_run_are_refused_and_nothing_is_written(tmp_path: Path) -> None:
    target = lake.open_lake(str(tmp_path / "lake"))
    records = sample_records()
    records[1] = dict(records[1], run_id="nightly-2026-11-29T0200")  # a host rewriting an older night
    with pytest.raises(IngestError) as info:
        ingest(target, write_jsonl(tmp_path / "r.jsonl", records))
    assert info.value.line == 2 and info.value.field == "run_id"
    assert "nightly-2026-11-29T0200" in str(info.value) and not target.exists()


def _hostile(records: list[dict], change: dict, index: int = 1) -> list[dict]:
    records = [dict(r) for r in records]
    records[index].update(change)
    return records


ERROR_RECORD = dict(status="error", images_per_sec=None, images_per_sec_samples=[], cv=None, error="boom")

HOSTILE = {
    "impossible date": ({"started_at": "2026-02-30T02:00:00+00:00"}, "started_at"),
    "hour 25": ({"finished_at": "2026-11-30T25:01:00+00:00"}, "finished_at"),
    "int beyond int64": ({**ERROR_RECORD, "batch_size": 2**70}, "batch_size"),
    "lone surrogate": ({"host": "bench\ud800"}, "host"),
    "finished before started": ({"finished_at": "2026-11-30T01:00:00+00:00"}, "finished_at"),
    "NUL in a name": ({"host": "bench\x00one"}, "host"),
    "newline in a name": ({"gpu_model": "Tesla\nV100"}, "gpu_model"),
    "name over 256 bytes": ({"host": "h" * 257}, "host"),
    "error over 64 KiB": ({**ERROR_RECORD, "error": "x" * (64 * 1024 + 1)}, "error"),
    "duplicate cell": ({"config_id": "score-resnet-50-b4-cpu"}, "config_id"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_input_exits_2_naming_line_and_field_and_writes_nothing(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    uri = str(tmp_path / "lake")
    good = write_jsonl(tmp_path / "good.jsonl", [dict(r, run_id="earlier") for r in sample_records()])
    assert (
        cli.main(
            [
                "ingest",
                "--results",
                str(good),
                "--lake",
                uri,
                "--provider",
                "local",
                "--instance-type",
                "cpu",
                "--run-id",
                "earlier",
            ]
        )
        == 0
    )
    before = plain_rows(lake.open_lake(uri))
    change, field = HOSTILE[case]
    path = tmp_path / "bad.jsonl"
    # json.dumps escapes a lone surrogate as \\ud800, exactly what a broken worker would write
    path.write_text(
        "".join(json.dumps(r) + "\n" for r in _hostile(sample_records(), change)), encoding="utf-8"
    )
    capsys.readouterr()
    code = cli.main(
        [
            "ingest",
            "--results",
            str(path),
            "--lake",
            uri,
            "--provider",
            "local",
            "--instance-type",
            "cpu",
            "--run-id",
            RUN,
        ]
    )
    err = capsys.readouterr().err
    assert code == 2, err
    assert "line 2" in err and f"field {field}" in err, err
    target = lake.open_lake(uri)
    assert target.version("results") == 0 and plain_rows(target) == before


def test_broken_json_and_unknown_fields_are_named(tmp_path: Path) -> None:
    target = lake.open_lake(str(tmp_path / "lake"))
    record = dict(make_record(), colour="blue")
    with pytest.raises(IngestError) as info:
        ingest(target, write_jsonl(tmp_path / "u.jsonl", [make_record(), record]))
    assert info.value.line == 2 and info.value.field == "colour"
    path = tmp_path / "j.jsonl"
    path.write_text(json.dumps(make_record()) + "\n{not json\n", encoding="utf-8")
    with pytest.raises(IngestError, match="line 2: not valid JSON"):
        ingest(target, path)
    assert not target.exists()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"provider": "AWS!"}, "provider"),
        ({"instance_type": "g5.xlarge; rm -rf /"}, "instance_type"),
        ({"region": "us east"}, "region"),
        ({"market": "reserved"}, "market"),
        ({"target": "published"}, "target"),
    ],
)
def test_orchestrator_values_are_validated(change: dict, field: str, tmp_path: Path) -> None:
    context = lake_ingest.RunContext(**{**CONTEXT.__dict__, **change})
    with pytest.raises(IngestError) as info:
        ingest(
            lake.open_lake(str(tmp_path / "lake")),
            write_jsonl(tmp_path / "r.jsonl", sample_records()),
            context=context,
        )
    assert info.value.field == field


def test_run_id_and_code_hash_are_checked(tmp_path: Path) -> None:
    target = lake.open_lake(str(tmp_path / "lake"))
    path = write_jsonl(tmp_path / "r.jsonl", sample_records())
    with pytest.raises(IngestError, match="run id") as info:
        ingest(target, path, run_id="x' OR 1=1 --")
    assert info.value.field == "run_id"
    with pytest.raises(IngestError) as info:
        ingest(target, path, code_hash="not a hash")
    assert info.value.field == "code_hash"


def test_stray_foreign_and_corrupt_files_never_change_what_is_read(tmp_path: Path) -> None:
    uri = str(tmp_path / "lake")
    target = lake.open_lake(uri)
    ingest(target, write_jsonl(tmp_path / "r.jsonl", sample_records()))
    clean = run_reports(uri, str(tmp_path / "clean"))
    live = target.snapshot("results").files[0]
    folder = Path(live.path).parent
    shutil.copy(live.path, folder / "backup-copy.parquet")  # a backup copy of a run file
    pq.write_table(pa.table({"colour": ["red"], "size": [3]}), folder / "foreign.parquet")  # another schema
    (folder / "corrupt.parquet").write_bytes(b"PAR1 not really parquet")
    (folder / ".tmp-half-written.parquet").write_bytes(Path(live.path).read_bytes()[:100])
    extra = Path(uri) / "results" / "mode=score" / "date=2026-12-24"
    extra.mkdir(parents=True)
    shutil.copy(live.path, extra / "stray.parquet")
    assert target.results_table().num_rows == 4
    dirty = run_reports(uri, str(tmp_path / "dirty"))
    assert dirty.rows_scanned == clean.rows_scanned == 4
    for name, table in clean.tables.items():
        assert dirty.tables[name].equals(table), name
    assert len(plain_rows(target)) == 4


def test_commands_on_a_path_without_a_lake_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    empty = tmp_path / "nothing"
    empty.mkdir()
    for argv in (
        ["report", "--lake", str(empty), "--out", str(tmp_path / "out")],
        ["lake-info", "--lake", str(empty)],
        ["compact", "--lake", str(empty)],
    ):
        assert cli.main(argv) == 2, argv
        assert "no lake at" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_report_as_of_rebuilds_an_earlier_version_and_names_it(tmp_path: Path) -> None:
    uri = str(tmp_path / "lake")
    target = lake.open_lake(uri)
    ingest(target, write_jsonl(tmp_path / "a.jsonl", sample_records()))
    between = dt.datetime.now(dt.UTC)
    time.sleep(0.05)
    changed = _hostile(sample_records(), {"images_per_sec": 99.0, "images_per_sec_samples": [99.0]}, 0)
    ingest(target, write_jsonl(tmp_path / "b.jsonl", changed))
    assert target.version("results") == 1

    def resnet(out: Path) -> float:
        rows = pq.read_table(out / "throughput" / "throughput.parquet").to_pylist()
        return next(r["images_per_sec"] for r in rows if r["network"] == "resnet-50" and r["mode"] == "score")

    assert cli.main(["report", "--lake", uri, "--out", str(tmp_path / "now")]) == 0
    assert cli.main(["report", "--lake", uri, "--out", str(tmp_path / "v0"), "--as-of", "0"]) == 0
    assert (
        cli.main(["report", "--lake", uri, "--out", str(tmp_path / "ts"), "--as-of", between.isoformat()])
        == 0
    )
    assert (resnet(tmp_path / "now"), resnet(tmp_path / "v0"), resnet(tmp_path / "ts")) == (99.0, 12.5, 12.5)
    manifest = json.loads((tmp_path / "v0" / "manifest.json").read_text())
    assert manifest["table_versions"]["results"] == 0 and manifest["as_of"] == "0"
    assert json.loads((tmp_path / "now" / "manifest.json").read_text())["table_versions"]["results"] == 1
    assert "results v0" in (tmp_path / "v0" / "summary.md").read_text()
    # before the first commit the table did not exist (delta-rs alone would load version 0):
    # refused, exit 2, nothing written (issue 23: an empty report with exit 0 before)
    assert (
        cli.main(["report", "--lake", uri, "--out", str(tmp_path / "old"), "--as-of", "2000-01-01T00:00:00Z"])
        == 2
    )
    assert not (tmp_path / "old").exists()
    assert cli.main(["report", "--lake", uri, "--out", str(tmp_path / "x"), "--as-of", "7"]) == 2
    assert cli.main(["report", "--lake", uri, "--out", str(tmp_path / "x"), "--as-of", "yesterday"]) == 2


def test_new_record_fields_arrive_through_schema_evolution(tmp_path: Path) -> None:
    """The worker adds fields (schema_version 2) while old rows stay: the table's schema grows,
    old rows read the new column as null and the reports still see RESULTS_SCHEMA's columns."""
    uri = str(tmp_path / "lake")
    target = lake.open_lake(uri)
    ingest(target, write_jsonl(tmp_path / "r.jsonl", sample_records()))
    newer = lake_ingest.results_rows([dict(r, run_id="newer") for r in sample_records()[:1]], CONTEXT)
    newer = newer.append_column("future_field", pa.array(["v2"]))
    target.write_results(newer, run_id="newer")
    names = target.snapshot("results").arrow_schema.names
    assert "future_field" in names and set(schema.RESULTS_SCHEMA.names) <= set(names)
    rows = plain_rows(target)
    assert sorted(r["future_field"] or "-" for r in rows) == ["-"] * 4 + ["v2"]
    assert run_reports(uri, str(tmp_path / "out")).rows_scanned == 5


def test_prices_with_unknown_units_or_negative_prices_are_refused(tmp_path: Path) -> None:
    from tests.support.reports_data import price

    target = lake.open_lake(str(tmp_path / "lake"))
    good = pa.Table.from_pylist([price("g5.xlarge", 1.0)], schema=schema.PRICES_SCHEMA)
    target.write_table("prices", "good", good)
    for row, word in (
        (price("g5.xlarge", 1.0, unit="day"), "unit 'day'"),
        (price("g5.xlarge", -1.0), "price must be"),
        (price("g5.xlarge", 1.0, currency="GBP"), "currency 'GBP'"),
    ):
        with pytest.raises(LakeError, match=word):
            target.write_table("prices", "bad", pa.Table.from_pylist([row], schema=schema.PRICES_SCHEMA))
    assert target.version("prices") == 0 and target.loads("prices") == ["good"]
    assert target.write_table("prices", "good", good).changed is False


def test_compaction_is_optimize_plus_vacuum_and_keeps_every_row(lake_uri: str, tmp_path: Path) -> None:
    target = lake.open_lake(lake_uri)
    for n in range(4):
        run = f"run-{n}"
        ingest(
            target,
            write_jsonl(tmp_path / f"{n}.jsonl", [dict(r, run_id=run) for r in sample_records()]),
            run_id=run,
        )
    before = sorted(map(str, target.results_table().sort_by("run_id").to_pylist()))
    assert len(target.snapshot("results").files) == 8
    summary = target.compact()
    assert summary.files_before == 8 and summary.files_after == 2 and summary.files_removed == 8
    assert sorted(map(str, target.results_table().sort_by("run_id").to_pylist())) == before
    # time travel keeps working: the removed files stay for the 7-day retention
    assert target.results_table(as_of=3).num_rows == 16 and summary.vacuumed == 0
    # a re-ingest after compaction replaces the run's rows inside the compacted files
    changed = [dict(r, run_id="run-2") for r in sample_records()[:2]]
    ingest(target, write_jsonl(tmp_path / "c.jsonl", changed), run_id="run-2")
    assert target.results_table(filter=pc.field("run_id") == "run-2").num_rows == 2
    assert target.results_table().num_rows == 14 and len(plain_rows(target)) == 14
    with pytest.raises(LakeError, match="7 days"):
        target.compact(retention_hours=24)


def test_compact_command_only_touches_old_partitions(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    uri = str(tmp_path / "lake")
    target = lake.open_lake(uri)
    for n in range(2):
        ingest(
            target,
            write_jsonl(tmp_path / f"{n}.jsonl", [dict(r, run_id=f"r{n}") for r in sample_records()]),
            run_id=f"r{n}",
        )
    target.compact(before=dt.date(2026, 12, 1))  # score partition (11-30) only
    counts = {}
    for f in target.snapshot("results").files:
        counts[f.partition["mode"]] = counts.get(f.partition["mode"], 0) + 1
    assert counts == {"score": 1, "train": 2}
    assert cli.main(["compact", "--lake", uri]) == 0
    assert "table version" in capsys.readouterr().out
    assert len(target.snapshot("results").files) == 2 and target.results_table().num_rows == 8


def _old_layout_lake(root: Path) -> int:
    """A lake in the old hand-written Hive layout, with a compacted partition, a superseded
    original beside it and a hidden temporary file; returns the rows the old readers counted."""
    table = lake_ingest.results_rows(sample_records(), CONTEXT).drop_columns(["code_hash", "ingest_key"])
    counted = 0
    for mode, date in (("score", "2026-11-30"), ("train", "2026-12-01")):
        rows = table.filter(pc.field("mode") == mode).drop_columns(["mode", "date"])
        folder = root / "results" / f"mode={mode}" / f"date={date}"
        folder.mkdir(parents=True)
        if mode == "score":
            manifest = {"runs": {}, "supersedes": ["run-a.parquet", "~compacted.parquet"]}
            meta = {b"gpucompare.compaction": json.dumps(manifest).encode()}
            pq.write_table(rows.replace_schema_metadata(meta), folder / "~compacted.parquet")
            pq.write_table(rows, folder / "run-a.parquet")  # superseded, deletion interrupted
        else:
            pq.write_table(rows, folder / "run-a.parquet")
        pq.write_table(rows, folder / ".run-b.parquet.tmp-123")
        counted += rows.num_rows
    (root / "prices").mkdir()
    from gpucompare.prices import tables as prices

    pq.write_table(prices.shipped_prices(), root / "prices" / "shipped.parquet")
    return counted


def test_migrate_lake_converts_the_old_layout_with_equal_counts(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    counted = _old_layout_lake(tmp_path / "old")
    assert counted == 4
    assert cli.main(["migrate-lake", "--from", str(tmp_path / "old"), "--to", str(tmp_path / "new")]) == 0
    out = capsys.readouterr().out
    assert f"results: 4 row(s) in {tmp_path / 'old'}, 4 row(s) in {tmp_path / 'new'}" in out
    new = lake.open_lake(str(tmp_path / "new"))
    rows = new.results_table().sort_by("config_id").to_pylist()
    assert [(r["config_id"], r["mode"], r["date"]) for r in rows] == [
        ("score-alexnet-b8-cpu", "score", dt.date(2026, 11, 30)),
        ("score-resnet-50-b4-cpu", "score", dt.date(2026, 11, 30)),
        ("train-resnet-152-b64-cpu", "train", dt.date(2026, 12, 1)),
        ("train-resnet-50-b8-cpu", "train", dt.date(2026, 12, 1)),
    ]
    assert new.loads("prices") == ["shipped"]
    table = new.results_table()
    assert table["series_key"].to_pylist() == expected_series_keys(table)  # keyed on the way in
    # a second migration into the same lake is refused rather than merged by guesswork
    assert cli.main(["migrate-lake", "--from", str(tmp_path / "old"), "--to", str(tmp_path / "new")]) == 2


def test_lake_uri_is_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(LakeError, match="scheme not supported"):
        lake.open_lake("ftp://example.com/lake")
    with pytest.raises(LakeError, match="names no bucket"):
        lake.open_lake("s3://")
    assert lake.open_lake(f"file://{tmp_path}/l").root == f"{tmp_path}/l"
    # no URI: the lake setting, as every command and DAG reads it (not ./lake)
    monkeypatch.setenv("GPUCOMPARE_LAKE", str(tmp_path / "configured"))
    assert lake.open_lake().root == str(tmp_path / "configured")


def test_lake_info_counts_what_was_written(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    uri = str(tmp_path / "lake")
    ingest(lake.open_lake(uri), write_jsonl(tmp_path / "r.jsonl", sample_records()))
    assert cli.main(["lake-info", "--lake", uri]) == 0
    out = capsys.readouterr().out
    assert "results: version 0, 2 live file(s), 4 row(s)" in out
    assert "mode=score date=2026-11-30 target=ec2: 2" in out
    assert "prices: no table" in out


def test_cli_ingest_into_s3_as_a_subprocess_exits_0(
    tmp_path: Path, s3_bucket: str, aws_endpoint: str
) -> None:
    """The command as the DAG's worker runs it: a separate process, its exit code asserted
    (a process that wrote a Delta table must exit 0, not abort at interpreter exit)."""
    path = write_jsonl(tmp_path / "r.jsonl", sample_records())
    uri = f"s3://{s3_bucket}/lake"
    command = [
        sys.executable,
        "-m",
        "gpucompare",
        "ingest",
        "--results",
        str(path),
        "--lake",
        uri,
        "--provider",
        "aws",
        "--instance-type",
        "g5.xlarge",
        "--region",
        "us-east-1",
        "--market",
        "spot",
        "--target",
        "ec2",
        "--run-id",
        RUN,
    ]
    for attempt in range(2):
        done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert ("committed" if attempt == 0 else "unchanged") in done.stdout
    table = lake.open_lake(uri).results_table()
    assert table.num_rows == 4 and set(table["market"].to_pylist()) == {"spot"}
    bad = write_jsonl(tmp_path / "bad.jsonl", _hostile(sample_records(), HOSTILE["hour 25"][0]))
    done = subprocess.run(
        [*command[:5], str(bad), *command[6:]], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2 and "field finished_at" in done.stderr


def test_results_file_can_be_read_from_s3(tmp_path: Path, s3_bucket: str, aws_client) -> None:
    """The EC2 target leaves results in S3; ingest reads them from there directly."""
    body = "".join(json.dumps(r) + "\n" for r in sample_records())
    aws_client("s3").put_object(Bucket=s3_bucket, Key="runs/r1/results.jsonl", Body=body.encode())
    target = lake.open_lake(str(tmp_path / "lake"))
    ingest(target, f"s3://{s3_bucket}/runs/r1/results.jsonl")
    assert target.results_table().num_rows == 4
    with pytest.raises(IngestError, match="cannot read results file"):
        ingest(target, f"s3://{s3_bucket}/runs/missing.jsonl")
