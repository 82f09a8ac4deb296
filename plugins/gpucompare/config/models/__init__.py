"""The pydantic models of everything a user states: one model per thing.

* ``values``: the field types, one definition each (``Name``, ``AwsRegion``, ``BatchSizes``…)
  over ``config.patterns`` and the worker's limits, and :class:`Strict`, the base of every model
  (frozen; an unknown key is an error naming the allowed keys);
* ``options``: the options of each target kind (:class:`LocalOptions`, :class:`SshOptions`,
  :class:`Ec2Options`) and the target, a union discriminated on ``kind`` (:data:`Target`);
* ``profiles``: :class:`SweepProfile` (and the worker's sweep document it makes),
  :class:`ScalingProfile`, :class:`ScalingGroup`;
* ``fleet_file``: :class:`FleetFile`, the whole fleet file;
* ``prices``: :class:`DeclaredPrice` and :class:`TargetPrice`, a price the user declares for a
  machine of their own (per hour, per month or an amortised purchase);
* ``trigger``: :class:`TriggerParams`, the manual DAG's params, and the form's JSON schema.

Validate with ``gpucompare.config.validation.validate`` / ``check`` to get the project's error
(field, value, allowed values), never pydantic's.
"""

from __future__ import annotations

from gpucompare.config.models.fleet_file import BudgetCeiling, Defaults, FleetFile
from gpucompare.config.models.options import (
    Ec2Options,
    Ec2Target,
    LocalOptions,
    LocalTarget,
    SshOptions,
    SshTarget,
    Target,
)
from gpucompare.config.models.prices import HOURS_PER_MONTH, DeclaredPrice, Purchase, TargetPrice
from gpucompare.config.models.profiles import (
    ModeOverride,
    ScalingGroup,
    ScalingPair,
    ScalingProfile,
    SweepProfile,
    default_devices,
    sweep_config,
)
from gpucompare.config.models.trigger import TriggerParams, check_request, form_fields
from gpucompare.config.models.values import (
    DEFAULT_MAX_INSTANCES,
    DEFAULT_SCHEDULE,
    DIST_KVSTORES,
    KNOWN_PROVIDERS,
    MAX_GPU_COUNT,
    MAX_NODES,
    MAX_VOLUME_GB,
    MIN_VOLUME_GB,
    PLACEHOLDER_BUCKET,
    AwsRegion,
    Cron,
    Strict,
    TtlMinutes,
    WorkerEnvsKept,
)

__all__ = [
    "DEFAULT_MAX_INSTANCES", "DEFAULT_SCHEDULE", "DIST_KVSTORES", "HOURS_PER_MONTH",
    "KNOWN_PROVIDERS", "DeclaredPrice", "Purchase", "TargetPrice",
    "MAX_GPU_COUNT", "MAX_NODES", "MAX_VOLUME_GB", "MIN_VOLUME_GB", "PLACEHOLDER_BUCKET",
    "AwsRegion", "BudgetCeiling", "Cron",
    "Defaults", "Ec2Options", "Ec2Target", "FleetFile", "LocalOptions", "LocalTarget", "ModeOverride",
    "ScalingGroup", "ScalingPair", "ScalingProfile", "SshOptions", "SshTarget", "Strict", "SweepProfile",
    "Target", "TriggerParams", "TtlMinutes", "WorkerEnvsKept", "check_request", "default_devices",
    "form_fields", "sweep_config",
]
