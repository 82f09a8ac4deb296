"""Helpers of the lake's concurrency, SIGKILL and benchmark runs: result files of any size and
the ``python -m gpucompare`` commands as real processes.

Shared by tests/system/test_lake_concurrency.py and scripts/bench_lake.py (the measurements with more
repetitions than CI can afford).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa

from bench_tasks.record_fields import empty_record

REPO_ROOT = Path(__file__).resolve().parents[2]


def run_records(
    run_id: str,
    count: int,
    *,
    night: dt.date = dt.date(2026, 11, 30),
    speed: float = 10.0,
    error_bytes: int = 0,
) -> list[dict[str, Any]]:
    """``count`` valid records of one run, one configuration each, half scoring and half
    training (two partitions of ``night``); ``error_bytes`` pads an ``error`` text to make big files."""
    records = []
    for index in range(count):
        mode = "score" if index % 2 == 0 else "train"
        started = dt.datetime(night.year, night.month, night.day, 2, 0, tzinfo=dt.UTC) + dt.timedelta(
            seconds=index % 14_400
        )  # one night: every record of a run within four hours
        failed = error_bytes > 0 and index % 2 == 1
        records.append(
            empty_record(
                run_id=run_id,
                config_id=f"{mode}-resnet-50-b{index + 1}-cpu",
                mode=mode,
                network="resnet-50",
                image_shape="3,224,224",
                dtype="float32",
                batch_size=index + 1,
                per_device_batch=index + 1,
                devices=["cpu:0"],
                device_kind="cpu",
                gpu_count=1,
                num_nodes=1,
                kvstore="device" if mode == "train" else None,
                warmup_batches=5,
                timed_batches=10,
                repeats=3,
                images_per_sec=None if failed else speed + index % 7,
                cv=None if failed else 0.01,
                images_per_sec_samples=[] if failed else [speed + index % 7] * 3,
                status="error" if failed else "ok",
                error=("x" * error_bytes) if failed else None,
                started_at=started.isoformat(),
                finished_at=(started + dt.timedelta(seconds=1)).isoformat(),
                host="bench1",
                gpu_model=None,
            )
        )
    return records


def write_records(path: Path, records: list[dict[str, Any]]) -> Path:
    with open(path, "w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record) + "\n")
    return path


def ingest_command(lake: str, results: Path | str, run_id: str, *, instance_type: str = "cpu") -> list[str]:
    return [
        sys.executable,
        "-m",
        "gpucompare",
        "ingest",
        "--results",
        str(results),
        "--lake",
        lake,
        "--provider",
        "local",
        "--instance-type",
        instance_type,
        "--run-id",
        run_id,
        "--code-hash",
        "0123456789abcdef",
    ]


def compact_command(lake: str) -> list[str]:
    return [sys.executable, "-m", "gpucompare", "compact", "--lake", lake]


def start(command: list[str]) -> subprocess.Popen[str]:
    """A command of the product as a process of its own (the repository on its path)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "plugins")])}
    return subprocess.Popen(
        command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def expected_series_keys(table: pa.Table) -> list[int]:
    """Each row's series_key computed one row at a time from its series columns (lake.series):
    what every writer of the results table must have stored."""
    from gpucompare.lake import series

    return [series.series_key([row[c] for c in series.SERIES_COLUMNS])
            for row in table.select(list(series.SERIES_COLUMNS)).to_pylist()]
