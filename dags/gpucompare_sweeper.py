"""
### gpucompare_sweeper — terminate expired gpucompare instances, hourly

The last line of defence after the runs' teardown tasks and each instance's own shutdown
timer: every hour, in each region of the fleet's enabled ec2 targets plus
`GPUCOMPARE_SWEEPER_REGIONS` (comma-separated; add the regions you use in manual runs),
terminates every instance tagged `gpucompare:expires-at` whose time has passed
(`gpucompare.targets.sweeper`) and logs what it terminated and why. Instances without
gpucompare tags are never touched.

AWS is reached through the fleet's ec2 `aws_conn_id` (default `aws_default`).
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import dag, task
from airflow.sdk.exceptions import AirflowSkipException

from gpucompare import fleet, pipeline, settings, validation

log = logging.getLogger(__name__)


def _regions(loaded: fleet.Fleet) -> list[str]:
    enabled = {t.spec["region"] for t in loaded.enabled_targets() if t.spec["kind"] == "ec2"}
    extra = [r.strip() for r in settings.setting("sweeper_regions").split(",") if r.strip()]
    for region in extra:
        validation.check_region(region, "ec2", "GPUCOMPARE_SWEEPER_REGIONS")
    return sorted(enabled | set(extra))


@task(execution_timeout=timedelta(minutes=20), **pipeline.network_retries())
def sweep_expired() -> list[dict[str, Any]]:
    """Terminate what outlived its time-to-live; return what was terminated."""
    from gpucompare.targets.sweeper import sweep_expired_instances

    with pipeline.bad_input_fails():
        loaded = fleet.load_fleet()
        regions = _regions(loaded)
    if not regions:
        raise AirflowSkipException("no ec2 target is enabled and GPUCOMPARE_SWEEPER_REGIONS is empty")
    aws_conn_id = loaded.defaults.get("ec2", {}).get("aws_conn_id", "aws_default")
    swept = sweep_expired_instances(regions, aws_conn_id=aws_conn_id)
    for item in swept:
        log.warning("Terminated %s in %s (run %s, expired %s): %s", item.instance_id, item.region,
                    item.run_id, item.expires_at, item.reason)
    log.info("Swept %s: %d instance(s) terminated", ", ".join(regions), len(swept))
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
