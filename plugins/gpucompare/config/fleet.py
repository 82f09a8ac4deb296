"""The fleet configuration: which machines the nightly DAG benchmarks, and with which sweeps.

The file (``dags/config/fleet.yaml``, or ``$GPUCOMPARE_FLEET``) has four parts::

    schedule: "0 2 * * *"          # the nightly DAG's cron (UTC); $GPUCOMPARE_NIGHTLY_SCHEDULE wins
    max_instances: 2               # slots of the pool that caps concurrently working instances
    defaults:                      # options merged into every target of a kind (manual runs too)
      ec2: {aws_conn_id: aws_default, results_bucket: …, instance_profile: …, ami: …}
    profiles:                      # sweep profiles: what to measure
      demo: {networks: [alexnet], batch_sizes: [1, 2], modes: [score, train], …}
    targets:                       # one entry per machine
      - {name: local, kind: local, provider: local, instance_type: local-cpu, profile: demo}
      - {name: aws-g5-spot, kind: ec2, provider: aws, instance_type: g5.xlarge, region: us-east-1,
         market: spot, gpu_count: 1, profile: nightly, enabled: false, options: {budget_cap: 5}}

Every entry is validated (``gpucompare.config.validation``) when the file is loaded, disabled ones
too, so an example in the file cannot rot; errors name the file, the entry and the field.

A *plan* is what one target's task group needs at run time, as plain JSON for XCom: the
``TargetSpec`` (with ``options.sweep_configs`` for ec2's cost guard), the target run id
(unique per DAG run and target, stable across task retries, so a retried step finds its
own work and re-ingesting a run replaces it) and one sweep configuration per mode in the
worker's sweep-file format (``bench_tasks.configs``), with its time limit.

Standard library, PyYAML and ``bench_tasks`` only: the DAG files read the schedule at parse time.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from bench_tasks.configs import ConfigError, parse_sweep
from bench_tasks.constants import MODES
from gpucompare import settings
from gpucompare.config import gpus, patterns, validation
from gpucompare.config.validation import ValidationError

DEFAULT_SCHEDULE = "0 2 * * *"
DEFAULT_MAX_INSTANCES = 2
TOP_LEVEL_KEYS = ("schedule", "max_instances", "defaults", "profiles", "targets", "scaling_profiles",
                  "scaling_groups", "budget_ceiling")
TARGET_KEYS = ("name", "kind", "provider", "instance_type", "region", "market", "gpu_count",
               "options", "profile", "enabled")
PROFILE_KEYS = ("description", "networks", "batch_sizes", "modes", "dtypes", "devices", "warmup",
                "batches", "repeats", "timeout_s", "score", "train", "methodology")
#: A profile's methodology (bench_tasks.methodology): the named rules only, so each night's
#: figures say which one they follow.
PROFILE_METHODOLOGIES = ("official", "robust")
#: What a profile may set for one mode only (e.g. fewer networks for training).
MODE_OVERRIDE_KEYS = ("networks", "batch_sizes", "dtypes", "devices", "kvstore", "scaling")

#: Slack on top of the per-configuration limits for a whole sweep: process starts, the
#: environment capture, copying results.
SWEEP_SLACK_S = 300.0
#: Per process the worker starts (one per network, mode and dtype): interpreter, mxnet import.
PROCESS_OVERHEAD_S = 30.0
#: The sweep tasks' execution_timeout; a sweep's own limit stays below it so the target,
#: not Airflow, stops the worker (and can still clean up).
SWEEP_TASK_TIMEOUT_S = 12 * 3600.0
_RUN_ID_MAX = 120

#: An ec2 instance's time-to-live covers its sweeps' own limits plus these (seconds): launch,
#: SSM agent, bundle and worker venv before the first sweep (``cost.PROVISIONING_OVERHEAD_S``
#: doubled: the TTL must be late, never early) and collect + teardown after the last ...
TTL_PROVISIONING_S = 1800.0
TTL_COLLECTION_S = 600.0
#: ... and a margin on top, so a night that runs to its limits still ends by them.
TTL_MARGIN_S = 1800.0


class FleetError(ValidationError):
    """The fleet file is unreadable or breaks a rule; the field says where (file: entry.field)."""


#: ``rate(from_currency, to_currency, on_date) -> units of to per unit of from``
FxRate = Callable[[str, str, date], float]


@dataclass(frozen=True)
class SweepProfile:
    """What to measure on a target: networks × batch sizes × modes × dtypes, and how."""

    name: str
    networks: tuple[str, ...]
    batch_sizes: tuple[int, ...]
    modes: tuple[str, ...]
    dtypes: tuple[str, ...] = ("float32",)
    devices: tuple[str, ...] | None = None  # None: derived from the target's gpu_count
    warmup: int = 5
    batches: int = 10
    repeats: int = 3
    timeout_s: int = 900
    per_mode: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    description: str = ""
    methodology: str = "official"


@dataclass(frozen=True)
class FleetTarget:
    """One machine of the fleet: its ``TargetSpec`` fields, its profile, whether it runs."""

    spec: dict[str, Any]
    profile: str
    enabled: bool = True

    @property
    def name(self) -> str:
        return self.spec["name"]


@dataclass(frozen=True)
class Fleet:
    schedule: str
    max_instances: int
    defaults: Mapping[str, Mapping[str, Any]]
    profiles: Mapping[str, SweepProfile]
    targets: tuple[FleetTarget, ...]
    source: str = ""
    #: Multi-GPU / multi-node scaling runs (``gpucompare.scaling.launcher``): what, and on which hosts.
    scaling_profiles: Mapping[str, Any] = field(default_factory=dict)
    scaling_groups: tuple[Any, ...] = ()
    #: (amount, currency): the most any paid run of this deployment may be estimated to cost;
    #: no fleet entry and no trigger form can set a higher ``budget_cap`` (None: no ceiling).
    budget_ceiling: tuple[float, str] | None = None
    #: converts a ``budget_cap`` given in another currency than the ceiling's (``FxRate``); the
    #: callers above the prices layer pass ``gpucompare.prices.tables.shipped_fx_rate``
    fx_rate: FxRate | None = field(default=None, compare=False, repr=False)

    def enabled_targets(self) -> list[FleetTarget]:
        return [t for t in self.targets if t.enabled]

    def profile(self, name: str, field_name: str = "profile") -> SweepProfile:
        if name not in self.profiles:
            raise ValidationError(field_name, f"{name!r} is not a profile of {self.source or 'the fleet'}",
                                  ", ".join(sorted(self.profiles)))
        return self.profiles[name]

    def regions_of(self, kind: str) -> list[str]:
        """Regions of every target of a kind, enabled or not (the sweeper looks everywhere)."""
        return sorted({t.spec["region"] for t in self.targets if t.spec["kind"] == kind and t.spec["region"]})


# -- loading -------------------------------------------------------------------------------
def read_document(path: Path) -> dict[str, Any]:
    import yaml

    try:
        text = path.read_text()
    except OSError as exc:
        raise FleetError(str(path), f"cannot read the fleet file: {exc.strerror}") from exc
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise FleetError(path.name, f"not valid YAML: {exc}") from exc
    if not isinstance(document, dict):
        raise FleetError(path.name, "expected a mapping with " + ", ".join(TOP_LEVEL_KEYS))
    return document


def load_fleet(path: str | Path | None = None, *, fx_rate: FxRate | None = None) -> Fleet:
    """Read and validate the fleet file (default: ``settings.fleet_path()``); ``fx_rate``
    compares a ``budget_cap`` in another currency with the ceiling (without it, such a cap is
    refused)."""
    path = Path(path) if path is not None else settings.fleet_path()
    document = read_document(path)
    try:
        return parse_fleet(document, source=path.name, fx_rate=fx_rate)
    except ValidationError as exc:
        if isinstance(exc, FleetError):
            raise
        raise FleetError(f"{path.name}: {exc.field}", exc.message, exc.allowed) from exc


def parse_fleet(document: Mapping[str, Any], source: str = "fleet", *,
                fx_rate: FxRate | None = None) -> Fleet:
    """Validate a loaded fleet document; errors name the entry and field (``targets[1].region``)."""
    validation.check_keys(document, TOP_LEVEL_KEYS)
    schedule = validation.check_schedule(document.get("schedule", DEFAULT_SCHEDULE))
    max_instances = validation.check_int(
        "max_instances", document.get("max_instances", DEFAULT_MAX_INSTANCES), minimum=1, maximum=1000)
    defaults = _parse_defaults(document.get("defaults") or {})
    profiles_doc = document.get("profiles")
    if not isinstance(profiles_doc, Mapping) or not profiles_doc:
        raise ValidationError("profiles", "expected a mapping of profile names to profiles")
    profiles = {}
    for name, body in profiles_doc.items():
        try:
            profiles[name] = parse_profile(name, body)
        except ValidationError as exc:
            raise validation.qualify(f"profiles.{name}", exc) from exc
    targets_doc = document.get("targets")
    if not isinstance(targets_doc, list) or not targets_doc:
        raise ValidationError("targets", "expected a non-empty list of targets")
    targets: list[FleetTarget] = []
    for index, entry in enumerate(targets_doc):
        try:
            target = parse_target(entry, profiles, defaults)
        except ValidationError as exc:
            raise validation.qualify(f"targets[{index}]", exc) from exc
        if any(t.name == target.name for t in targets):
            raise ValidationError(f"targets[{index}].name", f"{target.name!r} is used twice",
                                  "a name unique in the fleet")
        targets.append(target)
    scaling_profiles, scaling_groups = _parse_scaling(document, targets)
    ceiling = _parse_budget_ceiling(document.get("budget_ceiling"), defaults)
    for index, target in enumerate(targets):
        if target.spec["kind"] != "ec2":
            continue
        try:
            apply_budget_ceiling(dict(target.spec["options"]), ceiling, fx_rate)
            ttl = target.spec["options"].get("ttl_minutes")
            profile = profiles[target.profile]
            plan_ttl_minutes([sweep_time_limit(sweep_config(profile, mode, target.spec["gpu_count"]))
                              for mode in profile.modes], ttl)
        except ValidationError as exc:
            raise validation.qualify(f"targets[{index}]", exc) from exc
    return Fleet(schedule, max_instances, defaults, profiles, tuple(targets), source,
                 scaling_profiles, scaling_groups, ceiling, fx_rate)


def _parse_budget_ceiling(document: Any,
                          defaults: Mapping[str, Mapping[str, Any]]) -> tuple[float, str] | None:
    """``budget_ceiling: {amount: 50, currency: USD}``; absent: the ec2 defaults' ``budget_cap``."""
    if document is None:
        ec2 = defaults.get("ec2", {})
        if ec2.get("budget_cap") is None:
            return None
        return float(ec2["budget_cap"]), str(ec2.get("budget_currency", "USD"))
    validation.check_keys(document, ("amount", "currency"), prefix="budget_ceiling.", required=("amount",))
    amount = validation.check_budget_cap(document["amount"], "budget_ceiling.amount")
    currency = validation.check_choice("budget_ceiling.currency", document.get("currency", "USD"),
                                       validation.CURRENCIES)
    return amount, currency


def apply_budget_ceiling(options: dict[str, Any], ceiling: tuple[float, str] | None,
                         fx_rate: FxRate | None = None) -> dict[str, Any]:
    """The ec2 options with the deployment's ceiling applied: no cap means the ceiling; a cap
    may be lower, never higher, and must be in the ceiling's currency."""
    if ceiling is None:
        return options
    amount, currency = ceiling
    if options.get("budget_cap") is None:
        options.update(budget_cap=amount, budget_currency=currency)
        return options
    cap, cap_currency = float(options["budget_cap"]), str(options.get("budget_currency", "USD")).upper()
    limit = amount
    if cap_currency != currency:
        # the ceiling in the cap's currency, at today's rate (the prices layer's lookup, passed in:
        # the configuration sits below the price tables)
        from datetime import UTC, datetime

        if fx_rate is None:
            raise ValidationError("budget_currency", f"a cap in {cap_currency} cannot be compared with the "
                                  f"budget ceiling in {currency} without exchange rates", currency)
        try:
            limit = amount * fx_rate(currency, cap_currency, datetime.now(UTC).date())
        except (LookupError, ValueError) as exc:
            raise ValidationError("budget_currency", f"cannot compare a cap in {cap_currency} with the "
                                  f"budget ceiling in {currency}: {exc}", currency) from exc
    if cap > limit:
        shown = f" (= {limit:.2f} {cap_currency})" if cap_currency != currency else ""
        raise ValidationError("budget_cap", f"{cap:.2f} {cap_currency} is above this deployment's budget "
                              f"ceiling of {amount:.2f} {currency}{shown} (fleet file, budget_ceiling)",
                              f"0 to {limit:.2f} {cap_currency}")
    return options


def plan_ttl_minutes(sweep_limits_s: list[float], fleet_ttl: Any = None) -> int:
    """The instance TTL of a plan: its sweeps' limits + provisioning + collection + a margin,
    or the fleet's ``ttl_minutes`` when larger; a fleet TTL below the plan's own limits is
    refused with the figures (the instance would power off mid-sweep)."""
    sweeps = sum(sweep_limits_s)
    own = math.ceil((sweeps + TTL_PROVISIONING_S + TTL_COLLECTION_S) / 60)
    derived = math.ceil((sweeps + TTL_PROVISIONING_S + TTL_COLLECTION_S + TTL_MARGIN_S) / 60)
    if fleet_ttl is None:
        return derived
    ttl = validation.check_int("options.ttl_minutes", fleet_ttl, minimum=10, maximum=7 * 24 * 60)
    if ttl < own:
        raise ValidationError(
            "options.ttl_minutes",
            f"{ttl} min is shorter than the plan's own limits: {own} min = sweeps {sweeps / 60:.0f} min + "
            f"provisioning {TTL_PROVISIONING_S / 60:.0f} min + collection {TTL_COLLECTION_S / 60:.0f} min",
            f"at least {own}, or leave it out (derived: {derived} min with a "
            f"{TTL_MARGIN_S / 60:.0f} min margin)")
    return max(ttl, derived)


def _parse_scaling(document: Mapping[str, Any], targets: list[FleetTarget]) -> tuple[dict[str, Any], tuple]:
    """The optional ``scaling_profiles`` and ``scaling_groups`` (format: ``gpucompare.config.scaling``)."""
    from gpucompare.config import scaling as scaling_plan

    profiles_doc = document.get("scaling_profiles") or {}
    if not isinstance(profiles_doc, Mapping):
        raise ValidationError("scaling_profiles", "expected a mapping of profile names to scaling profiles")
    profiles = {}
    for name, body in profiles_doc.items():
        try:
            profiles[name] = scaling_plan.parse_scaling_profile(name, body)
        except ValidationError as exc:
            raise validation.qualify(f"scaling_profiles.{name}", exc) from exc
    groups_doc = document.get("scaling_groups") or []
    if not isinstance(groups_doc, list):
        raise ValidationError("scaling_groups", "expected a list of scaling groups")
    specs = {t.name: t.spec for t in targets}
    groups: list[Any] = []
    for index, entry in enumerate(groups_doc):
        try:
            group = scaling_plan.parse_scaling_group(entry, specs, profiles)
        except ValidationError as exc:
            raise validation.qualify(f"scaling_groups[{index}]", exc) from exc
        if any(g.name == group.name for g in groups):
            raise ValidationError(f"scaling_groups[{index}].name", f"{group.name!r} is used twice",
                                  "a name unique in the fleet")
        groups.append(group)
    return profiles, tuple(groups)


def _parse_defaults(document: Any) -> dict[str, dict[str, Any]]:
    if not isinstance(document, Mapping):
        raise ValidationError("defaults", "expected a mapping of target kinds to options",
                              ", ".join(validation.TARGET_KINDS))
    defaults = {}
    for kind, options in document.items():
        kind = validation.check_kind(kind, "defaults")
        defaults[kind] = validation.check_options(kind, options, f"defaults.{kind}", complete=False)
    return defaults


def parse_profile(name: Any, body: Any) -> SweepProfile:
    name = validation.check_pattern("name", name, patterns.NAME, "a lower-case profile name")
    validation.check_keys(body, PROFILE_KEYS, required=("networks", "batch_sizes", "modes"))
    per_mode: dict[str, dict[str, Any]] = {}
    for mode in MODES:
        override = validation.check_keys(body.get(mode) or {}, MODE_OVERRIDE_KEYS, prefix=f"{mode}.")
        per_mode[mode] = _check_override(mode, override)
    devices = body.get("devices")
    profile = SweepProfile(
        name=name,
        networks=tuple(validation.check_networks(body["networks"])),
        batch_sizes=tuple(validation.check_batch_sizes(body["batch_sizes"])),
        modes=tuple(validation.check_modes(body["modes"])),
        dtypes=tuple(validation.check_dtypes(body.get("dtypes", ["float32"]))),
        devices=None if devices in (None, "auto") else tuple(validation.check_devices(devices)),
        **validation.check_measurement(body),
        per_mode=per_mode,
        description=str(body.get("description", "")),
        methodology=validation.check_choice("methodology", body.get("methodology", "official"),
                                            PROFILE_METHODOLOGIES),
    )
    # the worker's own parser has the last word on the sweeps this profile produces
    for mode in profile.modes:
        check_sweep(sweep_config(profile, mode, gpu_count=1), f"{mode} sweep")
    return profile


def _check_override(mode: str, override: Mapping[str, Any]) -> dict[str, Any]:
    checks = {
        "networks": validation.check_networks,
        "batch_sizes": validation.check_batch_sizes,
        "dtypes": validation.check_dtypes,
        "devices": validation.check_devices,
    }
    checked = {}
    for key, value in override.items():
        if key in checks:
            checked[key] = checks[key](value, f"{mode}.{key}")
        else:  # kvstore, scaling: the worker's vocabulary, checked by check_sweep below
            checked[key] = value
    return checked


def parse_target(entry: Any, profiles: Mapping[str, SweepProfile],
                 defaults: Mapping[str, Mapping[str, Any]]) -> FleetTarget:
    validation.check_keys(entry, TARGET_KEYS)
    kind = validation.check_kind(entry.get("kind"))
    options = {**defaults.get(kind, {}), **(entry.get("options") or {})}
    spec = validation.check_target_fields({**entry, "options": options})
    gpus.check_target(spec)  # a GPU the worker cannot run is refused before anything is provisioned
    profile = entry.get("profile", "nightly")
    if profile not in profiles:
        raise ValidationError("profile", f"{profile!r} is not defined", ", ".join(sorted(profiles)))
    enabled = validation.check_bool("enabled", entry.get("enabled", True))
    return FleetTarget(spec=spec, profile=profile, enabled=enabled)


# -- the schedule, read at DAG parse time --------------------------------------------------
def nightly_schedule() -> str:
    """``$GPUCOMPARE_NIGHTLY_SCHEDULE``, else the fleet file's ``schedule``, else 02:00 UTC.

    Read while the DAG file is parsed, so it must never fail: an unreadable fleet file falls
    back to the default here and fails loudly in the run's ``load_fleet`` task instead.
    """
    configured = settings.setting("nightly_schedule")
    if configured:
        return validation.check_schedule(configured, "GPUCOMPARE_NIGHTLY_SCHEDULE")
    try:
        document = read_document(settings.fleet_path())
        return validation.check_schedule(document.get("schedule", DEFAULT_SCHEDULE))
    except ValidationError:
        return DEFAULT_SCHEDULE


# -- plans ------------------------------------------------------------------------------------
def target_run_id(dag_run_id: str, target_name: str, deployment: str | None = None) -> str:
    """The run id of one target in one DAG run: ``<deployment>.<dag run id>.<target>``,
    readable, unique across deployments sharing an account, stable across retries.

    Fits the worker's run-id alphabet (A-Z a-z 0-9 . _ : + -); long DAG run ids are cut and
    a hash of the whole keeps them apart. ``deployment`` defaults to ``settings.deployment()``.
    """
    deployment = deployment or settings.deployment()
    tail = re.sub(r"[^A-Za-z0-9._:+-]", "_", f"{dag_run_id}.{target_name}").lstrip("._:+-") or "run"
    plain = f"{deployment}.{tail}"
    if len(plain) <= _RUN_ID_MAX:
        return plain
    digest = hashlib.sha256(f"{deployment}\0{dag_run_id}\0{target_name}".encode()).hexdigest()[:12]
    return f"{plain[:_RUN_ID_MAX - 13]}-{digest}"


def default_devices(mode: str, gpu_count: int) -> list[str]:
    """CPU hosts run on ``cpu``; GPU hosts score on one GPU and train on one and on all of them."""
    if gpu_count <= 0:
        return ["cpu"]
    if mode == "score" or gpu_count == 1:
        return ["gpu:0"]
    return ["gpu:0", ",".join(f"gpu:{i}" for i in range(gpu_count))]


def sweep_config(profile: SweepProfile, mode: str, gpu_count: int) -> dict[str, Any]:
    """The worker's sweep document for one mode of a profile on a machine with ``gpu_count`` GPUs."""
    override = dict(profile.per_mode.get(mode, {}))
    matrix: dict[str, Any] = {
        "modes": [mode],
        "networks": list(override.pop("networks", profile.networks)),
        "batch_sizes": list(override.pop("batch_sizes", profile.batch_sizes)),
        "dtypes": list(override.pop("dtypes", profile.dtypes)),
        "devices": list(override.pop("devices", profile.devices or default_devices(mode, gpu_count))),
        **override,
    }
    return {
        "timeout_s": profile.timeout_s,
        "warmup": profile.warmup,
        "batches": profile.batches,
        "repeats": profile.repeats,
        "methodology": profile.methodology,
        "matrix": [matrix],
    }


def check_sweep(document: dict[str, Any], where: str) -> int:
    """Validate a sweep document with the worker's own parser; return its configuration count."""
    try:
        return len(parse_sweep(document, where=where).configs)
    except ConfigError as exc:
        raise ValidationError(exc.where, exc.message) from exc


def sweep_time_limit(document: dict[str, Any]) -> float:
    """Seconds the whole sweep may take: every configuration at its limit, plus overheads."""
    configs = parse_sweep(document).configs
    processes = len({c.group_key for c in configs})
    limit = sum(c.timeout_s for c in configs) + processes * PROCESS_OVERHEAD_S + SWEEP_SLACK_S
    return float(min(math.ceil(limit), SWEEP_TASK_TIMEOUT_S - 600))


def plan_target(spec: Mapping[str, Any], profile: SweepProfile, dag_run_id: str, *,
                modes: tuple[str, ...] | None = None,
                budget_ceiling: tuple[float, str] | None = None,
                fx_rate: FxRate | None = None) -> dict[str, Any]:
    """Everything one target's task group needs, as JSON (see the module docstring)."""
    spec = {**spec, "options": dict(spec.get("options") or {})}
    sweeps = {}
    for mode in MODES:
        if mode in (modes or profile.modes):
            document = sweep_config(profile, mode, spec.get("gpu_count", 0))
            check_sweep(document, f"{mode} sweep of {spec['name']}")
            sweeps[mode] = {"config": document, "timeout_s": sweep_time_limit(document)}
    if spec["kind"] == "ec2":
        # the cost guard in Ec2Target.prepare estimates the run from the sweeps it will execute
        spec["options"]["sweep_configs"] = [s["config"] for s in sweeps.values()]
        _plan_ec2_options(spec["options"], [s["timeout_s"] for s in sweeps.values()], budget_ceiling,
                          fx_rate)
    return {
        "spec": spec,
        "profile": profile.name,
        "run_id": target_run_id(dag_run_id, spec["name"]),
        "sweeps": sweeps,
    }


def _plan_ec2_options(options: dict[str, Any], sweep_limits_s: list[float],
                      budget_ceiling: tuple[float, str] | None, fx_rate: FxRate | None) -> None:
    """What every ec2 plan carries: the deployment (so every step of the run, wherever it runs,
    tags and finds the same instances), the TTL derived from the plan, the capped budget."""
    options["deployment"] = settings.deployment()
    options["ttl_minutes"] = plan_ttl_minutes(sweep_limits_s, options.get("ttl_minutes"))
    apply_budget_ceiling(options, budget_ceiling, fx_rate)


def plan_fleet(fleet: Fleet, dag_run_id: str) -> list[dict[str, Any]]:
    """One plan per enabled target, in the order of the file."""
    return [plan_target(t.spec, fleet.profile(t.profile), dag_run_id, budget_ceiling=fleet.budget_ceiling,
                        fx_rate=fleet.fx_rate)
            for t in fleet.enabled_targets()]


def plan_scaling(fleet: Fleet, dag_run_id: str) -> list[dict[str, Any]]:
    """One plan per enabled scaling group (``gpucompare.config.scaling.plan_scaling_group``)."""
    from gpucompare.config import scaling as scaling_plan

    specs = {t.name: t.spec for t in fleet.targets}
    plans = [scaling_plan.plan_scaling_group(group, [specs[n] for n in group.targets],
                                             fleet.scaling_profiles[group.profile],
                                             target_run_id(dag_run_id, f"scaling-{group.name}"))
             for group in fleet.scaling_groups if group.enabled]
    for plan in plans:
        for spec in plan["specs"]:
            if spec["kind"] == "ec2":  # each host is held for the whole group's run
                _plan_ec2_options(spec["options"], [plan["timeout_s"]], fleet.budget_ceiling,
                                  fleet.fx_rate)
    return plans


def plan_manual(request: Mapping[str, Any], fleet: Fleet, dag_run_id: str) -> dict[str, Any]:
    """The plan of a manual run: the request's target and matrix on a fleet profile's knobs.

    ``request`` is the output of ``validation.check_manual_request``; the fleet's defaults
    for the kind fill in what the form does not ask (AMI, results bucket …).
    """
    base = fleet.profile(request["profile"])
    profile = SweepProfile(
        name=f"manual-{base.name}",
        networks=tuple(request["networks"]),
        batch_sizes=tuple(request["batch_sizes"]),
        modes=tuple(request["modes"]),
        dtypes=tuple(request["dtypes"]),
        devices=base.devices,
        warmup=base.warmup,
        batches=base.batches,
        repeats=base.repeats,
        timeout_s=base.timeout_s,
    )
    target = request["target"]
    gpus.check_target(target)  # a GPU the worker cannot run is refused before anything is provisioned
    spec = {**target, "options": {**fleet.defaults.get(target["kind"], {}), **target["options"]}}
    # the form may lower the budget cap below the deployment's ceiling, never raise it past it
    return plan_target(spec, profile, dag_run_id, budget_ceiling=fleet.budget_ceiling,
                        fx_rate=fleet.fx_rate)
