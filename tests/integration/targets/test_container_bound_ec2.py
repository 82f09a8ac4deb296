"""The ec2 target's container is bound to its sweep: a worker hung past its time limit, or a
sweep command cancelled through SSM, leaves no container running on the instance.

Moto's server stands in for AWS and the stand-in SSM agent (``tests/support/ssm_agent.py``)
for the agent on the instance: the sweep script the target sends really runs here, in bash,
with the stand-in ``docker`` (``tests/support/fake_docker.py``) first on its PATH, whose
containers keep running when their client is killed, as a real daemon's do, until a
``docker kill`` names them. Stands in for a p5 instance with Docker and the NVIDIA Container
Toolkit (no GPU, no Docker engine here).

The container runtime's deploy (bundle and image pull in one command) is run here the same way,
its wait in the deploy's trigger (``SsmSweepTrigger``), rebuilt from its ``serialize()`` output
as the triggerer does.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from gpucompare.airflow.triggers import trigger_for
from gpucompare.targets.base import TargetError, TargetState
from gpucompare.targets.ec2 import sweeps
from gpucompare.targets.ec2 import target as ec2
from tests.conftest import BENCH_PYTHON
from tests.support import fake_docker
from tests.support.ec2_support import ec2_spec, new_run_id
from tests.support.fake_docker import calls, hang_workers, install_fake_docker, killed, running_containers
from tests.support.target_helpers import ENDLESS_SWEEP, wait_for

IMAGE = "nvcr.io/nvidia/mxnet:24.06-py3"
CONTAINER_AMI_PARAMETER = "/gpucompare/test/dlami-base/bound/ami-id"


@pytest.fixture
def instance_docker(working_instances: dict[str, Any], aws_client: Any, tmp_path: Path,
                    monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A p5 target on moto whose instance runs its commands with the stand-in docker on PATH
    (``--user 0:0``: the SSM agent runs the script as root)."""
    account, agent = working_instances["account"], working_instances["agent"]
    install_fake_docker(agent.bin, expected_image=IMAGE, bench_python=BENCH_PYTHON, user="0:0",
                        runtime_check="warn")
    aws_client("ssm").put_parameter(Name=CONTAINER_AMI_PARAMETER, Value=account["image_id"], Type="String",
                                    Overwrite=True)
    monkeypatch.setattr(sweeps, "KILL_GRACE_S", 2)  # timeout's grace before SIGKILL: 30 s in production
    spec = ec2_spec(account["profile"], account["bucket"], instance_type="p5.48xlarge",
                    container_ami=f"resolve:ssm:{CONTAINER_AMI_PARAMETER}",
                    remote_root=str(tmp_path / "instance-root"), bench_python=str(BENCH_PYTHON))
    spec.gpu_count, spec.worker_runtime = 8, "ngc-24.06"
    return {"target": ec2.Ec2Target(spec), "bin": agent.bin, "agent": agent}


def _container_of(bin_dir: Path) -> str:
    (run,) = [c for c in calls(bin_dir) if c[0] == "run"]
    return run[run.index("--name") + 1]


def test_a_worker_hung_past_its_limit_leaves_no_container_on_the_instance(instance_docker) -> None:
    target, bin_dir = instance_docker["target"], instance_docker["bin"]
    hang_workers(bin_dir)  # the worker ignores SIGTERM: only a docker kill ends its container
    state = target.prepare(new_run_id())
    try:
        state = target.deploy(state)
        with pytest.raises(TargetError, match=r"ended Failed \(exit code (124|137)"):
            target.run_sweep(state, ENDLESS_SWEEP, timeout_s=8)
        name = _container_of(bin_dir)
        print(f"\nhung worker on ec2: container {name}; killed {killed(bin_dir)}; "
              f"running after the sweep {running_containers(bin_dir)}")
        assert name.startswith("gpucompare-manual__2026-11-30T02_00_00_00_00-")
        assert killed(bin_dir) == [name]  # it outlived its client: the sweep's docker kill ended it
        assert running_containers(bin_dir) == []
    finally:
        target.teardown(state)


def test_a_cancelled_sweep_command_leaves_no_container_on_the_instance(instance_docker) -> None:
    target, bin_dir = instance_docker["target"], instance_docker["bin"]
    hang_workers(bin_dir)
    state = target.prepare(new_run_id())
    try:
        state = target.deploy(state)
        started = target.start_sweep(state, ENDLESS_SWEEP, timeout_s=600)
        wait_for(lambda: running_containers(bin_dir) != [], 60, "the sweep's container")
        name = _container_of(bin_dir)
        target.runner(state).cancel(started.command_id)  # SSM kills the script's process group
        wait_for(lambda: running_containers(bin_dir) == [], 15, f"container {name} to be killed")
        print(f"\ncancelled sweep on ec2: container {name}; killed {killed(bin_dir)}")
        assert killed(bin_dir) == [name]
        assert instance_docker["agent"].running() == []
    finally:
        target.teardown(state)


def _deploy_commands(aws_client: Any, instance_id: str) -> list[dict[str, Any]]:
    commands = aws_client("ssm").list_commands(InstanceId=instance_id)["Commands"]
    return [c for c in commands if c["Comment"].startswith("gpucompare deploy ")]


def test_the_container_deploy_defers_its_one_command_and_a_retry_attaches(instance_docker,
                                                                          aws_client) -> None:
    """Two worker parts, as the DAG's deploy task runs them: ``start_deploy`` sends one command
    (bundle, then the image pull), the trigger waits for it, and a new target object (the resumed
    task, on another worker) finishes it from the JSON state: the pulled ``image@digest`` in the
    state, the pull timed by the instance. A retried deploy attaches to the command it finds."""
    from airflow.sdk.module_loading import import_string

    first, bin_dir = instance_docker["target"], instance_docker["bin"]
    state = first.prepare(new_run_id())
    try:
        state, started = first.start_deploy(state)
        (sent,) = _deploy_commands(aws_client, state.resource_id)
        assert sent["CommandId"] == started["command_id"] and "image" not in state.extra
        assert f"docker pull {IMAGE}" in "\n".join(sent["Parameters"]["commands"])
        classpath, kwargs = trigger_for(first.deploy_wait(state, started)).serialize()
        event = asyncio.run(anext(import_string(classpath)(**json.loads(json.dumps(kwargs))).run())).payload
        assert event["invocation"]["Status"] == "Success", event
        resumed = ec2.Ec2Target(first.spec)
        kept = TargetState.from_dict(json.loads(json.dumps(state.to_dict())))
        done = resumed.finish_deploy(kept, json.loads(json.dumps(started)), event)
        assert done.extra["image"] == f"nvcr.io/nvidia/mxnet@{fake_docker.DIGEST}"
        assert ["pull", IMAGE] in calls(bin_dir)
        (pull,) = [r for r in resumed.phases.records if r.phase == "pull"]
        assert pull.status == "ok" and pull.seconds is not None and pull.seconds >= 0
        print(f"\ndeferred container deploy: command {started['command_id']}, image {done.extra['image']}, "
              f"pull {pull.seconds:.0f} s by the instance's clock")
        _, again = resumed.start_deploy(done)  # a retried deploy task
        assert again["command_id"] == started["command_id"]
        assert len(_deploy_commands(aws_client, state.resource_id)) == 1  # no second SendCommand
    finally:
        first.teardown(state)
