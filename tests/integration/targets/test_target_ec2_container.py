"""The ec2 target with a container runtime (``worker_runtime: ngc-24.06``) against moto's server.

Moto runs no instance and no command (every Run Command succeeds at once with no output), so
the pull's result, what the deploy command writes to S3 on the instance (the pull's start and
end, what ``docker image inspect`` prints), is put there by a botocore ``before-parameter-build`` handler
of SendCommand, at the address the command names; everything else is what was
asked of the endpoint, read back from it: the AMI launched is the one under the container AMI's
SSM parameter, the pull command names the pinned image, the sweep command runs the worker with
``docker run --gpus all … image@digest python -m bench_tasks``.
"""

from __future__ import annotations

import shlex
import time
from typing import Any

import pytest

from gpucompare.config.models.values import DEFAULT_CONTAINER_AMI
from gpucompare.targets.base import TargetError
from gpucompare.targets.ec2 import target as ec2
from gpucompare.targets.runs import run_key
from tests.support.ec2_support import (
    TINY_SWEEP,
    ec2_spec,
    new_run_id,
)
from tests.support.fake_docker import DIGEST

IMAGE = "nvcr.io/nvidia/mxnet:24.06-py3"
PINNED = f"nvcr.io/nvidia/mxnet@{DIGEST}"
CONTAINER_AMI_PARAMETER = "/gpucompare/test/dlami-base/latest/ami-id"  # moto refuses /aws/ names


@pytest.fixture
def container_account(aws_account: dict[str, Any], aws_client: Any) -> dict[str, Any]:
    """The account of ``aws_account``, plus a second AMI under the container parameter."""
    images = aws_client("ec2").describe_images(
        Owners=["amazon"], Filters=[{"Name": "name", "Values": ["amzn2-ami-hvm-*"]}])["Images"]
    container_image = next(i["ImageId"] for i in images if i["ImageId"] != aws_account["image_id"])
    aws_client("ssm").put_parameter(Name=CONTAINER_AMI_PARAMETER, Value=container_image, Type="String",
                                    Overwrite=True)
    return {**aws_account, "container_image": container_image}


PULL_SECONDS = 42


def _answer_pulls(target: ec2.Ec2Target, answer: str) -> None:
    """The pull's result the instance would write (moto runs no command): at the S3 address the
    deploy command names, the pull's start and end and what its docker printed."""
    def handler(params: dict[str, Any], **_: Any) -> None:
        if not params["Comment"].startswith("gpucompare deploy "):
            return
        (line,) = [c for c in params["Parameters"]["commands"] if c.startswith("aws s3 cp ")]
        bucket, key = shlex.split(line)[-1].removeprefix("s3://").split("/", 1)
        began = int(time.time()) - PULL_SECONDS
        target.s3_hook.conn.put_object(Bucket=bucket, Key=key, Body=(
            f"pull_began {began}\npull_ended {began + PULL_SECONDS}\n{answer}").encode())

    target.ssm_hook.conn.meta.events.register("before-parameter-build.ssm.SendCommand", handler)


def _sent(aws_client: Any, state) -> dict[str, list[str]]:
    commands = aws_client("ssm").list_commands(InstanceId=state.resource_id)["Commands"]
    return {c["Comment"].split()[1]: c["Parameters"]["commands"] for c in commands
            if run_key(state.run_id) in c["Comment"].split()}


def test_ngc_runtime_launches_the_container_ami_pulls_the_pinned_image_and_runs_in_it(container_account,
                                                                                      aws_client):
    spec = ec2_spec(container_account["profile"], container_account["bucket"], instance_type="p5.48xlarge",
                    container_ami=f"resolve:ssm:{CONTAINER_AMI_PARAMETER}")
    spec.gpu_count, spec.worker_runtime = 8, "auto"  # auto: an H100 runs only in ngc-24.06
    target = ec2.Ec2Target(spec)
    assert target.options.worker_runtime == "ngc-24.06"
    _answer_pulls(target, f"pulled {PINNED}\n")
    state = target.prepare(new_run_id())
    try:
        instance = aws_client("ec2").describe_instances(InstanceIds=[state.resource_id])
        assert instance["Reservations"][0]["Instances"][0]["ImageId"] == container_account["container_image"]
        state = target.deploy(state)
        assert state.extra["image"] == PINNED
        state = target.run_sweep(state, TINY_SWEEP, timeout_s=300)
        sent = _sent(aws_client, state)
        assert sorted(sent) == ["deploy", "sweep"]  # the pull is in the deploy's one command
        assert f"docker pull {IMAGE}" in "\n".join(sent["deploy"])
        assert not any("pip install" in line or "venv" in line for line in sent["deploy"])  # no venv
        # the worker line of the sweep script: `timeout … docker run … image python -m bench_tasks sweep …`
        (run,) = [shlex.split(line[line.index("docker run "):])
                  for line in sent["sweep"] if "docker run " in line]
        assert run[:run.index(PINNED)].count("--gpus") == 1 and "--gpus" in run and "all" in run
        assert {"--rm", "--init", "--user"} <= set(run) and run[run.index("--user") + 1] == "0:0"
        assert f"{state.workdir}:/opt/gpucompare/code:ro" in run
        assert run[run.index(PINNED) + 1:run.index(PINNED) + 5] == ["python", "-m", "bench_tasks", "sweep"]
        assert "GPUCOMPARE_WORKER_RUNTIME=ngc-24.06" in run and f"GPUCOMPARE_WORKER_IMAGE={PINNED}" in run
        phases = [r.phase for r in target.phases.records]
        assert phases == ["provision", "deploy", "pull", "sweep"]
        pull = target.phases.records[2]
        assert pull.seconds == PULL_SECONDS and pull.status == "ok"  # timed by the instance's clock
        assert all(r.billed for r in target.phases.records)  # an ec2 instance is paid for throughout
    finally:
        target.teardown(state)


def test_the_default_container_ami_is_aws_public_deep_learning_base_parameter(container_account):
    spec = ec2_spec(container_account["profile"], container_account["bucket"], instance_type="p5.48xlarge")
    spec.gpu_count, spec.worker_runtime = 8, "ngc-24.06"
    assert ec2.Ec2Target(spec).options.ami == DEFAULT_CONTAINER_AMI
    assert DEFAULT_CONTAINER_AMI.startswith("/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu")
    spec.instance_type, spec.gpu_count, spec.worker_runtime = "g4dn.xlarge", 1, "pip-cu112"
    assert ec2.Ec2Target(spec).options.ami == spec.options["ami"]  # a venv runtime keeps its AMI


def test_a_pull_answer_with_another_digest_or_none_fails_the_deploy(container_account):
    spec = ec2_spec(container_account["profile"], container_account["bucket"], instance_type="p5.48xlarge",
                    container_ami=f"resolve:ssm:{CONTAINER_AMI_PARAMETER}")
    spec.gpu_count, spec.worker_runtime = 8, "ngc-24.06"
    target = ec2.Ec2Target(spec)
    _answer_pulls(target, "Error response from daemon: manifest unknown\n")
    state = target.prepare(new_run_id())
    try:
        with pytest.raises(Exception, match="no image reference"):
            target.deploy(state)
        state.workdir, state.extra["bench_python"] = "/opt/gpucompare/bench-x", "python"
        with pytest.raises(TargetError, match="image@digest"):  # no sweep without the pinned image
            target.sweep_commands(state, TINY_SWEEP)
    finally:
        target.teardown(state)
