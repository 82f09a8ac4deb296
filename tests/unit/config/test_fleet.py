"""The fleet file: the shipped one is valid and small enough for the demo; errors name their place."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest

from bench_tasks.configs import parse_sweep, validate_run_id
from bench_tasks.constants import NETWORKS
from gpucompare import settings
from gpucompare.config import fleet
from gpucompare.config.fleet import FleetError
from gpucompare.config.validation import ValidationError
from gpucompare.errors import PermanentError
from gpucompare.prices.tables import shipped_fx_rate
from tests.conftest import REPO_ROOT

SHIPPED = REPO_ROOT / "dags" / "config" / "fleet.yaml"
RUN_ID = "scheduled__2026-11-30T02:00:00+00:00"


@pytest.fixture(scope="module")
def shipped() -> fleet.Fleet:
    return fleet.load_fleet(SHIPPED, fx_rate=shipped_fx_rate)


@pytest.fixture(scope="module")
def document() -> dict:
    return fleet.read_document(SHIPPED)


@pytest.fixture(scope="module")
def configured(document: dict) -> fleet.Fleet:
    """The shipped fleet as a user deploys it: the placeholder bucket replaced with theirs."""
    mine = copy.deepcopy(document)
    mine["defaults"]["ec2"]["results_bucket"] = "acme-gpu-results"
    return fleet.parse_fleet(mine, fx_rate=shipped_fx_rate)


def test_shipped_fleet_runs_the_local_target_with_the_demo_profile(shipped: fleet.Fleet) -> None:
    enabled = shipped.enabled_targets()
    assert [t.name for t in enabled] == ["local"]
    assert enabled[0].spec["kind"] == "local" and enabled[0].profile == "demo"
    assert shipped.schedule == "0 2 * * *"
    assert shipped.max_instances >= 1


def test_shipped_examples_cover_ssh_and_ec2_spot_and_on_demand(shipped: fleet.Fleet) -> None:
    disabled = {t.name: t.spec for t in shipped.targets if not t.enabled}
    kinds = {(spec["kind"], spec["instance_type"], spec["market"]) for spec in disabled.values()}
    assert ("ec2", "p3.2xlarge", "on_demand") in kinds
    assert ("ec2", "g5.xlarge", "spot") in kinds
    assert any(kind == "ssh" for kind, _, _ in kinds)
    # the kind's defaults reached the ec2 entries, and a per-target option overrides them
    g5 = disabled["aws-g5-xlarge-spot"]
    assert g5["options"]["budget_cap"] == 10.0 and g5["options"]["results_bucket"]
    assert disabled["aws-p3-2xlarge"]["options"]["budget_cap"] == 20.0


def test_every_shipped_target_is_accepted_by_its_target_class(shipped: fleet.Fleet) -> None:
    """Planned like the DAG plans them, each target builds (its class checks its own options)."""
    from gpucompare.config.models import PLACEHOLDER_BUCKET
    from gpucompare.targets import make_target
    from gpucompare.targets.base import TargetConfigError

    for target in shipped.targets:
        plan = fleet.plan_target(target.spec, shipped.profile(target.profile), RUN_ID)
        if target.spec["kind"] == "ec2":
            # the shipped bucket is a placeholder: refused until the user names a real one (issue 19)
            assert plan["spec"]["options"]["results_bucket"] == PLACEHOLDER_BUCKET
            with pytest.raises(TargetConfigError, match="options.results_bucket: 'my-gpucompare-results' is "
                                                        "the shipped example's placeholder"):
                make_target(plan["spec"])
            plan["spec"]["options"]["results_bucket"] = "acme-gpu-results"
        built = make_target(plan["spec"])
        assert built.kind == target.spec["kind"]


def test_the_placeholder_bucket_is_refused_for_an_enabled_target(document: dict) -> None:
    """Enabling a shipped ec2 example without replacing the bucket fails when the file is read."""
    document = copy.deepcopy(document)
    entry = next(t for t in document["targets"] if t["kind"] == "ec2")
    entry["enabled"] = True
    with pytest.raises(ValidationError, match=r"targets\[\d+\].*results_bucket.*placeholder"):
        fleet.parse_fleet(document)
    document["defaults"]["ec2"]["results_bucket"] = "acme-gpu-results"
    assert any(t.name == entry["name"] for t in fleet.parse_fleet(document).enabled_targets())


def test_demo_profile_is_small_and_nightly_is_the_published_matrix(shipped: fleet.Fleet) -> None:
    demo, nightly = shipped.profile("demo"), shipped.profile("nightly")
    demo_configs = sum(len(parse_sweep(fleet.sweep_config(demo, mode, 0)).configs) for mode in demo.modes)
    assert demo_configs <= 4 and demo.repeats == 1 and demo.timeout_s <= 300
    assert set(nightly.networks) == set(NETWORKS)
    assert nightly.batch_sizes == (1, 2, 4, 8, 16, 32)
    assert nightly.modes == ("score", "train")


def test_plan_holds_sweeps_the_worker_accepts(shipped: fleet.Fleet) -> None:
    plans = fleet.plan_fleet(shipped, RUN_ID)
    assert len(plans) == 1
    plan = plans[0]
    assert plan["run_id"] == f"{settings.deployment()}.{RUN_ID}.local"
    assert validate_run_id(plan["run_id"])
    for mode, sweep in plan["sweeps"].items():
        configs = parse_sweep(sweep["config"]).configs
        assert {c.mode for c in configs} == {mode}
        assert all(c.devices == ("cpu:0",) for c in configs)
        assert sweep["timeout_s"] >= sum(c.timeout_s for c in configs)


def test_ec2_plans_carry_their_sweeps_for_the_cost_guard(shipped: fleet.Fleet) -> None:
    target = next(t for t in shipped.targets if t.spec["kind"] == "ec2")
    plan = fleet.plan_target(target.spec, shipped.profile("nightly"), RUN_ID)
    assert plan["spec"]["options"]["sweep_configs"] == [s["config"] for s in plan["sweeps"].values()]
    train = parse_sweep(plan["sweeps"]["train"]["config"]).configs
    assert {c.network for c in train} == {"alexnet", "resnet-50", "inception-v3"}
    assert all(c.devices == ("gpu:0",) for c in train)
    assert target.spec["options"].get("sweep_configs") is None  # the fleet itself is not changed


def test_devices_follow_the_gpu_count() -> None:
    assert fleet.default_devices("score", 0) == ["cpu"]
    assert fleet.default_devices("score", 4) == ["gpu:0"]
    assert fleet.default_devices("train", 4) == ["gpu:0", "gpu:0,gpu:1,gpu:2,gpu:3"]


def test_target_run_ids_are_stable_distinct_and_short() -> None:
    assert fleet.target_run_id(RUN_ID, "a") == fleet.target_run_id(RUN_ID, "a")
    assert fleet.target_run_id(RUN_ID, "a") != fleet.target_run_id(RUN_ID, "b")
    long_a = fleet.target_run_id("manual__" + "x" * 300, "a")
    long_b = fleet.target_run_id("manual__" + "x" * 300 + "y", "a")
    assert long_a != long_b and len(long_a) <= 128
    assert validate_run_id(long_a) and validate_run_id(fleet.target_run_id("odd id/with spaces", "t"))


@pytest.mark.parametrize(("path", "value", "field"), [
    (("targets", 0, "instance_type"), "local; rm -rf /", "targets[0].instance_type"),
    (("targets", 2, "instance_type"), "p3.2xlarge; rm -rf /", "targets[2].instance_type"),
    (("targets", 2, "region"), "moon-1", "targets[2].region"),
    (("targets", 3, "market"), "reserved", "targets[3].market"),
    (("targets", 1, "options", "ssh_conn_id"), "x y", "targets[1].options.ssh_conn_id"),
    (("targets", 0, "profile"), "weekly", "targets[0].profile"),
    (("targets", 0, "colour"), "red", "targets[0].colour"),
    (("profiles", "demo", "networks"), ["lenet"], "profiles.demo.networks"),
    (("profiles", "demo", "batch_sizes"), [0], "profiles.demo.batch_sizes[0]"),
    (("profiles", "demo", "train", "batch_sizes"), [-4], "profiles.demo.train.batch_sizes[0]"),
    (("profiles", "nightly", "train", "kvstore"), "carrier-pigeon", "profiles.nightly"),
    (("defaults", "ec2", "budget_cap"), -5, "defaults.ec2.budget_cap"),
    (("schedule",), "every night", "schedule"),
])
def test_errors_name_file_entry_and_field(document: dict, tmp_path: Path, path: tuple, value,
                                          field: str) -> None:
    import yaml

    broken = copy.deepcopy(document)
    node = broken
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    fleet_file = tmp_path / "fleet.yaml"
    fleet_file.write_text(yaml.safe_dump(broken))
    with pytest.raises(FleetError) as info:
        fleet.load_fleet(fleet_file)
    assert info.value.field.startswith(f"fleet.yaml: {field}"), info.value.field


def test_duplicate_target_names_are_refused(document: dict) -> None:
    broken = copy.deepcopy(document)
    broken["targets"].append(dict(broken["targets"][0]))
    with pytest.raises(ValidationError, match="used twice"):
        fleet.parse_fleet(broken)


def test_unreadable_fleet_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(FleetError, match="nope.yaml"):
        fleet.load_fleet(missing)
    (tmp_path / "bad.yaml").write_text("targets: [unclosed\n")
    with pytest.raises(FleetError, match="not valid YAML"):
        fleet.load_fleet(tmp_path / "bad.yaml")


def test_nightly_schedule_comes_from_env_then_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fleet_file = tmp_path / "fleet.yaml"
    fleet_file.write_text('schedule: "15 3 * * *"\n')
    monkeypatch.setenv("GPUCOMPARE_FLEET", str(fleet_file))
    monkeypatch.delenv("GPUCOMPARE_NIGHTLY_SCHEDULE", raising=False)
    assert fleet.nightly_schedule() == "15 3 * * *"
    monkeypatch.setenv("GPUCOMPARE_NIGHTLY_SCHEDULE", "@daily")
    assert fleet.nightly_schedule() == "@daily"
    monkeypatch.setenv("GPUCOMPARE_NIGHTLY_SCHEDULE", "rm -rf /")
    with pytest.raises(settings.SettingError, match="GPUCOMPARE_NIGHTLY_SCHEDULE 'rm -rf /'.*cron"):
        fleet.nightly_schedule()
    # a broken file must not break DAG parsing: the default is used, the run task reports it
    monkeypatch.delenv("GPUCOMPARE_NIGHTLY_SCHEDULE")
    fleet_file.write_text("schedule: [\n")
    assert fleet.nightly_schedule() == fleet.DEFAULT_SCHEDULE


def test_a_scaling_group_takes_a_pool_slot_per_host_of_the_largest_enabled_group(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fleet_file = tmp_path / "fleet.yaml"
    monkeypatch.setenv("GPUCOMPARE_FLEET", str(fleet_file))
    fleet_file.write_text("scaling_groups:\n"
                          "  - {name: pair, targets: [a, b], profile: p}\n"
                          "  - {name: trio, targets: [a, b, c], profile: p}\n"
                          "  - {name: five, targets: [a, b, c, d, e], profile: p, enabled: false}\n")
    assert fleet.scaling_pool_slots() == 3  # the disabled five-host group does not count
    fleet_file.write_text("schedule: '0 2 * * *'\n")
    assert fleet.scaling_pool_slots() == 1
    # a broken file must not break DAG parsing: 1 here, the run's load_scaling reports it
    for broken in ("scaling_groups: [\n", "scaling_groups: [{name: 'A B', targets: [a]}]\n",
                   "scaling_groups: 3\n"):
        fleet_file.write_text(broken)
        assert fleet.scaling_pool_slots() == 1
    # at run time, a group that grew since the parse is refused, naming it and the limit
    plan = {"group": "trio", "specs": [{}, {}, {}]}
    fleet.check_scaling_slots(plan, 3)
    with pytest.raises(ValidationError, match="scaling_groups trio.*3 hosts.*2 pool slot.*parsed") as error:
        fleet.check_scaling_slots(plan, 2)
    assert error.value.allowed == "at most 2 hosts until the DAG file is parsed again"
    # a group larger than the pool could never start: load_scaling refuses it
    fleet.check_scaling_fits([plan], 3)
    with pytest.raises(ValidationError, match="scaling_groups trio.*3 hosts.*max_instances = 2.*never start"):
        fleet.check_scaling_fits([plan], 2)


def test_manual_plan_uses_the_request_on_the_profile_knobs(configured: fleet.Fleet) -> None:
    from gpucompare.config.models import check_request

    request = check_request({
        "kind": "ec2", "provider": "aws", "instance_type": "g6.xlarge", "region": "us-west-2",
        "market": "on_demand", "gpu_count": 1, "networks": ["alexnet"], "batch_sizes": [4],
        "modes": ["score"], "dtypes": ["float16"], "profile": "nightly", "budget_cap": 3.5,
        "budget_currency": "EUR"})
    plan = fleet.plan_manual(request, configured, "manual__x")
    assert list(plan["sweeps"]) == ["score"]
    configs = parse_sweep(plan["sweeps"]["score"]["config"]).configs
    assert [(c.network, c.batch_size, c.dtype, c.repeats) for c in configs] == [("alexnet", 4, "float16", 3)]
    options = plan["spec"]["options"]
    assert options["budget_cap"] == 3.5 and options["budget_currency"] == "EUR"
    assert options["results_bucket"] == configured.defaults["ec2"]["results_bucket"]
    with pytest.raises(ValidationError, match="profile"):
        fleet.plan_manual({**request, "profile": "weekly"}, configured, "manual__x")


def test_the_ttl_covers_the_plans_own_limits_and_a_short_fleet_ttl_is_refused(document: dict) -> None:
    """The nightly profile's sweeps may take 825 min by their own limits: the derived TTL is
    those + provisioning + collection + margin; a fleet TTL below the limits is refused at
    load time with the figures; a larger one is kept."""
    loaded = fleet.load_fleet(SHIPPED)
    target = next(t for t in loaded.targets if t.name == "aws-p3-2xlarge")
    plan = fleet.plan_target(target.spec, loaded.profile(target.profile), RUN_ID,
                             budget_ceiling=loaded.budget_ceiling)
    limits_min = sum(s["timeout_s"] for s in plan["sweeps"].values()) / 60
    assert round(limits_min) == 825
    assert plan["spec"]["options"]["ttl_minutes"] == math.ceil(
        limits_min + (fleet.TTL_PROVISIONING_S + fleet.TTL_COLLECTION_S + fleet.TTL_MARGIN_S) / 60)
    assert plan["spec"]["options"]["deployment"] == settings.deployment()

    short = copy.deepcopy(document)
    short["defaults"]["ec2"]["ttl_minutes"] = 240  # what the fleet file shipped before
    with pytest.raises(ValidationError) as refused:
        fleet.parse_fleet(short)
    message = str(refused.value)
    assert "ttl_minutes" in message and "240 min" in message and "865 min" in message
    assert "sweeps 825 min" in message

    long = copy.deepcopy(document)
    long["defaults"]["ec2"]["ttl_minutes"] = 2000
    kept = fleet.parse_fleet(long)
    spec = next(t for t in kept.targets if t.name == "aws-p3-2xlarge").spec
    assert fleet.plan_target(spec, kept.profile("nightly"), RUN_ID)["spec"]["options"]["ttl_minutes"] == 2000


def test_the_budget_ceiling_caps_every_target_and_the_manual_form(document: dict,
                                                                   shipped: fleet.Fleet,
                                                                   configured: fleet.Fleet) -> None:
    from gpucompare.config.models import check_request as check_manual_request

    assert shipped.budget_ceiling == (50.0, "USD")
    over = copy.deepcopy(document)
    over["targets"][3]["options"] = {"budget_cap": 75.0}
    with pytest.raises(ValidationError, match=r"targets\[3\]\.budget_cap: 75\.00 USD is above .* 50\.00 USD"):
        fleet.parse_fleet(over)

    params = {"kind": "ec2", "provider": "aws", "instance_type": "g6.xlarge", "region": "us-west-2",
              "market": "on_demand", "gpu_count": 1, "networks": ["alexnet"], "batch_sizes": [4],
              "modes": ["score"], "profile": "nightly", "budget_currency": "USD"}
    with pytest.raises(ValidationError, match="placeholder"):  # the shipped bucket is nobody's
        fleet.plan_manual(check_manual_request({**params, "budget_cap": 3.0}), shipped, "manual__x")
    lowered = fleet.plan_manual(check_manual_request({**params, "budget_cap": 3.0}), configured, "manual__x")
    assert lowered["spec"]["options"]["budget_cap"] == 3.0
    with pytest.raises(ValidationError, match="budget_cap: 1000000.00 USD is above"):
        fleet.plan_manual(check_manual_request({**params, "budget_cap": 1e6}), configured, "manual__x")
    # no explicit ceiling: the ec2 defaults' cap is the ceiling
    implicit = copy.deepcopy(document)
    del implicit["budget_ceiling"]
    assert fleet.parse_fleet(implicit).budget_ceiling == (20.0, "USD")


def test_the_deployment_name_is_required_checked_and_never_derived(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 19: the name is a stated setting. Missing, it is refused naming the setting and how
    to set it (no hash of the database URI, which holds the password, is ever used)."""
    monkeypatch.setenv("GPUCOMPARE_DEPLOYMENT", "Prod; rm -rf /")
    with pytest.raises(ValueError, match="GPUCOMPARE_DEPLOYMENT"):
        settings.deployment()
    monkeypatch.setenv("GPUCOMPARE_DEPLOYMENT", "prod\n")
    with pytest.raises(ValueError, match="GPUCOMPARE_DEPLOYMENT"):
        settings.deployment()
    monkeypatch.setenv("GPUCOMPARE_DEPLOYMENT", "staging")
    assert fleet.target_run_id(RUN_ID, "a").startswith("staging.")
    monkeypatch.delenv("GPUCOMPARE_DEPLOYMENT")
    monkeypatch.delenv("AIRFLOW__GPUCOMPARE__DEPLOYMENT", raising=False)
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "postgresql://a:Summer2026!@db/airflow")
    how = r"GPUCOMPARE_DEPLOYMENT=.*\[gpucompare\].*airflow\.cfg"
    with pytest.raises(PermanentError, match=how) as refused:
        settings.deployment()
    assert "Summer2026" not in str(refused.value)
    with pytest.raises(PermanentError, match="'deployment' is not set"):
        fleet.target_run_id(RUN_ID, "a")
    # the configuration file's option works as the environment does
    monkeypatch.setenv("AIRFLOW__GPUCOMPARE__DEPLOYMENT", "from-cfg")
    assert settings.deployment() == "from-cfg"


def test_former_deployment_names_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUCOMPARE_FORMER_DEPLOYMENTS", "d0123456789, old-prod ")
    assert settings.former_deployments() == ("d0123456789", "old-prod")
    monkeypatch.setenv("GPUCOMPARE_FORMER_DEPLOYMENTS", "ok,Bad Name")
    with pytest.raises(PermanentError, match="GPUCOMPARE_FORMER_DEPLOYMENTS .*'Bad Name'"):
        settings.former_deployments()
    monkeypatch.delenv("GPUCOMPARE_FORMER_DEPLOYMENTS")
    assert settings.former_deployments() == ()
    assert fleet.target_run_id(RUN_ID, "a", "x") != fleet.target_run_id(RUN_ID, "a", "y")
