"""
### gpucompare_sweeper — terminate this deployment's expired gpucompare instances, hourly

The last line of defence after the runs' teardown tasks and each instance's own shutdown
timer: every hour it terminates every instance tagged `gpucompare:deployment` = this
deployment (`GPUCOMPARE_DEPLOYMENT`) whose `gpucompare:expires-at` has passed
(`gpucompare.targets.sweeper`), and logs what it terminated and why. Where it looks: the
region of every ec2 target of the fleet, enabled or not (scaling groups use them too), each
through its own `aws_conn_id`; every region a run of this deployment recorded in its results
bucket before launching (manual runs); and `GPUCOMPARE_SWEEPER_REGIONS`. Instances without
gpucompare tags, or of another deployment, are never touched (and when another deployment
holds this one's name in a results bucket, `gpucompare.targets.name_lease`, nothing is);
instances tagged with a name in
`GPUCOMPARE_FORMER_DEPLOYMENTS` are this deployment's too (a renamed deployment). A region it
cannot read (access denied, not opted in) or a marker bucket it cannot list is skipped and
everything else is swept; then the task fails with `SweepIncomplete`, naming each location it
could not read and each expired instance it could not terminate (even one by one).
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import dag, task
from airflow.sdk.exceptions import AirflowSkipException

from gpucompare import settings
from gpucompare.airflow import policy
from gpucompare.config import fleet

log = logging.getLogger(__name__)


def sweep_locations(loaded: fleet.Fleet) -> Any:
    """Where to sweep for this deployment (``targets.sweeper.SweepLocations``; see the DAG's doc)."""
    from gpucompare.targets.sweeper import sweep_locations as locations

    extra = settings.sweeper_regions()
    return locations([t.spec for t in loaded.targets if t.spec["kind"] == "ec2"], extra,
                     deployment=settings.deployment(), former=settings.former_deployments(),
                     defaults=loaded.defaults.get("ec2"))


def hold_name(stores: set[tuple[str, str, str]]) -> list[str]:
    """Hold this deployment's name in every results location before terminating anything: another
    deployment's lease fails the task at once (its instances carry the same name); a lease that
    cannot be read is named (the task fails at the end) and the sweep goes on."""
    from gpucompare.targets import name_lease

    unreadable = []
    for store in sorted(stores):
        try:
            with policy.bad_input_fails():
                name_lease.hold_names([store], settings.deployment())
        except name_lease.NameLeaseError as exc:
            unreadable.append(f"name lease in s3://{store[1]}/{store[2]} (connection {store[0]}): {exc}")
    return unreadable


@task(execution_timeout=timedelta(minutes=20), **policy.network_retries())
def sweep_expired() -> list[dict[str, Any]]:
    """Terminate what outlived its time-to-live; return what was terminated. A region or marker
    location that cannot be read is skipped and the rest swept; the task then fails naming it."""
    from gpucompare.targets.sweeper import SweepIncomplete, sweep_expired_instances

    with policy.bad_input_fails():
        loaded = fleet.load_fleet()
        found = sweep_locations(loaded)
    if not any(found.regions.values()) and not found.unreadable:
        raise AirflowSkipException("no ec2 target, no region recorded by a run and "
                                   "GPUCOMPARE_SWEEPER_REGIONS is empty")
    swept, failures, unreadable = [], [], list(found.unreadable)
    unreadable += hold_name(found.stores)
    for aws_conn_id, regions in sorted(found.regions.items()):
        try:
            swept += sweep_expired_instances(sorted(regions), aws_conn_id=aws_conn_id)
        except SweepIncomplete as exc:  # the other connections are still swept
            swept += exc.swept
            failures += exc.failures
            unreadable += exc.unreadable
    for item in swept:
        log.warning("Terminated %s in %s (run %s, expired %s): %s", item.instance_id, item.region,
                    item.run_id, item.expires_at, item.reason)
    where = "; ".join(f"{conn}: {', '.join(sorted(r))}" for conn, r in sorted(found.regions.items()))
    log.info("Swept %s: %d instance(s) terminated", where, len(swept))
    if failures or unreadable:
        raise SweepIncomplete.of(swept, failures, unreadable)
    return [item.to_dict() for item in swept]


@dag(
    dag_id="gpucompare_sweeper",
    schedule="@hourly",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    doc_md=__doc__,
    tags=["gpucompare", "aws", "cleanup"],
    default_args=policy.default_args(),
)
def gpucompare_sweeper() -> None:
    sweep_expired()


gpucompare_sweeper()
