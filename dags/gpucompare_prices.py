"""
### gpucompare_prices — refresh the price tables daily

Every day at 05:00 UTC, for each AWS region of an ec2 target in the fleet file (enabled or
not: the reports compare those machines either way), appends today's on-demand list prices
(AWS Price List API) and spot prices (EC2 spot price history) of the GPU families people
compare (p3, g4dn, g5, g6, p4d, p5) to the lake's price history (`gpucompare.prices.refresh`).
Older rows are kept, so results are always costed at the price of their own date.

AWS is reached through the Airflow connection of the fleet's ec2 defaults (`aws_conn_id`,
default `aws_default`). Network calls retry with exponential backoff. The shipped price
tables (LeaderGPU's published per-minute prices, AWS list prices with their dates) are
read by the reports directly and need no refresh.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import dag, task

from gpucompare import settings
from gpucompare.airflow import policy
from gpucompare.config import fleet

log = logging.getLogger(__name__)


@task(retries=0)
def price_regions() -> list[str]:
    """The AWS regions of the fleet's ec2 targets."""
    with policy.bad_input_fails():
        regions = fleet.load_fleet().regions_of("ec2")
    log.info("Refreshing AWS prices for: %s", ", ".join(regions) or "no region (no ec2 target)")
    return regions


@task(execution_timeout=timedelta(minutes=20), **policy.network_retries())
def refresh_region(region: str) -> dict[str, Any]:
    """Today's on-demand and spot prices of one region, appended to the lake's history."""
    from gpucompare.lake.tables import open_lake
    from gpucompare.prices.refresh import aws_clients, refresh_aws_to_lake

    aws_conn_id = fleet.load_fleet().defaults.get("ec2", {}).get("aws_conn_id", "aws_default")
    pricing, ec2 = aws_clients(region, aws_conn_id=aws_conn_id)
    with policy.bad_input_fails():
        rows = refresh_aws_to_lake(open_lake(settings.lake_uri()), region=region,
                                   pricing_client=pricing, ec2_client=ec2)
    log.info("%s: %d price rows appended", region, rows.num_rows)
    return {"region": region, "rows": rows.num_rows}


@dag(
    dag_id="gpucompare_prices",
    schedule="0 5 * * *",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    doc_md=__doc__,
    tags=["gpucompare", "prices"],
    default_args=policy.default_args(),
)
def gpucompare_prices() -> None:
    refresh_region.expand(region=price_regions())


gpucompare_prices()
