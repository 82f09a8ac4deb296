"""A backlog of expired gpucompare instances on moto's server, and one sweeper pass over it
through the fault proxy (tests/integration/targets/test_sweeper_backlog.py and
scripts/bench_sweeper.py share it).

Moto stands in for EC2 in every region; the instances are launched straight at moto (not through
the proxy), ``per_call`` at a time (one reservation each: DescribeInstances pages count
reservations), tagged as the ec2 target tags them, already expired. The sweep goes through the
proxy, which refuses DescribeInstances in the ``refusing`` region (``OptInRequired``, as a region
not opted in answers) and counts every call.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from gpucompare.targets import sweeper
from gpucompare.targets.ec2.options import DEPLOYMENT_TAG, EXPIRES_AT_TAG, RUN_ID_TAG
from tests.support.fault_proxy import FaultProxy

REGIONS = ("us-east-1", "us-west-2", "eu-west-1", "eu-central-1", "ap-southeast-2")


def launch_backlog(client_for: Callable[[str], Any], regions: tuple[str, ...], per_region: int, *,
                   deployment: str, per_call: int = 10) -> dict[str, list[str]]:
    """``per_region`` expired instances of ``deployment`` in each region; their ids by region."""
    expired = (datetime.now(UTC) - timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    launched: dict[str, list[str]] = {}
    for region in regions:
        client = client_for(region)
        image_id = client.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
        tags = [{"Key": DEPLOYMENT_TAG, "Value": deployment}, {"Key": EXPIRES_AT_TAG, "Value": expired},
                {"Key": RUN_ID_TAG, "Value": f"backlog-{region}"}]
        ids: list[str] = []
        for start in range(0, per_region, per_call):
            count = min(per_call, per_region - start)
            answer = client.run_instances(ImageId=image_id, MinCount=count, MaxCount=count,
                                          InstanceType="g4dn.xlarge",
                                          TagSpecifications=[{"ResourceType": "instance", "Tags": tags}])
            ids += [instance["InstanceId"] for instance in answer["Instances"]]
        launched[region] = ids
    return launched


def live_count(client: Any, ids: list[str]) -> int:
    """How many of ``ids`` are still pending or running."""
    live = 0
    for start in range(0, len(ids), 500):
        answer = client.describe_instances(InstanceIds=ids[start:start + 500])
        live += sum(1 for r in answer["Reservations"] for i in r["Instances"]
                    if i["State"]["Name"] in ("pending", "running"))
    return live


@dataclass
class SweepTrial:
    """What one sweeper pass over a backlog did."""

    seconds: float
    swept: int
    left: dict[str, int]
    describe_calls: int
    terminate_calls: int
    unreadable: list[str] = field(default_factory=list)


def sweep_once(proxy: FaultProxy, client_for: Callable[[str], Any], launched: dict[str, list[str]],
               refusing: str | None, conn_id: str, deployment: str) -> SweepTrial:
    """One ``sweep_expired_instances`` pass over every region of ``launched`` through ``proxy``."""
    if refusing is not None:
        proxy.add("DescribeInstances", "refuse", times=10**6, region=refusing, code="OptInRequired")
    describe_before = proxy.count("DescribeInstances")
    terminate_before = proxy.count("TerminateInstances")
    started = time.perf_counter()
    unreadable: list[str] = []
    try:
        swept = sweeper.sweep_expired_instances(list(launched), aws_conn_id=conn_id, deployment=deployment,
                                                former=())
    except sweeper.SweepIncomplete as incomplete:
        swept, unreadable = incomplete.swept, incomplete.unreadable
    seconds = time.perf_counter() - started
    left = {region: live_count(client_for(region), ids) for region, ids in launched.items()}
    return SweepTrial(seconds=seconds, swept=len(swept), left=left,
                      describe_calls=proxy.count("DescribeInstances") - describe_before,
                      terminate_calls=proxy.count("TerminateInstances") - terminate_before,
                      unreadable=unreadable)
