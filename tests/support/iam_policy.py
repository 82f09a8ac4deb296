"""A small evaluator of the IAM policies in ``docker/iam`` for the tests (moto enforces none).

It stands in for IAM's own decision for the parts of the policy language those files use:
``Allow`` and ``Deny`` statements (an explicit deny wins), ``Action`` and ``Resource`` with
``*``/``?`` wildcards and the ``${aws:userid}`` variable, and the condition operators
``StringEquals``, ``StringLike``, ``ArnLike``, ``ForAnyValue:StringEquals`` (a multi-valued key
such as ``aws:TagKeys``), ``Null``, ``NumericLessThanEquals`` and ``Bool`` (a key missing from the
request fails every operator but ``Null``, as in IAM). Anything the files use beyond that
raises, so the tests cannot silently pass on an operator this evaluator does not know.

``requests_of_call`` turns one recorded API call (service, operation, parameters) into the
authorization requests AWS makes for it: one per resource, with the condition keys AWS
documents for that resource (request tags, instance type, volume size, resource tags ...).
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ACCOUNT = "123456789012"


@dataclass
class Request:
    """One authorization request: an action on a resource with its condition keys."""

    action: str
    resource: str
    context: dict[str, Any] = field(default_factory=dict)


def load_policy(path: Path, **placeholders: str) -> dict[str, Any]:
    text = path.read_text()
    for name, value in placeholders.items():
        text = text.replace(name, value)
    return json.loads(text)


def _listed(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _substitute(pattern: str, context: Mapping[str, Any]) -> str:
    if "${aws:userid}" in pattern:
        return pattern.replace("${aws:userid}", str(context.get("aws:userid", "\0no-userid")))
    return pattern


def _condition_holds(operator: str, key: str, expected: Any, context: Mapping[str, Any]) -> bool:
    values = _listed(expected)
    present = key in context
    actual = context.get(key)
    if operator == "Null":
        return (not present) == (str(values[0]).lower() == "true")
    if not present:
        return False
    actuals = _listed(actual) if isinstance(actual, (list, tuple)) else [actual]
    if operator == "StringEquals":
        return any(str(a) == str(v) for a in actuals for v in values)
    if operator in ("StringLike", "ArnLike"):
        return any(fnmatch.fnmatchcase(str(a), str(v)) for a in actuals for v in values)
    if operator == "ForAnyValue:StringEquals":
        return any(str(a) == str(v) for a in actuals for v in values)
    if operator == "NumericLessThanEquals":
        return all(float(a) <= float(values[0]) for a in actuals)
    if operator == "Bool":
        return any(str(a).lower() == str(v).lower() for a in actuals for v in values)
    raise AssertionError(f"the test evaluator does not know the condition operator {operator}")


def _matches(statement: Mapping[str, Any], request: Request) -> bool:
    if not any(fnmatch.fnmatchcase(request.action, a) for a in _listed(statement["Action"])):
        return False
    if not any(fnmatch.fnmatchcase(request.resource, _substitute(r, request.context))
               for r in _listed(statement["Resource"])):
        return False
    conditions = statement.get("Condition", {})
    return all(_condition_holds(operator, key, expected, request.context)
               for operator, keys in conditions.items() for key, expected in keys.items())


def denies(policy: Mapping[str, Any], request: Request) -> bool:
    """True when a Deny statement of the policy matches the request."""
    return any(s["Effect"] == "Deny" and _matches(s, request) for s in policy["Statement"])


def allows(policy: Mapping[str, Any], request: Request) -> bool:
    """True when some Allow statement grants the request and no Deny statement refuses it."""
    assert all(s["Effect"] in ("Allow", "Deny") for s in policy["Statement"])
    if denies(policy, request):
        return False
    return any(s["Effect"] == "Allow" and _matches(s, request) for s in policy["Statement"])


def _tag_context(prefix: str, tags: Mapping[str, str]) -> dict[str, Any]:
    return {f"{prefix}/{key}": value for key, value in tags.items()}


def profile_arn(name: str) -> str:
    return f"arn:aws:iam::{ACCOUNT}:instance-profile/{name}"


def _run_instances(params: Mapping[str, Any], region: str,
                   image_owner: Callable[[str], str | None]) -> list[Request]:
    arn_ec2 = f"arn:aws:ec2:{region}:{ACCOUNT}"
    tags = {spec["ResourceType"]: {t["Key"]: t["Value"] for t in spec["Tags"]}
            for spec in params.get("TagSpecifications", [])}
    ebs = params["BlockDeviceMappings"][0]["Ebs"]
    profile = (params.get("IamInstanceProfile") or {}).get("Name")
    instance_ctx = {**_tag_context("aws:RequestTag", tags.get("instance", {})),
                    "aws:TagKeys": list(tags.get("instance", {})), "ec2:InstanceType": params["InstanceType"]}
    if profile:
        instance_ctx["ec2:InstanceProfile"] = profile_arn(profile)
    volume_ctx = {**_tag_context("aws:RequestTag", tags.get("volume", {})),
                  "aws:TagKeys": list(tags.get("volume", {})),
                  "ec2:VolumeSize": ebs["VolumeSize"], "ec2:Encrypted": str(ebs.get("Encrypted", False))}
    owner = image_owner(params["ImageId"])
    requests = [
        Request("ec2:RunInstances", f"{arn_ec2}:instance/*", instance_ctx),
        Request("ec2:RunInstances", f"{arn_ec2}:volume/*", volume_ctx),
        Request("ec2:RunInstances", f"arn:aws:ec2:{region}::image/{params['ImageId']}",
                {"ec2:Owner": owner} if owner else {}),
        Request("ec2:RunInstances", f"{arn_ec2}:subnet/subnet-0default"),
        Request("ec2:RunInstances", f"{arn_ec2}:security-group/sg-0default"),
        Request("ec2:RunInstances", f"{arn_ec2}:network-interface/*"),
        Request("iam:PassRole", f"arn:aws:iam::{ACCOUNT}:role/{profile}",
                {"iam:PassedToService": "ec2.amazonaws.com"}),
    ]
    if params.get("InstanceMarketOptions"):
        requests.append(Request("ec2:RunInstances", f"{arn_ec2}:spot-instances-request/*"))
    for kind, ctx in (("instance", instance_ctx), ("volume", volume_ctx)):
        requests.append(Request("ec2:CreateTags", f"{arn_ec2}:{kind}/*",
                                {**ctx, "ec2:CreateAction": "RunInstances"}))
    return requests


def requests_of_call(service: str, operation: str, params: Mapping[str, Any], *, region: str,
                     instance_tags: Callable[[str], Mapping[str, str]],
                     instance_profile: Callable[[str], str | None] = lambda _: None,
                     image_owner: Callable[[str], str | None] = lambda _: None) -> list[Request]:
    """The authorization requests AWS evaluates for one API call (see the module docstring).
    ``instance_profile`` gives an instance's profile ARN (``ec2:InstanceProfile``) and
    ``image_owner`` an AMI's ``ec2:Owner`` (``amazon`` or an account id); unknown: key absent."""
    arn_ec2 = f"arn:aws:ec2:{region}:{ACCOUNT}"
    if service == "ec2" and operation == "RunInstances":
        return _run_instances(params, region, image_owner)
    if service == "ec2" and operation in ("CreateTags", "DeleteTags"):  # after launch: no CreateAction
        tags = {t["Key"]: t.get("Value", "") for t in params["Tags"]}
        return [Request(f"ec2:{operation}", f"{arn_ec2}:instance/{resource}",
                        {**_tag_context("aws:RequestTag", tags), "aws:TagKeys": list(tags),
                         **_tag_context("aws:ResourceTag", instance_tags(resource))})
                for resource in params["Resources"]]
    if service == "ssm" and operation == "CancelCommand":
        return [Request("ssm:CancelCommand", f"{arn_ec2}:instance/{instance_id}",
                        _tag_context("ssm:resourceTag", instance_tags(instance_id)))
                for instance_id in params.get("InstanceIds") or ["*"]]
    if service == "ec2" and operation == "TerminateInstances":
        requests = []
        for instance_id in params["InstanceIds"]:
            context = _tag_context("aws:ResourceTag", instance_tags(instance_id))
            profile = instance_profile(instance_id)
            if profile:
                context["ec2:InstanceProfile"] = profile
            requests.append(Request("ec2:TerminateInstances", f"{arn_ec2}:instance/{instance_id}", context))
        return requests
    if service == "ssm" and operation == "SendCommand":
        return [Request("ssm:SendCommand", f"arn:aws:ssm:{region}::document/{params['DocumentName']}"),
                *(Request("ssm:SendCommand", f"{arn_ec2}:instance/{instance_id}",
                          _tag_context("ssm:resourceTag", instance_tags(instance_id)))
                  for instance_id in params["InstanceIds"])]
    if service == "ssm" and operation == "GetParameter":
        name = params["Name"]
        return [Request("ssm:GetParameter", f"arn:aws:ssm:{region}::parameter{name}")]
    if service == "s3":
        bucket = params.get("Bucket")
        if operation in ("PutObject", "GetObject", "HeadObject", "DeleteObject", "CreateMultipartUpload",
                         "UploadPart", "CompleteMultipartUpload"):
            action = {"HeadObject": "s3:GetObject", "CreateMultipartUpload": "s3:PutObject",
                      "UploadPart": "s3:PutObject", "CompleteMultipartUpload": "s3:PutObject"}.get(
                operation, f"s3:{operation}")
            return [Request(action, f"arn:aws:s3:::{bucket}/{params['Key']}")]
        if operation == "DeleteObjects":
            return [Request("s3:DeleteObject", f"arn:aws:s3:::{bucket}/{item['Key']}")
                    for item in params["Delete"]["Objects"]]
        if operation in ("ListObjectsV2", "ListObjects"):
            return [Request("s3:ListBucket", f"arn:aws:s3:::{bucket}",
                            {"s3:prefix": params.get("Prefix", "")})]
    if service == "iam" and operation == "GetInstanceProfile":
        return [Request("iam:GetInstanceProfile",
                        f"arn:aws:iam::{ACCOUNT}:instance-profile/{params['InstanceProfileName']}")]
    return [Request(f"{service}:{operation}", "*")]
