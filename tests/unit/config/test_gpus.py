"""The GPU model table: aliases resolve, the MXNet rule holds row by row, and a fleet entry or
manual request whose GPU the worker cannot run (H100, K80) is refused before anything runs."""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import logging
from pathlib import Path

import pytest

from gpucompare.config import fleet, gpus, instances, runtimes
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


def test_every_row_follows_each_runtimes_rule_and_names_are_unambiguous() -> None:
    table = gpus.read_table()
    assert len({m.name for m in table}) == len(table) >= 30
    for model in table:
        for runtime in runtimes.gpu_runtimes():
            runs, reason = model.runs_on(runtime.name)
            assert runtimes.runs_capability(runtime, model.capability) is runs, (model.name, runtime.name)
            assert model.compute_capability in reason, (model.name, runtime.name)  # states the figure
        assert gpus.canonical(model.name) == model.name
        for alias in model.aliases:
            assert gpus.canonical(alias) == model.name, alias
    by_name = {m.name: m for m in table}
    # pip-cu112: Ada runs through binary compatibility, Hopper and Kepler do not
    pip = [by_name[n].runs_on("pip-cu112")[0] for n in ("L4", "L40S", "RTX 4090", "A10G", "M60")]
    assert pip == [True] * 5
    pip = [by_name[n].runs_on("pip-cu112")[0] for n in ("H100", "H200", "H800", "K80", "B200")]
    assert pip == [False] * 5
    # ngc-24.06: Hopper runs (the release notes), Maxwell (below 6.0) and Blackwell do not
    hopper = ("H100", "H100 NVL", "H200", "GH200", "H800")
    assert [by_name[n].runs_on("ngc-24.06")[0] for n in hopper] == [True] * 5
    assert [by_name[n].runs_on("ngc-24.06")[0] for n in ("M60", "K80", "B200", "GB200")] == [False] * 4
    assert by_name["B200"].runnable_with() == [] and by_name["GB200"].runnable_with() == []
    assert by_name["T4"].runnable_with() == ["pip-cu112", "ngc-24.06"]
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
    pip, ngc = runtimes.get("pip-cu112"), runtimes.get("ngc-24.06")
    assert all(runtimes.runs_capability(pip, c) for c in ((5, 0), (8, 6), (8, 9)))
    assert not any(runtimes.runs_capability(pip, c) for c in ((3, 7), (9, 0), (10, 0)))
    assert all(runtimes.runs_capability(ngc, c) for c in ((6, 0), (8, 9), (9, 0)))
    assert not any(runtimes.runs_capability(ngc, c) for c in ((5, 2), (10, 0), (12, 0)))
    # PTX is what would carry a runtime past its newest major version
    with_ptx = dataclasses.replace(ngc, ptx="yes")
    assert runtimes.runs_capability(with_ptx, (10, 0))
    assert not runtimes.runs_capability(runtimes.get("cpu"), (8, 0))


def test_an_ambiguous_table_is_refused(tmp_path: Path) -> None:
    """The index refuses one alias naming two GPUs (checked on a copy of the shipped table)."""
    shipped = gpus.gpus_file().read_text(encoding="utf-8")
    bad = tmp_path / "gpus.csv"
    bad.write_text(shipped + 'T4 copy,T4,16,Turing,7.5,true,"7.5",true,"7.5"\n', encoding="utf-8")
    with pytest.raises(ValidationError, match="names both T4 and T4 copy"):
        _index_of(bad)
    bad.write_text(shipped.replace(",7.5,true,", ",7.5,yes,", 1), encoding="utf-8")
    with pytest.raises(ValidationError, match="pip-cu112"):
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
    assert "allowed: worker_runtime auto, ngc-24.06" in text  # what does run it
    gpus.check_runnable("NVIDIA H100 80GB HBM3", runtime="ngc-24.06")  # the NGC build runs Hopper
    with pytest.raises(ValidationError, match="3.7 is below 5.0"):
        gpus.check_runnable("Tesla K80")
    with pytest.raises(ValidationError, match="no worker runtime runs compute capability 10.0"):
        gpus.check_runnable("B200", runtime="ngc-24.06")
    gpus.check_runnable("NVIDIA L4")  # 8.9: allowed
    with caplog.at_level(logging.WARNING, logger="gpucompare.config.gpus"):
        gpus.check_runnable("Hypothetical X9000")
    assert "Hypothetical X9000" in caplog.text and "gpus.csv" in caplog.text


def _listing(monkeypatch, provider: str, instance_type: str, gpu_model: str,
             gpu_count: int = 1) -> None:
    """The instance type table with one more row (a GPU it does not list, for the refusal paths)."""
    shipped = dict(instances.shipped())
    row = instances.InstanceType(provider, instance_type, gpu_model, gpu_count, "test", dt.date(2026, 12, 2))
    monkeypatch.setattr(instances, "shipped", lambda: {**shipped, (provider, instance_type): row})


def _fleet_with(document: dict, **target) -> dict:
    changed = copy.deepcopy(document)
    changed["defaults"]["ec2"]["results_bucket"] = "acme-gpu-results"  # the placeholder is refused
    changed["targets"].append({"name": "aws-new", "kind": "ec2", "provider": "aws", "region": "us-east-1",
                               "gpu_count": 1, "profile": "nightly", "enabled": False, **target})
    return changed


def test_fleet_h100_runs_with_ngc_and_auto_and_is_refused_with_pip_cu112() -> None:
    """Refused while the file is parsed, disabled or not: nothing is planned or provisioned."""
    document = fleet.read_document(SHIPPED_FLEET)
    new = len(document["targets"])
    for runtime in ("ngc-24.06", "auto", None):
        stated = {"worker_runtime": runtime} if runtime else {}
        parsed = fleet.parse_fleet(_fleet_with(document, instance_type="p5.48xlarge", gpu_count=8, **stated))
        assert parsed.targets[-1].spec["worker_runtime"] == "ngc-24.06", runtime
    with pytest.raises(ValidationError) as caught:
        fleet.parse_fleet(_fleet_with(document, instance_type="p5.48xlarge", gpu_count=8,
                                      worker_runtime="pip-cu112"), "fleet.yaml")
    text = str(caught.value)
    assert caught.value.field == f"targets[{new}].worker_runtime"  # the new entry
    assert "'p5.48xlarge' has the GPU H100 (compute capability 9.0)" in text
    assert "cannot run worker runtime pip-cu112" in text and "no PTX" in text and "ngc-24.06" in text
    with pytest.raises(ValidationError, match="3.7"):
        fleet.parse_fleet(_fleet_with(document, instance_type="p2.xlarge"), "fleet.yaml")
    # runnable GPUs pass with the runtime auto picks
    for instance_type, gpu_count in (("g6e.xlarge", 1), ("p4de.24xlarge", 8)):
        parsed = fleet.parse_fleet(_fleet_with(document, instance_type=instance_type, gpu_count=gpu_count),
                                   "fleet.yaml")
        assert parsed.targets[-1].spec["instance_type"] == instance_type


def test_b200_is_refused_naming_gpu_capability_and_runtimes_tried(monkeypatch) -> None:
    """The instance type table lists no B200 instance: the instance → GPU lookup is given one."""
    _listing(monkeypatch, "aws", "p6-b200.48xlarge", "B200")
    document = fleet.read_document(SHIPPED_FLEET)
    for runtime in ("auto", "ngc-24.06", "pip-cu112"):
        with pytest.raises(ValidationError) as caught:
            fleet.parse_fleet(_fleet_with(document, instance_type="p6-b200.48xlarge", gpu_count=8,
                                          worker_runtime=runtime), "fleet.yaml")
        text = str(caught.value)
        assert "B200 (compute capability 10.0)" in text
        assert "no worker runtime runs compute capability 10.0" in text
        if runtime == "auto":
            assert "tried pip-cu112: " in text and "ngc-24.06: " in text


def test_an_unknown_gpu_is_allowed_with_a_warning(caplog, monkeypatch) -> None:
    """A host whose GPU the model table does not know runs with auto's pick, with a warning; one
    with no GPU listed at all (a rented host's own machine name) is allowed silently, as before."""
    document = fleet.read_document(SHIPPED_FLEET)
    changed = copy.deepcopy(document)
    changed["targets"].append({"name": "rented-new", "kind": "ssh", "provider": "someprovider",
                               "instance_type": "x9000-box", "gpu_count": 1, "enabled": False,
                               "options": {"ssh_conn_id": "ssh_new"}})
    assert fleet.parse_fleet(changed).targets[-1].spec["worker_runtime"] == "pip-cu112"
    _listing(monkeypatch, "someprovider", "x9000-box", "Hypothetical X9000")
    with caplog.at_level(logging.WARNING, logger="gpucompare.config.gpus"):
        assert fleet.parse_fleet(changed).targets[-1].spec["worker_runtime"] == "pip-cu112"
    assert "Hypothetical X9000" in caplog.text and "not in the GPU model table" in caplog.text


def test_auto_prefers_one_runtime_for_the_whole_fleet(monkeypatch) -> None:
    """T4 alone: pip-cu112 (the table's first); T4 beside an H100: both on ngc-24.06 (it runs
    both); M60 beside an H100: no runtime runs both, each gets its own."""
    document = fleet.read_document(SHIPPED_FLEET)
    alone = fleet.parse_fleet(_fleet_with(document, instance_type="g4dn.xlarge", enabled=True))
    assert alone.targets[-1].spec["worker_runtime"] == "pip-cu112"
    both = _fleet_with(_fleet_with(document, instance_type="g4dn.xlarge", enabled=True),
                       instance_type="p5.48xlarge", gpu_count=8, enabled=True)
    both["targets"][-1]["name"] = "aws-h100"
    parsed = fleet.parse_fleet(both)
    assert [t.spec["worker_runtime"] for t in parsed.targets[-2:]] == ["ngc-24.06", "ngc-24.06"]
    assert parsed.targets[0].spec["worker_runtime"] == "cpu"  # the local CPU target
    _listing(monkeypatch, "aws", "g3s.xlarge", "M60")  # the shipped table lists no M60 machine
    mixed = _fleet_with(_fleet_with(document, instance_type="g3s.xlarge", enabled=True),
                        instance_type="p5.48xlarge", gpu_count=8, enabled=True)
    mixed["targets"][-1]["name"] = "aws-h100"
    parsed = fleet.parse_fleet(mixed)
    assert [t.spec["worker_runtime"] for t in parsed.targets[-2:]] == ["pip-cu112", "ngc-24.06"]


def test_a_profile_states_the_default_runtime_and_a_target_overrides_it() -> None:
    document = copy.deepcopy(fleet.read_document(SHIPPED_FLEET))
    document["profiles"]["nightly"]["worker_runtime"] = "ngc-24.06"
    parsed = fleet.parse_fleet(_fleet_with(document, instance_type="g4dn.xlarge"))
    assert parsed.targets[-1].spec["worker_runtime"] == "ngc-24.06"
    parsed = fleet.parse_fleet(_fleet_with(document, instance_type="g4dn.xlarge", worker_runtime="pip-cu112"))
    assert parsed.targets[-1].spec["worker_runtime"] == "pip-cu112"
    with pytest.raises(ValidationError, match=r"worker_runtime: 'nope' is not one of|worker_runtime"):
        fleet.parse_fleet(_fleet_with(document, instance_type="g4dn.xlarge", worker_runtime="nope"))


def test_manual_form_h100_needs_a_runtime_that_runs_it() -> None:
    document = fleet.read_document(SHIPPED_FLEET)
    document["defaults"]["ec2"]["results_bucket"] = "acme-gpu-results"  # the placeholder is refused
    shipped = fleet.parse_fleet(document)
    request = {"kind": "ec2", "provider": "aws", "instance_type": "p5.48xlarge", "region": "us-east-1",
               "market": "on_demand", "gpu_count": 8, "networks": ["alexnet"], "batch_sizes": [4],
               "modes": ["score"], "profile": "nightly", "budget_cap": 3.5}
    # the request's own check refuses it (the target model's GPU hook), before any plan
    with pytest.raises(ValidationError, match=r"worker_runtime: 'p5.48xlarge' has the GPU H100 \(compute "
                                              r"capability 9.0\), which cannot run worker runtime pip-cu112"):
        check_manual_request({**request, "worker_runtime": "pip-cu112"})
    assert check_manual_request(request)["target"]["worker_runtime"] == "ngc-24.06"  # auto
    plan = fleet.plan_manual(check_manual_request({**request, "instance_type": "g6.xlarge", "gpu_count": 1}),
                             shipped, "manual__x")
    assert plan["spec"]["instance_type"] == "g6.xlarge"  # an L4 (8.9) passes
    assert plan["spec"]["worker_runtime"] == "pip-cu112"
