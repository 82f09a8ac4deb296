"""A small evaluator of the IAM policies in ``docker/iam`` for the tests (moto enforces none).

It stands in for IAM's own decision for the parts of the policy language those files use:
``Allow`` statements, ``Action`` and ``Resource`` with ``*``/``?`` wildcards and the
``${aws:userid}`` variable, and the condition operators ``StringEquals``, ``StringLike``,
``Null``, ``NumericLessThanEquals`` and ``Bool`` (a key missing from the request fails every
operator but ``Null``, as in IAM). Anything the files use beyond that raises, so the tests
cannot silently pass on an operator this evaluator does not know.

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
    if operator == "StringLike":
        return any(fnmatch.fnmatchcase(str(a), str(v)) for a in actuals for v in values)
    if operator == "NumericLessThanEquals":
        return all(float(a) <= float(values[0]) for a in actuals)
    if operator == "Bool":
        return any(str(a).lower() == str(v).lower() for a in actuals for v in values)
    raise AssertionError(f"the test evaluator does not know the condition operator {operator}")


def allows(policy: Mapping[str, Any], request: Request) -> bool:
    """True when some Allow statement of the policy grants the request (no Deny is used)."""
    for statement in policy["Statement"]:
        assert statement["Effect"] == "Allow", statement
        if not any(fnmatch.fnmatchcase(request.action, a) for a in _listed(statement["Action"])):
            continue
        if not any(fnmatch.fnmatchcase(request.resource, _substitute(r, request.context))
                   for r in _listed(statement["Resource"])):
            continue
        conditions = statement.get("Condition", {})
        if all(_condition_holds(operator, key, expected, request.context)
               for operator, keys in conditions.items() for key, expected in keys.items()):
            return True
    return False


def _tag_context(prefix: str, tags: Mapping[str, str]) -> dict[str, Any]:
    return {f"{prefix}/{key}": value for key, value in tags.items()}


def requests_of_call(service: str, operation: str, params: Mapping[str, Any], *, region: str,
                     instance_tags: Callable[[str], Mapping[str, str]]) -> list[Request]:
    """The authorization requests AWS evaluates for one API call (see the module docstring)."""
    arn_ec2 = f"arn:aws:ec2:{region}:{ACCOUNT}"
    if service == "ec2" and operation == "RunInstances":
        tags = {spec["ResourceType"]: {t["Key"]: t["Value"] for t in spec["Tags"]}
                for spec in params.get("TagSpecifications", [])}
        ebs = params["BlockDeviceMappings"][0]["Ebs"]
        instance_ctx = {**_tag_context("aws:RequestTag", tags.get("instance", {})),
                        "ec2:InstanceType": params["InstanceType"]}
        volume_ctx = {**_tag_context("aws:RequestTag", tags.get("volume", {})),
                      "ec2:VolumeSize": ebs["VolumeSize"], "ec2:Encrypted": str(ebs.get("Encrypted", False))}
        requests = [
            Request("ec2:RunInstances", f"{arn_ec2}:instance/*", instance_ctx),
            Request("ec2:RunInstances", f"{arn_ec2}:volume/*", volume_ctx),
            Request("ec2:RunInstances", f"arn:aws:ec2:{region}::image/{params['ImageId']}"),
            Request("ec2:RunInstances", f"{arn_ec2}:subnet/subnet-0default"),
            Request("ec2:RunInstances", f"{arn_ec2}:security-group/sg-0default"),
            Request("ec2:RunInstances", f"{arn_ec2}:network-interface/*"),
            Request("iam:PassRole", f"arn:aws:iam::{ACCOUNT}:role/gpucompare-worker",
                    {"iam:PassedToService": "ec2.amazonaws.com"}),
        ]
        if params.get("InstanceMarketOptions"):
            requests.append(Request("ec2:RunInstances", f"{arn_ec2}:spot-instances-request/*"))
        for kind, ctx in (("instance", instance_ctx), ("volume", volume_ctx)):
            requests.append(Request("ec2:CreateTags", f"{arn_ec2}:{kind}/*",
                                    {**ctx, "ec2:CreateAction": "RunInstances"}))
        return requests
    if service == "ec2" and operation == "TerminateInstances":
        return [Request("ec2:TerminateInstances", f"{arn_ec2}:instance/{instance_id}",
                        _tag_context("aws:ResourceTag", instance_tags(instance_id)))
                for instance_id in params["InstanceIds"]]
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
