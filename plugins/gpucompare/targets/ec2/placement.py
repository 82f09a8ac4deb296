"""Where an ``ec2`` launch may go, and what RunInstances' refusals mean for it.

* ``Placement``: a subnet (fleet option ``subnets``, or ``subnet_id``) or an availability zone
  of the default VPC (``availability_zones``; neither given: every zone of the region that
  offers the instance type, from DescribeInstanceTypeOfferings), tried in order.
* ``CAPACITY_ERRORS``: no capacity in that place now, so the next place is tried; when every
  place refused, ``LaunchRefused`` names each place and its answer and what to change.
* ``QUOTA_ERRORS``: an account quota; nothing changes until it is raised, so the launch fails at
  once naming the quota (``quota_advice``).
* ``OPTION_OF_ERROR``: a permanent refusal names the fleet option that caused it (``ami``,
  ``subnets``, ``security_group_ids`` …).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from gpucompare.errors import PermanentError
from gpucompare.targets.base import TargetError
from gpucompare.targets.ec2.aws_errors import client_error_code, permanent_aws_error_code

log = logging.getLogger(__name__)


class LaunchRefused(TargetError, PermanentError):
    """RunInstances refused in a way no retry of the task can change soon (every allowed place
    without capacity, a quota reached, a bad option); the message says what to change."""


#: RunInstances codes for "no capacity of this type in this place now": the next place may have it.
CAPACITY_ERRORS = frozenset({
    "InsufficientInstanceCapacity",
    "InsufficientCapacity",
    "UnfulfillableCapacity",
    "InsufficientFreeAddressesInSubnet",
})
#: Spot refusals that no other place changes (a spot quota, a price cap): straight to on-demand.
SPOT_ONLY_REFUSALS = frozenset({"MaxSpotInstanceCountExceeded", "SpotMaxPriceTooLow"})
#: Quota codes: nothing changes until the quota is raised (so no retry, no other place).
QUOTA_ERRORS = frozenset({"VcpuLimitExceeded", "InstanceLimitExceeded", "MaxSpotInstanceCountExceeded"})
#: A permanent RunInstances/DescribeImages refusal → the fleet option at fault.
OPTION_OF_ERROR: dict[str, str] = {
    "InvalidAMIID.NotFound": "ami",
    "InvalidAMIID.Malformed": "ami",
    "InvalidAMIID.Unavailable": "ami",
    "InvalidSubnetID.NotFound": "subnets",
    "InvalidSubnet": "subnets",
    "InvalidGroup.NotFound": "security_group_ids",
    "InvalidSecurityGroupID.NotFound": "security_group_ids",
    "InvalidBlockDeviceMapping": "volume_size_gb",
    "InvalidInstanceType": "instance_type",
    "Unsupported": "instance_type (or availability_zones: the type is not offered there)",
    "UnauthorizedOperation": "aws_conn_id (its IAM policy: see `gpucompare iam-policy`)",
    "AuthFailure": "aws_conn_id (its credentials)",
    "OptInRequired": "region (not enabled for this account)",
}

#: The EC2 vCPU quotas, by instance family (the first letters of the type): (family label,
#: on-demand quota code, spot quota code). The quota's name is "Running On-Demand <label>
#: instances" or "All <label> Spot Instance Requests" (Service Quotas, service ``ec2``).
_FAMILY_QUOTAS: tuple[tuple[tuple[str, ...], str, str, str], ...] = (
    (("g", "vt"), "G and VT", "L-DB2E81BA", "L-3819A6DF"),
    (("p",), "P", "L-417A185B", "L-7212CCBC"),
)
_STANDARD_QUOTA = ("Standard (A, C, D, H, I, M, R, T, Z)", "L-1216C47A", "L-34B43A08")


@dataclass(frozen=True)
class Placement:
    """One place RunInstances is asked to use: a subnet, a zone, or neither (AWS chooses)."""

    subnet_id: str | None = None
    zone: str | None = None

    @property
    def label(self) -> str:
        """What the messages (and the idempotency token) call it."""
        if self.subnet_id:
            return f"subnet {self.subnet_id}"
        return f"zone {self.zone}" if self.zone else ""

    def request_fields(self) -> dict[str, Any]:
        if self.subnet_id:
            return {"SubnetId": self.subnet_id}
        return {"Placement": {"AvailabilityZone": self.zone}} if self.zone else {}


def offered_zones(ec2: Any, instance_type: str, region: str) -> list[str] | None:
    """The zones of the client's region that offer ``instance_type`` (sorted), from
    DescribeInstanceTypeOfferings; None when that cannot be read (the launch lets AWS choose)."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
            LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": [instance_type]}])
        return sorted({o["Location"] for page in pages for o in page.get("InstanceTypeOfferings", [])})
    except (ClientError, BotoCoreError) as exc:
        log.warning("DescribeInstanceTypeOfferings for %s in %s failed (%s): letting AWS choose the zone",
                    instance_type, region, exc)
        return None


def quota_advice(code: str, instance_type: str, region: str, spot: bool) -> str:
    """Which quota a ``QUOTA_ERRORS`` refusal is about, and how to raise it."""
    family = instance_type.split(".", 1)[0]
    label, on_demand, spot_code = _STANDARD_QUOTA
    for prefixes, name, od_code, sp_code in _FAMILY_QUOTAS:
        if family.startswith(prefixes):
            label, on_demand, spot_code = name, od_code, sp_code
    quota = (f"'All {label} Spot Instance Requests' ({spot_code})" if spot
             else f"'Running On-Demand {label} instances' ({on_demand})")
    return (f"the account's vCPU quota {quota} in {region} is reached ({code}): raise it in Service Quotas "
            f"(aws service-quotas request-service-quota-increase --service-code ec2 --quota-code "
            f"{spot_code if spot else on_demand} --desired-value N --region {region}), or choose another "
            f"region, a smaller type{', or on-demand' if spot else ''}")


def refusal(exc: BaseException, what: str) -> TargetError:
    """The error to raise for a RunInstances refusal that is neither capacity nor quota: a
    permanent one names the fleet option at fault (``OPTION_OF_ERROR``) and fails at once."""
    code = client_error_code(exc)
    option = OPTION_OF_ERROR.get(code or "")
    if option is not None:
        return LaunchRefused(f"{what} refused ({code}): check the fleet option {option}. AWS said: {exc}")
    if permanent_aws_error_code(exc):
        return LaunchRefused(f"{what} refused ({code}): the request itself is wrong (see the fleet entry's "
                             f"options). AWS said: {exc}")
    return TargetError(f"{what} failed: {exc}")


def exhausted(instance_type: str, region: str, tried: list[tuple[str, str, str]],
              spot_allowed: bool) -> LaunchRefused:
    """Every allowed place refused for capacity: what was tried, and what to change."""
    listed = "; ".join(f"{market} in {where or 'a zone of AWS choosing'}: {code}"
                       for market, where, code in tried)
    change = ["another region (fleet option region)", "another instance type",
              "more subnets or zones (fleet options subnets / availability_zones)"]
    if not spot_allowed:
        change.append("market spot")
    return LaunchRefused(f"no capacity for {instance_type} in {region} in any place the fleet entry allows "
                         f"(tried {len(tried)}: {listed}); change {', '.join(change)}, or try again later")
