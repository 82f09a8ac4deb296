"""Helpers shared by the EC2, sweeper and cost-guard tests (not fixtures: plain functions).

They set up, on the moto server of ``fixtures_aws``, what an AWS account would already
have: the Airflow AWS connection pointing at the endpoint, an IAM instance profile, a
published AMI id under a Deep Learning AMI's SSM parameter name.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from gpucompare.targets.base import TargetSpec

CONN_ID = "aws_test"
#: Where the tests publish the AMI id. Production names AWS's public parameter (e.g.
#: /aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id);
#: moto, like AWS, refuses to create parameters under /aws/, so the test account publishes
#: one of moto's AMI ids under its own name, read back by the same GetParameter call.
AMI_PARAMETER = "/gpucompare/test/gpu-ami/latest/ami-id"

TINY_SWEEP: dict[str, Any] = {
    "timeout_s": 120,
    "warmup": 1,
    "batches": 1,
    "repeats": 1,
    "matrix": [{"modes": ["score"], "networks": ["alexnet"], "batch_sizes": [1], "devices": ["cpu"]}],
}


def point_airflow_connection(monkeypatch: pytest.MonkeyPatch, endpoint_url: str) -> str:
    """``AIRFLOW_CONN_AWS_TEST``: the Airflow AWS connection the hooks use, aimed at moto."""
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps({
        "conn_type": "aws",
        "login": "testing",
        "password": "testing",
        "extra": {"endpoint_url": endpoint_url, "region_name": "us-east-1"},
    }))
    return CONN_ID


def create_instance_profile(aws_client: Any) -> str:
    """A role + instance profile in moto's IAM (RunInstances refuses an unknown profile)."""
    iam = aws_client("iam")
    name = f"gpucompare-worker-{uuid.uuid4().hex[:8]}"
    iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"},
                       "Action": "sts:AssumeRole"}],
    }))
    iam.create_instance_profile(InstanceProfileName=name)
    iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=name)
    return name


_IMAGE_IDS: dict[str, str] = {}


def any_image_id(aws_client: Any, region: str = "us-east-1") -> str:
    """One of the AMIs moto ships (filtered: listing all ~1,300 takes seconds)."""
    key = region
    if key not in _IMAGE_IDS:
        images = aws_client("ec2", region_name=region).describe_images(
            Owners=["amazon"], Filters=[{"Name": "name", "Values": ["amzn2-ami-hvm-*"]}])["Images"]
        _IMAGE_IDS[key] = images[0]["ImageId"]
    return _IMAGE_IDS[key]


def publish_ami_parameter(aws_client: Any, region: str = "us-east-1") -> str:
    """Put one of moto's AMI ids under ``AMI_PARAMETER`` (see there why not /aws/…)."""
    image_id = any_image_id(aws_client, region)
    aws_client("ssm", region_name=region).put_parameter(Name=AMI_PARAMETER, Value=image_id,
                                                        Type="String", Overwrite=True)
    return image_id


def ec2_spec(profile: str, bucket: str, *, market: str = "on_demand", region: str = "us-east-1",
             instance_type: str = "g4dn.xlarge", **options: Any) -> TargetSpec:
    return TargetSpec(
        name="aws-test", kind="ec2", provider="aws", instance_type=instance_type, region=region,
        market=market, gpu_count=1,
        options={"aws_conn_id": CONN_ID, "ami": f"resolve:ssm:{AMI_PARAMETER}", "instance_profile": profile,
                 "results_bucket": bucket, "results_prefix": "gpucompare/results", "poll_interval_s": 0.2,
                 "agent_timeout_s": 5, "launch_timeout_s": 30, **options},
    )


def new_run_id() -> str:
    return f"manual__2026-11-30T02:00:00+00:00-{uuid.uuid4().hex[:8]}"


def live_instances(aws_client: Any, run_id: str, region: str = "us-east-1") -> list[dict[str, Any]]:
    """Instances of this run that still exist (anything but terminated)."""
    reservations = aws_client("ec2", region_name=region).describe_instances(Filters=[
        {"Name": "tag:gpucompare:run-id", "Values": [run_id]},
        {"Name": "instance-state-name",
         "Values": ["pending", "running", "stopping", "stopped", "shutting-down"]},
    ])["Reservations"]
    return [instance for reservation in reservations for instance in reservation["Instances"]]


#: The nightly sweep of the shipped fleet at full size: what the cost guard prices.
NIGHTLY: dict[str, Any] = {
    "timeout_s": 900, "warmup": 5, "batches": 10, "repeats": 3,
    "matrix": [
        {"modes": ["score"], "batch_sizes": [1, 2, 4, 8, 16, 32], "devices": ["gpu:0"],
         "networks": ["alexnet", "vgg-16", "googlenet", "inception-bn", "inception-v3", "resnet-50",
                      "resnet-152"]},
        {"modes": ["train"], "networks": ["alexnet", "resnet-50", "inception-v3"],
         "batch_sizes": [8, 16, 32, 64], "devices": ["gpu:0"]},
    ],
}
