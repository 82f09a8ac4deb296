"""The field types of the models, one definition each (``Name``, ``Provider``, ``AwsRegion``,
``BatchSizes``…), their vocabularies and limits, and the base of every model (:class:`Strict`).

A type is ``Annotated[<python type>, <marker of config.fields>]`` over a pattern of
``config.patterns`` or a limit of the worker (``bench_tasks.constants``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, model_validator
from pydantic_core import PydanticCustomError

from bench_tasks.constants import (
    DTYPES,
    MAX_BATCH_SIZE,
    MAX_CONFIG_TIMEOUT_S,
    MODES,
    NETWORKS,
)
from gpucompare.config import patterns, runtimes
from gpucompare.config.fields import (
    Flag,
    Matching,
    Number,
    OneOf,
    Predicate,
    Subset,
    TextList,
    Whole,
    WholeList,
)
from gpucompare.config.validation import RULE, UNKNOWN_KEY

#: Providers with a price table in the project; any other lower-case name may rent hosts over SSH.
KNOWN_PROVIDERS: tuple[str, ...] = ("local", "aws", "leadergpu")
#: The worker environments a rented host can build (``targets.bundle.REQUIREMENTS``).
REQUIREMENTS: tuple[str, ...] = ("cpu", "gpu")
DIST_KVSTORES: tuple[str, ...] = ("dist_sync", "dist_device_sync")
MAX_GPU_COUNT = 64
MAX_NODES = 256
MAX_TIMEOUT_S = int(MAX_CONFIG_TIMEOUT_S)
DEFAULT_SCHEDULE = "0 2 * * *"
#: The AMI of an ec2 target whose worker runtime is a container (ngc-…): AWS's public SSM parameter
#: of the Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04), which has the NVIDIA driver,
#: Docker and the NVIDIA Container Toolkit; the option ``container_ami`` overrides it.
DEFAULT_CONTAINER_AMI = ("/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/"
                         "latest/ami-id")
DEFAULT_MAX_INSTANCES = 2


def _text(pattern: Any, what: str, also: Any = None) -> Any:
    return Annotated[str, Matching(pattern, what, also)]


# -- field types: one definition each ------------------------------------------------------------
Name = _text(patterns.NAME, "a lower-case name of letters, digits, '_' and '-' (at most 40)")
Provider = _text(patterns.PROVIDER, f"a lower-case name such as {', '.join(KNOWN_PROVIDERS)}")
InstanceLabel = _text(patterns.INSTANCE_TYPE, "a machine name of letters, digits, '.', '_' and '-' "
                      "such as ltbv14")
Ec2InstanceType = _text(patterns.EC2_INSTANCE_TYPE, "an EC2 type family.size such as p3.2xlarge")
AwsRegion = _text(patterns.AWS_REGION, "an AWS region such as us-east-1")
Region = _text(patterns.REGION, "a lower-case region label such as eu-nl or us-east-1")
ConnId = _text(patterns.CONN_ID, "an Airflow connection id of letters, digits, '_', '.' and '-'")
Cron = _text(patterns.CRON, "a five-field cron expression or @daily, @hourly …")
RemotePath = _text(patterns.ABSOLUTE_PATH, "an absolute path of letters, digits and . _ - + @ % = , "
                   "(no '..', no spaces)", lambda v: not patterns.has_dot_segment(v))
LocalPath = Annotated[str, Predicate(lambda v: os.path.isabs(v) and "\0" not in v and "\n" not in v,
                                     "an absolute path on this machine")]
Interface = _text(patterns.INTERFACE, "a network interface name such as eth0 or ens5")
Market = Annotated[str, OneOf(patterns.MARKETS)]
#: ``auto`` or a runtime of data/runtimes.csv (``config.runtimes``)
WorkerRuntime = Annotated[str, OneOf(runtimes.choices())]
Currency = Annotated[str, OneOf(patterns.CURRENCIES)]
GpuCount = Annotated[int, Whole(0, MAX_GPU_COUNT)]
Enabled = Annotated[bool, Flag()]
Money = Annotated[float, Number(0.0, 1e6)]
Networks = Annotated[tuple[str, ...], Subset(NETWORKS, everything="all")]
Modes = Annotated[tuple[str, ...], Subset(MODES)]
Dtypes = Annotated[tuple[str, ...], Subset(DTYPES)]
BatchSizes = Annotated[tuple[int, ...], WholeList(1, MAX_BATCH_SIZE)]
DeviceLists = Annotated[tuple[str, ...], TextList(Matching(
    patterns.DEVICES, "cpu, gpu:N or a comma-separated list such as gpu:0,gpu:1"))]
BasePython = _text(patterns.INTERPRETER,
                   "python3, python3.N or an absolute path", lambda v: not patterns.has_dot_segment(v))
DockerImage = _text(patterns.DOCKER_IMAGE, "a docker image name[:tag][@sha256:digest]")
DockerGpus = _text(patterns.DOCKER_GPUS, "all, a count or device=0,1")
AmiRef = _text(patterns.AMI_REF,
               "an AMI id (ami-…) or an SSM parameter name holding one (/aws/service/…)")
InstanceProfile = _text(patterns.INSTANCE_PROFILE, "an IAM instance profile name")
Bucket = _text(patterns.BUCKET, "an S3 bucket name")
#: The longest ``results_prefix``: the run's keys add the deployment, run and writer below it.
MAX_PREFIX_LENGTH = 128
Prefix = _text(patterns.PREFIX, f"an S3 key prefix (no leading '/', no '.' or '..' segment, at most "
               f"{MAX_PREFIX_LENGTH} characters)",
               lambda v: len(v) <= MAX_PREFIX_LENGTH and not patterns.has_dot_segment(v))
#: The results bucket of the shipped example fleet file: a placeholder, refused for any target
#: that can run (and never read by the sweeper) until replaced with a real bucket.
PLACEHOLDER_BUCKET = "my-gpucompare-results"
#: An ec2 target's root volume (GB): the IAM policy (``gpucompare iam-policy``) allows exactly
#: this range, so an option the policy would deny at launch is refused when the fleet is read.
MIN_VOLUME_GB = 8
MAX_VOLUME_GB = 200
VolumeSize = Annotated[int, Whole(MIN_VOLUME_GB, MAX_VOLUME_GB)]
SubnetId = _text(patterns.SUBNET_ID, "a subnet id (subnet-…)")
Subnets = Annotated[tuple[str, ...], TextList(Matching(patterns.SUBNET_ID, "subnet ids (subnet-…)"))]
AvailabilityZones = Annotated[tuple[str, ...], TextList(Matching(patterns.AVAILABILITY_ZONE,
                                                                 "availability zone names (us-east-1a …)"))]
SecurityGroups = Annotated[tuple[str, ...], TextList(Matching(patterns.SECURITY_GROUP_ID,
                                                              "security group ids (sg-…)"))]
Deployment = _text(patterns.DEPLOYMENT, "a deployment name (lower-case letters, "
                   "digits, '-')")
TagKey = _text(patterns.TAG_KEY, "a tag key not starting with aws: or gpucompare:",
               lambda k: not k.startswith(("aws:", "gpucompare:")))
TagValue = _text(patterns.TAG_VALUE, "a tag value of at most 256 letters, digits, spaces and _ . : / = + @ -")
Tags = Annotated[dict[TagKey, TagValue], Field(strict=True)]
TtlMinutes = Annotated[int, Whole(10, 7 * 24 * 60)]
#: the setting worker_envs_kept: worker environments an ssh host keeps besides the one in use
WorkerEnvsKept = Annotated[int, Whole(0, 100)]


def rule(field: str, message: str, allowed: str = "") -> PydanticCustomError:
    """A rule between fields is broken: ``field`` (relative to the model) and why."""
    return PydanticCustomError(RULE, "{field}: {message}", {"field": field, "message": message,
                                                            "allowed": allowed})


def partial_options(info: ValidationInfo) -> bool:
    """Whether options may be incomplete: a manual request before the fleet's defaults are merged."""
    return bool(info.context and info.context.get("partial"))


class Strict(BaseModel):
    """Base of every model: frozen, and an unknown key is refused naming the allowed ones."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if isinstance(data, cls):
            return data
        allowed = ", ".join(cls.model_fields)
        if not isinstance(data, Mapping):
            raise PydanticCustomError("not_allowed", "{message}", {
                "message": f"{type(data).__name__} {data!r:.60} is not allowed (expected a mapping)",
                "allowed": f"a mapping of {allowed}"})
        unknown = sorted(str(key) for key in data if key not in cls.model_fields)
        if unknown:
            raise PydanticCustomError(UNKNOWN_KEY, "unknown key {key}",
                                      {"key": unknown[0], "allowed": allowed})
        return data
