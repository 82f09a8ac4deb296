"""The cost guard reads the lake: the prices the prices DAG refreshed and the throughput
measured before on the instance type, with the shipped tables and the per-network guess only
where the lake has nothing. Real local Delta lakes, written through the lake's own API."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

import pyarrow as pa
import pytest

from gpucompare.lake import schema
from gpucompare.lake.tables import open_lake
from gpucompare.targets import cost
from gpucompare.targets.base import BudgetExceeded, TargetSpec
from gpucompare.targets.ec2 import target as ec2
from tests.support import reports_data as data

ON = dt.date(2026, 11, 30)
#: two scoring configurations on one GPU: resnet-50 at batch 32 (measured below) and batch 64
SWEEP: dict[str, Any] = {
    "timeout_s": 900, "warmup": 5, "batches": 10, "repeats": 3,
    "matrix": [{"modes": ["score"], "networks": ["resnet-50"], "batch_sizes": [32, 64],
                "devices": ["gpu:0"]}],
}
OPTIONS = {"ami": "ami-0123456789abcdef0", "instance_profile": "p", "results_bucket": "my-bucket"}


def _refresh(lake, instance_type: str, price: float) -> None:
    """What the prices DAG does: a refreshed row appended to the lake's ``prices``."""
    row = data.price(instance_type, price, effective_from=dt.date(2026, 11, 1), source="price list API")
    lake.write_table("prices", f"aws-us-east-1-{ON.isoformat()}",
                     pa.Table.from_pylist([row], schema=schema.PRICES_SCHEMA))


def _measure(lake, instance_type: str, speeds: list[float], **extra: Any) -> None:
    """Results of resnet-50 scoring at batch 32 on ``instance_type``, one night each."""
    records = [data.record(images_per_sec=ips, batch_size=32, night=dt.date(2026, 11, 1 + i), **extra)
               for i, ips in enumerate(speeds)]
    data.ingest(lake, records, instance_type=instance_type)


def _target(lake_uri: str, instance_type: str = "g4dn.xlarge", **extra: Any) -> ec2.Ec2Target:
    return ec2.Ec2Target(TargetSpec(name="t", kind="ec2", provider="aws", instance_type=instance_type,
                                    region="us-east-1", options={**OPTIONS, "sweep_configs": [SWEEP],
                                                                 "budget_cap": 100.0, **extra}),
                         lake_uri=lake_uri)


def test_refreshed_price_and_measured_throughput_change_the_estimate_and_say_so(tmp_path):
    lake = open_lake(str(tmp_path / "lake"))
    before = _target(lake.uri).estimate()
    _refresh(lake, "g4dn.xlarge", 0.9)
    # the median of the 5 latest ok runs: 1000 (the oldest, 10, is beyond the 5 and ignored)
    _measure(lake, "g4dn.xlarge", [10.0, 900.0, 1000.0, 1100.0, 950.0, 1050.0])
    _measure(lake, "g4dn.xlarge", [5.0], status="error")  # failed runs do not count
    _measure(lake, "p3.2xlarge", [1.0])  # another instance type does not count
    after = _target(lake.uri).estimate()

    assert before.price_per_hour == pytest.approx(0.526)  # the shipped table
    assert after.price_per_hour == pytest.approx(0.9)
    assert "the lake's refreshed prices" in after.price_source
    assert after.time.measured_configurations == 1 and after.time.guessed_configurations == 1
    configs = cost.parse_sweeps([SWEEP])
    guessed = cost.configuration_seconds(configs[1])
    measured = min(cost.CONFIG_OVERHEAD_S + 35 * 32 / 1000.0, 900)
    assert after.time.sweep_seconds == pytest.approx(measured + guessed)
    assert after.time.sweep_seconds < before.time.sweep_seconds
    text = after.describe()
    assert "1 timed from measured throughput, 1 from the per-network guess" in text
    assert "0.9000 USD/h from the lake's refreshed prices" in text


def test_an_empty_or_missing_or_unreadable_lake_gives_the_shipped_tables_and_the_guess(tmp_path, caplog):
    shipped = cost.estimate_run_cost("g4dn.xlarge", "us-east-1", "on_demand", [SWEEP], currency="USD")
    missing = _target(str(tmp_path / "no-lake")).estimate()
    empty = open_lake(str(tmp_path / "lake"))
    _measure(empty, "p3.2xlarge", [500.0])  # a lake with results of another type only
    other = _target(empty.uri).estimate()
    unreadable = tmp_path / "broken"
    (unreadable / "results" / "_delta_log").mkdir(parents=True)
    (unreadable / "results" / "_delta_log" / "00000000000000000000.json").write_text("not json\n")
    with caplog.at_level(logging.WARNING, logger="gpucompare.targets.cost"):
        broken = _target(str(unreadable)).estimate()
    for estimate in (missing, other, broken):
        assert estimate.cost == pytest.approx(shipped.cost)
        assert estimate.price_source == shipped.price_source
        assert estimate.time.measured_configurations == 0
        assert "0 timed from measured throughput, 2 from the per-network guess" in estimate.describe()
    assert "cannot read the lake" in caplog.text


def test_a_refreshed_lake_price_makes_the_guard_refuse_before_anything_starts(tmp_path):
    lake = open_lake(str(tmp_path / "lake"))
    target = _target(lake.uri, budget_cap=1.0)
    assert target.estimate().cost < 1.0  # at the shipped 0.526 USD/h the run fits the cap
    _refresh(lake, "g4dn.xlarge", 5.0)
    with pytest.raises(BudgetExceeded, match=r"cap 1\.00 USD") as refused:
        # refused in prepare before the first AWS call (no endpoint is configured here)
        _target(lake.uri, budget_cap=1.0).prepare("manual__2026-11-30")
    assert "5.0000 USD/h from the lake's refreshed prices" in str(refused.value)
