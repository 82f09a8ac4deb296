"""The deferred ec2 sweep's trigger (``SsmSweepTrigger``: signed calls over aiohttp) against
moto's server on 127.0.0.1 (``fixtures_aws``, standing in for EC2, SSM and S3), and against a
stand-in endpoint that accepts TCP and never answers.

The trigger is built by ``triggers.trigger_for`` from ``Ec2Target.sweep_wait`` and rebuilt from
its ``serialize()`` output, as the triggerer does. Moto finishes every command at once.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from typing import Any

import pytest
from airflow.sdk.module_loading import import_string

from gpucompare.airflow.triggers import trigger_for
from gpucompare.targets.base import TargetError
from gpucompare.targets.ec2 import target as ec2
from tests.support.ec2_support import TINY_SWEEP, ec2_spec, new_run_id


def _rebuilt(wait: dict[str, Any]) -> Any:
    classpath, kwargs = trigger_for(wait).serialize()
    assert not {"spec", "state", "started"} & set(kwargs)  # only what the wait needs
    return import_string(classpath)(**json.loads(json.dumps(kwargs)))


async def _first(trigger: Any) -> dict[str, Any]:
    async for event in trigger.run():
        return event.payload
    raise AssertionError("no event")


@pytest.fixture
def deployed(aws_account: dict[str, Any]):
    target = ec2.Ec2Target(ec2_spec(aws_account["profile"], aws_account["bucket"]), line_sink=lambda _: None)
    state = target.prepare(new_run_id())
    try:
        yield target, target.deploy(state), aws_account
    finally:
        target.teardown(state)


def test_the_trigger_reads_the_finished_command_and_the_task_finishes_the_sweep(deployed, aws_client) -> None:
    target, state, account = deployed
    started = target.start_sweep(state, TINY_SWEEP, timeout_s=60)
    # the instance uploaded two progress lines and half of a third
    aws_client("s3").put_object(Bucket=account["bucket"], Key=started.progress_key,
                                Body=b"[1/2] score alexnet b1: ok\n[2/2] score alexnet b2: ok\n[3/")
    trigger = _rebuilt(target.sweep_wait(state, started))
    event = asyncio.run(_first(trigger))
    assert event["invocation"]["CommandId"] == started.command_id and event["progress_seen"] is True
    assert event["invocation"]["Status"] in ("Success", "Failed")
    # the offset of the two complete lines was kept beside the progress object, before logging
    kept = aws_client("s3").get_object(Bucket=account["bucket"], Key=f"{started.progress_key}.offset")
    assert int(kept["Body"].read()) == len(b"[1/2] score alexnet b1: ok\n[2/2] score alexnet b2: ok\n")
    if event["invocation"]["Status"] == "Success":
        assert target.finish_sweep(state, started, event).remote_results.startswith("s3://")
    else:
        with pytest.raises(TargetError):
            target.finish_sweep(state, started, event)


def test_an_instance_gone_mid_command_ends_the_wait_and_the_task_cancels_it(deployed, aws_client,
                                                                            monkeypatch) -> None:
    """The command still runs (moto's answer rewritten to InProgress on the wire is not possible
    here, so the invocation is stood in for: GetCommandInvocation answered InProgress) while the
    instance was terminated (a spot interruption)."""
    from gpucompare.airflow import ssm_trigger

    target, state, _ = deployed
    started = target.start_sweep(state, TINY_SWEEP, timeout_s=60)
    real_ssm = ssm_trigger.SignedAws.ssm

    async def in_progress(self, action: str, payload: dict[str, Any]) -> dict[str, Any]:
        answer = await real_ssm(self, action, payload)  # the real signed call, then rewritten
        return {**answer, "Status": "InProgress"}

    monkeypatch.setattr(ssm_trigger.SignedAws, "ssm", in_progress)
    aws_client("ec2").terminate_instances(InstanceIds=[state.resource_id])
    event = asyncio.run(_first(_rebuilt(target.sweep_wait(state, started))))
    assert event["cancel"] is True and state.resource_id in event["error"] and "InProgress" in event["error"]
    with pytest.raises(TargetError, match="spot interruption or time-to-live"):
        target.finish_sweep(state, started, event)


def test_a_stalled_endpoint_ends_the_wait_at_its_deadline_with_an_error_event(monkeypatch) -> None:
    """An AWS endpoint that accepts TCP and never answers: every call ends at its timeout, the
    wait at its deadline, with an error event the task turns into the target's error."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []
    threading.Thread(target=lambda: [held.append(server.accept()[0]) for _ in range(64)], daemon=True).start()
    port = server.getsockname()[1]
    monkeypatch.setenv("AIRFLOW_CONN_AWS_STALLED", json.dumps({
        "conn_type": "aws", "login": "stalled", "password": "stalled",
        "extra": {"endpoint_url": f"http://127.0.0.1:{port}", "region_name": "us-east-1"}}))
    wait = {"kind": "ssm", "aws_conn_id": "aws_stalled", "region": "us-east-1",
            "instance_id": "i-0123456789abcdef0", "command_id": "c0ffee00-0000-0000-0000-000000000000",
            "bucket": "b", "progress_key": "p/progress.log", "deadline": time.time() + 4, "limit_s": 4,
            "poll_interval_s": 0.5,
            "call_timeout_s": 1.0}
    began = time.monotonic()
    event = asyncio.run(_first(_rebuilt(wait)))
    took = time.monotonic() - began
    server.close()
    assert event["cancel"] is True and "TimeoutError" in event["error"], event
    assert 3.0 <= took <= 4.0 + 1.0 + 1.0, took  # at the deadline, at most one call timeout (+1 s) later


def test_the_deploy_defers_its_command_and_a_retry_attaches_to_it(aws_account: dict[str, Any]) -> None:
    """The ec2 deploy's command (fetch the bundle, build the venv: minutes on a real instance)
    waits in the same trigger; a retried deploy finds the command by its comment and sends none."""
    target = ec2.Ec2Target(ec2_spec(aws_account["profile"], aws_account["bucket"]), line_sink=lambda _: None)
    state = target.prepare(new_run_id())
    sent: list[dict[str, Any]] = []
    target.ssm_hook.conn.meta.events.register("before-call.ssm.SendCommand",
                                              lambda params, **_: sent.append(params))
    try:
        state, started = target.start_deploy(state)
        assert started is not None and len(sent) == 1
        assert state.workdir and state.extra["bench_python"]  # known before the wait
        wait = target.deploy_wait(state, started)
        assert wait["command_id"] == started["command_id"] and wait["progress_key"] == ""
        event = asyncio.run(_first(_rebuilt(wait)))
        assert event["invocation"]["CommandId"] == started["command_id"]
        assert target.finish_deploy(state, started, event) is state
        _, again = target.start_deploy(state)  # a retried deploy task
        assert again is not None and again["command_id"] == started["command_id"] and len(sent) == 1
        with pytest.raises(TargetError, match="still not finished"):
            target.finish_deploy(state, started, {"error": "SSM command still not finished", "cancel": True})
    finally:
        target.teardown(state)
