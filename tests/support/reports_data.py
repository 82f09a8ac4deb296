"""Small, hand-checkable lakes for the report tests (a helper module, not a fixture module).

Records are built with ``bench_tasks.record_fields.empty_record``, checked with the contract's own
``validate_record`` and written through the lake's real ingest path (``lake.results_rows``
then ``Lake.write_results``, one Delta commit per run), so the reports read exactly what production writes.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa

from bench_tasks.record import validate_record
from bench_tasks.record_fields import empty_record
from gpucompare.lake import schema
from gpucompare.lake.ingest import RunContext, results_rows
from gpucompare.lake.tables import Lake
from gpucompare.reports.inputs import ReportInputs

IMAGE_SHAPES = {"inception-v3": "3,299,299"}


def record(
    *,
    network: str = "resnet-50",
    mode: str = "score",
    batch_size: int = 32,
    gpu_count: int = 1,
    num_nodes: int = 1,
    images_per_sec: float | None = 100.0,
    night: dt.date = dt.date(2026, 3, 10),
    status: str = "ok",
    dtype: str = "float32",
    gpu_model: str | None = "NVIDIA A10G",
    scaling: str | None = None,
    minute: int = 0,
    methodology: str | None = None,
) -> dict[str, Any]:
    """One valid result record (a run started at 02:00 UTC + ``minute`` on ``night``), timed
    under ``methodology`` (None: a record from before the field existed, read as official).
    The config_id leaves the methodology out on purpose: the reports must keep methodologies
    apart by the ``methodology`` column itself, whatever the worker's ids say."""
    started = dt.datetime(night.year, night.month, night.day, 2, minute, tzinfo=dt.UTC)
    finished = started + dt.timedelta(seconds=30)
    ok = status == "ok"
    per_node = gpu_count // num_nodes
    values = dict(
        run_id=f"nightly-{night.isoformat()}",
        config_id=f"{mode}-{network}-{dtype}-b{batch_size}-g{gpu_count}",
        mode=mode,
        network=network,
        image_shape=IMAGE_SHAPES.get(network, "3,224,224"),
        dtype=dtype,
        batch_size=batch_size,
        per_device_batch=batch_size // gpu_count if batch_size % gpu_count == 0 else None,
        devices=[f"gpu:{i}" for i in range(per_node)],
        device_kind="gpu",
        gpu_count=gpu_count,
        num_nodes=num_nodes,
        kvstore=("device" if num_nodes == 1 else "dist_sync") if mode == "train" else None,
        scaling=scaling,
        warmup_batches=5,
        timed_batches=10,
        repeats=3,
        images_per_sec=images_per_sec if ok else None,
        images_per_sec_samples=[images_per_sec] * 3 if ok else [],
        cv=0.0 if ok else None,
        status=status,
        error=None if ok else "out of memory",
        started_at=started.isoformat(),
        finished_at=finished.isoformat(),
        host="bench-host",
        gpu_model=gpu_model,
        methodology=methodology,
    )
    if methodology == "robust":  # the values the contract requires of a robust record
        values.update(min_time_s=2.0, target_cv=0.03, max_repeats=10)
    elif methodology == "custom":
        values.update(min_time_s=1.0)
    return validate_record(empty_record(**values))


def ingest(
    lake: Lake,
    records: list[dict[str, Any]],
    *,
    provider: str = "aws",
    instance_type: str = "g5.xlarge",
    region: str | None = "us-east-1",
    market: str = "on_demand",
    target: str = "ec2",
) -> None:
    """Write records as one run per night of one machine, through the real ingest path."""
    context = RunContext(
        provider=provider, instance_type=instance_type, region=region, market=market, target=target
    ).validated()
    # one run per night and machine, named as the orchestrator names a target's run
    by_run: dict[str, list[dict[str, Any]]] = {}
    for rec in records:
        run_id = f"{rec['run_id']}.{provider}-{instance_type}-{region or 'any'}-{market}-{target}"
        by_run.setdefault(run_id, []).append({**rec, "run_id": run_id})
    for run_id, rows in by_run.items():
        lake.write_results(results_rows(rows, context), run_id=run_id)


def price(
    instance_type: str,
    value: float,
    *,
    provider: str = "aws",
    region: str | None = "us-east-1",
    market: str = "on_demand",
    currency: str = "USD",
    unit: str = "hour",
    effective_from: dt.date = dt.date(2025, 1, 1),
    gpu_count: int | None = 1,
    source: str = "test price list",
) -> dict[str, Any]:
    return {
        "provider": provider,
        "instance_type": instance_type,
        "region": region,
        "market": market,
        "gpu_model": None,
        "gpu_count": gpu_count,
        "price": value,
        "currency": currency,
        "unit": unit,
        "effective_from": effective_from,
        "source": source,
    }


def fx(rate: float, effective_from: dt.date, base: str = "EUR", quote: str = "USD") -> dict[str, Any]:
    return {
        "base": base,
        "quote": quote,
        "rate": rate,
        "effective_from": effective_from,
        "source": "test rates",
    }


def inputs(
    lake: Lake,
    prices: list[dict[str, Any]],
    rates: list[dict[str, Any]],
    scaling: list[dict[str, Any]] | None = None,
) -> ReportInputs:
    """Report inputs with exactly these prices, rates and published curves (no shipped tables)."""
    return ReportInputs(
        lake=lake,
        prices=pa.Table.from_pylist(prices, schema=schema.PRICES_SCHEMA),
        fx=pa.Table.from_pylist(rates, schema=schema.FX_SCHEMA),
        published_scaling=pa.Table.from_pylist(scaling or [], schema=schema.PUBLISHED_SCALING_SCHEMA),
    )


def rows(table: pa.Table, **where: Any) -> list[dict[str, Any]]:
    """The rows of a report table whose columns equal ``where``."""
    return [row for row in table.to_pylist() if all(row[key] == value for key, value in where.items())]
