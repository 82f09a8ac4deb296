"""The GPU model table: aliases resolve, the MXNet rule holds row by row, and a fleet entry or
manual request whose GPU the worker cannot run (H100, K80) is refused before anything runs."""

from __future__ import annotations

import copy
import logging
from pathlib import Path

import pytest

from gpucompare.config import fleet, gpus
from gpucompare.config.models import check_request as check_manual_request
from gpucompare.config.validation import ValidationError
from gpucompare.errors import PermanentError
from tests.conftest import REPO_ROOT

SHIPPED_FLEET = REPO_ROOT / "dags" / "config" / "fleet.yaml"

# what providers, catalogs and nvidia-smi call them -> the table's name
ALIASES = {
    "A10G": "A10G", "NVIDIA A10G": "A10G", "nvidia a10g": "A10G",
    "Tesla V100-SXM2-16GB": "V100", "V100": "V100", "Tesla V100-PCIE-16GB": "V100",
    "Tesla V100-SXM2-32GB": "V100-32GB", "V100-32GB": "V100-32GB",
    "H100 80GB HBM3": "H100", "NVIDIA H100 80GB HBM3": "H100", "H100-MEGA": "H100",
    "NVIDIA H100 PCIe": "H100",
    "Tesla T4": "T4", "T4": "T4", "A100-SXM4-40GB": "A100", "NVIDIA A100-SXM4-80GB": "A100-80GB",
    "A100-80GB": "A100-80GB", "A100 80GB PCIe": "A100-80GB", "L4": "L4", "NVIDIA L4": "L4", "L40S": "L40S",
    "K80": "K80", "Tesla K80": "K80", "M60": "M60", "P100": "P100", "Tesla P100-PCIE-16GB": "P100",
    "GTX 1080": "GTX 1080", "GeForce GTX 1080": "GTX 1080", "GTX 1080 Ti": "GTX 1080 Ti",
    "RTX 4090": "RTX 4090", "NVIDIA GeForce RTX 4090": "RTX 4090", "RTX4090": "RTX 4090",
    "A6000": "A6000", "NVIDIA RTX A6000": "A6000", "RTXA6000": "A6000", "RTX6000-Ada": "RTX 6000 Ada",
    "RTX 6000": "RTX 6000", "Quadro RTX 6000": "RTX 6000", "H200": "H200", "GH200": "GH200",
    "Tesla M40": "M40", "Tesla K40m": "K40", "NVIDIA A30": "A30", "Quadro RTX 8000": "RTX 8000",
    "NVIDIA H800": "H800", "NVIDIA H100 NVL": "H100 NVL",
}


@pytest.mark.parametrize(("alias", "name"), sorted(ALIASES.items()))
def test_provider_and_nvidia_smi_names_resolve(alias: str, name: str) -> None:
    assert gpus.canonical(alias) == name
    assert gpus.lookup(alias).name == name


@pytest.mark.parametrize("name", ["", "   ", "V100 24GB", "A100 16GB", "Radeon MI300X", "X" * 500, "NVIDIA"])
def test_unknown_names_are_none_not_a_guess(name: str) -> None:
    """A known base with a memory no variant has is another GPU: no silent mapping to the base."""
    assert gpus.canonical(name) is None


def test_every_row_follows_the_mxnet_rule_and_names_are_unambiguous() -> None:
    table = gpus.read_table()
    assert len({m.name for m in table}) == len(table) >= 30
    for model in table:
        assert gpus.mxnet_runs(model.capability) is model.mxnet_cu112, model
        assert model.compute_capability in model.reason, model  # the reason states the figure
        assert gpus.canonical(model.name) == model.name
        for alias in model.aliases:
            assert gpus.canonical(alias) == model.name, alias
    by_name = {m.name: m for m in table}
    # the cases: Ada runs through binary compatibility, Hopper and Kepler do not
    assert [by_name[n].mxnet_cu112 for n in ("L4", "L40S", "RTX 4090", "A10G", "M60")] == [True] * 5
    assert [by_name[n].mxnet_cu112 for n in ("H100", "H200", "H800", "K80", "K40", "B200")] == [False] * 6
    assert (by_name["K80"].compute_capability, by_name["H100"].memory_gib) == ("3.7", 80)


def test_every_gpu_of_the_shipped_tables_resolves() -> None:
    """The GPU names of the shipped price and published tables (what results are joined with)."""
    import csv

    from gpucompare import resources

    names = set()
    for path in [*resources.data_dir("prices").glob("*.csv"), *resources.data_dir("published").glob("*.csv")]:
        with path.open(encoding="utf-8", newline="") as handle:
            names |= {row["gpu_model"] for row in csv.DictReader(handle) if row.get("gpu_model")}
    assert {"Tesla M40", "Tesla K80", "A10G", "GTX 1080 Ti"} <= names
    assert {name: gpus.canonical(name) for name in names if gpus.canonical(name) is None} == {}


def test_the_rule_itself() -> None:
    assert gpus.mxnet_runs((5, 0)) and gpus.mxnet_runs((8, 6)) and gpus.mxnet_runs((8, 9))
    assert not gpus.mxnet_runs((3, 7)) and not gpus.mxnet_runs((9, 0)) and not gpus.mxnet_runs((10, 0))


def test_an_ambiguous_table_is_refused(tmp_path: Path) -> None:
    """The index refuses one alias naming two GPUs (checked on a copy of the shipped table)."""
    shipped = gpus.gpus_file().read_text(encoding="utf-8")
    bad = tmp_path / "gpus.csv"
    bad.write_text(shipped + 'T4 copy,T4,16,Turing,7.5,true,"compute capability 7.5"\n', encoding="utf-8")
    with pytest.raises(ValidationError, match="names both T4 and T4 copy"):
        _index_of(bad)
    bad.write_text(shipped.replace(",7.5,true,", ",7.5,yes,", 1), encoding="utf-8")
    with pytest.raises(ValidationError, match="mxnet_cu112"):
        gpus.read_table(bad)


def _index_of(path: Path) -> None:
    original = gpus.read_table
    gpus._index.cache_clear()
    try:
        gpus.read_table = lambda: original(path)  # type: ignore[assignment]
        gpus._index()
    finally:
        gpus.read_table = original  # type: ignore[assignment]
        gpus._index.cache_clear()


def test_check_runnable_refuses_with_gpu_and_reason_and_warns_on_unknown(caplog) -> None:
    with pytest.raises(ValidationError) as caught:
        gpus.check_runnable("NVIDIA H100 80GB HBM3")
    assert isinstance(caught.value, PermanentError)
    text = str(caught.value)
    assert "NVIDIA H100 80GB HBM3 (H100)" in text and "9.0" in text and "no PTX" in text
    with pytest.raises(ValidationError, match="3.7 is below 5.0"):
        gpus.check_runnable("Tesla K80")
    gpus.check_runnable("NVIDIA L4")  # 8.9: allowed
    with caplog.at_level(logging.WARNING, logger="gpucompare.config.gpus"):
        gpus.check_runnable("Hypothetical X9000")
    assert "Hypothetical X9000" in caplog.text and "gpus.csv" in caplog.text


def test_instance_types_take_their_gpu_from_the_shipped_price_tables() -> None:
    assert gpus.instance_gpu("aws", "p5.48xlarge") == "H100"
    assert gpus.canonical(gpus.instance_gpu("aws", "g4dn.xlarge")) == "T4"
    assert gpus.canonical(gpus.instance_gpu("leadergpu", "ltbv14")) == "GTX 1080"
    assert gpus.instance_gpu("aws", "m5.large") is None


def _fleet_with(document: dict, **target) -> dict:
    changed = copy.deepcopy(document)
    changed["targets"].append({"name": "aws-new", "kind": "ec2", "provider": "aws", "region": "us-east-1",
                               "gpu_count": 1, "profile": "nightly", "enabled": False, **target})
    return changed


def test_fleet_entry_with_an_h100_instance_is_refused_with_the_reason() -> None:
    """Refused while the file is parsed, disabled or not: nothing is planned or provisioned."""
    document = fleet.read_document(SHIPPED_FLEET)
    with pytest.raises(ValidationError) as caught:
        fleet.parse_fleet(_fleet_with(document, instance_type="p5.48xlarge", gpu_count=8), "fleet.yaml")
    text = str(caught.value)
    assert caught.value.field == f"targets[{len(document['targets'])}].instance_type"  # the new entry
    assert "'p5.48xlarge' has the GPU H100" in text and "compute capability 9.0" in text
    with pytest.raises(ValidationError, match="3.7"):
        fleet.parse_fleet(_fleet_with(document, instance_type="p2.xlarge"), "fleet.yaml")
    # runnable and unknown GPUs pass
    for instance_type in ("g6e.xlarge", "p4de.24xlarge", "m5.large"):
        parsed = fleet.parse_fleet(_fleet_with(document, instance_type=instance_type), "fleet.yaml")
        assert parsed.targets[-1].spec["instance_type"] == instance_type


def test_manual_form_refuses_an_h100_instance_before_planning() -> None:
    document = fleet.read_document(SHIPPED_FLEET)
    document["defaults"]["ec2"]["results_bucket"] = "acme-gpu-results"  # the placeholder is refused
    shipped = fleet.parse_fleet(document)
    # the request's own check refuses it (the target model's GPU hook), before any plan
    with pytest.raises(ValidationError, match=r"instance_type: 'p5.48xlarge' has the GPU H100, which cannot"):
        check_manual_request({
            "kind": "ec2", "provider": "aws", "instance_type": "p5.48xlarge", "region": "us-east-1",
            "market": "on_demand", "gpu_count": 8, "networks": ["alexnet"], "batch_sizes": [4],
            "modes": ["score"], "profile": "nightly", "budget_cap": 3.5})
    plan = fleet.plan_manual(check_manual_request({
        "kind": "ec2", "provider": "aws", "instance_type": "g6.xlarge", "region": "us-east-1",
        "market": "on_demand", "gpu_count": 1, "networks": ["alexnet"], "batch_sizes": [4],
        "modes": ["score"], "profile": "nightly", "budget_cap": 3.5}), shipped, "manual__x")
    assert plan["spec"]["instance_type"] == "g6.xlarge"  # an L4 (8.9) passes
