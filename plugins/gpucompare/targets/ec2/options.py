"""The options of an ``ec2`` target, parsed and checked before anything is provisioned (every
value that reaches an AWS API or a shell matches a pattern), and the target's tags and limits.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from gpucompare import settings
from gpucompare.config import models, runtime_choice, runtimes
from gpucompare.config.validation import ValidationError, check
from gpucompare.targets.base import (
    TargetConfigError,
    TargetSpec,
)

log = logging.getLogger(__name__)

RUN_ID_TAG = "gpucompare:run-id"
DEPLOYMENT_TAG = "gpucompare:deployment"
EXPIRES_AT_TAG = "gpucompare:expires-at"
#: Set by a teardown that could not terminate its instance (throttled past ``TEARDOWN_PATIENCE_S``):
#: the next sweeper run terminates an instance carrying it at once, whatever its expires-at.
SWEEP_NOW_TAG = "gpucompare:sweep-now"

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

#: The document SSM runs our commands with: the agent writes them, one a line, to a
#: ``_script.sh`` and runs ``sh -c <that file>``; a shebang as the first line makes it bash.
SCRIPT_PREAMBLE = ("#!/bin/bash", "set -euo pipefail")

DEFAULT_TTL_MINUTES = 240
DEFAULT_VOLUME_GB = 150  # the Deep Learning Base AMI's root snapshot is ~100 GB
#: Seconds between uploads of a running sweep's progress file (what the task log follows).
PROGRESS_UPLOAD_S = 20




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
    container_ami: str = ""
    subnets: tuple[str, ...] = ()
    availability_zones: tuple[str, ...] = ()
    #: the worker runtime (``config.runtime_choice``); a container runtime launches container_ami
    worker_runtime: str = "pip-cu112"
    max_reclaims: int = 2

    @classmethod
    def from_spec(cls, spec: TargetSpec) -> Ec2Options:
        """The target's spec checked whole by its model (``config.models.Ec2Target``: instance
        type, region, market and every option); an error names the field, the value and what is
        allowed."""
        if spec.kind != "ec2":
            raise TargetConfigError(f"Ec2Target needs kind='ec2', got {spec.kind!r}")
        try:
            checked = check("", models.Target, spec.to_dict())
        except ValidationError as exc:
            raise TargetConfigError(f"ec2 target: {exc}") from None
        opts = checked.options
        if opts.budget_cap is not None and not opts.sweep_configs:
            raise TargetConfigError("ec2 target: options.budget_cap needs options.sweep_configs (the sweeps "
                                    "the run will execute) to estimate the run's cost")
        values = opts.model_dump()
        values.update(sweep_configs=tuple(opts.sweep_configs), tags=dict(opts.tags),
                      subnets=tuple(opts.subnets), availability_zones=tuple(opts.availability_zones),
                      deployment=opts.deployment or settings.deployment(),
                      worker_runtime=runtime_choice.choose(spec.to_dict(), spec.worker_runtime))
        if runtimes.get(values["worker_runtime"]).delivery == "docker":
            values["ami"] = opts.container_ami  # the Deep Learning Base AMI: Docker + Toolkit
        return cls(**values)
