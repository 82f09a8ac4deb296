"""Compaction of the results lake, on a local folder and on S3 (moto's server on 127.0.0.1).

Every row stays exactly once (after compaction, and at every point of a compaction that
fails half way), ingest stays idempotent afterwards (same data writes nothing, changed data
replaces the run's rows), and the reports read the same before and after.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest

from gpucompare import cli, compaction, lake, reports
from tests import reports_data
from tests.test_lake import CONTEXT, lake_uri, make_record, snapshot, write_jsonl

__all__ = ["lake_uri"]  # the fixture, shared with test_lake (local and S3)

MACHINES = [
    lake.RunContext(provider="aws", instance_type="g5.xlarge", region="us-east-1", target="ec2"),
    lake.RunContext(provider="aws", instance_type="p3.2xlarge", region="eu-west-1", market="spot",
                    target="ec2"),
    lake.RunContext(provider="leadergpu", instance_type="ltbv14", target="ssh"),
]
NIGHTS = [dt.date(2026, 11, 27), dt.date(2026, 11, 28)]


def night_records(night: dt.date, speed: float = 1.0) -> list[dict]:
    """One machine's run of a night: two score and one train configurations."""
    start = f"{night.isoformat()}T02:00:00+00:00"
    end = f"{night.isoformat()}T02:01:00+00:00"
    common = dict(run_id=f"nightly-{night.isoformat()}", started_at=start, finished_at=end)
    return [
        make_record(**common, images_per_sec=12.5 * speed),
        make_record(**common, config_id="score-alexnet-b8-cpu", network="alexnet", batch_size=8,
                    per_device_batch=8, images_per_sec=80.0 * speed),
        make_record(**common, config_id="train-resnet-50-b4-cpu", mode="train", kvstore="device",
                    images_per_sec=3.0 * speed),
    ]


def build_run_by_run(target: lake.Lake, tmp_path: Path) -> None:
    """Each machine's nightly run ingested on its own: 3 files per (mode, date) partition."""
    for night in NIGHTS:
        for index, context in enumerate(MACHINES):
            path = write_jsonl(tmp_path / f"{night}-{index}.jsonl", night_records(night, 1 + index))
            lake.ingest_results(target, path, context)


def all_rows(target: lake.Lake) -> list[dict]:
    """Every result row, in a stable order (so two reads compare equal row for row)."""
    table = target.results_table()
    keys = ["date", "mode", "provider", "instance_type", "config_id"]
    return table.sort_by([(k, "ascending") for k in keys]).to_pylist()


def partitions(target: lake.Lake) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for rel in target.list_files("results"):
        directory, name = rel.rsplit("/", 1)
        out.setdefault(directory, []).append(name)
    return out


def test_compaction_keeps_every_row_exactly_once_in_one_file_per_partition(
    lake_uri: str, tmp_path: Path,
) -> None:
    target = lake.open_lake(lake_uri)
    build_run_by_run(target, tmp_path)
    before = all_rows(target)
    assert len(before) == len(NIGHTS) * len(MACHINES) * 3
    assert sum(len(v) for v in partitions(target).values()) == len(NIGHTS) * 2 * len(MACHINES)

    summary = target.compact()

    assert (summary.partitions_compacted, summary.files_before, summary.files_after) == (4, 12, 4)
    assert summary.rows == len(before)
    layout = partitions(target)
    assert len(layout) == 4
    assert all(len(names) == 1 and compaction.is_compacted(names[0]) for names in layout.values())
    # the originals are gone from storage, not just hidden
    assert sorted(snapshot(target)) == sorted(f"{d}/{n[0]}" for d, n in layout.items())
    assert all_rows(target) == before
    # compacting again changes nothing
    again = snapshot(target)
    assert target.compact().partitions_compacted == 0
    assert snapshot(target) == again


def test_compaction_leaves_partitions_from_the_cutoff_on(lake_uri: str, tmp_path: Path) -> None:
    target = lake.open_lake(lake_uri)
    build_run_by_run(target, tmp_path)
    before = all_rows(target)
    summary = target.compact(before=NIGHTS[1])
    assert (summary.partitions_compacted, summary.partitions_left) == (2, 2)
    layout = partitions(target)
    for directory, names in layout.items():
        old = f"date={NIGHTS[0].isoformat()}" in directory
        assert (len(names) == 1 and compaction.is_compacted(names[0])) if old else len(names) == 3
    assert all_rows(target) == before


def test_re_ingest_after_compaction_is_idempotent(lake_uri: str, tmp_path: Path) -> None:
    target = lake.open_lake(lake_uri)
    build_run_by_run(target, tmp_path)
    target.compact()
    before, rows = snapshot(target), all_rows(target)
    path = write_jsonl(tmp_path / "again.jsonl", night_records(NIGHTS[0], 2))
    written = lake.ingest_results(target, path, MACHINES[1])
    assert snapshot(target) == before  # not a byte written or deleted
    assert all_rows(target) == rows
    assert sorted(written) == sorted(p for p in before if f"date={NIGHTS[0]}" in p)


def test_changed_re_ingest_after_compaction_replaces_the_runs_rows(lake_uri: str, tmp_path: Path) -> None:
    target = lake.open_lake(lake_uri)
    build_run_by_run(target, tmp_path)
    target.compact()
    rows = all_rows(target)
    path = write_jsonl(tmp_path / "fixed.jsonl", night_records(NIGHTS[0], 10))
    lake.ingest_results(target, path, MACHINES[0])

    after = all_rows(target)
    assert len(after) == len(rows)  # replaced, not appended
    changed = [r for r in after if r["instance_type"] == "g5.xlarge" and r["date"] == NIGHTS[0]]
    assert sorted(r["images_per_sec"] for r in changed) == [30.0, 125.0, 800.0]
    def others(table: list[dict]) -> list[dict]:
        return [r for r in table if not (r["instance_type"] == "g5.xlarge" and r["date"] == NIGHTS[0])]

    assert others(after) == others(rows)
    layout = partitions(target)
    assert all(len(names) == 1 and compaction.is_compacted(names[0]) for names in layout.values())
    assert len(snapshot(target)) == 4  # on S3 the older compacted version is deleted too

    # a run new to a compacted partition goes into it as well; ingesting it again writes nothing
    late = lake.RunContext(provider="local", instance_type="cpu")
    lake.ingest_results(target, write_jsonl(tmp_path / "late.jsonl", night_records(NIGHTS[0])), late)
    assert len(all_rows(target)) == len(rows) + 3
    settled = snapshot(target)
    lake.ingest_results(target, write_jsonl(tmp_path / "late.jsonl", night_records(NIGHTS[0])), late)
    assert snapshot(target) == settled and len(settled) == 4


def test_a_failure_between_writing_the_compacted_file_and_deleting_the_originals(
    lake_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fault is injected: the second deletion of an original raises, as a dropped
    connection would. The compacted file and most originals are then both in storage."""
    target = lake.open_lake(lake_uri)
    build_run_by_run(target, tmp_path)
    rows = all_rows(target)
    original_delete = lake.Lake._delete_if_present
    calls: list[str] = []

    def failing_delete(self: lake.Lake, path: str) -> None:
        calls.append(path)
        if len(calls) == 2:
            raise OSError("injected: connection reset")
        original_delete(self, path)

    monkeypatch.setattr(lake.Lake, "_delete_if_present", failing_delete)
    with pytest.raises(OSError, match="injected"):
        target.compact()
    monkeypatch.setattr(lake.Lake, "_delete_if_present", original_delete)

    stored = snapshot(target)
    assert any(compaction.is_compacted(p.rsplit("/", 1)[1]) for p in stored)
    assert len(stored) > len(partitions(target))  # superseded originals still stored, not listed
    assert all_rows(target) == rows  # every row exactly once
    reread = reports.ResultFiles.of(target, reports._connect())
    reread.register("results")
    assert reread.con.execute("SELECT count(*) FROM results").fetchone() == (len(rows),)

    # an ingest into the half-done partition, then the next compaction, finish the job
    path = write_jsonl(tmp_path / "again.jsonl", night_records(NIGHTS[0], 1))
    lake.ingest_results(target, path, MACHINES[0])
    assert all_rows(target) == rows
    target.compact()
    assert all_rows(target) == rows
    assert len(snapshot(target)) == 4


def test_a_failed_compacted_write_leaves_the_lake_as_it_was(
    lake_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fault is injected: putting the compacted file of the second partition raises."""
    target = lake.open_lake(lake_uri)
    build_run_by_run(target, tmp_path)
    rows = all_rows(target)
    original_put = lake.Lake._put_atomic
    calls: list[str] = []

    def failing_put(self: lake.Lake, path: str, data: bytes) -> None:
        calls.append(path)
        if len(calls) == 2:
            raise OSError("injected: no space left on device")
        original_put(self, path, data)

    monkeypatch.setattr(lake.Lake, "_put_atomic", failing_put)
    with pytest.raises(OSError, match="injected"):
        target.compact()
    monkeypatch.setattr(lake.Lake, "_put_atomic", original_put)
    layout = partitions(target)
    assert sorted(len(names) for names in layout.values()) == [1, 3, 3, 3]  # first partition done
    assert all_rows(target) == rows


def report_tables(target: lake.Lake) -> dict[str, list[dict]]:
    night = NIGHTS[-1]
    prices = [reports_data.price(c.instance_type, 1.0 + i, provider=c.provider, region=c.region,
                                 market=c.market, effective_from=night - dt.timedelta(days=30))
              for i, c in enumerate(MACHINES)]
    built = reports.build_reports(reports_data.inputs(target, prices, [reports_data.fx(1.1, night)]),
                                  currency="USD")
    out = {}
    for name, table in built.tables.items():
        ordered = table.sort_by([(c, "ascending") for c in table.column_names
                                 if not pa.types.is_nested(table.schema.field(c).type)])
        out[name] = ordered.to_pylist()
    return out


def test_reports_are_the_same_before_and_after_compaction(lake_uri: str, tmp_path: Path) -> None:
    target = lake.open_lake(lake_uri)
    build_run_by_run(target, tmp_path)
    before = report_tables(target)
    assert len(before["cost_per_million"]) == len(MACHINES) * 3
    assert target.compact().partitions_compacted == 4
    assert report_tables(target) == before


def test_cli_compact_older_than_days(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    uri = str(tmp_path / "lake")
    target = lake.open_lake(uri)
    today = dt.datetime.now(dt.UTC).date()
    for days_ago in (0, 5):
        for index, context in enumerate(MACHINES[:2]):
            records = night_records(today - dt.timedelta(days=days_ago))
            lake.ingest_results(target, write_jsonl(tmp_path / f"{days_ago}-{index}.jsonl", records), context)
    rows = all_rows(target)
    assert cli.main(["compact", "--lake", uri, "--older-than-days", "2"]) == 0
    assert "compacted 2 partition(s): 4 file(s) → 2" in capsys.readouterr().out
    assert sorted(len(names) for names in partitions(target).values()) == [1, 1, 2, 2]
    assert all_rows(target) == rows
    assert cli.main(["compact", "--lake", uri, "--older-than-days", "-1"]) == 2
    assert "--older-than-days must be >= 0" in capsys.readouterr().err
    assert cli.compaction_cutoff(2, today=dt.date(2026, 11, 30)) == dt.date(2026, 11, 28)


def test_a_run_named_like_the_compacted_file_is_still_a_run(tmp_path: Path) -> None:
    """'~' never survives safe_name, so no run file can pass for a compacted one."""
    target = lake.open_lake(str(tmp_path / "lake"))
    records = [dict(r, run_id="~compacted") for r in night_records(NIGHTS[0])]
    written = lake.ingest_results(target, write_jsonl(tmp_path / "r.jsonl", records), CONTEXT)
    assert not any(compaction.is_compacted(p.rsplit("/", 1)[1]) for p in written)
