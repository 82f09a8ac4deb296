"""``python -m gpucompare plan`` and the cost guard: one night estimate (targets.night).

Real fleet files, a real lake on disk (run_phases written by ``lake.phases``, results ingested),
the real ec2 target's guard (no AWS call happens before it refuses or passes).
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml

from gpucompare import cli
from gpucompare.lake import schema
from gpucompare.lake.ingest import RunContext, ingest_results
from gpucompare.lake.phases import write_phases
from gpucompare.lake.tables import Lake, open_lake
from gpucompare.targets import cost, make_target, night
from gpucompare.targets.base import BudgetExceeded
from gpucompare.targets.plan import plan_estimates
from tests.support.lake_support import run_records, write_records

PROFILE = {"networks": ["alexnet", "resnet-50"], "batch_sizes": [1, 2], "modes": ["score"], "warmup": 5,
           "batches": 10, "repeats": 3, "timeout_s": 900}
EC2_DEFAULTS = {"ami": "ami-12345678", "instance_profile": "gpucompare-worker",
                "results_bucket": "acme-gpu-results", "budget_cap": 20.0, "budget_currency": "USD"}


def fleet_file(tmp_path: Path, instance_type: str = "x9.test", **ec2_options: Any) -> Path:
    document = {
        "defaults": {"ec2": {**EC2_DEFAULTS, **ec2_options}},
        "profiles": {"small": PROFILE},
        "targets": [
            {"name": "aws-x9", "kind": "ec2", "provider": "aws", "instance_type": instance_type,
             "region": "us-east-1", "gpu_count": 1, "profile": "small"},
            {"name": "here", "kind": "local", "provider": "local", "instance_type": "local-cpu",
             "profile": "small"},
        ],
    }
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def record_history(lake: Lake, tmp_path: Path) -> None:
    """Six earlier ec2 nights of x9.test: run-level phases and the records of the 4 configurations.

    The oldest night's provisioning (10,000 s) is outside the last five: it must not count."""
    lake.write_table("prices", "test", pa.Table.from_pylist([{
        "provider": "aws", "instance_type": "x9.test", "region": "us-east-1", "market": "on_demand",
        "gpu_model": "V100", "gpu_count": 1, "price": 3.6, "currency": "USD", "unit": "hour",
        "effective_from": dt.date(2026, 1, 1), "source": "test price"}], schema=schema.PRICES_SCHEMA))
    for night_index, provision in enumerate([10_000, 100, 200, 300, 400, 500]):
        day = dt.date(2026, 11, 20) + dt.timedelta(days=night_index)
        run_id = f"night-{night_index}"
        t0 = dt.datetime(day.year, day.month, day.day, 2, tzinfo=dt.UTC)
        rows, clock = [], 0.0
        # 4 configurations × (5 + 0.5 + 3) s inside, plus 2 s each outside: a 42 s sweep
        for name, seconds, gap in (("provision", provision, 0), ("deploy", 60, 0), ("sweep", 42, 0),
                                   ("teardown", 30, 10)):
            clock += gap  # 10 s billed between the sweep and the teardown: idle
            rows.append({"run_id": run_id, "target": "aws-x9", "kind": "ec2", "provider": "aws",
                         "instance_type": "x9.test", "region": "us-east-1", "market": "on_demand",
                         "phase": name, "started_at": t0 + dt.timedelta(seconds=clock),
                         "finished_at": t0 + dt.timedelta(seconds=clock + seconds), "seconds": float(seconds),
                         "billed": True, "status": "ok"})
            clock += seconds
        write_phases(lake, rows)
        records = run_records(run_id, 4, night=day)
        for record, (network, batch) in zip(records, [("alexnet", 1), ("alexnet", 2), ("resnet-50", 1),
                                                      ("resnet-50", 2)], strict=True):
            record.update(mode="score", network=network, batch_size=batch, per_device_batch=batch,
                          kvstore=None, config_id=f"score-{network}-b{batch}", warmup_batches=5,
                          timed_batches=30, repeats=3, setup_seconds=5.0, warmup_seconds=0.5,
                          timed_seconds=3.0)
        path = write_records(tmp_path / f"{run_id}.jsonl", records)
        ingest_results(lake, path, RunContext(provider="aws", instance_type="x9.test", region="us-east-1",
                                              target="ec2"), run_id=run_id)


def by_phase(estimate: night.NightEstimate) -> dict[str, night.PhaseEstimate]:
    return {p.phase: p for p in estimate.phases}


def test_an_empty_lake_gives_today_s_guard_figures_and_says_so(tmp_path: Path) -> None:
    """On a lake with nothing recorded the plan is the guard as it was: 15 min of provisioning
    plus 60 s and the batches at the published guess per configuration, every phase 'constant'."""
    (estimate,) = plan_estimates(str(fleet_file(tmp_path, "p3.2xlarge")), "aws-x9", str(tmp_path / "empty"))
    sweeps = [{"timeout_s": 900, "warmup": 5, "batches": 10, "repeats": 3, "methodology": "official",
               "matrix": [{"modes": ["score"], "networks": ["alexnet", "resnet-50"], "batch_sizes": [1, 2],
                           "devices": ["gpu:0"]}]}]
    today = cost.estimate_run_cost("p3.2xlarge", "us-east-1", "on_demand", sweeps, currency="USD")
    assert estimate.configurations == 4 and estimate.recorded_configurations == 0
    assert estimate.billed_seconds == pytest.approx(today.time.hours * 3600)
    assert estimate.cost == pytest.approx(today.cost)
    assert (by_phase(estimate)["provision"].seconds + by_phase(estimate)["deploy"].seconds
            == cost.PROVISIONING_OVERHEAD_S)
    assert by_phase(estimate)["setup"].seconds == 4 * cost.CONFIG_OVERHEAD_S
    assert all(p.source.startswith("constant") for p in estimate.phases), estimate.phases


def test_recorded_phases_give_the_medians_of_the_last_runs(tmp_path: Path) -> None:
    lake = open_lake(str(tmp_path / "lake"))
    record_history(lake, tmp_path)
    (estimate,) = plan_estimates(str(fleet_file(tmp_path)), "aws-x9", lake.uri)
    phases = by_phase(estimate)
    assert {name: p.seconds for name, p in phases.items()} == pytest.approx({
        "provision": 300.0,  # median of 100…500: the 10,000 s night is older than the last five
        "deploy": 60.0, "setup": 4 * 5.0, "warmup": 4 * 0.5, "timed": 4 * 3.0,
        "sweep_other": 4 * 2.0, "teardown": 30.0, "idle": 10.0})
    assert phases["provision"].source == "recorded: median of 5 run(s)"
    assert phases["timed"].source.startswith("recorded: median of recent records for 4 of 4")
    assert estimate.recorded_configurations == 4
    assert estimate.billed_seconds == pytest.approx(442.0)
    assert estimate.overhead_ratio == pytest.approx(442.0 / 12.0)
    assert estimate.cost == pytest.approx(0.442)


def test_the_cost_guard_sees_the_plan_s_figures(tmp_path: Path) -> None:
    lake = open_lake(str(tmp_path / "lake"))
    record_history(lake, tmp_path)
    fleet = fleet_file(tmp_path, budget_cap=0.4)
    (planned,) = plan_estimates(str(fleet), "aws-x9", lake.uri)
    from gpucompare.config.fleet import load_fleet, plan_target

    loaded = load_fleet(fleet)
    spec = plan_target(loaded.targets[0].spec, loaded.profile("small"), "scheduled__2026-11-30")["spec"]
    guard = make_target(spec, lake_uri=lake.uri)
    assert guard.estimate() == planned.cost_estimate
    assert guard.estimate().cost == pytest.approx(planned.cost)
    # over the cap: refused before anything is created, with the plan's figure in the message
    with pytest.raises(BudgetExceeded, match=f"estimated {planned.cost:.2f} USD"):
        guard.prepare("manual__2026-11-30T02:00:00+00:00")
    (provision,) = guard.phases.records
    assert (provision.phase, provision.status, provision.billed) == ("provision", "failed", False)


def test_an_unpriced_local_target_has_no_cost_rather_than_zero(tmp_path: Path, capsys) -> None:
    code = cli.main(["plan", "--fleet", str(fleet_file(tmp_path)), "--target", "here", "--lake",
                     str(tmp_path / "empty"), "--json"])
    assert code == 0
    (shown,) = json.loads(capsys.readouterr().out)
    assert shown["cost"] is None and shown["price_per_hour"] is None
    assert {p["phase"]: p["billed"] for p in shown["phases"]} == {
        "provision": False, "deploy": False, "setup": True, "warmup": True, "timed": True,
        "sweep_other": True, "teardown": False}
    assert all(p["cost"] is None for p in shown["phases"])
    assert shown["billed_seconds"] == pytest.approx(sum(p["seconds"] for p in shown["phases"] if p["billed"]))


def test_plan_prints_each_enabled_target_and_refuses_an_unknown_one(tmp_path: Path, capsys) -> None:
    fleet = str(fleet_file(tmp_path, "p3.2xlarge"))
    assert cli.main(["plan", "--fleet", fleet, "--lake", str(tmp_path / "empty")]) == 0
    out = capsys.readouterr().out
    assert "aws-x9 (ec2, aws p3.2xlarge us-east-1, on_demand): 4 configuration(s)" in out
    assert "here (local, local local-cpu, on_demand)" in out
    assert "billed / timed = " in out and "cost: unpriced" in out
    assert cli.main(["plan", "--fleet", fleet, "--target", "nope';rm -rf /", "--lake", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--target \"nope';rm -rf /\" is not a target of fleet.yaml: aws-x9, here" in err


def test_a_bad_fleet_file_exits_2_naming_the_field(tmp_path: Path, capsys) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump({"profiles": {"small": PROFILE}, "targets": [
        {"name": "x", "kind": "gpu-cloud", "provider": "aws", "instance_type": "x9.test",
         "profile": "small"}]}))
    assert cli.main(["plan", "--fleet", str(path), "--lake", str(tmp_path)]) == 2
    assert "kind" in capsys.readouterr().err
