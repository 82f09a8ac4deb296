"""
### gpucompare_sweeper — terminate this deployment's expired gpucompare instances, hourly

The last line of defence after the runs' teardown tasks and each instance's own shutdown
timer: every hour it terminates every instance tagged `gpucompare:deployment` = this
deployment (`GPUCOMPARE_DEPLOYMENT`) whose `gpucompare:expires-at` has passed
(`gpucompare.targets.sweeper`), and logs what it terminated and why. Where it looks: the
region of every ec2 target of the fleet, enabled or not (scaling groups use them too), each
through its own `aws_conn_id`; every region a run of this deployment recorded in its results
bucket before launching (manual runs); and `GPUCOMPARE_SWEEPER_REGIONS`. Instances without
gpucompare tags, or of another deployment, are never touched. An expired instance it cannot
terminate (even one by one) is named and fails the task.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import dag, task
from airflow.sdk.exceptions import AirflowSkipException

from gpucompare import settings
from gpucompare.airflow import pipeline
from gpucompare.config import fleet

log = logging.getLogger(__name__)


def sweep_locations(loaded: fleet.Fleet) -> dict[str, set[str]]:
    """``aws_conn_id -> regions`` for this deployment (see the DAG's doc)."""
    from gpucompare.targets.sweeper import sweep_locations as locations

    extra = settings.sweeper_regions()
    return locations([t.spec for t in loaded.targets if t.spec["kind"] == "ec2"], extra,
                     deployment=settings.deployment(), defaults=loaded.defaults.get("ec2"))


@task(execution_timeout=timedelta(minutes=20), **pipeline.network_retries())
def sweep_expired() -> list[dict[str, Any]]:
    """Terminate what outlived its time-to-live; return what was terminated."""
    from gpucompare.targets.sweeper import SweepIncomplete, sweep_expired_instances

    with pipeline.bad_input_fails():
        loaded = fleet.load_fleet()
    locations = sweep_locations(loaded)
    if not any(locations.values()):
        raise AirflowSkipException("no ec2 target, no region recorded by a run and "
                                   "GPUCOMPARE_SWEEPER_REGIONS is empty")
    swept, failures = [], []
    for aws_conn_id, regions in sorted(locations.items()):
        try:
            swept += sweep_expired_instances(sorted(regions), aws_conn_id=aws_conn_id)
        except SweepIncomplete as exc:  # the other connections are still swept
            swept += exc.swept
            failures += exc.failures
    for item in swept:
        log.warning("Terminated %s in %s (run %s, expired %s): %s", item.instance_id, item.region,
                    item.run_id, item.expires_at, item.reason)
    where = "; ".join(f"{conn}: {', '.join(sorted(r))}" for conn, r in sorted(locations.items()))
    log.info("Swept %s: %d instance(s) terminated", where, len(swept))
    if failures:
        raise SweepIncomplete(f"could not terminate {len(failures)} expired instance(s): "
                              + "; ".join(failures), swept, failures)
    return [item.to_dict() for item in swept]
@dag(
    dag_id="gpucompare_sweeper",
    schedule="@hourly",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    doc_md=__doc__,
    tags=["gpucompare", "aws", "cleanup"],
    default_args=pipeline.default_args(),
)
def gpucompare_sweeper() -> None:
    sweep_expired()


gpucompare_sweeper()
