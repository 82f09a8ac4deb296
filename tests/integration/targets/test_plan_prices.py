"""``gpucompare plan`` and prices: the shipped p-family prices are the ones after AWS's June 2025
P4/P5 reduction, with their sources; a price the table calls superseded and an unpriced target the
cost guard would refuse are marked with the command that fixes them; billed ÷ timed is n/a when
nothing would be timed. Real fleet files, the shipped price table, a real lake on disk."""

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
from gpucompare.lake.tables import open_lake
from gpucompare.prices import tables as prices

PROFILE = {"networks": ["alexnet"], "batch_sizes": [1], "modes": ["score"], "warmup": 5, "batches": 10,
           "repeats": 3, "timeout_s": 900}
EC2 = {"ami": "ami-12345678", "instance_profile": "gpucompare-worker", "results_bucket": "acme-gpu-results"}


def plan(tmp_path: Path, capsys: pytest.CaptureFixture, targets: list[dict[str, Any]], lake: str,
         **ec2: Any) -> dict[str, dict[str, Any]]:
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump({"defaults": {"ec2": {**EC2, **ec2}}, "profiles": {"p": PROFILE},
                                    "targets": [{**t, "profile": "p"} for t in targets]}))
    capsys.readouterr()
    assert cli.main(["plan", "--fleet", str(path), "--lake", lake, "--json"]) == 0
    return {t["target"]: t for t in json.loads(capsys.readouterr().out)}


def ec2_target(name: str, instance_type: str) -> dict[str, Any]:
    return {"name": name, "kind": "ec2", "provider": "aws", "instance_type": instance_type,
            "region": "us-east-1", "gpu_count": 8}


def test_the_shipped_p_family_prices_are_after_the_june_2025_reduction_and_cited() -> None:
    rows = prices.shipped_prices().to_pylist()
    today = dt.date(2026, 12, 3)
    current = {}
    for row in sorted(rows, key=lambda r: r["effective_from"]):
        if row["market"] == "on_demand" and row["region"] == "us-east-1" and row["effective_from"] <= today:
            current[row["instance_type"]] = row
    assert current["p5.48xlarge"]["price"] == 55.04 and current["p4d.24xlarge"]["price"] == 21.957642
    assert current["p4de.24xlarge"]["price"] == 27.44705 and current["p5en.48xlarge"]["price"] == 63.296
    for name in ("p5.48xlarge", "p4d.24xlarge", "p4de.24xlarge"):
        assert "github.com/tsaol/aws-gpu/blob/" in current[name]["source"]
        assert "superseded" not in current[name]["source"]
    assert "p5e.48xlarge" not in current  # no citable price: unpriced, never made up
    old = [r for r in rows if r["instance_type"] == "p5.48xlarge" and r["price"] == 98.32]
    assert old and "superseded" in old[0]["source"]


def test_plan_prices_p5_at_today_s_rate(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    shown = plan(tmp_path, capsys, [ec2_target("aws-p5", "p5.48xlarge")], str(tmp_path / "none"))["aws-p5"]
    assert shown["price_per_hour"] == pytest.approx(55.04) and shown["price_warning"] is None


def test_a_superseded_price_is_marked_with_the_command_that_fixes_it(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture) -> None:
    lake = open_lake(str(tmp_path / "lake"))
    lake.write_table("prices", "test", pa.Table.from_pylist([{
        "provider": "aws", "instance_type": "p3.2xlarge", "region": "us-east-1", "market": "on_demand",
        "gpu_model": "V100", "gpu_count": 1, "price": 9.99, "currency": "USD", "unit": "hour",
        "effective_from": dt.date(2026, 11, 1), "source": "old list; superseded by a later rate"}],
        schema=schema.PRICES_SCHEMA))
    target = {**ec2_target("aws-p3", "p3.2xlarge"), "gpu_count": 1}
    shown = plan(tmp_path, capsys, [target], lake.uri)["aws-p3"]
    assert shown["price_per_hour"] == pytest.approx(9.99)
    assert "calls this price superseded" in shown["price_warning"]
    assert ("`gpucompare refresh-prices --provider aws --region us-east-1 --instance-types p3.2xlarge`"
            in shown["price_warning"])


def test_an_unpriced_target_with_a_budget_cap_is_marked_as_refused(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture) -> None:
    capped = plan(tmp_path, capsys, [ec2_target("aws-p5e", "p5e.48xlarge")], str(tmp_path / "none"),
                  budget_cap=500, budget_currency="USD")["aws-p5e"]
    assert capped["cost"] is None
    assert capped["price_warning"].startswith("unpriced with budget_cap 500: the cost guard will refuse")
    assert "--instance-types p5e.48xlarge" in capped["price_warning"]
    uncapped = plan(tmp_path, capsys, [ec2_target("aws-p5e", "p5e.48xlarge")], str(tmp_path / "none"))
    assert uncapped["aws-p5e"]["price_warning"] is None  # no cap: the guard lets it run unpriced


def test_billed_per_timed_is_na_when_nothing_is_timed(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    local = {"name": "here", "kind": "local", "provider": "local", "instance_type": "local-cpu"}
    shown = plan(tmp_path, capsys, [local], str(tmp_path / "none"))["here"]
    assert shown["timed_seconds"] < 1 and shown["billed_per_timed"] is None
    assert cli.main(["plan", "--fleet", str(tmp_path / "fleet.yaml"), "--lake", str(tmp_path / "none")]) == 0
    assert "billed / timed = n/a (nothing timed)" in capsys.readouterr().out
