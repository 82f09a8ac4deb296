"""How long one sweeper pass takes over a backlog of expired instances, and how many calls.

    .venv/bin/python scripts/bench_sweeper.py [--per-region 1000] [--per-call 10] [--page 1000]

Starts moto's server on 127.0.0.1 (the stand-in for EC2 in every region) and the fault proxy in
front of it (tests/support/fault_proxy.py), launches ``--per-region`` expired instances of one
deployment in each of 5 regions (``--per-call`` per RunInstances: one reservation each), makes
the proxy refuse DescribeInstances in the fifth (OptInRequired), runs one
``sweep_expired_instances`` pass through an Airflow connection aimed at the proxy, and prints
its wall time, the DescribeInstances and TerminateInstances calls, what was swept and what is
left running per region. ``--page`` is the page size asked for (the sweeper's
``DESCRIBE_PAGE_SIZE``; AWS's maximum is 1,000). Moto's speed is not AWS's: the figure bounds
the sweeper's own work (pages, batches), not the cloud's latency.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
for path in (REPO_ROOT, REPO_ROOT / "plugins"):
    sys.path.insert(0, str(path))

from gpucompare.targets import sweeper  # noqa: E402
from tests.support.fault_proxy import FaultProxy  # noqa: E402
from tests.support.fixtures_aws import _start_server  # noqa: E402
from tests.support.sweeper_backlog import REGIONS, launch_backlog, sweep_once  # noqa: E402

CONN_ID = "aws_bench_sweeper"


def main() -> None:
    parser = argparse.ArgumentParser(description="one sweeper pass over a backlog of expired instances")
    parser.add_argument("--per-region", type=int, default=1000)
    parser.add_argument("--per-call", type=int, default=10)
    parser.add_argument("--page", type=int, default=sweeper.DESCRIBE_PAGE_SIZE)
    args = parser.parse_args()
    import boto3

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ[name] = "testing"
    server, endpoint = _start_server()
    proxy = FaultProxy(endpoint, read_timeout_s=60)
    os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = json.dumps({
        "conn_type": "aws", "login": "testing", "password": "testing",
        "extra": {"endpoint_url": proxy.url, "region_name": "us-east-1"}})
    sweeper.DESCRIBE_PAGE_SIZE = args.page
    try:
        from botocore.config import Config

        patient = Config(read_timeout=900, retries={"total_max_attempts": 1})  # moto slows with thousands

        def client_for(region: str):
            return boto3.client("ec2", endpoint_url=endpoint, region_name=region, config=patient)

        started = time.perf_counter()
        launched = launch_backlog(client_for, REGIONS, args.per_region, deployment="bench",
                                  per_call=args.per_call)
        print(f"launched {sum(map(len, launched.values()))} instances in {len(REGIONS)} regions "
              f"({args.per_call} per reservation) in {time.perf_counter() - started:.1f} s")
        trial = sweep_once(proxy, client_for, launched, REGIONS[-1], CONN_ID, "bench")
    finally:
        proxy.close()
        server.stop()
    print(f"one sweeper pass: {trial.seconds:.1f} s wall, {trial.swept} terminated, "
          f"{trial.describe_calls} DescribeInstances, {trial.terminate_calls} TerminateInstances "
          f"(page {args.page}, batch {sweeper.TERMINATE_BATCH})")
    print("left running per region: " + ", ".join(f"{r} {n}" for r, n in trial.left.items()))
    print("not readable: " + "; ".join(u[:120] for u in trial.unreadable))
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
