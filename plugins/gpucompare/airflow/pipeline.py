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
* A target whose sweep failed ingests nothing (a failed run leaves the lake as it was); the
  others carry on, because the steps of a mapped group depend only on their own index.
* ``results_ready`` then announces the results Asset once per DAG run (if anything was
  ingested) and ``check_targets`` fails the run, naming every target that did not finish, so
  a partly failed night is visible while its good results are kept and reported.
* Retries follow the error's class (``policy.is_permanent``): a ``PermanentError`` (validation,
  a refused sweep configuration or budget, bad records; ``gpucompare.errors``) or an AWS error
  code no retry can fix (``targets.ec2.aws_errors.PERMANENT_ERROR_CODES``) fails at once
  (``AirflowFailException``), since retrying cannot fix it and a paid instance would idle
  meanwhile; anything else retries with exponential backoff. The steps around a sweep that
  hold a machine (``deploy``, ``collect``) and ``terminate`` retry quickly and boundedly
  (30 s then 60 s), so a finished instance is not paid for idling through a long backoff.
  Every step has an execution timeout.
* Every step that runs a target's step (prepare, deploy, the sweeps, terminate) writes the
  phases the target timed into the lake's ``run_phases`` when it ends, failed or not
  (``targets.phases``): a run that failed in provisioning still shows what it cost, and the
  teardown's row arrives last, after the results' ingest, in a small append of its own.
* The steps that hold a machine run in the pool ``$GPUCOMPARE_POOL`` (``gpucompare_instances``),
  whose slots cap how many targets work at once. Nothing chains one target's group to
  another's, so with a slot per target (``max_instances`` ≥ the enabled targets) every
  target provisions at once; with fewer slots, a target whose machine is up keeps going
  before the next one provisions (priority grows along the group, see ``_step``).

The library modules that pull in heavy dependencies (the lake: pyarrow; ec2: boto3) are
imported inside the tasks, so the DAG files that import this module parse fast.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn

from airflow.providers.standard.decorators.python import _PythonDecoratedOperator
from airflow.sdk import Asset, TriggerRule, WeightRule, get_current_context, task, task_group
from airflow.sdk.bases.decorator import task_decorator_factory
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from gpucompare import settings
from gpucompare.airflow.policy import (
    HOLDING_FIRST_DELAY,
    HOLDING_MAX_DELAY,
    HOLDING_RETRIES,
    bad_input_fails,
    network_retries,
)
from gpucompare.config.fleet import SWEEP_TASK_TIMEOUT_S
from gpucompare.config.validation import ValidationError

log = logging.getLogger(__name__)

GROUP_ID = "target"
#: The steps whose state ``terminate`` may find, newest first.
STATE_STEPS = ("train_sweep", "score_sweep", "deploy", "prepare")


#: The results table of the lake; updated once per DAG run that ingested anything. Its URI is a
#: fixed name in a private scheme (``x-``: Airflow stores it as written), never derived from the
#: lake setting: the DAG files, the scheduler and the task that announces it must name one and the
#: same asset whatever environment each of them was started in. The event's extra says which run.
RESULTS = Asset(name="gpucompare_results", uri="x-gpucompare://lake/results", group="gpucompare")
#: The published report set (``<reports>/latest``); BI refreshes can schedule on it.
REPORTS = Asset(name="gpucompare_reports", uri="x-gpucompare://reports/latest", group="gpucompare")


def declared_outlet_events() -> Any:
    """The outlet events of the running task's own declared asset (the one its DAG was built
    with), so an event always goes to the asset the scheduler knows, never one rebuilt from the
    settings as they are now."""
    context = get_current_context()
    (asset,) = context["task"].outlets
    return context["outlet_events"][asset]


# -- helpers of the steps ----------------------------------------------------------------------
def _target(plan: dict[str, Any]) -> Any:
    from gpucompare.targets import make_target

    return make_target(plan["spec"], line_sink=lambda line: log.info("%s", line))


def check_plan(plan: dict[str, Any]) -> None:
    """Before anything runs: the target class accepts the plan's options, its connection exists."""
    from gpucompare.targets.base import TargetError

    spec = plan["spec"]
    try:
        _target(plan)
    except TargetError as exc:
        raise ValidationError(f"{spec['name']}.options", str(exc)) from exc
    conn_id = spec["options"].get("ssh_conn_id")
    if conn_id:
        _check_connection(conn_id, "ssh", f"{spec['name']}.ssh_conn_id")


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


#: The UI shows each mapped step under its target's name instead of its map index.
MAP_INDEX_TEMPLATE = "{{ target_name }}"


def _name_map_index(plan: dict[str, Any]) -> None:
    get_current_context()["target_name"] = plan["spec"]["name"]  # type: ignore[typeddict-unknown-key]


def _state(data: dict[str, Any]) -> Any:
    from gpucompare.targets.base import TargetState

    return TargetState.from_dict(data)


def _own_xcom(step: str) -> Any:
    """The return value of ``step`` in this task's own map index (None if it has none)."""
    ti = get_current_context()["ti"]
    return ti.xcom_pull(task_ids=f"{GROUP_ID}.{step}", map_indexes=ti.map_index)


def _newest_state(plan: dict[str, Any]) -> Any:
    """The newest state a step of this target recorded, else a bare one (spec and run id)."""
    for step in STATE_STEPS:
        data = _own_xcom(step)
        if data:
            return _state(data)
    from gpucompare.targets.base import TargetState

    return TargetState(spec=plan["spec"], run_id=plan["run_id"])


@contextlib.contextmanager
def _phases_recorded(plan: dict[str, Any], target: Any, market: str | None = None) -> Iterator[None]:
    """After the block, returned or raised: the phases ``target`` timed in it go into the lake's
    ``run_phases`` (a failure to write them is only logged, see ``targets.phases``)."""
    try:
        yield
    finally:
        from gpucompare.targets.bundle import local_code_hash
        from gpucompare.targets.phases import PhaseContext, record_quietly

        context = PhaseContext.of(plan["spec"], plan["run_id"], market=market,
                                  dag_run_id=get_current_context()["dag_run"].run_id,
                                  code_hash=local_code_hash())
        record_quietly(settings.lake_uri(), target.phases, context)


def _run_sweep(plan: dict[str, Any], state: dict[str, Any], mode: str) -> dict[str, Any]:
    """Start the sweep and defer its wait to ``SweepTrigger`` (targets that can: ssh, ec2), or
    run it here (local). A sweep already finished is reused without deferring."""
    sweep = plan["sweeps"].get(mode)
    if sweep is None:
        log.info("Profile %s has no %s mode; nothing to run", plan["profile"], mode)
        return state
    log.info("Running the %s sweep of %s (time limit %.0f s)", mode, plan["spec"]["name"], sweep["timeout_s"])
    target = _target(plan)
    with _phases_recorded(plan, target, state.get("market")), bad_input_fails():
        if not hasattr(target, "start_sweep"):
            return target.run_sweep(_state(state), sweep["config"], timeout_s=sweep["timeout_s"]).to_dict()
        current = _state(state)
        began = time.time()
        started = target.start_sweep(current, sweep["config"], timeout_s=sweep["timeout_s"])
        started = {**(started.to_dict() if hasattr(started, "to_dict") else started), "began": began}
    log.info("%s sweep of %s: %s; waiting in the triggerer", mode, plan["spec"]["name"], started["decision"])
    _defer("resume_sweep", plan, target, current, started)


def _defer(method_name: str, plan: dict[str, Any], target: Any, state: Any, started: dict[str, Any],
           poller: str = "sweep_poller") -> NoReturn:
    """Defer the task to ``SweepTrigger`` over the target's ``poller``; ``method_name`` resumes it."""
    from airflow.sdk.exceptions import TaskDeferred

    from gpucompare.airflow.triggers import SweepTrigger

    carry = {"plan": plan, "state": state.to_dict(), "started": started}
    trigger = SweepTrigger(spec=plan["spec"], state=state.to_dict(), started=started,
                           poll_interval_s=target.options.poll_interval_s, carry=carry, poller=poller)
    # what the resumed task needs travels in the event (dag.test() replaces the kwargs by it)
    raise TaskDeferred(trigger=trigger, method_name=method_name)


@contextlib.contextmanager
def _phase_if_failed(target: Any, phase: str) -> Iterator[None]:
    """Time the block as ``phase`` only if it raises: when it returns, the task defers and the
    resumed task records the phase from its start (``_deferred_phase``)."""
    with target.phases.timed(phase) as record:
        yield
    target.phases.records.remove(record)


@contextlib.contextmanager
def _deferred_phase(target: Any, phase: str, started: dict[str, Any]) -> Iterator[Any]:
    """A phase of a deferred step (``sweep``, ec2's ``provision``): from its start in the first
    task to the end of the resumed one (the wait in the triggerer included), recorded whether
    it ended or raised."""
    from datetime import UTC, datetime

    began = float(started.get("began") or time.time())
    record = None
    try:
        with target.phases.timed(phase) as record:
            record.started_at = datetime.fromtimestamp(began, UTC).isoformat()
            yield record
    finally:
        if record is not None:
            record.seconds = time.time() - began


@contextlib.contextmanager
def _resumed(context: Any, event: dict[str, Any], phase: str) -> Iterator[tuple[dict[str, Any], Any, Any,
                                                                              dict[str, Any]]]:
    """The resumed part of a deferred step: the plan, state and start carried by the trigger's
    event, the map index label (as ``_name_map_index``), and ``phase`` recorded from the step's
    first part on; yields (plan, target, state, started)."""
    plan, state, started = (event["carry"][key] for key in ("plan", "state", "started"))
    context["target_name"] = plan["spec"]["name"]
    target = _target(plan)
    with _phases_recorded(plan, target, state.get("market")), bad_input_fails(), \
            _deferred_phase(target, phase, started):
        yield plan, target, _state(state), started


class SweepOperator(_PythonDecoratedOperator):
    """A sweep step: its function starts the sweep and defers (``_run_sweep``); the task
    resumes in ``resume_sweep`` when ``SweepTrigger`` fires, for seconds again."""

    def resume_sweep(self, context: Any, event: dict[str, Any], **_: Any) -> dict[str, Any]:
        with _resumed(context, event, "sweep") as (plan, target, state, started):
            done = target.finish_sweep(state, started, event)
        log.info("Sweep of %s finished (%s)", plan["spec"]["name"], started["decision"])
        return done.to_dict()


class PrepareOperator(_PythonDecoratedOperator):
    """The prepare step: for ec2 its function launches the instance and defers the wait until
    it is usable (``prepare``); the task resumes in ``resume_prepare``, for seconds again."""

    def resume_prepare(self, context: Any, event: dict[str, Any], **_: Any) -> dict[str, Any]:
        with _resumed(context, event, "provision") as (plan, target, state, _started):
            target.phases.mark_billed()  # the instance existed since the first part
            done = target.finish_prepare(state, event)
        log.info("Prepared %s: resource %s, market %s", plan["spec"]["name"], done.resource_id, done.market)
        return done.to_dict()


def staged_results_location(plan: dict[str, Any]) -> str:
    """Where collect leaves a target's results for ingest: under ``GPUCOMPARE_STAGING``, a local
    folder or an ``s3://`` prefix (Airflow run ids hold ':' and '+', hence the substitution)."""
    from gpucompare.targets.runs import run_key

    return f"{settings.staging_uri().rstrip('/')}/{run_key(plan['run_id'])}/results.jsonl"


# -- the steps -----------------------------------------------------------------------------------
#: step name -> (retries, holds_machine, bounded_retries): what ``_with_settings`` applies when
#: the group is built
_STEP_POLICY: dict[str, tuple[int, bool, bool]] = {}


def _step(timeout: timedelta, retries: int = 3, *, holds_machine: bool = True,
          bounded_retries: bool = False, operator: type | None = None) -> Any:
    """The decorator of a step of the group: its time limit and its target's name as the map
    index label in the UI; its retries with backoff (``bounded_retries``: the bounded schedule of the
    steps that hold an idle machine) and the pool when it holds a machine come from the
    settings, so they are applied when a DAG builds the group (``_with_settings``), not here.
    ``operator``: the step's operator class when it defers (:class:`SweepOperator`,
    :class:`PrepareOperator`: it starts the work and defers the wait).

    Priority grows along the group (``WeightRule.UPSTREAM``): when the pool is short of slots,
    the next step of a target whose machine is up goes before another target's ``prepare``,
    so a paid machine does not idle while one more is started (Airflow's default weights
    the other way round, upstream steps first)."""
    def decorate(function: Any) -> Any:
        _STEP_POLICY[function.__name__] = (retries, holds_machine, bounded_retries)
        options = dict(map_index_template=MAP_INDEX_TEMPLATE, execution_timeout=timeout,
                       weight_rule=WeightRule.UPSTREAM)
        if operator is not None:
            return task_decorator_factory(function, decorated_operator_class=operator, **options)
        return task(**options)(function)

    return decorate


def _with_settings(step: Any) -> Any:
    """The step with its retries and pool read from the settings now (the DAG is being built)."""
    retries, holds_machine, bounded_retries = _STEP_POLICY[step.function.__name__]
    backoff = (network_retries(retries, max_delay=HOLDING_MAX_DELAY, first_delay=HOLDING_FIRST_DELAY)
               if bounded_retries else network_retries(retries))
    pool = {"pool": settings.pool()} if holds_machine else {}
    return step.override(**backoff, **pool)


@_step(timedelta(minutes=45), operator=PrepareOperator)
def prepare(plan: dict[str, Any]) -> dict[str, Any]:
    """Provision or reach the machine (the cost guard runs first for paid ones). A target whose
    machine takes minutes to come up (ec2: ``start_prepare``) launches it here and defers the
    wait (instance running, SSM agent online) to ``SweepTrigger``; the others prepare here."""
    _name_map_index(plan)
    target = _target(plan)
    with _phases_recorded(plan, target), bad_input_fails():
        if not hasattr(target, "start_prepare"):
            state = target.prepare(plan["run_id"])
            log.info("Prepared %s: resource %s, market %s", plan["spec"]["name"], state.resource_id,
                     state.market)
            return state.to_dict()
        began = time.time()
        with _phase_if_failed(target, "provision"):
            state, started = target.start_prepare(plan["run_id"])
    log.info("Launched or found %s for %s; waiting in the triggerer until it is usable", state.resource_id,
             plan["spec"]["name"])
    _defer("resume_prepare", plan, target, state, {**started, "began": began}, poller="prepare_poller")


@_step(timedelta(hours=1), HOLDING_RETRIES, bounded_retries=True)
def deploy(plan: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    """Put the worker and its environment on the machine (idempotent)."""
    _name_map_index(plan)
    target = _target(plan)
    with _phases_recorded(plan, target, state.get("market")), bad_input_fails():
        return target.deploy(_state(state)).to_dict()


@_step(timedelta(seconds=SWEEP_TASK_TIMEOUT_S), retries=1, operator=SweepOperator)
def score_sweep(plan: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    """The scoring sweep (as MXNet's benchmark_score.py), progress streamed into this log."""
    _name_map_index(plan)
    return _run_sweep(plan, state, "score")


@_step(timedelta(seconds=SWEEP_TASK_TIMEOUT_S), retries=1, operator=SweepOperator)
def train_sweep(plan: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    """The training sweep (as train_imagenet.py --benchmark 1)."""
    _name_map_index(plan)
    return _run_sweep(plan, state, "train")


@_step(timedelta(minutes=10), HOLDING_RETRIES, bounded_retries=True)
def collect(plan: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    """Bring the run's JSON Lines back into staging (a folder, or S3 when ingest may run on
    another worker)."""
    _name_map_index(plan)
    from gpucompare.lake.storage import put_file

    location = staged_results_location(plan)
    with tempfile.TemporaryDirectory(prefix="gpucompare-collect-") as scratch:
        with bad_input_fails():
            local = _target(plan).collect(_state(state), str(Path(scratch) / "results.jsonl"))
        records = sum(1 for line in Path(local).read_text().splitlines() if line.strip())
        put_file(local, location)
    log.info("Collected %d records of %s into %s", records, plan["spec"]["name"], location)
    return {"path": location, "records": records,
            "market": state.get("market") or plan["spec"]["market"]}


@_step(timedelta(minutes=30), holds_machine=False)
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
                         dag_run_id=get_current_context()["dag_run"].run_id)
    with bad_input_fails():
        # the run's identity is the orchestrator's (plan["run_id"]), never the records' own
        summary = ingest_results(open_lake(settings.lake_uri()), collected["path"], context,
                                 run_id=plan["run_id"], code_hash=local_code_hash())
    delete_file(collected["path"])
    _delete_run_objects(plan)
    log.info("Ingested %d records of %s: %s", collected["records"], spec["name"], summary.describe())
    return {"target": spec["name"], "records": collected["records"], "version": summary.write.version,
            "changed": summary.changed}


def _delete_run_objects(plan: dict[str, Any]) -> None:
    """After a successful ingest, delete the run's objects the target staged remotely (ec2:
    results, progress and SSM output in the results bucket). A failure is only logged: the
    results are safe in the lake, and the bucket's lifecycle rule removes what is left."""
    try:
        _target(plan).delete_run_objects(plan["run_id"])
    except Exception as exc:
        log.warning("Could not delete the staged objects of run %s: %s", plan["run_id"], exc)


@_step(timedelta(minutes=30), retries=4, holds_machine=False, bounded_retries=True)
def terminate(plan: dict[str, Any]) -> None:
    """Give back what prepare took, whatever happened in between (safe twice)."""
    _name_map_index(plan)
    state = _newest_state(plan)
    log.info("Tearing down %s (run %s, resource %s)", plan["spec"]["name"], state.run_id, state.resource_id)
    target = _target(plan)
    # the run's last phase row: an append of its own, whether ingest ran before it, beside it or not
    with _phases_recorded(plan, target, state.market):
        target.teardown(state)


@task_group(group_id=GROUP_ID)
def target_run(plan: dict[str, Any]) -> Any:
    """One target: provision, deploy, both sweeps, collect, ingest; terminate in any case."""
    state = _with_settings(prepare)(plan).as_setup()
    deployed = _with_settings(deploy)(plan, state)
    swept = _with_settings(train_sweep)(plan, _with_settings(score_sweep)(plan, deployed))
    collected = _with_settings(collect)(plan, swept)
    # Marked here rather than with @setup/@teardown: those decorators keep state between
    # calls, and both the nightly and the manual DAG build this group.
    finished = _with_settings(terminate)(plan).as_teardown(setups=state.operator,
                                                           on_failure_fail_dagrun=True)
    # all_done rather than the teardown default (all_done_setup_success): a prepare that
    # failed half-way may have started something, and teardown copes with a partial state
    finished.operator.trigger_rule = TriggerRule.ALL_DONE
    collected >> finished
    return _with_settings(ingest)(plan, collected)


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
    declared_outlet_events().extra = {"scaling_group": plan["group"],
                                                             "dag_run_id": dag_run_id}
    return {"group": plan["group"], "records": len(plan["points"]), "files": written}


def run_scaling_groups(plans: Any, pool_slots: int = 1) -> None:
    """One mapped ``scaling_group`` task per enabled scaling group of the fleet, each taking
    ``pool_slots`` slots of the pool (a slot per host of the largest group:
    ``config.fleet.scaling_pool_slots``), so the pool still caps the paid machines."""
    bound = scaling_group.override(pool=settings.pool(), pool_slots=pool_slots, outlets=[RESULTS],
                                   **network_retries(1))
    bound.expand(plan=plans)
