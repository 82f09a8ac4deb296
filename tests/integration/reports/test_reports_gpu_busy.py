"""A configuration that found its GPU busy (status gpu_busy, ``bench_tasks.exclusive``) goes through
the real ingest into a Delta lake on disk and shows in the reports (real DuckDB) like any other
status: the throughput report's row says gpu_busy and carries no figure; the lake keeps the
record's gpu_exclusive and its note."""

from __future__ import annotations

import datetime as dt

from bench_tasks.record import validate_record
from gpucompare.lake.tables import open_lake
from gpucompare.reports.build import build_reports
from tests.support.reports_data import ingest, inputs, record

NIGHT = dt.date(2026, 3, 10)
BUSY = "another process computes on the GPU: gpu:0 pid 4242 (stray_train.py)"


def test_a_gpu_busy_cell_is_reported_with_its_status(tmp_path) -> None:
    lake = open_lake(str(tmp_path / "lake"))
    busy = {**record(night=NIGHT, batch_size=32, status="oom"), "status": "gpu_busy", "error": BUSY,
            "gpu_exclusive": False, "gpu_exclusive_note": BUSY}
    ok = {**record(night=NIGHT, batch_size=8, images_per_sec=50.0), "gpu_exclusive": True}
    ingest(lake, [validate_record(busy), validate_record(ok)])
    rows = {r["batch_size"]: r for r in build_reports(inputs(lake, [], [])).tables["throughput"].to_pylist()}
    assert rows[32]["status"] == "gpu_busy" and rows[32]["images_per_sec"] is None
    assert rows[8]["status"] == "ok" and rows[8]["images_per_sec"] == 50.0
    stored = lake.results_table(columns=["status", "gpu_exclusive", "gpu_exclusive_note"]).to_pylist()
    assert sorted((r["status"], r["gpu_exclusive"]) for r in stored) == [("gpu_busy", False), ("ok", True)]
    assert {r["gpu_exclusive_note"] for r in stored} == {BUSY, None}
