"""Combine the records of a multi-node run's workers into the run's one record.

In a parameter-server run (kvstore ``dist_sync`` / ``dist_device_sync``) every worker host
runs ``python -m bench_tasks train ... --kvstore dist_sync`` and writes one record. Those
records already agree on what describes the whole run: ``run_id`` and ``config_id`` (the
grouping key), ``batch_size`` (global: per-worker batch × workers), ``gpu_count`` (devices
per worker × workers) and ``num_nodes`` (``kv.num_workers``). What differs is the throughput:
each worker's ``images_per_sec`` is its own, and its ``per_worker_images_per_sec`` is a
one-element list holding it.

The run's record (:func:`merge_worker_records`) has ``images_per_sec`` = the sum of the
workers' throughputs (dist_sync steps are synchronous, so the workers' timed windows
coincide), ``per_worker_images_per_sec`` = the workers' figures, ``images_per_sec_samples``
= the per-repeat sums, and the status of the worst worker (any failure fails the run).

Standard library only: the orchestrator imports this at ingest time.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from bench_tasks.compat import zip_strict
from bench_tasks.record import validate_record
from bench_tasks.record_fields import RecordError

_SHARED = ("run_id", "config_id", "mode", "network", "dtype", "batch_size", "gpu_count", "num_nodes",
           "kvstore", "repeats", "timed_batches", "methodology", "train_loop")


def merge_worker_records(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One record for a multi-node run from its workers' records (see module docstring)."""
    if not records:
        raise RecordError("records", "no worker records to merge")
    first = records[0]
    for record in records[1:]:
        for name in _SHARED:
            if record[name] != first[name]:
                raise RecordError(name, f"workers disagree: {first[name]!r} vs {record[name]!r}")
    expected = first["num_nodes"]
    failed = [r for r in records if r["status"] != "ok"]
    merged = dict(first)
    merged["started_at"] = min(r["started_at"] for r in records)
    merged["finished_at"] = max(r["finished_at"] for r in records)
    if failed or len(records) != expected:
        worst = failed[0] if failed else first
        merged.update(
            status=worst["status"] if failed else "error",
            error=worst["error"] if failed else f"{len(records)} worker records for {expected} workers",
            images_per_sec=None, images_per_sec_samples=[], per_worker_images_per_sec=[], cv=None,
            stop_rule=None, warmup_seconds=None, timed_seconds=None,
            energy_joules=None, energy_method=None, avg_power_watts=None,
        )
        return validate_record(merged)
    per_worker = [float(r["images_per_sec"]) for r in records]
    samples = [sum(values) for values in zip_strict(*(r["images_per_sec_samples"] for r in records))]
    merged.update(_merged_energy(records))
    merged.update(
        images_per_sec=sum(per_worker),
        per_worker_images_per_sec=per_worker,
        images_per_sec_samples=samples,
        cv=statistics.stdev(samples) / statistics.mean(samples) if len(samples) >= 2 else None,
    )
    return validate_record(merged)


def _merged_energy(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Energy of a multi-node run: the workers' sum when every worker measured it, else none
    (a partial sum would understate it) with the first missing worker's reason."""
    missing = [r for r in records if r.get("energy_joules") is None]
    if missing:
        reason = missing[0].get("energy_method") or "unavailable: not measured"
        return {"energy_joules": None, "avg_power_watts": None,
                "energy_method": reason if reason.startswith("unavailable") else f"unavailable: {reason}"}
    methods = sorted({r["energy_method"] for r in records})
    return {"energy_joules": sum(float(r["energy_joules"]) for r in records),
            "avg_power_watts": sum(float(r["avg_power_watts"] or 0.0) for r in records),
            "energy_method": methods[0] if len(methods) == 1 else "unavailable: workers measured differently"}
