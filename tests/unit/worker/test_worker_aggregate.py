"""Merging the workers' records of a multi-node training run into the run's record
(``bench_tasks.aggregate``; the real multi-node run is tests/integration/worker/test_worker_distributed.py).
"""

from __future__ import annotations

import pytest

from bench_tasks.aggregate import merge_worker_records
from bench_tasks.record_fields import RecordError


def _worker_record(ips: float | None, status: str = "ok") -> dict:
    from bench_tasks.record_fields import empty_record

    return empty_record(
        run_id="r", config_id="c", mode="train", network="googlenet", image_shape="3,224,224",
        dtype="float32", batch_size=64, per_device_batch=8, devices=["gpu:0", "gpu:1", "gpu:2", "gpu:3"],
        device_kind="gpu", gpu_count=8, num_nodes=2, kvstore="dist_sync", warmup_batches=5,
        timed_batches=10, repeats=2, images_per_sec=ips, images_per_sec_samples=[ips, ips] if ips else [],
        per_worker_images_per_sec=[ips] if ips else [], cv=0.0 if ips else None, status=status,
        error=None if status == "ok" else "Memory allocation failed out of memory",
        started_at="2026-11-30T01:00:00+00:00", finished_at="2026-11-30T01:01:00+00:00", host="h",
        methodology="official", train_loop="official", stop_rule="fixed_batches" if ips else None,
        setup_seconds=3.0, warmup_seconds=1.0 if ips else None, timed_seconds=2.0 if ips else None)


def test_merge_sums_workers_and_a_failed_worker_fails_the_run() -> None:
    run = merge_worker_records([_worker_record(100.0), _worker_record(90.0)])
    assert run["images_per_sec"] == 190.0 and run["per_worker_images_per_sec"] == [100.0, 90.0]
    assert run["images_per_sec_samples"] == [190.0, 190.0]
    failed = merge_worker_records([_worker_record(100.0), _worker_record(None, "oom")])
    assert failed["status"] == "oom" and failed["images_per_sec"] is None
    assert (failed["stop_rule"], failed["timed_seconds"], failed["warmup_seconds"]) == (None, None, None)
    missing = merge_worker_records([_worker_record(100.0)])
    assert missing["status"] == "error" and "1 worker records for 2 workers" in missing["error"]
    other = _worker_record(90.0)
    other["batch_size"] = 32
    with pytest.raises(RecordError, match="batch_size"):
        merge_worker_records([_worker_record(100.0), other])
