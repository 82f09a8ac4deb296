"""An H200 instance type with no shipped price (p5e.48xlarge: AWS sells it through Capacity Blocks)
through the real fleet path: the fleet file read from disk and validated, then ``gpucompare plan``
on an empty lake. Its GPU comes from the instance type table, so ``auto`` picks the NGC runtime
with no unknown-GPU warning; the plan still says the night is unpriced (no invented price)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import yaml

from gpucompare import cli
from gpucompare.config.fleet import load_fleet

PROFILE = {"networks": ["resnet-50"], "batch_sizes": [32], "modes": ["score"], "warmup": 5,
           "batches": 10, "repeats": 3, "timeout_s": 900}
EC2_DEFAULTS = {"ami": "ami-12345678", "instance_profile": "gpucompare-worker",
                "results_bucket": "acme-gpu-results", "budget_cap": 2000.0, "budget_currency": "USD"}


def _fleet(tmp_path: Path) -> Path:
    document = {"defaults": {"ec2": EC2_DEFAULTS}, "profiles": {"small": PROFILE}, "targets": [
        {"name": "aws-h200", "kind": "ec2", "provider": "aws", "instance_type": "p5e.48xlarge",
         "region": "us-east-1", "gpu_count": 8, "profile": "small"}]}
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def test_p5e_validates_with_the_ngc_runtime_and_no_unknown_gpu_warning(tmp_path: Path, caplog) -> None:
    with caplog.at_level(logging.WARNING):
        loaded = load_fleet(_fleet(tmp_path))
    (target,) = loaded.targets
    assert target.spec["worker_runtime"] == "ngc-24.06"  # pip-cu112 cannot run Hopper
    assert not [r for r in caplog.records if "GPU" in r.getMessage()], caplog.text


def test_plan_of_p5e_says_unpriced_never_a_cost(tmp_path: Path, capsys) -> None:
    fleet, lake = str(_fleet(tmp_path)), str(tmp_path / "empty")
    assert cli.main(["plan", "--fleet", fleet, "--target", "aws-h200", "--lake", lake, "--json"]) == 0
    (shown,) = json.loads(capsys.readouterr().out)
    assert shown["cost"] is None and shown["price_per_hour"] is None
    assert all(p["cost"] is None for p in shown["phases"])
    assert "pull" in {p["phase"] for p in shown["phases"]}  # the NGC image's pull is planned
    assert cli.main(["plan", "--fleet", fleet, "--lake", lake]) == 0
    out = capsys.readouterr().out
    assert "aws-h200 (ec2, aws p5e.48xlarge us-east-1, on_demand)" in out
    assert "cost: unpriced: no aws price for p5e.48xlarge" in out
