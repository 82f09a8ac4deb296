"""The cost guard against moto's server as EC2: an expensive run is refused before anything is
created (split from tests/unit/targets/test_cost_guard.py, which holds the guard's arithmetic).
"""

from __future__ import annotations

import pytest

from gpucompare.targets.base import BudgetExceeded
from gpucompare.targets.ec2 import target as ec2
from tests.support.ec2_support import (
    NIGHTLY,
    TINY_SWEEP,
    ec2_spec,
    live_instances,
    new_run_id,
)


def test_an_expensive_run_is_refused_before_anything_is_created(aws_account, aws_client):
    """The nightly matrix on p3.2xlarge (3.06 USD/h in the shipped table) with a 1 USD cap:
    refused, with no RunInstances call made and not one more instance on the endpoint."""
    run_id = new_run_id()
    profile, bucket = aws_account["profile"], aws_account["bucket"]
    target = ec2.Ec2Target(ec2_spec(profile, bucket, instance_type="p3.2xlarge", market="spot",
                                    budget_cap=1.0, sweep_configs=[NIGHTLY]))
    calls: list[str] = []
    target.ec2_hook.conn.meta.events.register("before-call.ec2.*", lambda event_name, **_: calls.append(
        event_name))

    def count_all() -> int:
        reservations = aws_client("ec2").describe_instances()["Reservations"]
        return sum(len(r["Instances"]) for r in reservations)

    before = count_all()
    with pytest.raises(BudgetExceeded, match=r"cap 1\.00 USD") as refused:
        target.prepare(run_id)
    assert "p3.2xlarge" in str(refused.value)
    assert calls == []  # not even a describe: refused before the first EC2 call
    assert count_all() == before
    assert live_instances(aws_client, run_id) == []

    # the same run within its budget goes ahead
    cheap = ec2.Ec2Target(ec2_spec(profile, bucket, instance_type="g4dn.xlarge", budget_cap=5.0,
                                   sweep_configs=[TINY_SWEEP]))
    state = cheap.prepare(run_id)
    try:
        assert len(live_instances(aws_client, run_id)) == 1
    finally:
        cheap.teardown(state)
