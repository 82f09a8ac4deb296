"""The stand-in SSM agent (``tests/support/ssm_agent.py``) behaves as the agent on an instance
does, as the ec2 target's own ``SsmRunner`` sees it through the AWS API: the commands run, their
exit code and output are reported, and a cancel, a time limit or the instance's termination
stops their processes. The DAG tests that run ec2 sweeps on moto rely on exactly this.

Moto's server stands in for AWS, the fault proxy with the agent in front of it for the network
and the instances' agents (their processes run on this machine).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpucompare.targets.ec2.ssm import SsmRunner, exit_code_of
from tests.support.ec2_support import any_image_id
from tests.support.target_helpers import wait_for


@pytest.fixture
def instance(working_instances: dict[str, Any], aws_client: Any) -> dict[str, Any]:
    """A moto instance and an SSM runner for it, through the proxy with the agent."""
    import boto3

    url = working_instances["proxy"].url
    proxied = {service: boto3.client(service, region_name="us-east-1", endpoint_url=url)
               for service in ("ec2", "ssm")}
    instance_id = aws_client("ec2").run_instances(ImageId=any_image_id(aws_client), MinCount=1, MaxCount=1,
                                                  InstanceType="g4dn.xlarge")["Instances"][0]["InstanceId"]
    return {"id": instance_id, "runner": SsmRunner(proxied["ssm"], instance_id, poll_interval_s=0.1),
            "agent": working_instances["agent"], "ec2": proxied["ec2"]}


def _group_alive(pgid: int) -> bool:
    """Whether a process of the command's process group (its script, the script's children) is
    alive (not a zombie waiting for its reaper: that one runs nothing)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue  # ended while we looked
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def test_the_commands_run_and_their_exit_code_and_output_are_reported(instance) -> None:
    script = ["#!/bin/bash", "echo to-stdout", "echo to-stderr >&2", "pwd", "exit 3"]
    invocation = instance["runner"].run(script, 30, comment="gpucompare test exit")
    assert invocation["Status"] == "Failed" and exit_code_of(invocation) == 3
    out = invocation["StandardOutputContent"].splitlines()
    assert out[0] == "to-stdout" and invocation["StandardErrorContent"] == "to-stderr\n"
    assert out[1].endswith(f"/{instance['id']}/{invocation['CommandId']}")  # the command's own folder
    ok = instance["runner"].run(["#!/bin/bash", "set -euo pipefail", "true"], 30,
                                comment="gpucompare test ok")
    assert ok["Status"] == "Success" and exit_code_of(ok) == 0


def test_a_command_stays_in_progress_while_it_runs_and_a_cancel_kills_it(instance) -> None:
    runner, agent = instance["runner"], instance["agent"]
    command_id = runner.send(["#!/bin/bash", "sleep 300"], 600, comment="gpucompare test cancel")
    assert runner.invocation(command_id)["Status"] == "InProgress"
    (running,) = agent.running()
    runner.cancel(command_id)
    assert runner.invocation(command_id)["Status"] == "Cancelled"
    assert not _group_alive(running.process.pid) and agent.running() == []


def test_a_command_past_its_execution_timeout_is_ended_timed_out(instance) -> None:
    runner = instance["runner"]
    command_id = runner.send(["#!/bin/bash", "sleep 300"], 1, comment="gpucompare test timeout")
    wait_for(lambda: runner.invocation(command_id)["Status"] != "InProgress", timeout_s=30,
             what="the time limit")
    invocation = runner.invocation(command_id)
    assert invocation["Status"] == "TimedOut" and exit_code_of(invocation) == 255


def test_terminating_the_instance_kills_its_commands(instance) -> None:
    runner, agent = instance["runner"], instance["agent"]
    command_id = runner.send(["#!/bin/bash", "sleep 300"], 600, comment="gpucompare test terminate")
    (running,) = agent.running()
    assert _group_alive(running.process.pid)
    instance["ec2"].terminate_instances(InstanceIds=[instance["id"]])
    assert runner.invocation(command_id)["Status"] == "Terminated"
    assert not _group_alive(running.process.pid)
