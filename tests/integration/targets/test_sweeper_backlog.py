"""A backlog of expired instances in 5 regions, one of which refuses DescribeInstances: one
sweeper pass terminates every expired instance it can read (issue 32). 500 instances here, in
reservations of 5 and pages of 10 (2 pages per region); scripts/bench_sweeper.py runs the same
pass over 5,000 for the figure (moto slows down with thousands of instances: 1,000 took 15 min
on the shared machine).

Moto's server stands in for EC2, the fault proxy refuses one region (OptInRequired) and counts
the calls. Before: the sweeper read one DescribeInstances page per region per run, so 480
expired instances across 3 regions needed two hourly runs (300 went in the first).
"""

from __future__ import annotations

from typing import Any

from gpucompare.targets import sweeper
from tests.support.ec2_support import point_airflow_connection
from tests.support.fault_proxy import FaultProxy
from tests.support.sweeper_backlog import REGIONS, launch_backlog, sweep_once

PER_REGION = 100
PER_CALL = 5
PAGE = 10  # reservations per page asked for: 20 reservations a region, so 2 pages each
BATCH = 30  # instances per TerminateInstances: 4 batches a region


def test_one_pass_terminates_a_backlog_in_every_readable_region(
        aws_endpoint: str, aws_client: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(sweeper, "DESCRIBE_PAGE_SIZE", PAGE)
    monkeypatch.setattr(sweeper, "TERMINATE_BATCH", BATCH)
    proxy = FaultProxy(aws_endpoint, read_timeout_s=60)
    try:
        conn_id = point_airflow_connection(monkeypatch, proxy.url)

        def client_for(region: str) -> Any:
            return aws_client("ec2", region_name=region)

        launched = launch_backlog(client_for, REGIONS, PER_REGION, deployment="backlog-test",
                                  per_call=PER_CALL)
        refusing = REGIONS[-1]
        trial = sweep_once(proxy, client_for, launched, refusing, conn_id, "backlog-test")
    finally:
        proxy.close()
    readable = [region for region in REGIONS if region != refusing]
    assert trial.swept == PER_REGION * len(readable)
    assert {region: trial.left[region] for region in readable} == dict.fromkeys(readable, 0)
    assert trial.left[refusing] == PER_REGION  # not readable: named, not guessed at
    assert len(trial.unreadable) == 1
    assert refusing in trial.unreadable[0] and "OptInRequired" in trial.unreadable[0]
    pages_per_region = -(-PER_REGION // PER_CALL // PAGE)
    assert trial.describe_calls == len(readable) * pages_per_region + 1  # + the refused one
    batches_per_region = -(-PER_REGION // sweeper.TERMINATE_BATCH)
    assert trial.terminate_calls == len(readable) * batches_per_region
    for region, ids in launched.items():  # what the refusing region kept running
        aws_client("ec2", region_name=region).terminate_instances(InstanceIds=ids)
