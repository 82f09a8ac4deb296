"""The results lake on a local folder and on S3 (moto's server on 127.0.0.1), through the same tests.

Covers ingest (validation with line and field, orchestrator columns, zstd Parquet in Hive
partitions), idempotence, atomicity (a failure in the middle of a commit leaves the lake as
it was; temporary files are never part of the table) and the command line.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import duckdb
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from bench_tasks.record import empty_record, validate_record
from gpucompare import cli, lake, schema
from tests.conftest import REPO_ROOT


def make_record(**overrides: object) -> dict:
    """A valid record of a finished configuration (overridable)."""
    values = dict(
        run_id="nightly-2026-11-30T0200", config_id="score-resnet-50-b4-cpu", mode="score",
        network="resnet-50", image_shape="3,224,224", dtype="float32", batch_size=4,
        per_device_batch=4, devices=["cpu:0"], device_kind="cpu", gpu_count=1, num_nodes=1,
        warmup_batches=5, timed_batches=10, repeats=3, images_per_sec=12.5,
        images_per_sec_samples=[12.4, 12.5, 12.7], cv=0.01, status="ok",
        started_at="2026-11-30T02:00:00+00:00", finished_at="2026-11-30T02:01:00+00:00", host="bench1",
    )
    values.update(overrides)
    return validate_record(empty_record(**values))


def sample_records() -> list[dict]:
    return [
        make_record(),
        make_record(config_id="score-alexnet-b8-cpu", network="alexnet", batch_size=8, per_device_batch=8,
                    images_per_sec=80.0, images_per_sec_samples=[79.0, 80.0, 81.0]),
        make_record(config_id="train-resnet-50-b8-cpu", mode="train", batch_size=8, per_device_batch=4,
                    devices=["cpu:0", "cpu:1"], gpu_count=2, kvstore="device", scaling="strong",
                    images_per_sec=3.25, images_per_sec_samples=[3.2, 3.25, 3.3],
                    started_at="2026-12-01T00:10:00Z", finished_at="2026-12-01T00:12:00Z"),
        make_record(config_id="train-resnet-152-b64-cpu", mode="train", network="resnet-152", batch_size=64,
                    per_device_batch=64, kvstore="device", status="oom", images_per_sec=None,
                    images_per_sec_samples=[], cv=None, error="out of memory",
                    started_at="2026-12-01T00:20:00Z", finished_at="2026-12-01T00:20:05Z"),
    ]


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


CONTEXT = lake.RunContext(provider="aws", instance_type="g5.xlarge", region="us-east-1", market="spot",
                          target="ec2", dag_run_id="scheduled__2026-11-30T02:00:00+00:00")


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.integration)])
def lake_uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A new, empty lake: a local folder, or a prefix in a fresh bucket on moto's server."""
    if request.param == "local":
        return str(tmp_path / "lake")
    bucket = request.getfixturevalue("s3_bucket")
    return f"s3://{bucket}/lakes/test"


def snapshot(target: lake.Lake) -> dict[str, bytes]:
    """Every committed file of the lake with its bytes."""
    out = {}
    for kind in lake.TABLE_KINDS:
        for rel in target.list_files(kind):
            with target.fs.open_input_stream(target.path(rel)) as stream:
                out[rel] = stream.read()
    return out


def test_ingest_writes_partitioned_zstd_parquet_with_orchestrator_columns(
    lake_uri: str, tmp_path: Path,
) -> None:
    target = lake.open_lake(lake_uri)
    written = lake.ingest_results(target, write_jsonl(tmp_path / "r.jsonl", sample_records()), CONTEXT)

    assert sorted({p.rsplit("/", 1)[0] for p in written}) == [
        "results/mode=score/date=2026-11-30", "results/mode=train/date=2026-12-01"]
    assert target.list_files("results") == sorted(written)
    for rel in written:
        metadata = pq.ParquetFile(target.fs.open_input_file(target.path(rel))).metadata
        assert metadata.row_group(0).column(0).compression == "ZSTD"
        assert "mode" not in metadata.schema.names  # partition columns live in the path

    table = target.results_dataset().to_table().sort_by("config_id")
    assert table.schema.equals(schema.RESULTS_SCHEMA)
    assert table.num_rows == 4
    rows = {r["config_id"]: r for r in table.to_pylist()}
    train = rows["train-resnet-50-b8-cpu"]
    assert (train["mode"], train["date"].isoformat()) == ("train", "2026-12-01")
    assert train["devices"] == ["cpu:0", "cpu:1"] and train["images_per_sec_samples"] == [3.2, 3.25, 3.3]
    assert train["started_at"].isoformat() == "2026-12-01T00:10:00+00:00"
    assert (train["provider"], train["instance_type"], train["region"], train["market"], train["target"]) == (
        "aws", "g5.xlarge", "us-east-1", "spot", "ec2")
    assert train["dag_run_id"] == CONTEXT.dag_run_id and train["source"] == "gpucompare ec2 run"
    assert rows["train-resnet-152-b64-cpu"]["status"] == "oom"
    assert rows["train-resnet-152-b64-cpu"]["images_per_sec"] is None
    # partition pruning works on the typed partition columns
    scores = target.results_table(filter=pc.field("mode") == "score")
    assert sorted(scores["network"].to_pylist()) == ["alexnet", "resnet-50"]


def test_ingesting_the_same_run_twice_leaves_one_copy(lake_uri: str, tmp_path: Path) -> None:
    target = lake.open_lake(lake_uri)
    results = write_jsonl(tmp_path / "r.jsonl", sample_records())
    first = lake.ingest_results(target, results, CONTEXT)
    second = lake.ingest_results(target, results, CONTEXT)
    assert first == second
    assert target.list_files("results") == sorted(first)
    assert target.results_table().num_rows == 4

    # another machine in the same nightly run (same run_id) is a different ingest unit
    other = lake.RunContext(provider="leadergpu", instance_type="ltbv14", target="ssh")
    lake.ingest_results(target, results, other)
    assert target.results_table().num_rows == 8


def test_re_ingest_replaces_the_run_rather_than_appending(lake_uri: str, tmp_path: Path) -> None:
    target = lake.open_lake(lake_uri)
    lake.ingest_results(target, write_jsonl(tmp_path / "a.jsonl", sample_records()), CONTEXT)
    corrected = [dict(r) for r in sample_records()]
    corrected[0]["images_per_sec"] = 99.0
    corrected[0]["images_per_sec_samples"] = [99.0]
    lake.ingest_results(target, write_jsonl(tmp_path / "b.jsonl", corrected), CONTEXT)
    table = target.results_table(filter=pc.field("config_id") == "score-resnet-50-b4-cpu")
    assert table["images_per_sec"].to_pylist() == [99.0]
    assert len(target.list_files("results")) == 2  # the superseded version is gone
    assert target.results_table().num_rows == 4


def test_bad_record_is_refused_with_line_and_field_and_nothing_is_written(
    lake_uri: str, tmp_path: Path,
) -> None:
    target = lake.open_lake(lake_uri)
    records = sample_records()
    lines = [json.dumps(r) for r in records]
    bad = dict(records[1], batch_size=0)
    lines[1] = json.dumps(bad)
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join([lines[0], "", lines[1], *lines[2:]]) + "\n", encoding="utf-8")

    with pytest.raises(lake.IngestError) as info:
        lake.ingest_results(target, path, CONTEXT)
    assert (info.value.line, info.value.field) == (3, "batch_size")
    assert "line 3" in str(info.value) and "batch_size" in str(info.value)
    assert snapshot(target) == {}
    assert target.results_table().num_rows == 0


def test_unknown_field_and_broken_json_are_named(tmp_path: Path) -> None:
    target = lake.open_lake(str(tmp_path / "lake"))
    record = dict(make_record(), gpu_modle="typo")
    with pytest.raises(lake.IngestError) as info:
        lake.ingest_results(target, write_jsonl(tmp_path / "u.jsonl", [make_record(), record]), CONTEXT)
    assert (info.value.line, info.value.field) == (2, "gpu_modle")
    path = tmp_path / "j.jsonl"
    path.write_text(json.dumps(make_record()) + "\n{not json\n", encoding="utf-8")
    with pytest.raises(lake.IngestError, match="line 2: not valid JSON"):
        lake.ingest_results(target, path, CONTEXT)
    assert not (tmp_path / "lake").exists()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"provider": "aws; rm -rf /"}, "provider"),
        ({"instance_type": "../../etc"}, "instance_type"),
        ({"region": "US East"}, "region"),
        ({"market": "reserved"}, "market"),
        ({"target": "published"}, "target"),
        ({"dag_run_id": "a\nb"}, "dag_run_id"),
    ],
)
def test_orchestrator_values_are_validated(change: dict, field: str, tmp_path: Path) -> None:
    context = lake.RunContext(**{**CONTEXT.__dict__, **change})
    with pytest.raises(lake.IngestError) as info:
        lake.ingest_results(lake.open_lake(str(tmp_path / "lake")),
                            write_jsonl(tmp_path / "r.jsonl", sample_records()), context)
    assert info.value.field == field
    assert not (tmp_path / "lake").exists()


def test_a_failure_in_the_middle_of_a_commit_leaves_the_lake_as_it_was(
    lake_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fault is injected: the second file put of the re-ingest raises, as a full disk or a
    dropped connection would."""
    target = lake.open_lake(lake_uri)
    lake.ingest_results(target, write_jsonl(tmp_path / "a.jsonl", sample_records()), CONTEXT)
    before = snapshot(target)

    corrected = [dict(r, images_per_sec=r["images_per_sec"] and r["images_per_sec"] * 2)
                 for r in sample_records()]
    new_day = dict(make_record(), config_id="late", started_at="2026-12-02T00:00:00Z",
                   finished_at="2026-12-02T00:00:01Z")
    original_put = lake.Lake._put_atomic
    calls = []

    def failing_put(self: lake.Lake, path: str, data: bytes) -> None:
        calls.append(path)
        if len(calls) == 2:
            raise OSError("injected: no space left on device")
        original_put(self, path, data)

    monkeypatch.setattr(lake.Lake, "_put_atomic", failing_put)
    with pytest.raises(OSError, match="injected"):
        lake.ingest_results(target, write_jsonl(tmp_path / "b.jsonl", [*corrected, new_day]), CONTEXT)
    monkeypatch.setattr(lake.Lake, "_put_atomic", original_put)

    assert len(calls) >= 2
    assert snapshot(target) == before  # the replaced file is back, the new one is gone
    assert target.results_table().num_rows == 4


def test_temporary_files_are_never_part_of_the_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = lake.open_lake(str(tmp_path / "lake"))
    written = lake.ingest_results(target, write_jsonl(tmp_path / "r.jsonl", sample_records()), CONTEXT)
    partition = tmp_path / "lake" / written[0].rsplit("/", 1)[0]
    # what a writer killed between write and rename leaves behind: half a Parquet file
    stray = partition / f".{Path(written[0]).name}.tmp-0123456789abcdef"
    stray.write_bytes(b"PAR1 half a file")
    assert target.results_dataset().to_table().num_rows == 4
    assert target.list_files("results") == sorted(written)
    glob = (tmp_path / "lake" / "results" / "**" / "*.parquet").as_posix()
    assert duckdb.connect().execute(f"SELECT count(*) FROM read_parquet('{glob}')").fetchone() == (4,)

    # a failed local write removes its own temporary file
    monkeypatch.setattr(lake.os, "replace", lambda *a: (_ for _ in ()).throw(OSError("injected")))
    with pytest.raises(OSError, match="injected"):
        lake.ingest_results(target, write_jsonl(tmp_path / "r2.jsonl", sample_records()[:1]),
                            lake.RunContext(provider="local", instance_type="cpu"))
    leftovers = sorted(p.name for p in (tmp_path / "lake").rglob(".*.tmp-*"))
    assert leftovers == [stray.name]


def test_readers_never_see_half_a_file_while_a_run_is_re_ingested(lake_uri: str, tmp_path: Path) -> None:
    """A writer alternates two versions of one run (50 and 250 rows) while the main thread
    reads. Every read is whole: one version — or on S3, for a moment, both (300); never a
    torn file. An S3 read that misses a superseded file deleted meanwhile is retried by
    results_table."""
    target = lake.open_lake(lake_uri)
    paths = []
    for i in range(2):  # two versions of the run, of different sizes
        records = [make_record(config_id=f"c{j}", batch_size=j + 1, per_device_batch=j + 1)
                   for j in range(50 + 200 * i)]
        paths.append(write_jsonl(tmp_path / f"v{i}.jsonl", records))
    lake.ingest_results(target, paths[0], CONTEXT)
    stop = threading.Event()
    errors: list[BaseException] = []
    rounds = 20 if lake_uri.startswith("s3://") else 60

    def writer() -> None:
        try:
            for n in range(1, rounds + 1):
                lake.ingest_results(target, paths[n % 2], CONTEXT)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)
        finally:
            stop.set()

    thread = threading.Thread(target=writer)
    thread.start()
    seen = set()
    reads = 0
    while not stop.is_set():
        seen.add(target.results_table().num_rows)
        reads += 1
    thread.join()
    assert not errors
    allowed = {50, 250, 300} if lake_uri.startswith("s3://") else {50, 250}
    assert reads > 0 and seen <= allowed, seen
    # the last version alone remains: one file, no leftovers of the older one
    assert target.results_table().num_rows == (50 if rounds % 2 == 0 else 250)
    assert len(target.list_files("results")) == 1


def test_committing_the_same_data_again_touches_nothing(lake_uri: str, tmp_path: Path) -> None:
    target = lake.open_lake(lake_uri)
    results = write_jsonl(tmp_path / "r.jsonl", sample_records())
    lake.ingest_results(target, results, CONTEXT)
    before = snapshot(target)
    first_ingest = set(target.results_table()["ingested_at"].to_pylist())
    lake.ingest_results(target, results, CONTEXT)
    assert snapshot(target) == before
    assert set(target.results_table()["ingested_at"].to_pylist()) == first_ingest


def test_empty_lake_reads_as_empty_tables(tmp_path: Path) -> None:
    target = lake.open_lake(str(tmp_path / "nothing-here"))
    assert target.results_dataset().to_table().num_rows == 0
    assert target.results_dataset().schema.equals(schema.RESULTS_SCHEMA)
    assert target.published_scaling_table().num_rows == 0
    assert target.prices_table(include_shipped=False).num_rows == 0


def test_lake_uri_is_checked(tmp_path: Path) -> None:
    with pytest.raises(lake.LakeError, match="scheme not supported"):
        lake.open_lake("ftp://example.com/lake")
    with pytest.raises(lake.LakeError, match="names no bucket"):
        lake.open_lake("s3://")
    assert lake.open_lake(f"file://{tmp_path}/l").root == f"{tmp_path}/l"
    assert lake.open_lake().root == str(Path("./lake").resolve())


def test_cli_ingest_reports_bad_record_with_exit_code_2(
    tmp_path: Path, capsys: pytest.CaptureFixture,
) -> None:
    records = sample_records()
    records[2] = dict(records[2], status="crashed")
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    code = cli.main(["ingest", "--results", str(path), "--lake", str(tmp_path / "lake"),
                     "--provider", "local", "--instance-type", "cpu"])
    assert code == 2
    err = capsys.readouterr().err
    assert "line 3" in err and "field status" in err and "crashed" in err
    assert not (tmp_path / "lake").exists()


@pytest.mark.integration
def test_cli_ingest_into_s3_as_a_subprocess(tmp_path: Path, s3_bucket: str, aws_endpoint: str) -> None:
    path = write_jsonl(tmp_path / "r.jsonl", sample_records())
    uri = f"s3://{s3_bucket}/lake"
    command = [sys.executable, "-m", "gpucompare", "ingest", "--results", str(path), "--lake", uri,
               "--provider", "aws", "--instance-type", "g5.xlarge", "--region", "us-east-1",
               "--market", "spot", "--target", "ec2"]
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "2 file(s)" in done.stdout
    table = lake.open_lake(uri).results_table()
    assert table.num_rows == 4 and set(table["market"].to_pylist()) == {"spot"}


@pytest.mark.integration
def test_results_file_can_be_read_from_s3(tmp_path: Path, s3_bucket: str, aws_client) -> None:
    """The EC2 target leaves results in S3; ingest reads them from there directly."""
    body = "".join(json.dumps(r) + "\n" for r in sample_records())
    aws_client("s3").put_object(Bucket=s3_bucket, Key="runs/r1/results.jsonl", Body=body.encode())
    target = lake.open_lake(str(tmp_path / "lake"))
    lake.ingest_results(target, f"s3://{s3_bucket}/runs/r1/results.jsonl", CONTEXT)
    assert target.results_table().num_rows == 4
    with pytest.raises(lake.IngestError, match="cannot read results file"):
        lake.ingest_results(target, f"s3://{s3_bucket}/runs/missing.jsonl", CONTEXT)


def test_lake_info_counts_what_was_written(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    uri = str(tmp_path / "lake")
    lake.ingest_results(lake.open_lake(uri), write_jsonl(tmp_path / "r.jsonl", sample_records()), CONTEXT)
    assert cli.main(["lake-info", "--lake", uri]) == 0
    out = capsys.readouterr().out
    assert "results: 2 file(s), 4 row(s)" in out
    assert "mode=score date=2026-11-30 target=ec2: 2" in out
    assert "mode=train date=2026-12-01 target=ec2: 2" in out
    assert "prices: 0 file(s), 0 row(s)" in out
