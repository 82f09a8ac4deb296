"""A retried scaling task attaches to its roles' SSM commands instead of starting over
(``SSMChannel.attach``: the command ids are found again by their comments, through every page
of ListCommands).

Moto's server stands in for AWS and the stand-in SSM agent (``tests/support/ssm_agent.py``,
behind the fault proxy) for the agent on the instance: the roles' commands run on this machine.
A try "killed mid-run" is stood in for by dropping its channel object (everything it kept in
memory is gone) while its role's command still runs; the retry is a new channel.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from gpucompare.targets.base import Role
from gpucompare.targets.channel import MARKER_VARIABLE
from gpucompare.targets.ec2.channel import SSMChannel
from gpucompare.targets.ec2.ssm import SsmRunner
from tests.support.ec2_support import any_image_id
from tests.support.target_helpers import wait_for


@pytest.fixture
def host(working_instances: dict[str, Any], aws_client: Any, tmp_path: Path) -> dict[str, Any]:
    """A moto instance whose commands run here, a count of the SendCommand calls made to it,
    and a way to make a fresh channel to it (as a retried task would)."""
    import boto3

    ssm = boto3.client("ssm", region_name="us-east-1", endpoint_url=working_instances["proxy"].url)
    sent: list[str] = []
    ssm.meta.events.register("before-call.ssm.SendCommand",
                             lambda params, **_: sent.append(str(params)))
    instance_id = aws_client("ec2").run_instances(ImageId=any_image_id(aws_client), MinCount=1, MaxCount=1,
                                                  InstanceType="g4dn.xlarge")["Instances"][0]["InstanceId"]
    (tmp_path / "code").mkdir()

    def channel() -> SSMChannel:
        return SSMChannel(runner=SsmRunner(ssm, instance_id, poll_interval_s=0.1), address="10.0.0.10",
                          python="python3", code_dir=str(tmp_path / "code"), run_dir=str(tmp_path / "run"))

    return {"channel": channel, "sent": sent, "tmp": tmp_path}


def _worker(marker: str, point_dir: Path, seconds: float) -> Role:
    """A worker role that runs ``seconds``, then writes its one record."""
    record = point_dir / "worker-0.jsonl"
    return Role(name="worker-0", kind="worker", host_index=0, env={MARKER_VARIABLE: f"{marker}/worker-0"},
                argv=("sh", "-c", f"sleep {seconds}; echo '{{\"images_per_sec\": 1.0}}' > {record}"),
                timeout_s=60)


def test_a_retry_after_a_try_killed_mid_run_sends_no_second_command(host: dict[str, Any]) -> None:
    marker = "gcd-" + hashlib.sha256(b"attach").hexdigest()[:12]
    first = host["channel"]()
    role = _worker(marker, Path(first.point_dir(marker)), seconds=3)
    first.launch(role, marker, kill_grace_s=2)
    assert len(host["sent"]) == 1
    wait_for(lambda: first.statuses(marker, [role])["worker-0"].state == "running", 20, "the role running")
    # the first try is killed here: the retry is a new channel, knowing nothing of first's command
    retry = host["channel"]()
    assert retry.attach(marker, [role]) is True
    assert len(host["sent"]) == 1  # attached: nothing sent again
    assert retry.statuses(marker, [role])["worker-0"].state == "running"
    wait_for(lambda: retry.statuses(marker, [role])["worker-0"].state == "exit", 30, "the role's end")
    assert retry.statuses(marker, [role])["worker-0"].exit_code == 0
    assert retry.worker_output(marker, role).strip() == '{"images_per_sec": 1.0}'


def test_a_stopped_or_unknown_point_is_not_attached_to(host: dict[str, Any]) -> None:
    marker = "gcd-" + hashlib.sha256(b"stopped").hexdigest()[:12]
    first = host["channel"]()
    role = _worker(marker, Path(first.point_dir(marker)), seconds=30)
    assert first.attach(marker, [role]) is False  # nothing was ever sent for this point
    first.launch(role, marker, kill_grace_s=2)
    wait_for(lambda: first.statuses(marker, [role])["worker-0"].state == "running", 20, "the role running")
    first.stop(marker, grace_s=1)  # cancels its command: a retry must start over, not follow it
    retry = host["channel"]()
    wait_for(lambda: retry.attach(marker, [role]) is False, 20, "the cancelled command to count as failed")
    assert retry.statuses(marker, [role]) == {}  # nothing adopted
