"""The deferred ec2 prepare: ``SsmReadyTrigger`` (``airflow.ssm_trigger``: signed calls over
aiohttp, built by ``triggers.trigger_for`` from ``Ec2Target.prepare_wait``) against moto's server
on 127.0.0.1 (``fixtures_aws``, standing in for EC2 and SSM).

The trigger is rebuilt from its ``serialize()`` output, as the triggerer does, and run in an
asyncio loop in this process. Moto's instances are ``running`` as soon as DescribeInstances
sees them and its server does not implement DescribeInstanceInformation (the trigger's
test-endpoint fallback counts a running instance as ready); a booting instance is stood in
for by answering ``pending`` to the trigger's first state reads.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from airflow.sdk.module_loading import import_string

from gpucompare.airflow import ssm_trigger
from gpucompare.airflow.triggers import trigger_for
from gpucompare.targets.base import TargetError
from gpucompare.targets.ec2 import target as ec2
from tests.support.ec2_support import (
    ec2_spec,
    live_instances,
    new_run_id,
)


def _rebuilt(wait: dict[str, Any]) -> Any:
    classpath, kwargs = trigger_for(wait).serialize()
    return import_string(classpath)(**json.loads(json.dumps(kwargs)))


async def _events(trigger: Any) -> list[dict[str, Any]]:
    return [event.payload async for event in trigger.run()]


def _started(aws_account: dict[str, Any], **options: Any) -> tuple[Any, Any, Any, str]:
    run_id = new_run_id()
    target = ec2.Ec2Target(ec2_spec(aws_account["profile"], aws_account["bucket"], **options))
    state, started = target.start_prepare(run_id)
    wait = target.prepare_wait(state, started)
    assert set(wait) == {"kind", "aws_conn_id", "region", "instance_id", "deadline", "poll_interval_s"}
    trigger = _rebuilt({**wait, "poll_interval_s": 0.05})
    return target, state, trigger, run_id


def test_the_prepare_wait_fires_once_the_instance_runs_and_not_before(
        aws_account: dict[str, Any], aws_client: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    target, state, trigger, run_id = _started(aws_account)
    reads: list[str | None] = []
    real_state = ssm_trigger.SignedAws.instance_state

    async def booting(self: Any, instance_id: str) -> str | None:
        reads.append(await real_state(self, instance_id))  # the real read, answered "pending" three times
        return "pending" if len(reads) <= 3 else reads[-1]

    monkeypatch.setattr(ssm_trigger.SignedAws, "instance_state", booting)
    (event,) = asyncio.run(_events(trigger))
    assert event == {"ready": state.resource_id}
    assert len(reads) == 4 and reads[-1] == "running"  # three polls while pending gave no event
    try:
        assert target.finish_prepare(state, event) is state
        assert [i["InstanceId"] for i in live_instances(aws_client, run_id)] == [state.resource_id]
    finally:
        target.teardown(state)


def test_an_instance_gone_before_it_was_ready_fails_prepare_and_leaves_nothing(
        aws_account: dict[str, Any], aws_client: Any) -> None:
    """Spot capacity reclaimed at boot (the instance terminated behind the wait's back)."""
    target, state, trigger, run_id = _started(aws_account)
    aws_client("ec2").terminate_instances(InstanceIds=[state.resource_id])
    (event,) = asyncio.run(_events(trigger))
    assert "terminated before it was ready" in event["error"] or "shutting-down" in event["error"]
    with pytest.raises(TargetError, match=state.resource_id):
        target.finish_prepare(state, event)
    assert live_instances(aws_client, run_id) == []


def test_a_wait_past_its_deadline_fails_and_terminates_the_instance(
        aws_account: dict[str, Any], aws_client: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An instance that never leaves pending (stand-in) within launch + agent timeouts."""
    async def pending(self: Any, instance_id: str) -> str:
        return "pending"

    monkeypatch.setattr(ssm_trigger.SignedAws, "instance_state", pending)
    target, state, trigger, run_id = _started(aws_account, launch_timeout_s=1, agent_timeout_s=1)
    (event,) = asyncio.run(_events(trigger))
    assert event["error"] == f"instance {state.resource_id} not running in time"
    with pytest.raises(TargetError, match="not running in time"):
        target.finish_prepare(state, event)
    assert live_instances(aws_client, run_id) == []
