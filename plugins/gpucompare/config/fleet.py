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

Every entry is validated by the pydantic models of ``gpucompare.config.models`` (``FleetFile``)
when the file is loaded, disabled ones too, so an example in the file cannot rot; errors name the
file, the entry, the field, the value and what is allowed. The rules that need a plan (a scaling
group's hosts can run its profile, a fleet TTL covers the sweeps' limits, no budget cap above the
ceiling) are checked here right after.

A *plan* is what one target's task group needs at run time, as plain JSON for XCom: the
``TargetSpec`` (with ``options.sweep_configs`` for ec2's cost guard), the target run id
(unique per DAG run and target, stable across task retries, so a retried step finds its
own work and re-ingesting a run replaces it) and one sweep configuration per mode in the
worker's sweep-file format (``bench_tasks.configs``), with its time limit.

PyYAML, pydantic and ``bench_tasks``'s contract only: the DAG files read the schedule at parse time.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from bench_tasks.configs import ConfigError, parse_sweep
from bench_tasks.constants import MODES
from gpucompare import settings
from gpucompare.config import models, patterns, runtime_choice, validation
from gpucompare.config.models import (  # noqa: F401  (the planning vocabulary, used by the DAGs)
    DEFAULT_MAX_INSTANCES,
    DEFAULT_SCHEDULE,
    SweepProfile,
    default_devices,
    sweep_config,
)
from gpucompare.config.validation import ValidationError

#: Slack on top of the per-configuration limits for a whole sweep: process starts, the
#: environment capture, copying results.
SWEEP_SLACK_S = 300.0
#: Per process the worker starts (one per network, mode and dtype): interpreter, mxnet import.
PROCESS_OVERHEAD_S = 30.0
#: The sweep tasks' execution_timeout; a sweep's own limit stays below it so the target,
#: not Airflow, stops the worker (and can still clean up).
SWEEP_TASK_TIMEOUT_S = 12 * 3600.0
#: A target's derived run id stays this short (S3 keys, tags and folder names hold it with more);
#: every run id also follows the one rule, ``patterns.RUN_ID``.
TARGET_RUN_ID_LENGTH = 120

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
class FleetTarget:
    """One machine of the fleet: its ``TargetSpec`` fields (JSON), its profile, whether it runs."""

    spec: dict[str, Any]
    profile: str
    enabled: bool = True
    #: why it runs its worker runtime (``runtime_choice.explain``: ``gpucompare plan`` prints it)
    runtime_reason: str = ""

    @property
    def name(self) -> str:
        return self.spec["name"]


@dataclass(frozen=True)
class Fleet:
    """The validated fleet file as the plans use it (specs as JSON for XCom)."""

    schedule: str
    max_instances: int
    defaults: Mapping[str, Mapping[str, Any]]
    profiles: Mapping[str, SweepProfile]
    targets: tuple[FleetTarget, ...]
    source: str = ""
    #: Multi-GPU / multi-node scaling runs (``gpucompare.scaling.launcher``): what, and on which hosts.
    scaling_profiles: Mapping[str, models.ScalingProfile] = field(default_factory=dict)
    scaling_groups: tuple[models.ScalingGroup, ...] = ()
    #: (amount, currency): the most any paid run of this deployment may be estimated to cost;
    #: no fleet entry and no trigger form can set a higher ``budget_cap`` (None: no ceiling).
    budget_ceiling: tuple[float, str] | None = None
    #: prices declared for the user's own machines (``prices`` entries and targets' ``price``)
    declared_prices: tuple[models.DeclaredPrice, ...] = ()
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
        raise FleetError(path.name, "expected a mapping", ", ".join(models.FleetFile.model_fields))
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
        raise FleetError(f"{path.name}: {exc.field}", exc.message, exc.allowed, exc.more) from exc


def parse_fleet(document: Mapping[str, Any], source: str = "fleet", *,
                fx_rate: FxRate | None = None) -> Fleet:
    """Validate a loaded fleet document; errors name the entry and field (``targets[1].region``)."""
    from gpucompare.config import scaling

    checked = validation.validate(models.FleetFile, document)
    targets = _with_runtimes(checked)
    specs = {t.name: t.spec for t in targets}
    for index, group in enumerate(checked.scaling_groups):
        try:  # refuses a profile the group's hosts cannot run
            scaling.group_points(group, [specs[n] for n in group.targets],
                                 checked.scaling_profiles[group.profile])
        except ValidationError as exc:
            raise validation.qualify(f"scaling_groups[{index}]", exc) from exc
    ceiling = checked.ceiling()
    for index, target in enumerate(targets):
        if target.spec["kind"] != "ec2":
            continue
        try:
            apply_budget_ceiling(dict(target.spec["options"]), ceiling, fx_rate)
            profile = checked.profiles[target.profile]
            plan_ttl_minutes([sweep_time_limit(sweep_config(profile, mode, target.spec["gpu_count"]))
                              for mode in profile.modes], target.spec["options"].get("ttl_minutes"))
        except ValidationError as exc:
            raise validation.qualify(f"targets[{index}]", exc) from exc
    defaults = {kind: options.given() for kind in patterns.TARGET_KINDS
                if (options := getattr(checked.defaults, kind)) is not None}
    return Fleet(checked.schedule, checked.max_instances, defaults, dict(checked.profiles), targets, source,
                 dict(checked.scaling_profiles), tuple(checked.scaling_groups), ceiling,
                 tuple(checked.declared_prices()), fx_rate)


def _with_runtimes(checked: models.FleetFile) -> tuple[FleetTarget, ...]:
    """The fleet's targets, each spec with its worker runtime decided: the entry's, else its
    profile's, else auto, resolved preferring one runtime for the enabled targets
    (``config.runtime_choice``)."""
    requested = [t.worker_runtime or checked.profiles[t.profile].worker_runtime
                 if t.profile in checked.profiles else t.worker_runtime for t in checked.targets]
    entries = [(t.spec(), r) for t, r in zip(checked.targets, requested, strict=True)]
    enabled = [entry for entry, t in zip(entries, checked.targets, strict=True) if t.enabled]
    preference = runtime_choice.fleet_preference(enabled)
    targets = []
    for index, ((spec, wanted), target) in enumerate(zip(entries, checked.targets, strict=True)):
        try:
            spec["worker_runtime"] = runtime_choice.choose(spec, wanted, preference)
        except ValidationError as exc:
            raise validation.qualify(f"targets[{index}]", exc) from exc
        reason = runtime_choice.explain(spec, wanted, spec["worker_runtime"], enabled)
        targets.append(FleetTarget(spec=spec, profile=target.profile, enabled=target.enabled,
                                   runtime_reason=reason))
    return tuple(targets)


def parse_profile(name: Any, body: Any) -> SweepProfile:
    """One sweep profile, as a fleet file's ``profiles.<name>`` states it."""
    named = {**body, "name": name} if isinstance(body, Mapping) else body
    return validation.validate(models.SweepProfile, named)


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
    ttl = validation.check("options.ttl_minutes", models.TtlMinutes, fleet_ttl)
    if ttl < own:
        raise ValidationError(
            "options.ttl_minutes",
            f"{ttl} min is shorter than the plan's own limits: {own} min = sweeps {sweeps / 60:.0f} min + "
            f"provisioning {TTL_PROVISIONING_S / 60:.0f} min + collection {TTL_COLLECTION_S / 60:.0f} min",
            f"at least {own}, or leave it out (derived: {derived} min with a "
            f"{TTL_MARGIN_S / 60:.0f} min margin)")
    return max(ttl, derived)


# -- the schedule, read at DAG parse time --------------------------------------------------
def nightly_schedule() -> str:
    """``$GPUCOMPARE_NIGHTLY_SCHEDULE``, else the fleet file's ``schedule``, else 02:00 UTC.

    Read while the DAG file is parsed. A bad ``GPUCOMPARE_NIGHTLY_SCHEDULE`` raises
    ``settings.SettingError`` (the DAG shows as broken, naming the variable: a schedule typed
    wrong should not silently become 02:00); an unreadable fleet file falls back to the
    default here and fails loudly in the run's ``load_fleet`` task instead.
    """
    configured = settings.nightly_schedule()
    if configured:
        return configured
    try:
        document = read_document(settings.fleet_path())
        return validation.check("schedule", models.Cron, document.get("schedule", DEFAULT_SCHEDULE))
    except ValidationError:
        return DEFAULT_SCHEDULE


def scaling_pool_slots() -> int:
    """The pool slots a ``scaling_group`` task takes: the host count of the largest enabled
    scaling group of the fleet file (each host is a paid machine), at least 1.

    Read while the DAG file is parsed, as :func:`nightly_schedule`: a mapped task's
    ``pool_slots`` is fixed when the DAG is built, while the plans exist only at run time.
    An unreadable or invalid fleet file gives 1 here and fails loudly in the run's
    ``load_scaling`` task; a group that grew since the parse is refused by the task
    (:func:`check_scaling_slots`) until the DAG is parsed again.
    """
    try:
        document = read_document(settings.fleet_path())
        groups = [validation.check(f"scaling_groups[{index}]", models.ScalingGroup, entry)
                  for index, entry in enumerate(document.get("scaling_groups") or [])]
    except (ValidationError, TypeError):
        return 1
    return max([len(group.targets) for group in groups if group.enabled] + [1])


def check_scaling_fits(plans: list[dict[str, Any]], max_instances: int) -> None:
    """Refuse a scaling group with more hosts than the pool has slots (``max_instances``): its
    task takes a slot per host and could never start, so the night would wait forever."""
    for plan in plans:
        if len(plan["specs"]) > max_instances:
            raise FleetError(f"scaling_groups {plan['group']}",
                             f"{len(plan['specs'])} hosts, but the pool has max_instances = {max_instances} "
                             "slots: the group could never start",
                             f"at most {max_instances} hosts, or raise max_instances and the pool's slots")


def check_scaling_slots(plan: Mapping[str, Any], pool_slots: int) -> None:
    """Refuse a scaling group with more hosts than the pool slots its task holds (the fleet
    file changed after the DAG was parsed): the pool would under-count its paid machines."""
    hosts = len(plan["specs"])
    if hosts > pool_slots:
        raise FleetError(f"scaling_groups {plan['group']}", f"{hosts} hosts, but its task holds "
                         f"{pool_slots} pool slot(s): the fleet file changed after the DAG was parsed",
                         f"at most {pool_slots} hosts until the DAG file is parsed again")


# -- plans ------------------------------------------------------------------------------------
def target_run_id(dag_run_id: str, target_name: str, deployment: str | None = None) -> str:
    """The run id of one target in one DAG run: ``<deployment>.<dag run id>.<target>``,
    readable, unique across deployments sharing an account, stable across retries.

    Fits the worker's run-id alphabet (A-Z a-z 0-9 . _ : + -); long DAG run ids are cut and
    a hash of the whole keeps them apart. ``deployment`` defaults to ``settings.deployment()``.
    """
    deployment = deployment or settings.deployment()
    tail = patterns.NOT_RUN_ID_CHAR.sub("_", f"{dag_run_id}.{target_name}").lstrip("._:+-") or "run"
    plain = f"{deployment}.{tail}"
    if len(plain) <= TARGET_RUN_ID_LENGTH:
        return plain
    digest = hashlib.sha256(f"{deployment}\0{dag_run_id}\0{target_name}".encode()).hexdigest()[:12]
    return f"{plain[:TARGET_RUN_ID_LENGTH - 13]}-{digest}"


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
        "run_id": target_run_id(dag_run_id, spec["name"], _run_id_deployment(spec["kind"])),
        "sweeps": sweeps,
    }


#: The run ids' first part for targets that launch nothing when no deployment name is set.
UNNAMED_DEPLOYMENT = "local"


def _run_id_deployment(kind: str) -> str | None:
    """The deployment a target's run id starts with: the setting (required for ec2: its name tags the
    paid machines, ``settings.deployment()`` says how to set it), else, for targets that launch
    nothing (local, ssh), ``UNNAMED_DEPLOYMENT``: a newcomer's local fleet needs no name."""
    if kind == "ec2":
        return None
    return settings.get("deployment") or UNNAMED_DEPLOYMENT


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

    ``request`` is ``models.TriggerParams.request()``; the fleet's defaults for the kind fill
    in what the form does not ask (AMI, results bucket …), and the merged target is checked
    whole by its model (``models.Target``), as a fleet entry is.
    """
    base = fleet.profile(request["profile"])
    # the base profile's knobs with the request's matrix (already checked by TriggerParams);
    # methodology and per-mode overrides stay the fleet's business
    profile = base.model_copy(update={
        "name": f"manual-{base.name}", "networks": tuple(request["networks"]),
        "batch_sizes": tuple(request["batch_sizes"]), "modes": tuple(request["modes"]),
        "dtypes": tuple(request["dtypes"]), "methodology": "official", "score": None, "train": None})
    target = request["target"]
    merged = {**target, "options": {**fleet.defaults.get(target["kind"], {}), **target["options"]}}
    spec = validation.check("", models.Target, merged).spec()
    # the form may lower the budget cap below the deployment's ceiling, never raise it past it
    return plan_target(spec, profile, dag_run_id, budget_ceiling=fleet.budget_ceiling,
                        fx_rate=fleet.fx_rate)
