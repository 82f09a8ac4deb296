"""The instance type table (data/instances.csv): every instance type gpucompare names has its GPU
there without a price, the price tables agree with it, and a Hopper type with no price row
(p5e.48xlarge, p5.4xlarge) gets the NGC runtime from ``auto``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpucompare.config import gpus, instances, runtime_choice
from gpucompare.config.validation import ValidationError
from gpucompare.prices import tables as prices
from tests.conftest import REPO_ROOT

#: an AWS GPU instance type written in a fleet file or a doc (p2…p6, g3…g6 families and sizes)
AWS_GPU_TYPE = re.compile(r"\b([pg][0-9][a-z0-9-]*\.[0-9]*x?large)\b")
HOPPER = {"p5.4xlarge": ("H100", 1), "p5.48xlarge": ("H100", 8), "p5e.48xlarge": ("H200", 8),
          "p5en.48xlarge": ("H200", 8)}


def _ec2(instance_type: str, gpu_count: int = 8) -> dict:
    return {"kind": "ec2", "provider": "aws", "instance_type": instance_type, "gpu_count": gpu_count}


def test_hopper_types_are_listed_with_gpu_count_source_and_date() -> None:
    for instance_type, (model, count) in HOPPER.items():
        row = instances.lookup("aws", instance_type)
        assert row is not None, instance_type
        assert (row.gpu_model, row.gpu_count) == (model, count)
        assert row.source == "https://aws.amazon.com/ec2/instance-types/p5/"
        assert row.as_of.isoformat() == "2026-12-02"
    assert instances.instance_gpu("aws", "m5.large") is None
    assert instances.instance_gpu("leadergpu", "ltbv14") == "GTX 1080"  # a rented host's server name


def test_no_price_row_exists_for_p5e_or_p5_4xlarge() -> None:
    """The reason for the table: these two have no shipped price, yet their GPU is known."""
    priced = {(r["provider"], r["instance_type"]) for r in prices.shipped_prices().to_pylist()}
    assert ("aws", "p5e.48xlarge") not in priced and ("aws", "p5.4xlarge") not in priced


def test_every_priced_instance_type_is_listed_with_the_same_gpu_and_count() -> None:
    """One definition: the price tables' gpu_model/gpu_count columns may not say otherwise."""
    for row in prices.shipped_prices().to_pylist():
        listed = instances.lookup(row["provider"], row["instance_type"])
        assert listed is not None, f"{row['provider']} {row['instance_type']} is priced but not listed"
        assert gpus.canonical(row["gpu_model"]) == listed.gpu_model, row
        assert row["gpu_count"] in (None, listed.gpu_count), row


def test_every_aws_gpu_type_of_the_fleet_examples_and_docs_is_listed() -> None:
    files = [*(REPO_ROOT / "dags" / "config").glob("*.yaml"), *(REPO_ROOT / "docs").glob("*.md"),
             REPO_ROOT / "README.md"]
    named = {m for path in files for m in AWS_GPU_TYPE.findall(path.read_text(encoding="utf-8"))}
    assert {"p5.48xlarge", "g5.xlarge", "p3.2xlarge"} <= named  # the scan finds what it should
    assert sorted(t for t in named if instances.lookup("aws", t) is None) == []


def test_a_size_the_table_omits_takes_its_family_s_gpu() -> None:
    assert instances.family_gpu("aws", "g5.16xlarge") == "A10G"
    assert instances.family_gpu("aws", "g4dn.metal") == "T4"
    assert instances.family_gpu("aws", "p5e.48xlarge") == "H200"
    assert instances.family_gpu("aws", "g5g.xlarge") is None  # another family (Graviton, T4G)
    assert instances.family_gpu("aws", "m5.large") is None


@pytest.mark.parametrize("instance_type", sorted(HOPPER))
def test_auto_runs_hopper_types_on_the_ngc_runtime_without_a_price(instance_type: str, caplog) -> None:
    count = HOPPER[instance_type][1]
    with caplog.at_level("WARNING", logger="gpucompare.config.gpus"):
        assert runtime_choice.choose(_ec2(instance_type, count)) == "ngc-24.06"
    assert "not in the GPU model table" not in caplog.text
    with pytest.raises(ValidationError, match=f"'{re.escape(instance_type)}' has the GPU H[12]00"):
        runtime_choice.choose(_ec2(instance_type, count), "pip-cu112")


def _table(tmp_path: Path, *rows: str) -> Path:
    path = tmp_path / "instances.csv"
    header = "# a comment\nprovider,instance_type,gpu_model,gpu_count,source,as_of\n"
    path.write_text(header + "\n".join(rows))
    return path


@pytest.mark.parametrize(("row", "field", "says"), [
    ("aws,x1.large,Hypothetical X9000,1,src,2026-12-02", "row 1.gpu_model", "not in the GPU model table"),
    ("aws,x1.large,H100,0,src,2026-12-02", "row 1.gpu_count", "whole number >= 1"),
    ("aws,x1.large,H100,8,src,2026-13-02", "row 1.as_of", "not a date"),
    ("aws,x1.large,H100,8,,2026-12-02", "row 1.source", "must not be empty"),
])
def test_a_bad_row_is_refused_naming_row_and_column(tmp_path: Path, row: str, field: str, says: str) -> None:
    with pytest.raises(ValidationError, match=says) as caught:
        instances.read_table(_table(tmp_path, row))
    assert caught.value.field == f"instances.csv {field}"


def test_a_type_listed_twice_is_refused(tmp_path: Path) -> None:
    row = "aws,x1.large,H100 80GB HBM3,8,src,2026-12-02"
    with pytest.raises(ValidationError, match="aws x1.large is listed twice"):
        instances.read_table(_table(tmp_path, row, row))
    (only,) = instances.read_table(_table(tmp_path, row))
    assert only.gpu_model == "H100"  # stored under the model table's canonical name


@pytest.mark.parametrize(("instance_type", "stated", "listed"),
                         [("p5e.48xlarge", 1, 8), ("g4dn.xlarge", 4, 1)])
def test_a_stated_gpu_count_other_than_the_table_s_is_refused(instance_type: str, stated: int,
                                                              listed: int) -> None:
    """A p5e.48xlarge entry with ``gpu_count: 1`` would sweep one of its eight GPUs and price the
    whole machine against it: refused, naming the field, the table's count and its source."""
    from gpucompare.config import models
    from gpucompare.config.validation import check

    target = {"name": "t", "region": "us-east-1", **_ec2(instance_type, stated),
              "options": {"ami": "ami-0123456789abcdef0", "instance_profile": "gpucompare-worker",
                          "results_bucket": "acme-gpu-results"}}
    with pytest.raises(ValidationError) as refused:
        check("targets[0]", models.Target, target)
    assert refused.value.field == "targets[0].gpu_count"
    assert f"{stated} is not allowed for aws {instance_type}: it has {listed} ×" in str(refused.value)
    assert refused.value.allowed == str(listed)
    for count in (listed, 0):  # the table's count, or none stated
        assert check("targets[0]", models.Target, {**target, "gpu_count": count}).gpu_count == count
