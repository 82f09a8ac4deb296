"""Helpers of the worker tests: run ``python -m bench_tasks`` in .venv-bench, read its records.

Builds on tests/support/bench_helpers.py (the worker interpreter, from the repository root).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench_tasks.record import validate_record
from tests.conftest import BENCH_PYTHON, REPO_ROOT
from tests.support.proc_helpers import children_of, is_alive


def read_records(path: Path) -> list[dict[str, Any]]:
    """Every line of a JSON Lines output, each validated by the record contract."""
    if not path.exists():
        return []
    return [validate_record(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


def start_worker(args: Sequence[str], env: dict[str, str] | None = None,
                 prefix: Sequence[str] = ()) -> subprocess.Popen[str]:
    """``python -m bench_tasks ARGS`` in the background (for tests that act while it runs)."""
    return subprocess.Popen(
        [*prefix, str(BENCH_PYTHON), "-m", "bench_tasks", *args],
        cwd=REPO_ROOT, env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )



def wait_for(predicate, timeout: float, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"condition not met within {timeout} s")



def timed_seconds(record: dict[str, Any]) -> float:
    """Seconds inside timed batches recovered from the samples: batches × batch / images/s per
    repeat (fixed batch counts: ``timed_batches`` is the total over the repeats)."""
    per_worker_batch = record["batch_size"] // record["num_nodes"]
    per_repeat = record["timed_batches"] / record["repeats"]
    return sum(per_repeat * per_worker_batch / s for s in record["images_per_sec_samples"])


__all__ = ["REPO_ROOT", "children_of", "is_alive", "read_records", "start_worker", "timed_seconds",
           "wait_for"]


#: The fields of one plausible ok GPU scoring record (``empty_record`` fills the rest): the base
#: the record-plausibility tests (unit) and the record property test (integration) vary.
PLAUSIBLE_RECORD: dict = dict(
    run_id="r1", config_id="score-resnet-50-b4-gpu", mode="score", network="resnet-50",
    image_shape="3,224,224", dtype="float32", batch_size=4, per_device_batch=4, devices=["gpu:0"],
    device_kind="gpu", gpu_count=1, num_nodes=1, warmup_batches=5, timed_batches=10, repeats=3,
    images_per_sec=120.0, images_per_sec_samples=[119.0, 120.0, 121.0], cv=0.01, status="ok",
    started_at="2026-11-30T02:00:00+00:00", finished_at="2026-11-30T02:01:00+00:00", host="h",
    parameters=25_000_000, gpu_memory_mib=24_000,
)
