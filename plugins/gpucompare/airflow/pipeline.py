"""The task group every target runs, shared by the nightly and the manual DAG, and the DAGs' manners.

One target's run, one mapped task group per plan (``gpucompare.config.fleet.plan_target``)::

    prepare (setup) → deploy → score_sweep → train_sweep → collect → ingest
        └──────────────────── terminate (teardown) ◄─────────┘

* ``terminate`` is a teardown with trigger rule ``all_done``: it runs whatever happened
  before it, also when ``prepare`` itself failed half-way (it then tears down by run id,
  which the targets support), so a paid instance is never left behind by a failed step.
  Its failure fails the DAG run (``on_failure_fail_dagrun``): a machine that may still be
  running must be seen.
* Each task reads the state the step before it returned (``TargetState`` as JSON, through
  XCom); ``terminate`` pulls the newest state of its own map index.
* ``prepare``, ``deploy`` and the sweeps are operators (``airflow.operators``): a target that
  can defer starts the work there and waits in the triggerer, holding no worker slot; the other
  steps are TaskFlow tasks.
* A target whose sweep failed ingests nothing (a failed run leaves the lake as it was); the
  others carry on, because the steps of a mapped group depend only on their own index.
* ``results_ready`` then announces the results Asset (``airflow.assets``) once per DAG run (if
  anything was ingested) and ``check_targets`` fails the run, naming every target that did not
  finish, so a partly failed night is visible while its good results are kept and reported.
* Retries follow the error's class (``policy.is_permanent``): a ``PermanentError`` (validation,
  a refused sweep configuration or budget, bad records; ``gpucompare.errors``) or an AWS error
  code no retry can fix (``targets.ec2.aws_errors.PERMANENT_ERROR_CODES``) fails at once
  (``AirflowFailException``), since retrying cannot fix it and a paid instance would idle
  meanwhile; anything else retries with exponential backoff. The steps around a sweep that
  hold a machine (``deploy``, ``collect``) and ``terminate`` retry quickly and boundedly
  (30 s then 60 s), so a finished instance is not paid for idling through a long backoff.
  Every step has an execution timeout.
* Every step that runs a target's step writes the phases the target timed into the lake's
  ``run_phases`` when it ends, failed or not (``airflow.staging``).
* The steps that hold a machine run in the pool ``$GPUCOMPARE_POOL`` (``gpucompare_instances``),
  whose slots cap how many targets work at once. Nothing chains one target's group to
  another's, so with a slot per target (``max_instances`` ≥ the enabled targets) every
  target provisions at once; with fewer slots, a target whose machine is up keeps going
  before the next one provisions (priority grows along the group, see ``step_options``).

The library modules that pull in heavy dependencies (the lake: pyarrow; ec2: boto3) are
imported inside the tasks, so the DAG files that import this module parse fast.
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import TriggerRule, WeightRule, get_current_context, task, task_group
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from gpucompare import settings
from gpucompare.airflow.assets import RESULTS, declared_outlet_events
from gpucompare.airflow.operators import DeployOperator, PrepareOperator, SweepOperator
from gpucompare.airflow.policy import (
    HOLDING_FIRST_DELAY,
    HOLDING_MAX_DELAY,
    HOLDING_RETRIES,
    bad_input_fails,
    network_retries,
)
from gpucompare.airflow.staging import (
    delete_run_objects,
    phases_recorded,
    staged_results_location,
    state_of,
    target_of,
)
from gpucompare.config.fleet import SWEEP_TASK_TIMEOUT_S
from gpucompare.config.validation import ValidationError

log = logging.getLogger(__name__)

GROUP_ID = "target"
#: The steps whose state ``terminate`` may find, newest first.
STATE_STEPS = ("train_sweep", "score_sweep", "deploy", "prepare")
#: The UI shows each mapped step under its target's name instead of its map index.
MAP_INDEX_TEMPLATE = "{{ target_name }}"


def check_plan(plan: dict[str, Any]) -> None:
    """Before anything runs: the target class accepts the plan's options, its connection exists."""
    from gpucompare.targets.base import TargetError

    spec = plan["spec"]
    try:
        target_of(plan)
    except TargetError as exc:
        raise ValidationError(f"{spec['name']}.options", str(exc)) from exc
    conn_id = spec["options"].get("ssh_conn_id")
    if conn_id:
        _check_connection(conn_id, "ssh", f"{spec['name']}.ssh_conn_id")


def hold_deployment_names(specs: list[dict[str, Any]]) -> None:
    """Before anything paid is launched: this deployment holds its name in the results bucket of
    every ec2 spec (``targets.name_lease``); another deployment's lease fails the task at once."""
    ec2_specs = [spec for spec in specs if spec["kind"] == "ec2"]
    if not ec2_specs:
        return
    from gpucompare.targets import name_lease

    for lease in name_lease.hold_names(name_lease.lease_stores(ec2_specs), settings.deployment()):
        log.info("Deployment name %r held by this deployment (%s) since %s: %s", lease.deployment,
                 lease.identity, lease.since, lease.where())


def _check_connection(conn_id: str, conn_type: str, field: str) -> None:
    from airflow.sdk import Connection
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        connection = Connection.get(conn_id)
    except AirflowNotFoundException as exc:
        raise ValidationError(field, f"there is no Airflow connection {conn_id!r}",
                              f"the id of an existing {conn_type} connection") from exc
    if connection.conn_type != conn_type:
        raise ValidationError(field, f"connection {conn_id!r} is of type {connection.conn_type!r}",
                              f"a connection of type {conn_type}")


def _name_map_index(plan: dict[str, Any]) -> None:
    get_current_context()["target_name"] = plan["spec"]["name"]  # type: ignore[typeddict-unknown-key]


def _dag_run_id() -> str:
    return get_current_context()["dag_run"].run_id


def _own_xcom(step: str) -> Any:
    """The return value of ``step`` in this task's own map index (None if it has none)."""
    ti = get_current_context()["ti"]
    return ti.xcom_pull(task_ids=f"{GROUP_ID}.{step}", map_indexes=ti.map_index)


def _newest_state(plan: dict[str, Any]) -> Any:
    """The newest state a step of this target recorded, else a bare one (spec and run id)."""
    for step in STATE_STEPS:
        data = _own_xcom(step)
        if data:
            return state_of(data)
    from gpucompare.targets.base import TargetState

    return TargetState(spec=plan["spec"], run_id=plan["run_id"])


# -- the steps -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class StepPolicy:
    """How a step of the group is run: its time limit, its retries (``bounded``: the short schedule
    of the steps that hold an idle machine) and whether it takes a slot of the pool."""

    timeout: timedelta
    retries: int = 3
    holds_machine: bool = True
    bounded: bool = False


STEPS: dict[str, StepPolicy] = {
    "prepare": StepPolicy(timedelta(minutes=45)),
    "deploy": StepPolicy(timedelta(hours=1), HOLDING_RETRIES, bounded=True),
    "score_sweep": StepPolicy(timedelta(seconds=SWEEP_TASK_TIMEOUT_S), retries=1),
    "train_sweep": StepPolicy(timedelta(seconds=SWEEP_TASK_TIMEOUT_S), retries=1),
    "collect": StepPolicy(timedelta(minutes=10), HOLDING_RETRIES, bounded=True),
    "ingest": StepPolicy(timedelta(minutes=30), holds_machine=False),
    "terminate": StepPolicy(timedelta(minutes=30), retries=4, holds_machine=False, bounded=True),
}


def step_options(step: str) -> dict[str, Any]:
    """The operator arguments of a step, read from its policy and the settings now (the DAG is
    being built): time limit, retries with backoff, pool, and the target's name as the map index
    label in the UI.

    Priority grows along the group (``WeightRule.UPSTREAM``): when the pool is short of slots,
    the next step of a target whose machine is up goes before another target's ``prepare``,
    so a paid machine does not idle while one more is started (Airflow's default weights
    the other way round, upstream steps first)."""
    policy = STEPS[step]
    backoff = (network_retries(policy.retries, max_delay=HOLDING_MAX_DELAY, first_delay=HOLDING_FIRST_DELAY)
               if policy.bounded else network_retries(policy.retries))
    pool = {"pool": settings.pool()} if policy.holds_machine else {}
    return {"task_id": step, "execution_timeout": policy.timeout, "map_index_template": MAP_INDEX_TEMPLATE,
            "weight_rule": WeightRule.UPSTREAM, **backoff, **pool}


@task
def collect(plan: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    """Bring the run's JSON Lines back into staging (a folder, or S3 when ingest may run on
    another worker)."""
    _name_map_index(plan)
    from gpucompare.lake.storage import put_file

    location = staged_results_location(plan)
    with tempfile.TemporaryDirectory(prefix="gpucompare-collect-") as scratch:
        with bad_input_fails():
            local = target_of(plan).collect(state_of(state), str(Path(scratch) / "results.jsonl"))
        records = sum(1 for line in Path(local).read_text().splitlines() if line.strip())
        put_file(local, location)
    log.info("Collected %d records of %s into %s", records, plan["spec"]["name"], location)
    return {"path": location, "records": records,
            "market": state.get("market") or plan["spec"]["market"]}


@task
def ingest(plan: dict[str, Any], collected: dict[str, Any]) -> dict[str, Any]:
    """Validate the records and write them into the lake: all or nothing, idempotent per run."""
    _name_map_index(plan)
    from gpucompare.lake.ingest import RunContext, ingest_results
    from gpucompare.lake.storage import delete_file
    from gpucompare.lake.tables import open_lake
    from gpucompare.targets.bundle import local_code_hash

    spec = plan["spec"]
    context = RunContext(provider=spec["provider"], instance_type=spec["instance_type"],
                         region=spec["region"], market=collected["market"], target=spec["kind"],
                         dag_run_id=_dag_run_id())
    with bad_input_fails():
        # the run's identity is the orchestrator's (plan["run_id"]), never the records' own
        summary = ingest_results(open_lake(settings.lake_uri()), collected["path"], context,
                                 run_id=plan["run_id"], code_hash=local_code_hash())
    delete_file(collected["path"])
    delete_run_objects(plan)
    log.info("Ingested %d records of %s: %s", collected["records"], spec["name"], summary.describe())
    return {"target": spec["name"], "records": collected["records"], "version": summary.write.version,
            "changed": summary.changed}


@task
def terminate(plan: dict[str, Any]) -> None:
    """Give back what prepare took, whatever happened in between (safe twice)."""
    _name_map_index(plan)
    state = _newest_state(plan)
    log.info("Tearing down %s (run %s, resource %s)", plan["spec"]["name"], state.run_id, state.resource_id)
    target = target_of(plan)
    # the run's last phase row: an append of its own, whether ingest ran before it, beside it or not
    with phases_recorded(plan, target, _dag_run_id(), state.market):
        target.teardown(state)


@task_group(group_id=GROUP_ID)
def target_run(plan: dict[str, Any]) -> Any:
    """One target: provision, deploy, both sweeps, collect, ingest; terminate in any case."""
    prepared = PrepareOperator(plan=plan, **step_options("prepare"))
    deployed = DeployOperator(plan=plan, state=prepared.output, **step_options("deploy"))
    scored = SweepOperator(mode="score", plan=plan, state=deployed.output, **step_options("score_sweep"))
    trained = SweepOperator(mode="train", plan=plan, state=scored.output, **step_options("train_sweep"))
    collected = collect.override(**step_options("collect"))(plan, trained.output)
    # Marked here rather than with @setup/@teardown: those decorators keep state between
    # calls, and both the nightly and the manual DAG build this group.
    prepared.as_setup()
    finished = terminate.override(**step_options("terminate"))(plan).as_teardown(
        setups=prepared, on_failure_fail_dagrun=True)
    # all_done rather than the teardown default (all_done_setup_success): a prepare that
    # failed half-way may have started something, and teardown copes with a partial state
    finished.operator.trigger_rule = TriggerRule.ALL_DONE
    collected >> finished
    return ingest.override(**step_options("ingest"))(plan, collected)


# -- after every target ------------------------------------------------------------------------
# Both closing tasks run whatever happened before them (all_done), so they take the plans by
# the id of the task that made them instead of as an argument: an argument whose task failed
# could not be resolved, and Airflow's all_done_min_one_success would skip them as soon as
# one upstream task was skipped.
def _plans_and_summaries(plans_task_id: str) -> tuple[list[dict[str, Any]] | None, list[Any]]:
    """The run's plans (None if their task failed) and each one's ingest summary (or None)."""
    ti = get_current_context()["ti"]
    plans = ti.xcom_pull(task_ids=plans_task_id, map_indexes=None)
    if not plans:
        return plans, []
    return plans, ti.xcom_pull(task_ids=f"{GROUP_ID}.ingest", map_indexes=list(range(len(plans))))


@task(trigger_rule=TriggerRule.ALL_DONE, retries=0)  # outlets: RESULTS, in run_targets
def results_ready(plans_task_id: str) -> dict[str, Any]:
    """Announce the results Asset once for this run, if any target ingested results."""
    _, summaries = _plans_and_summaries(plans_task_id)
    done = [summary for summary in summaries if summary]
    if not done:
        raise AirflowSkipException("no target ingested results; the results Asset is not updated")
    extra = {"targets": [d["target"] for d in done], "records": sum(d["records"] for d in done),
             "dag_run_id": get_current_context()["dag_run"].run_id}
    declared_outlet_events().extra = extra
    log.info("Results ready: %s", extra)
    return extra


@task(trigger_rule=TriggerRule.ALL_DONE, retries=0)
def check_targets(plans_task_id: str) -> list[str]:
    """Fail the run, naming them, if some targets did not finish; their teardown ran anyway."""
    plans, summaries = _plans_and_summaries(plans_task_id)
    if plans is None:
        raise AirflowFailException(f"no plan: {plans_task_id} failed, so no target ran (see its log)")
    failed = [plan["spec"]["name"] for plan, summary in zip(plans, summaries, strict=True) if not summary]
    if failed:
        raise AirflowFailException(
            f"{len(failed)} of {len(plans)} target(s) did not finish: {', '.join(failed)} "
            f"(see their tasks in the {GROUP_ID} group; their machines were torn down)")
    names = [plan["spec"]["name"] for plan in plans]
    log.info("Every target finished: %s", ", ".join(names) or "(none enabled)")
    return names


def log_pool_fit(targets: int, max_instances: int) -> None:
    """Say whether tonight's targets all provision at once: the pool has ``max_instances``
    slots (``gpucompare.airflow.deployment init`` sizes it from the fleet file)."""
    if targets > max_instances:
        log.warning("%d targets tonight but the pool %s has max_instances = %d slots: %d of them "
                    "provision only when a machine is done (raise max_instances in the fleet file "
                    "and the pool's slots to start them all at once)", targets, settings.pool(),
                    max_instances, targets - max_instances)
    else:
        log.info("%d target(s) tonight, %d pool slots: every target provisions at once", targets,
                 max_instances)


def run_targets(plans: Any) -> None:
    """Wire the mapped per-target group and the two closing tasks onto a list of plans."""
    runs = target_run.expand(plan=plans)
    plans_task_id = plans.operator.task_id
    ready = results_ready.override(outlets=[RESULTS])(plans_task_id)
    checked = check_targets(plans_task_id)
    plans >> ready
    runs >> ready >> checked


# -- scaling groups (multi-GPU / multi-node runs, gpucompare.scaling.launcher) -----------------------
@task(execution_timeout=timedelta(seconds=SWEEP_TASK_TIMEOUT_S))  # pool, outlets, retries: run_scaling_groups
def scaling_group(plan: dict[str, Any]) -> dict[str, Any]:
    """One scaling group: prepare and deploy its hosts, run every point (MXNet's parameter
    server across the hosts), ingest, and tear every host down whatever happened.

    One task rather than a setup/teardown group: the hosts work together, and the points
    share them. Teardown runs in the task's ``finally``; an ec2 host that outlives a killed
    task powers itself off at its TTL, and the sweeper DAG terminates it.
    """
    from gpucompare.config.fleet import check_scaling_slots
    from gpucompare.scaling import run as scaling_run

    context = get_current_context()
    dag_run_id = context["dag_run"].run_id
    with bad_input_fails():
        check_scaling_slots(plan, context["task"].pool_slots)
    log.info("Scaling group %s: %d point(s) on %s", plan["group"], len(plan["points"]),
             ", ".join(s["name"] for s in plan["specs"]))
    # the points and their ingest happen in this task, so the records stay on its own disk
    with bad_input_fails(), tempfile.TemporaryDirectory(prefix="gpucompare-scaling-") as scratch:
        written = scaling_run.run_scaling_plan(
            plan, lake_uri=settings.lake_uri(), dag_run_id=dag_run_id,
            results_path=str(Path(scratch) / "results.jsonl"), line_sink=lambda line: log.info("%s", line))
    declared_outlet_events().extra = {"scaling_group": plan["group"], "dag_run_id": dag_run_id}
    return {"group": plan["group"], "records": len(plan["points"]), "files": written}


def run_scaling_groups(plans: Any, pool_slots: int = 1) -> None:
    """One mapped ``scaling_group`` task per enabled scaling group of the fleet, each taking
    ``pool_slots`` slots of the pool (a slot per host of the largest group:
    ``config.fleet.scaling_pool_slots``), so the pool still caps the paid machines."""
    bound = scaling_group.override(pool=settings.pool(), pool_slots=pool_slots, outlets=[RESULTS],
                                   **network_retries(1))
    bound.expand(plan=plans)
