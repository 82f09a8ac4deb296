"""Launching an ``ec2`` target's instance: what ``prepare`` sends to RunInstances and waits for.

The idempotency ``ClientToken`` (``client_token``), the boot script that schedules the
power-off (``user_data_script``), the AMI (an id or the SSM parameter that names it), the
RunInstances request (IMDSv2, encrypted root volume deleted on termination,
``InstanceInitiatedShutdownBehavior=terminate``, tags, spot options), spot with the
on-demand fallback on refused capacity, and the waits until the instance runs and its SSM
agent is online. ``Ec2LaunchMixin`` holds the methods that need the target's hooks and
options; ``Ec2Target`` (``target.py``) mixes it in.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from typing import Any
from urllib.parse import urlparse

from gpucompare.errors import TransientError
from gpucompare.targets.base import TargetConfigError, TargetError, TargetSpec
from gpucompare.targets.ec2.aws_errors import client_error_code, http_status, permanent_aws_error_code
from gpucompare.targets.ec2.options import (
    AMI_ID,
    DEPLOYMENT_TAG,
    EXPIRES_AT_TAG,
    RUN_ID_TAG,
    SPOT_CAPACITY_ERRORS,
    Ec2Options,
    run_key,
)

log = logging.getLogger(__name__)


class InstanceLookupFailed(TargetError, TransientError):
    """The tag lookup of a run's instance failed: whether one exists is unknown, so nothing is
    launched (a guess could start a second paid instance); the task's retry looks again."""


def find_run_instances(ec2_hook: Any, run_id: str, deployment: str,
                       states: tuple[str, ...]) -> list[dict[str, Any]]:
    """This deployment's instances of the run in ``states``, by their tags. "Found none" is an
    answer; a lookup that fails (after botocore's own retries) raises ``InstanceLookupFailed``,
    or the AWS error itself when its code is permanent (access denied: retrying cannot help)."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return ec2_hook.get_instances(filters=[
            {"Name": f"tag:{RUN_ID_TAG}", "Values": [run_id]},
            {"Name": f"tag:{DEPLOYMENT_TAG}", "Values": [deployment]},
            {"Name": "instance-state-name", "Values": list(states)},
        ])
    except (ClientError, BotoCoreError) as exc:
        if permanent_aws_error_code(exc):
            raise
        raise InstanceLookupFailed(
            f"cannot tell whether run {run_id} already has an instance (DescribeInstances failed: {exc}); "
            "refusing to launch one that could be a second: the task's retry looks again") from exc


def client_token(deployment: str, run_id: str, attempt: int, market: str) -> str:
    """RunInstances' idempotency token (at most 64 ASCII characters): the same run, attempt and
    market always give the same token, so a retried call returns the instance of the first."""
    return hashlib.sha256(f"{deployment}\0{run_id}\0{int(attempt)}\0{market}".encode()).hexdigest()[:64]


def current_attempt() -> int:
    """The Airflow task's try number when called inside a task, else 1."""
    try:
        from airflow.sdk import get_current_context

        return int(get_current_context()["ti"].try_number or 1)
    except Exception:  # outside a task (tests, the CLI): one attempt
        return 1


def user_data_script(ttl_minutes: int) -> str:
    """Boot script: schedule the power-off that (with shutdown behaviour terminate) kills it."""
    return (
        "#!/bin/bash\n"
        "# gpucompare: a forgotten instance powers itself off; InstanceInitiatedShutdownBehavior\n"
        "# is 'terminate', so powering off deletes it (and its encrypted volume).\n"
        f"shutdown -h +{int(ttl_minutes)} 'gpucompare: time-to-live reached'\n"
    )


class Ec2LaunchMixin:
    """Launch and wait for the run's instance (see the module docstring); part of ``Ec2Target``."""

    # provided by Ec2Target
    spec: TargetSpec
    options: Ec2Options
    ec2_hook: Any
    ssm_hook: Any

    def resolve_ami(self) -> str:
        """The AMI id: given directly, or read from the SSM parameter that names it."""
        ami = self.options.ami
        if AMI_ID.fullmatch(ami):
            return ami
        name = ami.removeprefix("resolve:ssm:")
        try:
            value = self.ssm_hook.get_parameter_value(name)
        except Exception as exc:
            raise TargetError(f"ec2 option 'ami': cannot read SSM parameter {name!r} in "
                              f"{self.spec.region}: {exc}") from exc
        if not AMI_ID.fullmatch(value.strip()):
            raise TargetError(f"ec2 option 'ami': SSM parameter {name!r} holds {value!r}, not an AMI id")
        return value.strip()

    def _root_device_name(self, image_id: str) -> str:
        images = self.ec2_hook.conn.describe_images(ImageIds=[image_id]).get("Images", [])
        if not images:  # no retry makes it exist: fail at once
            raise TargetConfigError(f"AMI {image_id} does not exist in {self.spec.region}")
        return images[0].get("RootDeviceName") or "/dev/sda1"

    def run_instances_request(self, run_id: str, image_id: str, ttl_minutes: int, expires_at: str,
                              *, spot: bool, attempt: int = 1) -> dict[str, Any]:
        """The RunInstances parameters (everything ``target``'s module docstring promises)."""
        tags = [
            {"Key": "Name", "Value": f"gpucompare-{run_key(run_id)}"[:255]},
            {"Key": RUN_ID_TAG, "Value": run_id},
            {"Key": DEPLOYMENT_TAG, "Value": self.options.deployment},
            {"Key": EXPIRES_AT_TAG, "Value": expires_at},
            *({"Key": key, "Value": value} for key, value in sorted(self.options.tags.items())),
        ]
        request: dict[str, Any] = {
            "ImageId": image_id,
            "InstanceType": self.spec.instance_type,
            "MinCount": 1,
            "MaxCount": 1,
            "ClientToken": client_token(self.options.deployment, run_id, attempt,
                                        "spot" if spot else "on_demand"),
            "IamInstanceProfile": {"Name": self.options.instance_profile},
            # hop limit 2: a container on the host (the worker image) can still reach IMDSv2
            "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled",
                                "HttpPutResponseHopLimit": 2},
            "BlockDeviceMappings": [{
                "DeviceName": self._root_device_name(image_id),
                "Ebs": {"VolumeSize": self.options.volume_size_gb, "VolumeType": "gp3",
                        "Encrypted": True, "DeleteOnTermination": True},
            }],
            "InstanceInitiatedShutdownBehavior": "terminate",
            "UserData": user_data_script(ttl_minutes),
            "TagSpecifications": [{"ResourceType": "instance", "Tags": tags},
                                  {"ResourceType": "volume", "Tags": tags}],
        }
        if self.options.subnet_id:
            request["SubnetId"] = self.options.subnet_id
        if self.options.security_group_ids:
            request["SecurityGroupIds"] = list(self.options.security_group_ids)
        if spot:
            request["InstanceMarketOptions"] = {
                "MarketType": "spot",
                # no MaxPrice: capped at the on-demand price, which the cost guard assumed
                "SpotOptions": {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"},
            }
        return request

    def _launch(self, run_id: str, image_id: str, ttl_minutes: int, expires_at: str, *,
                attempt: int) -> tuple[str, str]:
        from botocore.exceptions import ClientError

        want_spot = self.spec.market == "spot"
        if want_spot:
            try:
                request = self.run_instances_request(run_id, image_id, ttl_minutes, expires_at, spot=True,
                                                     attempt=attempt)
                instance = self.ec2_hook.conn.run_instances(**request)["Instances"][0]
                log.info("Launched spot instance %s (%s) for run %s", instance["InstanceId"],
                         self.spec.instance_type, run_id)
                return instance["InstanceId"], "spot"
            except ClientError as exc:
                code = client_error_code(exc)
                if code not in SPOT_CAPACITY_ERRORS:
                    raise TargetError(f"RunInstances (spot {self.spec.instance_type}) failed: {exc}") from exc
                log.warning("Spot capacity refused for %s in %s (%s): falling back to on-demand",
                            self.spec.instance_type, self.spec.region, code)
        request = self.run_instances_request(run_id, image_id, ttl_minutes, expires_at, spot=False,
                                             attempt=attempt)
        try:
            instance = self.ec2_hook.conn.run_instances(**request)["Instances"][0]
        except ClientError as exc:
            raise TargetError(f"RunInstances (on-demand {self.spec.instance_type}) failed: {exc}") from exc
        log.info("Launched on-demand instance %s (%s) for run %s", instance["InstanceId"],
                 self.spec.instance_type, run_id)
        return instance["InstanceId"], "on_demand"

    @staticmethod
    def _market_of(instance: dict[str, Any]) -> str:
        return "spot" if instance.get("InstanceLifecycle") == "spot" else "on_demand"

    def _waiter_config(self, timeout_s: float) -> dict[str, float]:
        delay = self.options.poll_interval_s
        return {"Delay": delay, "MaxAttempts": max(1, math.ceil(timeout_s / delay))}

    def _wait_running(self, instance_id: str) -> None:
        self.ec2_hook.get_waiter("instance_running").wait(
            InstanceIds=[instance_id], WaiterConfig=self._waiter_config(self.options.launch_timeout_s))

    def _endpoint_is_custom(self) -> bool:
        """True when SSM calls go to an endpoint that is not AWS's own (a test endpoint)."""
        host = urlparse(self.ssm_hook.conn.meta.endpoint_url).hostname or ""
        return not (host.endswith(".amazonaws.com") or host.endswith(".amazonaws.com.cn"))

    def _wait_for_ssm_agent(self, instance_id: str) -> None:
        """Wait until the instance's SSM agent reports Online (commands are refused before).

        Fallback, for AWS-compatible test endpoints only: when SSM calls go to an endpoint
        outside ``*.amazonaws.com`` (``endpoint_url`` in the connection) and that endpoint does not implement
        DescribeInstanceInformation (moto's server answers HTTP 500 "not implemented"),
        an instance in state ``running`` counts as ready, with a warning. Against AWS itself
        any error is raised.
        """
        from botocore.exceptions import ClientError

        deadline = time.monotonic() + self.options.agent_timeout_s
        while True:
            try:
                info = self.ssm_hook.conn.describe_instance_information(
                    Filters=[{"Key": "InstanceIds", "Values": [instance_id]}])
            except ClientError as exc:
                unimplemented = http_status(exc) in (500, 501) or client_error_code(exc) in (
                    "NotImplemented", "InvalidAction", "UnknownOperationException")
                if unimplemented and self._endpoint_is_custom():
                    log.warning("The endpoint does not implement DescribeInstanceInformation (%s); "
                                "treating running instance %s as ready", exc, instance_id)
                    return
                raise TargetError(f"SSM DescribeInstanceInformation for {instance_id} failed: {exc}") from exc
            pings = [item.get("PingStatus") for item in info.get("InstanceInformationList", [])]
            if "Online" in pings:
                log.info("SSM agent on %s is online", instance_id)
                return
            if time.monotonic() >= deadline:
                raise TargetError(
                    f"SSM agent on {instance_id} not online after {self.options.agent_timeout_s:.0f} s "
                    f"(status {pings or 'not registered'}): check the instance profile has "
                    f"AmazonSSMManagedInstanceCore and the subnet reaches the SSM endpoints")
            time.sleep(self.options.poll_interval_s)
