"""Launching an ``ec2`` target's instance: what ``prepare`` sends to RunInstances and waits for.

The idempotency ``ClientToken`` (``client_token``: one per run and market, whatever the try),
the boot script that schedules the
power-off (``user_data_script``), the AMI (an id or the SSM parameter that names it), the
RunInstances request (IMDSv2, encrypted root volume deleted on termination,
``InstanceInitiatedShutdownBehavior=terminate``, tags, spot options), spot with the
on-demand fallback on refused capacity, and the wait until the instance runs and its SSM
agent is online (``ReadyPoller``: in the task or in a trigger). ``Ec2Launcher`` holds what
needs the target's clients and options; ``Ec2Target`` (``target.py``) is built from it, a
``storage.RunStorage`` and an ``ssm.SsmRunner`` per instance.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from typing import Any
from urllib.parse import urlparse

from gpucompare.config import patterns
from gpucompare.errors import TransientError
from gpucompare.targets import runs
from gpucompare.targets.base import TargetConfigError, TargetError, TargetSpec
from gpucompare.targets.ec2.aws_errors import client_error_code, http_status, permanent_aws_error_code
from gpucompare.targets.ec2.options import (
    DEPLOYMENT_TAG,
    EXPIRES_AT_TAG,
    RUN_ID_TAG,
    SPOT_CAPACITY_ERRORS,
    Ec2Options,
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


def client_token(deployment: str, run_id: str, market: str, dead: tuple[str, ...] = ()) -> str:
    """RunInstances' idempotency token (at most 64 ASCII characters), the same for every try of
    the run: a call retried by botocore after a lost answer, and a task retry whose tag lookup
    does not see the instance yet (DescribeInstances is eventually consistent), get the first
    call's instance back instead of launching a second one. ``dead``: the run's instances
    already gone (terminated, stopped: a spot reclaim, a failed try's teardown), which the
    lookup sees; each one gives a new token, so a retry after a lost instance launches anew."""
    seed = "\0".join([deployment, run_id, market, *sorted(dead)])
    return hashlib.sha256(seed.encode()).hexdigest()[:64]


def user_data_script(ttl_minutes: int) -> str:
    """Boot script: schedule the power-off that (with shutdown behaviour terminate) kills it."""
    return (
        "#!/bin/bash\n"
        "# gpucompare: a forgotten instance powers itself off; InstanceInitiatedShutdownBehavior\n"
        "# is 'terminate', so powering off deletes it (and its encrypted volume).\n"
        f"shutdown -h +{int(ttl_minutes)} 'gpucompare: time-to-live reached'\n"
    )


class Ec2Launcher:
    """Launch the run's instance and wait for it (see the module docstring): one part of
    ``Ec2Target``, usable alone with a spec, its options and the clients (``AwsClients``)."""

    def __init__(self, spec: TargetSpec, options: Ec2Options, clients: Any) -> None:
        self.spec, self.options, self.clients = spec, options, clients

    @property
    def ec2_hook(self) -> Any:
        return self.clients.ec2_hook

    @property
    def ssm_hook(self) -> Any:
        return self.clients.ssm_hook

    def find(self, run_id: str, states: tuple[str, ...]) -> list[dict[str, Any]]:
        """This deployment's instances of the run in ``states`` (``find_run_instances``)."""
        return find_run_instances(self.ec2_hook, run_id, self.options.deployment, states)

    def resolve_ami(self) -> str:
        """The AMI id: given directly, or read from the SSM parameter that names it."""
        ami = self.options.ami
        if patterns.AMI_ID.fullmatch(ami):
            return ami
        name = ami.removeprefix("resolve:ssm:")
        try:
            value = self.ssm_hook.get_parameter_value(name)
        except Exception as exc:
            raise TargetError(f"ec2 option 'ami': cannot read SSM parameter {name!r} in "
                              f"{self.spec.region}: {exc}") from exc
        if not patterns.AMI_ID.fullmatch(value.strip()):
            raise TargetError(f"ec2 option 'ami': SSM parameter {name!r} holds {value!r}, not an AMI id")
        return value.strip()

    def root_device_name(self, image_id: str) -> str:
        images = self.ec2_hook.conn.describe_images(ImageIds=[image_id]).get("Images", [])
        if not images:  # no retry makes it exist: fail at once
            raise TargetConfigError(f"AMI {image_id} does not exist in {self.spec.region}")
        return images[0].get("RootDeviceName") or "/dev/sda1"

    def run_instances_request(self, run_id: str, image_id: str, ttl_minutes: int, expires_at: str,
                              *, spot: bool, dead: tuple[str, ...] = ()) -> dict[str, Any]:
        """The RunInstances parameters (everything ``target``'s module docstring promises)."""
        tags = [
            {"Key": "Name", "Value": f"gpucompare-{runs.run_key(run_id)}"[:255]},
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
            "ClientToken": client_token(self.options.deployment, run_id, "spot" if spot else "on_demand",
                                        dead),
            "IamInstanceProfile": {"Name": self.options.instance_profile},
            # hop limit 2: a container on the host (the worker image) can still reach IMDSv2
            "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled",
                                "HttpPutResponseHopLimit": 2},
            "BlockDeviceMappings": [{
                "DeviceName": self.root_device_name(image_id),
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

    def launch(self, run_id: str, image_id: str, ttl_minutes: int, expires_at: str, *,
               dead: tuple[str, ...] = ()) -> tuple[str, str]:
        """RunInstances (spot first if asked, on-demand when spot capacity is refused): the new
        (or, for a repeated token, the earlier) instance's id and the market it got."""
        from botocore.exceptions import ClientError

        want_spot = self.spec.market == "spot"
        if want_spot:
            try:
                request = self.run_instances_request(run_id, image_id, ttl_minutes, expires_at, spot=True,
                                                     dead=dead)
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
                                             dead=dead)
        try:
            instance = self.ec2_hook.conn.run_instances(**request)["Instances"][0]
        except ClientError as exc:
            raise TargetError(f"RunInstances (on-demand {self.spec.instance_type}) failed: {exc}") from exc
        log.info("Launched on-demand instance %s (%s) for run %s", instance["InstanceId"],
                 self.spec.instance_type, run_id)
        return instance["InstanceId"], "on_demand"

    @staticmethod
    def market_of(instance: dict[str, Any]) -> str:
        return "spot" if instance.get("InstanceLifecycle") == "spot" else "on_demand"

    def waiter_config(self, timeout_s: float) -> dict[str, float]:
        delay = self.options.poll_interval_s
        return {"Delay": delay, "MaxAttempts": max(1, math.ceil(timeout_s / delay))}

    def endpoint_is_custom(self) -> bool:
        """True when SSM calls go to an endpoint that is not AWS's own (a test endpoint)."""
        host = urlparse(self.ssm_hook.conn.meta.endpoint_url).hostname or ""
        return not (host.endswith(".amazonaws.com") or host.endswith(".amazonaws.com.cn"))

    def ready_poller(self, instance_id: str, deadline: float) -> ReadyPoller:
        """The wait until the instance runs and its SSM agent is online (``ReadyPoller``)."""
        return ReadyPoller(self.ec2_hook.conn, self.ssm_hook.conn, instance_id, deadline,
                           custom_endpoint=self.endpoint_is_custom())


#: Instance states from which it never becomes ready (a spot instance reclaimed at once, a
#: launch refused after RunInstances answered, the time-to-live reached).
DEAD_STATES = ("shutting-down", "terminated", "stopping", "stopped")


class ReadyPoller:
    """The wait until a launched instance is ``running`` and its SSM agent reports Online
    (commands are refused before), one ``poll()`` at a time: None while it is not ready, else
    ``{"ready": instance_id}``; raises ``TargetError`` when the instance died or ``deadline``
    (epoch seconds) passed. The same object waits in the task (``Ec2Target.prepare``) or in
    the triggerer (``airflow.triggers.SweepTrigger``).

    An instance id not known yet (DescribeInstances right after RunInstances is eventually
    consistent) counts as pending. Fallback, for AWS-compatible test endpoints only
    (``custom_endpoint``: SSM calls go outside ``*.amazonaws.com``): an endpoint that does not
    implement DescribeInstanceInformation (moto's server answers HTTP 500 "not implemented")
    counts a running instance as ready, with a warning. Against AWS any error is raised.
    """

    def __init__(self, ec2: Any, ssm: Any, instance_id: str, deadline: float, *,
                 custom_endpoint: bool = False) -> None:
        self.ec2, self.ssm, self.instance_id = ec2, ssm, instance_id
        self.deadline, self.custom_endpoint = deadline, custom_endpoint
        self.running = False
        self.pings: list[Any] = []

    def poll(self) -> dict[str, Any] | None:
        if not self.running:
            state = self._instance_state()
            if state in DEAD_STATES:
                raise TargetError(f"instance {self.instance_id} is {state} before it was ready "
                                  "(spot capacity reclaimed, or the launch failed after RunInstances)")
            self.running = state == "running"
            if self.running:
                log.info("Instance %s is running", self.instance_id)
        if self.running and self._agent_online():
            log.info("SSM agent on %s is online", self.instance_id)
            return {"ready": self.instance_id}
        if time.time() >= self.deadline:
            if not self.running:
                raise TargetError(f"instance {self.instance_id} not running in time")
            raise TargetError(
                f"SSM agent on {self.instance_id} not online in time "
                f"(status {self.pings or 'not registered'}): "
                "check the instance profile has AmazonSSMManagedInstanceCore and the subnet reaches "
                "the SSM endpoints")
        return None

    def close(self) -> None:
        """Nothing to close: each poll is a call of the clients."""

    def _instance_state(self) -> str | None:
        from botocore.exceptions import ClientError

        try:
            reservations = self.ec2.describe_instances(InstanceIds=[self.instance_id])["Reservations"]
        except ClientError as exc:
            if client_error_code(exc) == "InvalidInstanceID.NotFound":
                return None  # not visible yet
            raise
        states = [i["State"]["Name"] for r in reservations for i in r.get("Instances", [])]
        return states[0] if states else None

    def _agent_online(self) -> bool:
        from botocore.exceptions import ClientError

        try:
            info = self.ssm.describe_instance_information(
                Filters=[{"Key": "InstanceIds", "Values": [self.instance_id]}])
        except ClientError as exc:
            unimplemented = http_status(exc) in (500, 501) or client_error_code(exc) in (
                "NotImplemented", "InvalidAction", "UnknownOperationException")
            if unimplemented and self.custom_endpoint:
                log.warning("The endpoint does not implement DescribeInstanceInformation (%s); "
                            "treating running instance %s as ready", exc, self.instance_id)
                return True
            raise TargetError(
                f"SSM DescribeInstanceInformation for {self.instance_id} failed: {exc}") from exc
        self.pings = [item.get("PingStatus") for item in info.get("InstanceInformationList", [])]
        return "Online" in self.pings
