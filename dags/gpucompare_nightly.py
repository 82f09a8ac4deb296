"""
### gpucompare_nightly — benchmark every machine of the fleet

Every night (cron from `dags/config/fleet.yaml`, `schedule`; `GPUCOMPARE_NIGHTLY_SCHEDULE`
overrides it; default 02:00 UTC) this DAG reads the fleet file, plans one run per enabled
target and runs them side by side, one mapped task group per target:

`prepare` (setup: provision or reach the machine; the cost guard first for paid ones) →
`deploy` → `score_sweep` → `train_sweep` → `collect` → `ingest` (into the lake),
and `terminate` (teardown) whatever happened, so a paid instance is never left running.

* A failing target does not stop the others; `check_targets` fails the run at the end and
  names the targets that did not finish, while the others' results are kept.
* `results_ready` updates the **gpucompare_results** Asset once per run, which triggers
  `gpucompare_reports`.
* The steps that hold a machine run in the pool `gpucompare_instances` (slots =
  `max_instances` of the fleet file), which caps how many machines work at once.
* Scaling groups of the fleet file (`scaling_groups`, README "Scaling runs") run beside the
  targets, one mapped `scaling_group` task each: the same training configuration on 1, 2, 4, …
  devices and over several hosts (MXNet's parameter server), hosts torn down at the end.
  Each takes one pool slot per host of the largest enabled group (read when this file is
  parsed); a group that grew since then fails until the next parse.
* Settings: `GPUCOMPARE_FLEET`, `GPUCOMPARE_LAKE`, `GPUCOMPARE_STAGING`, `GPUCOMPARE_POOL`.
"""

from __future__ import annotations

import logging
from typing import Any

import pendulum
from airflow.sdk import dag, get_current_context, task

from gpucompare.airflow import pipeline, policy
from gpucompare.config import fleet

log = logging.getLogger(__name__)


@task(retries=0)
def load_fleet() -> list[dict[str, Any]]:
    """Read and validate the fleet file; one plan per enabled target (checked by its target class)."""
    dag_run_id = get_current_context()["dag_run"].run_id
    from gpucompare.prices.tables import shipped_fx_rate  # here: pyarrow stays out of the parse

    with policy.bad_input_fails():
        loaded = fleet.load_fleet(fx_rate=shipped_fx_rate)
        plans = fleet.plan_fleet(loaded, dag_run_id)
        for plan in plans:
            pipeline.check_plan(plan)
        pipeline.hold_deployment_names([plan["spec"] for plan in plans])
    pipeline.log_pool_fit(len(plans), loaded.max_instances)
    log.info("%d target(s) tonight: %s", len(plans), ", ".join(p["spec"]["name"] for p in plans) or "none")
    return plans


@task(retries=0)
def load_scaling() -> list[dict[str, Any]]:
    """The enabled scaling groups of the fleet file: one plan each (hosts and points)."""
    dag_run_id = get_current_context()["dag_run"].run_id
    from gpucompare.prices.tables import shipped_fx_rate  # here: pyarrow stays out of the parse

    with policy.bad_input_fails():
        loaded = fleet.load_fleet(fx_rate=shipped_fx_rate)
        plans = fleet.plan_scaling(loaded, dag_run_id)
        fleet.check_scaling_fits(plans, loaded.max_instances)
        pipeline.hold_deployment_names([spec for plan in plans for spec in plan["specs"]])
    log.info("%d scaling group(s) tonight: %s", len(plans), ", ".join(p["group"] for p in plans) or "none")
    return plans


@dag(
    dag_id="gpucompare_nightly",
    schedule=fleet.nightly_schedule(),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    doc_md=__doc__,
    tags=["gpucompare", "benchmark", "nightly"],
    default_args=policy.default_args(),
)
def gpucompare_nightly() -> None:
    pipeline.run_targets(load_fleet())
    pipeline.run_scaling_groups(load_scaling(), fleet.scaling_pool_slots())


gpucompare_nightly()
