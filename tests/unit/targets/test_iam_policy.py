"""The orchestrator's IAM policy generated from the fleet file (``targets.ec2.iam``, ``gpucompare
iam-policy``) against the tests' IAM evaluator (``tests/support/iam_policy.py``: moto enforces no
IAM): what a run needs is allowed; tag-then-terminate, a foreign AMI owner and a type outside the
fleet are denied (issue 19)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpucompare import cli
from gpucompare.config import fleet
from gpucompare.config.models import MAX_VOLUME_GB
from gpucompare.targets.ec2 import iam
from gpucompare.targets.ec2.options import DEPLOYMENT_TAG, EXPIRES_AT_TAG, RUN_ID_TAG
from tests.conftest import REPO_ROOT
from tests.support import iam_policy
from tests.support.iam_policy import ACCOUNT, allows, profile_arn, requests_of_call

SHIPPED_FLEET = REPO_ROOT / "dags" / "config" / "fleet.yaml"
PROFILE = "gpucompare-worker"
DEPLOYMENT = "prod"
INSTANCE = "i-0123456789abcdef0"


@pytest.fixture(scope="module")
def policy() -> dict[str, Any]:
    specs = [t.spec for t in fleet.load_fleet(SHIPPED_FLEET).targets]
    return iam.orchestrator_policy(
        iam.fleet_instance_types(specs),
        instance_profiles=[PROFILE],
        account=ACCOUNT,
        deployment=DEPLOYMENT,
        bucket="acme-results",
    )


def _launch(instance_type: str = "g5.xlarge", volume_gb: int = 150, profile: str = PROFILE) -> dict[str, Any]:
    tags = [
        {"Key": DEPLOYMENT_TAG, "Value": DEPLOYMENT},
        {"Key": RUN_ID_TAG, "Value": "prod.r.t"},
        {"Key": EXPIRES_AT_TAG, "Value": "2026-12-02T06:00:00Z"},
    ]
    return {
        "ImageId": "ami-0123456789abcdef0",
        "InstanceType": instance_type,
        "IamInstanceProfile": {"Name": profile},
        "BlockDeviceMappings": [
            {"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": volume_gb, "Encrypted": True}}
        ],
        "TagSpecifications": [
            {"ResourceType": "instance", "Tags": tags},
            {"ResourceType": "volume", "Tags": tags},
        ],
    }


def _granted(
    policy: dict[str, Any],
    operation: str,
    params: dict[str, Any],
    *,
    owner: str = "amazon",
    tags: dict[str, str] | None = None,
    profile: str | None = PROFILE,
    service: str = "ec2",
) -> bool:
    requests = requests_of_call(
        service,
        operation,
        params,
        region="us-east-1",
        instance_tags=lambda _: tags or {},
        instance_profile=lambda _: profile_arn(profile) if profile else None,
        image_owner=lambda _: owner,
    )
    return all(allows(policy, request) for request in requests)


def test_the_shipped_policy_files_are_the_generators_output() -> None:
    """docker/iam/*.json are what `gpucompare iam-policy` prints for the shipped fleet file."""
    specs = [t.spec for t in fleet.load_fleet(SHIPPED_FLEET).targets]
    generated = iam.orchestrator_policy(
        iam.fleet_instance_types(specs), instance_profiles=iam.fleet_instance_profiles(specs)
    )
    assert json.loads((REPO_ROOT / "docker" / "iam" / "orchestrator-policy.json").read_text()) == generated
    assert (
        json.loads((REPO_ROOT / "docker" / "iam" / "tag-guard-scp.json").read_text())
        == iam.tag_guard_policy()
    )


def test_a_launch_of_the_fleet_is_allowed_and_each_limit_holds(policy: dict[str, Any]) -> None:
    assert _granted(policy, "RunInstances", _launch())
    assert _granted(policy, "RunInstances", _launch("p3.2xlarge", MAX_VOLUME_GB))
    assert _granted(policy, "RunInstances", _launch(), owner="898082745236")  # the Deep Learning AMIs' owner
    # a type outside the fleet file, even of a family the fleet uses
    assert not _granted(policy, "RunInstances", _launch("p3.16xlarge"))
    assert not _granted(policy, "RunInstances", _launch("g5.48xlarge"))
    # an AMI of another owner (a marketplace image, someone's public AMI)
    assert not _granted(policy, "RunInstances", _launch(), owner="aws-marketplace")
    assert not _granted(policy, "RunInstances", _launch(), owner="210987654321")
    # a volume above what the option allows, another role
    assert not _granted(policy, "RunInstances", _launch(volume_gb=MAX_VOLUME_GB + 1))
    assert not _granted(policy, "RunInstances", _launch(profile="admin-profile"))


def test_tagging_an_instance_after_launch_never_makes_it_terminable(policy: dict[str, Any]) -> None:
    """Someone who may merely tag gives a foreign instance this deployment's tag: the tag guard
    (an SCP) refuses the tag; and even if it were there, the role refuses to terminate an instance
    that does not run with the worker profile, and this role itself may not tag after launch."""
    guard = iam.tag_guard_policy()
    tag = {"Resources": [INSTANCE], "Tags": [{"Key": DEPLOYMENT_TAG, "Value": DEPLOYMENT}]}
    for request in requests_of_call("ec2", "CreateTags", tag, region="us-east-1", instance_tags=lambda _: {}):
        assert iam_policy.denies(guard, request) and not allows(policy, request)
    untag = {"Resources": [INSTANCE], "Tags": [{"Key": EXPIRES_AT_TAG}]}
    for request in requests_of_call(
        "ec2", "DeleteTags", untag, region="us-east-1", instance_tags=lambda _: {}
    ):
        assert iam_policy.denies(guard, request)
    other = {"Resources": [INSTANCE], "Tags": [{"Key": "team", "Value": "ml"}]}  # other tags stay free
    for request in requests_of_call(
        "ec2", "CreateTags", other, region="us-east-1", instance_tags=lambda _: {}
    ):
        assert not iam_policy.denies(guard, request)
    # at launch the same tags pass the guard (ec2:CreateAction = RunInstances)
    launch = requests_of_call(
        "ec2",
        "RunInstances",
        _launch(),
        region="us-east-1",
        instance_tags=lambda _: {},
        image_owner=lambda _: "amazon",
    )
    assert not any(iam_policy.denies(guard, request) for request in launch)
    ours = {DEPLOYMENT_TAG: DEPLOYMENT, EXPIRES_AT_TAG: "2026-01-01T00:00:00Z"}
    terminate = {"InstanceIds": [INSTANCE]}
    assert _granted(policy, "TerminateInstances", terminate, tags=ours)
    assert not _granted(policy, "TerminateInstances", terminate, tags=ours, profile=None)
    assert not _granted(policy, "TerminateInstances", terminate, tags=ours, profile="someone-elses-profile")
    assert not _granted(policy, "TerminateInstances", terminate, tags={DEPLOYMENT_TAG: "staging"})


def test_cancel_command_is_scoped_to_this_deployments_instances(policy: dict[str, Any]) -> None:
    cancel = {"CommandId": "c-1", "InstanceIds": [INSTANCE]}
    assert _granted(policy, "CancelCommand", cancel, service="ssm", tags={DEPLOYMENT_TAG: DEPLOYMENT})
    assert not _granted(policy, "CancelCommand", cancel, service="ssm", tags={DEPLOYMENT_TAG: "staging"})
    assert not _granted(policy, "CancelCommand", {"CommandId": "c-1"}, service="ssm")


def test_the_name_lease_calls_are_allowed_for_this_deployments_name_only(policy: dict[str, Any]) -> None:
    """``targets.name_lease``: take/renew (PutObject), read (GetObject), release (DeleteObject)."""
    from gpucompare.targets.name_lease import lease_key

    for operation in ("PutObject", "GetObject", "DeleteObject"):
        own = {"Bucket": "acme-results", "Key": lease_key("gpucompare", DEPLOYMENT)}
        other = {"Bucket": "acme-results", "Key": lease_key("gpucompare", "staging")}
        assert _granted(policy, operation, own, service="s3"), operation
        assert not _granted(policy, operation, other, service="s3"), operation


def test_the_command_prints_the_policy_and_refuses_bad_values(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        cli.main(
            [
                "iam-policy",
                "--fleet",
                str(SHIPPED_FLEET),
                "--instance-type",
                "g6.xlarge",
                "--account",
                ACCOUNT,
                "--deployment",
                DEPLOYMENT,
                "--bucket",
                "acme-results",
            ]
        )
        == 0
    )
    printed = json.loads(capsys.readouterr().out)
    launch = next(s for s in printed["Statement"] if s["Sid"].startswith("LaunchOnlyTheFleetsTypes"))
    assert launch["Condition"]["StringEquals"]["ec2:InstanceType"] == [
        "g5.xlarge", "g6.xlarge", "p3.2xlarge", "p5.48xlarge"]
    assert "acme-results" in json.dumps(printed) and "ACCOUNT_ID" not in json.dumps(printed)
    for bad in (
        ["--instance-type", "g5.*"],
        ["--account", "12"],
        ["--deployment", "Prod;x"],
        ["--bucket", "Bad_Bucket"],
    ):
        assert cli.main(["iam-policy", "--fleet", str(SHIPPED_FLEET), *bad]) == 2
        assert bad[0] in capsys.readouterr().err
