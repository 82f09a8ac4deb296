"""``gpucompare plan --json`` says which worker runtime each target will use and why: its GPU's
compute capability, or the fleet-wide choice and the target that forced it; and it warns when a
target's recorded history (a real lake on disk, results ingested) ran another runtime."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucompare import cli
from gpucompare.lake.ingest import RunContext, ingest_results
from gpucompare.lake.tables import open_lake
from tests.support.lake_support import run_records, write_records

PROFILE = {"networks": ["alexnet"], "batch_sizes": [1, 32], "modes": ["score"], "warmup": 5,
           "batches": 10, "repeats": 3, "timeout_s": 900}
EC2 = {"ami": "ami-12345678", "instance_profile": "gpucompare-worker", "results_bucket": "acme-gpu-results"}
MACHINES = {"aws-p5": ("p5.48xlarge", 8), "aws-g5": ("g5.xlarge", 1), "aws-p3": ("p3.2xlarge", 1)}


def plan_json(tmp_path: Path, names: list[str], capsys: pytest.CaptureFixture, lake: str) -> dict[str, Any]:
    document = {"defaults": {"ec2": EC2}, "profiles": {"nightly": PROFILE},
                "targets": [{"name": name, "kind": "ec2", "provider": "aws",
                             "instance_type": MACHINES[name][0], "region": "us-east-1",
                             "gpu_count": MACHINES[name][1], "profile": "nightly"}
                            for name in names]}
    path = tmp_path / f"fleet-{len(names)}.yaml"
    path.write_text(yaml.safe_dump(document))
    capsys.readouterr()
    assert cli.main(["plan", "--fleet", str(path), "--lake", lake, "--json"]) == 0
    return {t["target"]: t for t in json.loads(capsys.readouterr().out)}


def test_one_hopper_moves_the_fleet_into_the_container_and_plan_says_which_target_did(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    plans = plan_json(tmp_path, ["aws-p5", "aws-g5", "aws-p3"], capsys, str(tmp_path / "no-lake"))
    assert {name: p["worker_runtime"] for name, p in plans.items()} == dict.fromkeys(plans, "ngc-24.06")
    assert plans["aws-p5"]["runtime_reason"] == "its GPU H100 (compute capability 9.0) runs in ngc-24.06"
    assert plans["aws-g5"]["runtime_reason"] == (
        "fleet-wide choice: ngc-24.06 runs every GPU of the fleet; alone its GPU A10G (compute capability "
        "8.6) would use pip-cu112; forced by aws-p5")
    assert plans["aws-p3"]["runtime_reason"].endswith("V100 (compute capability 7.0) would use pip-cu112; "
                                                      "forced by aws-p5")
    assert all(p["runtime_warning"] is None for p in plans.values())  # no history yet


def test_without_the_hopper_each_gpu_keeps_its_own_runtime(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture) -> None:
    plans = plan_json(tmp_path, ["aws-g5", "aws-p3"], capsys, str(tmp_path / "no-lake"))
    assert plans["aws-g5"]["worker_runtime"] == plans["aws-p3"]["worker_runtime"] == "pip-cu112"
    assert plans["aws-g5"]["runtime_reason"] == (
        "its GPU A10G (compute capability 8.6) runs in pip-cu112 (also in ngc-24.06)")
    assert "V100 (compute capability 7.0)" in plans["aws-p3"]["runtime_reason"]


def test_a_runtime_other_than_the_recorded_history_s_is_warned_about(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture) -> None:
    lake = open_lake(str(tmp_path / "lake"))
    records = run_records("night-1", 2)
    for record in records:
        record["worker_runtime"] = "pip-cu112"
    ingest_results(lake, write_records(tmp_path / "night-1.jsonl", records),
                   RunContext(provider="aws", instance_type="g5.xlarge", region="us-east-1", target="ec2"),
                   run_id="night-1")
    plans = plan_json(tmp_path, ["aws-p5", "aws-g5", "aws-p3"], capsys, lake.uri)
    assert plans["aws-g5"]["history_runtime"] == "pip-cu112"
    assert plans["aws-g5"]["runtime_warning"].startswith(
        "its recorded history ran pip-cu112, this night runs ngc-24.06")
    assert plans["aws-p3"]["runtime_warning"] is None  # no history of its own
    capsys.readouterr()
    path = tmp_path / "fleet-3.yaml"
    assert cli.main(["plan", "--fleet", str(path), "--lake", lake.uri]) == 0
    text = capsys.readouterr().out
    assert "  runtime ngc-24.06: fleet-wide choice" in text
    assert "  WARNING: its recorded history ran pip-cu112" in text
