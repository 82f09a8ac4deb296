"""Launching an ``ec2`` target's instance: what ``prepare`` sends to RunInstances and waits for.

The idempotency ``ClientToken`` (``client_token``: one per run and market, whatever the try),
the boot script that schedules the
power-off (``user_data_script``), the AMI (an id or the SSM parameter that names it), the
RunInstances request (IMDSv2, encrypted root volume deleted on termination,
``InstanceInitiatedShutdownBehavior=terminate``, tags, spot options), spot with the
on-demand fallback on refused capacity, and the run's instance found again or launched from its
launch plan (``Ec2Launcher.find_or_launch``). The wait until it is usable is ``readiness``'s.
``Ec2Launcher`` holds what needs the target's clients and options; ``Ec2Target``
(``target.py``) coordinates it with the other parts.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from typing import Any

from gpucompare.config import patterns
from gpucompare.errors import TransientError
from gpucompare.targets import runs
from gpucompare.targets.base import TargetConfigError, TargetError, TargetSpec
from gpucompare.targets.ec2.aws_errors import client_error_code, permanent_aws_error_code
from gpucompare.targets.ec2.options import (
    DEPLOYMENT_TAG,
    EXPIRES_AT_TAG,
    RUN_ID_TAG,
    SPOT_CAPACITY_ERRORS,
    Ec2Options,
)
from gpucompare.targets.ec2.placement import (
    CAPACITY_ERRORS,
    QUOTA_ERRORS,
    SPOT_ONLY_REFUSALS,
    LaunchRefused,
    Placement,
    exhausted,
    offered_zones,
    quota_advice,
    refusal,
)
from gpucompare.targets.ec2.states import ALIVE_STATES, DEAD_STATES

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


def client_token(deployment: str, run_id: str, market: str, dead: tuple[str, ...] = (),
                 placement: str = "", generation: int = 0) -> str:
    """RunInstances' idempotency token (at most 64 ASCII characters), the same for every try of
    the run: a call retried by botocore after a lost answer, and a task retry whose tag lookup
    does not see the instance yet (DescribeInstances is eventually consistent), get the first
    call's instance back instead of launching a second one. ``dead``: the run's instances
    already gone (terminated, stopped: a spot reclaim, a failed try's teardown), which the
    lookup sees; each one gives a new token, so a retry after a lost instance launches anew.
    ``placement``: the subnet or zone asked for (``Placement.label``; "" for AWS's choice): each
    place is its own request, so it has its own token. ``generation``: the launch plan's
    (``RunStorage.launch_plan``): a plan made anew is a new request."""
    parts = [deployment, run_id, market, *sorted(dead)]
    parts += [f"placement={placement}"] if placement else []
    parts += [f"plan={generation}"] if generation else []
    seed = "\0".join(parts)
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
        """The image's root device; a refused or unknown image names the fleet option ``ami``."""
        from botocore.exceptions import ClientError

        try:
            images = self.ec2_hook.conn.describe_images(ImageIds=[image_id]).get("Images", [])
        except ClientError as exc:
            raise refusal(exc, f"DescribeImages {image_id} (ec2 option 'ami' {self.options.ami!r})") from exc
        if not images:  # no retry makes it exist: fail at once
            raise TargetConfigError(f"ec2 option 'ami': AMI {image_id} does not exist in {self.spec.region} "
                                    f"(from {self.options.ami!r})")
        return images[0].get("RootDeviceName") or "/dev/sda1"

    def placements(self) -> list[Placement]:
        """Where the launch may go, in the order tried: the fleet entry's ``subnets`` (or
        ``subnet_id``), else its ``availability_zones``, else every zone of the region offering
        the type (DescribeInstanceTypeOfferings; unreadable: AWS chooses)."""
        options = self.options
        subnets = list(options.subnets) or ([options.subnet_id] if options.subnet_id else [])
        if subnets:
            return [Placement(subnet_id=subnet) for subnet in subnets]
        zones: list[str] | None = list(options.availability_zones)
        if not zones:
            zones = offered_zones(self.ec2_hook.conn, self.spec.instance_type, self.spec.region)
            if zones == []:
                raise LaunchRefused(f"instance type {self.spec.instance_type} is not offered in any zone of "
                                    f"{self.spec.region} (DescribeInstanceTypeOfferings): choose another "
                                    "region or instance type")
        return [Placement(zone=zone) for zone in zones or []] or [Placement()]

    def run_instances_request(self, run_id: str, image_id: str, ttl_minutes: int, expires_at: str,
                              *, spot: bool, dead: tuple[str, ...] = (),
                              placement: Placement | None = None, generation: int = 0) -> dict[str, Any]:
        """The RunInstances parameters (everything ``target``'s module docstring promises): a
        function of its arguments and the options only, so a retry with the same token sends
        the same request."""
        placement = placement or Placement()
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
                                        dead, placement.label, generation),
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
            **placement.request_fields(),
        }
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
               dead: tuple[str, ...] = (), generation: int = 0) -> tuple[str, str]:
        """RunInstances in each allowed place (``placements``) until one has capacity: spot in
        every place first if asked, then on-demand in every place (spot capacity refused falls
        back to on-demand). Returns the new (or, for a repeated token, the earlier) instance's id
        and the market it got. A quota refusal fails at once naming the quota; every place without
        capacity ends in ``LaunchRefused`` naming what was tried and what to change; any other
        permanent refusal names the fleet option at fault."""
        tried: list[tuple[str, str, str]] = []
        places = self.placements()
        markets = (True, False) if self.spec.market == "spot" else (False,)
        for spot in markets:
            for place in places:
                request = self.run_instances_request(run_id, image_id, ttl_minutes, expires_at, spot=spot,
                                                     dead=dead, placement=place, generation=generation)
                instance, code = self._try_launch(request, spot, place, tried)
                if instance is not None:
                    log.info("Launched %s instance %s (%s) for run %s in %s", "spot" if spot else "on-demand",
                             instance["InstanceId"], self.spec.instance_type, run_id,
                             place.label or instance.get("Placement", {}).get("AvailabilityZone"))
                    return instance["InstanceId"], "spot" if spot else "on_demand"
                if spot and code in SPOT_ONLY_REFUSALS:
                    break  # a spot quota or price: no other place changes it, on-demand next
        raise exhausted(self.spec.instance_type, self.spec.region, tried, self.spec.market == "spot")

    def _try_launch(self, request: dict[str, Any], spot: bool, place: Placement,
                    tried: list[tuple[str, str, str]]) -> tuple[dict[str, Any] | None, str | None]:
        """One RunInstances: (the instance, None) when it launched, else (None, the capacity code
        that refused it, also recorded in ``tried``); raises anything else."""
        from botocore.exceptions import ClientError

        market = "spot" if spot else "on-demand"
        where = f" in {place.label}" if place.label else ""
        what = f"RunInstances ({market} {self.spec.instance_type}{where})"
        try:
            return self.ec2_hook.conn.run_instances(**request)["Instances"][0], None
        except ClientError as exc:
            code = client_error_code(exc) or ""
            if code in QUOTA_ERRORS and not (spot and code in SPOT_ONLY_REFUSALS):
                advice = quota_advice(code, self.spec.instance_type, self.spec.region, spot)
                raise LaunchRefused(f"{what}: {advice}") from exc
            if code in CAPACITY_ERRORS or (spot and code in SPOT_CAPACITY_ERRORS):
                log.warning("%s: %s; trying the next place the fleet entry allows", what, code)
                tried.append((market, place.label, code))
                return None, code
            raise refusal(exc, what) from exc

    @staticmethod
    def market_of(instance: dict[str, Any]) -> str:
        return "spot" if instance.get("InstanceLifecycle") == "spot" else "on_demand"

    def find_or_launch(self, run_id: str, storage: Any,
                       fresh_plan: Callable[[], dict[str, Any]]) -> tuple[str, str, str | None]:
        """The run's instance: the one already running (found by tag), else launched from the
        run's launch plan (``storage.launch_plan``: kept in S3, so every try sends the same
        request and token; ``fresh_plan`` makes a new one). Returns (instance id, market,
        expires-at)."""
        known = self.find(run_id, (*ALIVE_STATES, *DEAD_STATES))
        existing = [i for i in known if i["State"]["Name"] in ALIVE_STATES]
        dead = tuple(i["InstanceId"] for i in known if i not in existing)
        if existing:
            instance = existing[0]
            instance_id, market = instance["InstanceId"], self.market_of(instance)
            log.info("Run %s already has instance %s (%s): reusing it", run_id, instance_id, market)
            return instance_id, market, tag_of(instance, EXPIRES_AT_TAG)
        plan = storage.launch_plan(run_id, dead, fresh_plan)
        storage.record_region()
        instance_id, market = self.launch(run_id, plan["image_id"], int(plan["ttl_minutes"]),
                                          plan["expires_at"], dead=dead, generation=int(plan["generation"]))
        return instance_id, market, plan["expires_at"]


def tag_of(instance: dict[str, Any], key: str) -> str | None:
    """The value of one of an instance's tags (DescribeInstances' ``Tags``), if it has it."""
    for tag in instance.get("Tags") or []:
        if tag.get("Key") == key:
            return tag.get("Value")
    return None
