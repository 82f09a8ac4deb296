"""The orchestrator role's IAM policy, generated from the fleet file (``gpucompare iam-policy``).

The policy grants what a run and the sweeper call (``docs/targets-ec2.md``, IAM) and nothing
more, with the limits the options are validated to (one definition each):

* ``RunInstances`` only for the instance types of the fleet file's ec2 targets (enabled or not:
  scaling groups and the sweeper use them too, plus any ``extra_types``), only from AMIs of the
  owners the worker runtimes use (:data:`AMI_OWNERS`), only with the fleet's instance profiles,
  only tagged at launch with this deployment, a run id and an expiry (``aws:RequestTag``), and
  only with encrypted root volumes of at most ``config.models.MAX_VOLUME_GB`` (the option's own
  limit, so an option the policy would deny is refused when the fleet is read);
* the gpucompare tags cannot be added, changed or removed after launch, by this role or (with
  :func:`tag_guard_policy` as a service control policy) by anyone: someone who may merely tag
  cannot make a foreign instance this deployment's;
* ``TerminateInstances`` only for instances tagged with this deployment *and* running with one
  of the fleet's instance profiles; ``SendCommand`` and ``CancelCommand`` only for instances
  tagged with this deployment; S3 only below ``<prefix>/<deployment>/``.

The placeholders ``ACCOUNT_ID``, ``DEPLOYMENT`` and ``RESULTS_BUCKET`` stay in the output unless
values are given; ``docker/iam/orchestrator-policy.json`` is this module's output for the shipped
fleet file (a test keeps the two equal).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gpucompare.config.models import MAX_VOLUME_GB
from gpucompare.targets.ec2.options import DEPLOYMENT_TAG, EXPIRES_AT_TAG, RUN_ID_TAG, SWEEP_NOW_TAG

#: ``ec2:Owner`` of the AMIs the worker runtimes launch from: Amazon's own images (alias
#: ``amazon``) and the account that publishes the AWS Deep Learning AMIs (the base AMI of the
#: pip-cu112 and NGC container runtimes). The one list; a runtime on another owner's AMI adds it here.
AMI_OWNERS: tuple[str, ...] = ("amazon", "898082745236")
#: The tags that make an instance this deployment's: set at launch only, never afterwards.
GUARDED_TAGS: tuple[str, ...] = (DEPLOYMENT_TAG, RUN_ID_TAG, EXPIRES_AT_TAG)
DEFAULT_PROFILES: tuple[str, ...] = ("gpucompare-worker",)


def fleet_instance_types(specs: Iterable[dict[str, Any]]) -> list[str]:
    """The instance types of the ec2 targets among ``specs`` (enabled or not), sorted."""
    return sorted({spec["instance_type"] for spec in specs if spec.get("kind") == "ec2"})


def fleet_instance_profiles(specs: Iterable[dict[str, Any]]) -> list[str]:
    """The instance profiles the fleet's ec2 targets launch with (the role has the same name)."""
    names = {
        (spec.get("options") or {}).get("instance_profile") for spec in specs if spec.get("kind") == "ec2"
    }
    return sorted(name for name in names if name) or list(DEFAULT_PROFILES)


def _statement(
    sid: str,
    action: str | list[str],
    resource: str | list[str],
    condition: dict[str, Any] | None = None,
    effect: str = "Allow",
) -> dict[str, Any]:
    statement: dict[str, Any] = {"Sid": sid, "Effect": effect, "Action": action, "Resource": resource}
    if condition:
        statement["Condition"] = condition
    return statement


def _no_tags_after_launch(sid: str) -> dict[str, Any]:
    """Deny adding or removing the guarded tags outside RunInstances (no ``ec2:CreateAction``)."""
    return _statement(
        sid,
        ["ec2:CreateTags", "ec2:DeleteTags"],
        "*",
        {
            "ForAnyValue:StringEquals": {"aws:TagKeys": list(GUARDED_TAGS)},
            "Null": {"ec2:CreateAction": "true"},
        },
        effect="Deny",
    )


def _launch_statements(
    types: list[str], profiles: list[str], account: str, deployment: str
) -> list[dict[str, Any]]:
    ec2 = f"arn:aws:ec2:*:{account}"
    tagged = {"StringEquals": {f"aws:RequestTag/{DEPLOYMENT_TAG}": deployment}}
    return [
        _statement(
            "LaunchOnlyTheFleetsTypesWithItsProfilesTaggedForThisDeployment",
            "ec2:RunInstances",
            f"{ec2}:instance/*",
            {
                "StringEquals": {f"aws:RequestTag/{DEPLOYMENT_TAG}": deployment, "ec2:InstanceType": types},
                "ArnLike": {
                    "ec2:InstanceProfile": [
                        f"arn:aws:iam::{account}:instance-profile/{name}" for name in profiles
                    ]
                },
                "Null": {
                    f"aws:RequestTag/{RUN_ID_TAG}": "false",
                    f"aws:RequestTag/{EXPIRES_AT_TAG}": "false",
                },
            },
        ),
        _statement(
            "LaunchOnlyBoundedEncryptedVolumesTaggedForThisDeployment",
            "ec2:RunInstances",
            f"{ec2}:volume/*",
            {
                **tagged,
                "NumericLessThanEquals": {"ec2:VolumeSize": str(MAX_VOLUME_GB)},
                "Bool": {"ec2:Encrypted": "true"},
            },
        ),
        _statement(
            "LaunchOnlyFromTheRuntimesAmiOwners",
            "ec2:RunInstances",
            "arn:aws:ec2:*::image/*",
            {"StringEquals": {"ec2:Owner": list(AMI_OWNERS)}},
        ),
        _statement(
            "LaunchIntoTheseSharedResources",
            "ec2:RunInstances",
            [
                f"{ec2}:subnet/*",
                f"{ec2}:security-group/*",
                f"{ec2}:network-interface/*",
                f"{ec2}:spot-instances-request/*",
            ],
        ),
        _statement(
            "TagOnlyWhileLaunching",
            "ec2:CreateTags",
            [f"{ec2}:instance/*", f"{ec2}:volume/*"],
            {"StringEquals": {"ec2:CreateAction": "RunInstances", **tagged["StringEquals"]}},
        ),
        _no_tags_after_launch("NeverTheGpucompareTagsAfterLaunch"),
    ]


def _iam_statements(profiles: list[str], account: str) -> list[dict[str, Any]]:
    """Pass only the worker roles, read their profiles, create the spot service role once."""
    return [
        _statement(
            "PassOnlyTheWorkerRoles",
            "iam:PassRole",
            [f"arn:aws:iam::{account}:role/{name}" for name in profiles],
            {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}},
        ),
        _statement(
            "ReadTheWorkerProfilesForTheirRoleIds",
            "iam:GetInstanceProfile",
            [f"arn:aws:iam::{account}:instance-profile/{name}" for name in profiles],
        ),
        _statement(
            "SpotServiceLinkedRoleOnFirstUse",
            "iam:CreateServiceLinkedRole",
            f"arn:aws:iam::{account}:role/aws-service-role/spot.amazonaws.com/AWSServiceRoleForEC2Spot",
            {"StringEquals": {"iam:AWSServiceName": "spot.amazonaws.com"}},
        ),
    ]


def _sweeper_tag_statement(instances: str, deployment: str) -> dict[str, Any]:
    """A throttled teardown may tag this deployment's instances for the sweeper (that tag only)."""
    return _statement(
        "HandThisDeploymentsInstancesToTheSweeper",
        "ec2:CreateTags",
        instances,
        {
            "StringEquals": {f"aws:ResourceTag/{DEPLOYMENT_TAG}": deployment},
            "ForAllValues:StringEquals": {"aws:TagKeys": [SWEEP_NOW_TAG]},
        },
    )


def _use_statements(
    profiles: list[str], account: str, deployment: str, bucket: str, prefix: str
) -> list[dict[str, Any]]:
    instances = f"arn:aws:ec2:*:{account}:instance/*"
    ours_for_ssm = {"StringEquals": {f"ssm:resourceTag/{DEPLOYMENT_TAG}": deployment}}
    return [
        _statement(
            "TerminateOnlyThisDeploymentsInstancesOfItsProfiles",
            "ec2:TerminateInstances",
            instances,
            {
                "StringEquals": {f"aws:ResourceTag/{DEPLOYMENT_TAG}": deployment},
                "ArnLike": {
                    "ec2:InstanceProfile": [
                        f"arn:aws:iam::{account}:instance-profile/{name}" for name in profiles
                    ]
                },
            },
        ),
        _sweeper_tag_statement(instances, deployment),
        _statement(
            "DescribeIsNotResourceScoped",
            ["ec2:DescribeInstanceTypeOfferings", "ec2:DescribeInstances", "ec2:DescribeInstanceStatus",
             "ec2:DescribeImages", "ec2:DescribeSpotPriceHistory"],
            "*",
        ),
        _statement(
            "RunShellScriptDocument", ["ssm:SendCommand"], "arn:aws:ssm:*::document/AWS-RunShellScript"
        ),
        _statement(
            "SendAndCancelCommandsOnlyOnThisDeploymentsInstances",
            ["ssm:SendCommand", "ssm:CancelCommand"],
            instances,
            ours_for_ssm,
        ),
        _statement(
            "FollowCommandsAndAgents",
            ["ssm:GetCommandInvocation", "ssm:ListCommands", "ssm:ListCommandInvocations",
             "ssm:DescribeInstanceInformation"],
            "*",
        ),
        _statement(
            "ResolvePublicAmiParameters", "ssm:GetParameter", "arn:aws:ssm:*::parameter/aws/service/*"
        ),
        _statement(
            "ThisDeploymentsResultsPrefixOnly",
            ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"],
            f"arn:aws:s3:::{bucket}/{prefix}/{deployment}/*",
        ),
        _statement(
            "ThisDeploymentsResultsListing",
            "s3:ListBucket",
            f"arn:aws:s3:::{bucket}",
            {"StringLike": {"s3:prefix": [f"{prefix}/{deployment}/*"]}},
        ),
        _statement("PriceListRead", "pricing:GetProducts", "*"),
    ]


def orchestrator_policy(
    instance_types: Iterable[str],
    *,
    instance_profiles: Iterable[str] = DEFAULT_PROFILES,
    account: str = "ACCOUNT_ID",
    deployment: str = "DEPLOYMENT",
    bucket: str = "RESULTS_BUCKET",
    prefix: str = "gpucompare",
) -> dict[str, Any]:
    """The orchestrator role's policy document (see the module docstring)."""
    types = sorted(set(instance_types))
    if not types:
        raise ValueError("no ec2 instance type: the fleet file has no ec2 target (add --instance-type)")
    profiles = sorted(set(instance_profiles))
    return {
        "Version": "2012-10-17",
        "Statement": [
            *_launch_statements(types, profiles, account, deployment),
            *_iam_statements(profiles, account),
            *_use_statements(profiles, account, deployment, bucket, prefix),
        ],
    }


def tag_guard_policy() -> dict[str, Any]:
    """A service control policy (or a permissions boundary for every role of the account) that
    denies everyone the gpucompare tags after launch: no principal that may merely tag can make
    an instance look like a deployment's (and so terminable and commandable by its role)."""
    return {"Version": "2012-10-17", "Statement": [_no_tags_after_launch("GpucompareTagsOnlyAtLaunch")]}
