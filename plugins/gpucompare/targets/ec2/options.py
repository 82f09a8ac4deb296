"""The options of an ``ec2`` target, parsed and checked before anything is provisioned (every
value that reaches an AWS API or a shell matches a pattern), and the target's tags and limits.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any

from gpucompare import settings
from gpucompare.config import patterns
from gpucompare.targets import cost
from gpucompare.targets.base import (
    TargetConfigError,
    TargetSpec,
)

log = logging.getLogger(__name__)

RUN_ID_TAG = "gpucompare:run-id"
DEPLOYMENT_TAG = "gpucompare:deployment"
EXPIRES_AT_TAG = "gpucompare:expires-at"

#: RunInstances error codes that mean "no spot capacity for you now" (not a bad request):
#: these, and only these, make a spot request fall back to on-demand.
SPOT_CAPACITY_ERRORS = frozenset({
    "InsufficientInstanceCapacity",
    "SpotMaxPriceTooLow",
    "MaxSpotInstanceCountExceeded",
    "InsufficientCapacity",
    "UnfulfillableCapacity",
})

#: States of an instance that still exists (and may cost money).
LIVE_STATES = ("pending", "running", "stopping", "stopped", "shutting-down")

#: SSM command statuses after which nothing more will happen.
SSM_FINAL_STATUSES = frozenset({"Success", "Failed", "Cancelled", "TimedOut", "Cancelling"})

#: The document SSM runs our commands with: the agent writes them, one a line, to a
#: ``_script.sh`` and runs ``sh -c <that file>``; a shebang as the first line makes it bash.
SCRIPT_PREAMBLE = ("#!/bin/bash", "set -euo pipefail")

DEFAULT_TTL_MINUTES = 240
DEFAULT_VOLUME_GB = 150  # the Deep Learning Base AMI's root snapshot is ~100 GB
STDERR_TAIL_LINES = 40
#: Seconds between uploads of a running sweep's progress file (what the task log follows).
PROGRESS_UPLOAD_S = 20

# Used with fullmatch only: "$" would accept a trailing newline.
_AMI_ID = patterns.AMI_ID
_SSM_PARAMETER = re.compile(r"(resolve:ssm:)?(/[A-Za-z0-9_.\-]+)+")
_SUBNET_ID = re.compile(r"subnet-[0-9a-f]{8,17}")
_SECURITY_GROUP_ID = re.compile(r"sg-[0-9a-f]{8,17}")
_INSTANCE_TYPE = patterns.EC2_INSTANCE_TYPE
_INSTANCE_ID = re.compile(r"i-[0-9a-f]{8,17}")
_REGION = patterns.AWS_REGION
_PROFILE_NAME = re.compile(r"[A-Za-z0-9+=,.@_-]{1,128}")
_BUCKET = patterns.BUCKET
_PREFIX = patterns.PREFIX
_ABS_PATH = re.compile(r"(/[A-Za-z0-9_.-]+)+")
_RUN_ID = patterns.RUN_ID
_TAG_KEY = re.compile(r"[A-Za-z0-9 _.:/=+@-]{1,128}")
_CURRENCY = patterns.CURRENCY
_DEPLOYMENT = re.compile(settings.DEPLOYMENT_PATTERN)
#: ``aws:userid`` of an instance role session: ``<role id>:<instance id>``.
_WRITER = re.compile(r"[A-Z0-9]{8,128}:i-[0-9a-f]{8,17}")


def run_key(run_id: str) -> str:
    """The run id as a path component (S3 keys, directories): Airflow's ':' and '+' become '-'."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", run_id)


def _require(options: dict[str, Any], name: str, pattern: re.Pattern[str], what: str) -> str:
    value = options.get(name)
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise TargetConfigError(f"ec2 option {name!r}: {value!r} is not {what}")
    return value


def _optional(options: dict[str, Any], name: str, pattern: re.Pattern[str], what: str,
              default: str | None = None) -> str | None:
    if options.get(name) in (None, ""):
        return default
    return _require(options, name, pattern, what)


def _number(options: dict[str, Any], name: str, low: float, high: float) -> float | None:
    value = options.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise TargetConfigError(f"ec2 option {name!r}: {value!r} is not a number between {low} and {high}")
    return float(value)


def _number_or(options: dict[str, Any], name: str, default: float, low: float, high: float) -> float:
    value = _number(options, name, low, high)
    return default if value is None else value


#: Every option an ec2 target understands (anything else is refused, typos included).
OPTION_NAMES: tuple[str, ...] = (
    "ami", "instance_profile", "results_bucket", "results_prefix", "aws_conn_id", "subnet_id",
    "security_group_ids", "ttl_minutes", "volume_size_gb", "remote_root", "bench_python", "budget_cap",
    "budget_currency", "sweep_configs", "poll_interval_s", "agent_timeout_s", "launch_timeout_s",
    "deploy_timeout_s", "tags", "deployment",
)


@dataclass(frozen=True)
class Ec2Options:
    """The validated settings of an ec2 target (see the module docstring for each one)."""

    ami: str
    instance_profile: str
    results_bucket: str
    results_prefix: str
    aws_conn_id: str
    subnet_id: str | None
    security_group_ids: tuple[str, ...]
    ttl_minutes: int | None
    volume_size_gb: int
    remote_root: str
    bench_python: str | None
    budget_cap: float | None
    budget_currency: str
    sweep_configs: tuple[dict[str, Any], ...]
    poll_interval_s: float
    agent_timeout_s: float
    launch_timeout_s: float
    deploy_timeout_s: float
    tags: dict[str, str] = field(default_factory=dict)
    deployment: str = ""

    @classmethod
    def from_spec(cls, spec: TargetSpec) -> Ec2Options:
        if spec.kind != "ec2":
            raise TargetConfigError(f"Ec2Target needs kind='ec2', got {spec.kind!r}")
        if not isinstance(spec.instance_type, str) or not _INSTANCE_TYPE.fullmatch(spec.instance_type):
            raise TargetConfigError(
                f"ec2 instance_type {spec.instance_type!r} is not an EC2 type like g4dn.xlarge")
        if not isinstance(spec.region, str) or not _REGION.fullmatch(spec.region):
            raise TargetConfigError(f"ec2 region {spec.region!r} is not an AWS region like us-east-1")
        if spec.market not in cost.MARKETS:
            raise TargetConfigError(f"ec2 market {spec.market!r} is not one of {', '.join(cost.MARKETS)}")
        opts = dict(spec.options or {})
        unknown = sorted(set(opts) - set(OPTION_NAMES))
        if unknown:
            raise TargetConfigError(
                f"ec2 option {unknown[0]!r} is not known; allowed: {', '.join(OPTION_NAMES)}")
        groups = opts.get("security_group_ids") or []
        if isinstance(groups, str):
            groups = [groups]
        for group in groups:
            if not isinstance(group, str) or not _SECURITY_GROUP_ID.fullmatch(group):
                raise TargetConfigError(
                    f"ec2 option 'security_group_ids': {group!r} is not a security group id (sg-…)")
        sweeps = opts.get("sweep_configs") or []
        if isinstance(sweeps, dict):
            sweeps = [sweeps]
        if not all(isinstance(sweep, dict) for sweep in sweeps):
            raise TargetConfigError("ec2 option 'sweep_configs' must be a list of sweep configs (mappings)")
        tags = opts.get("tags") or {}
        if not isinstance(tags, dict) or not all(
            isinstance(k, str) and _TAG_KEY.fullmatch(k) and not k.startswith(("aws:", "gpucompare:"))
            and isinstance(v, str) and len(v) <= 256 for k, v in tags.items()
        ):
            raise TargetConfigError("ec2 option 'tags' must map tag keys (not aws:/gpucompare:) to strings")
        aws_conn_id = opts.get("aws_conn_id", "aws_default")
        if not isinstance(aws_conn_id, str) or not aws_conn_id:
            raise TargetConfigError(f"ec2 option 'aws_conn_id': {aws_conn_id!r} is not a connection id")
        currency = opts.get("budget_currency", "USD")
        if not isinstance(currency, str) or not _CURRENCY.fullmatch(currency):
            raise TargetConfigError(
                f"ec2 option 'budget_currency': {currency!r} is not an ISO currency like USD")
        ttl = _number(opts, "ttl_minutes", 10, 7 * 24 * 60)
        budget_cap = _number(opts, "budget_cap", 0, 1e6)  # 0 refuses every paid run
        ami_pattern, ami_what = ((_AMI_ID, "an AMI id (ami-…)") if str(opts.get("ami", "")).startswith("ami-")
                                 else (_SSM_PARAMETER, "an AMI id (ami-…) or an SSM parameter name (/aws/…)"))
        if budget_cap is not None and not sweeps:
            raise TargetConfigError("ec2 option 'budget_cap' needs 'sweep_configs' (the sweeps the run will "
                              "execute) to estimate the run's cost")
        return cls(
            ami=_require(opts, "ami", ami_pattern, ami_what),
            instance_profile=_require(opts, "instance_profile", _PROFILE_NAME, "an instance profile name"),
            results_bucket=_require(opts, "results_bucket", _BUCKET, "an S3 bucket name"),
            results_prefix=_optional(opts, "results_prefix", _PREFIX, "an S3 key prefix (no leading '/')",
                                     "gpucompare") or "gpucompare",
            aws_conn_id=aws_conn_id,
            subnet_id=_optional(opts, "subnet_id", _SUBNET_ID, "a subnet id (subnet-…)"),
            security_group_ids=tuple(groups),
            ttl_minutes=int(ttl) if ttl is not None else None,
            volume_size_gb=int(_number_or(opts, "volume_size_gb", DEFAULT_VOLUME_GB, 8, 16384)),
            remote_root=_optional(opts, "remote_root", _ABS_PATH, "an absolute path", "/opt/gpucompare")
            or "/opt/gpucompare",
            bench_python=_optional(opts, "bench_python", _ABS_PATH, "an absolute path to a python"),
            budget_cap=budget_cap,
            budget_currency=currency.upper(),
            sweep_configs=tuple(sweeps),
            poll_interval_s=_number_or(opts, "poll_interval_s", 15, 0.1, 600),
            agent_timeout_s=_number_or(opts, "agent_timeout_s", 900, 1, 7200),
            launch_timeout_s=_number_or(opts, "launch_timeout_s", 900, 1, 7200),
            deploy_timeout_s=_number_or(opts, "deploy_timeout_s", 1800, 1, 14400),
            tags=dict(tags),
            deployment=_optional(opts, "deployment", _DEPLOYMENT, "a deployment name "
                                 f"({settings.DEPLOYMENT_PATTERN})") or settings.deployment(),
        )


