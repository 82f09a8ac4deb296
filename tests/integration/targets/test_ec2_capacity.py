"""Launching at the edges of an account (issue 32): no capacity in some zones, a quota reached,
a bad ``ami``, a retry whose lookup misses, a teardown AWS keeps throttling.

Moto's server stands in for EC2 behind the fault proxy (tests/support/fault_proxy.py), which
refuses RunInstances per zone (the request's ``Placement.AvailabilityZone``), answers quota and
throttling errors, refuses a repeated ClientToken sent with other parameters (as AWS does) and
counts every call. Each docstring says what happened before.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpucompare.targets import sweeper
from gpucompare.targets.base import TargetError
from gpucompare.targets.ec2 import target as ec2
from gpucompare.targets.ec2 import teardown
from gpucompare.targets.ec2.options import EXPIRES_AT_TAG, SWEEP_NOW_TAG
from gpucompare.targets.ec2.placement import LaunchRefused
from gpucompare.targets.ec2.readiness import InstanceLost
from tests.support.ec2_support import CONN_ID, ec2_spec, live_instances, new_run_id
from tests.support.fault_proxy import FaultProxy
from tests.support.fixtures_aws import account_on

ZONES = ["us-east-1a", "us-east-1b", "us-east-1c"]


@pytest.fixture
def proxied(aws_endpoint: str, aws_client: Any, monkeypatch: pytest.MonkeyPatch,
            s3_bucket: str) -> Iterator[Any]:
    proxy = FaultProxy(aws_endpoint, read_timeout_s=30)
    try:
        account = account_on(proxy.url, aws_client, monkeypatch, s3_bucket)
        yield proxy, account
    finally:
        proxy.close()


def target_of(account: dict[str, Any], **options: Any) -> ec2.Ec2Target:
    return ec2.Ec2Target(ec2_spec(account["profile"], account["bucket"], **options))


def zone_of(aws_client: Any, instance_id: str) -> str:
    reservations = aws_client("ec2").describe_instances(InstanceIds=[instance_id])["Reservations"]
    return reservations[0]["Instances"][0]["Placement"]["AvailabilityZone"]


def no_capacity(proxy: FaultProxy, zone: str) -> None:
    proxy.add("RunInstances", "refuse", times=10**6, code="InsufficientInstanceCapacity", status=500,
              where={"Placement.AvailabilityZone": zone})


def test_no_capacity_in_two_of_three_zones_launches_in_the_third(proxied: Any, aws_client: Any) -> None:
    """Before: InsufficientInstanceCapacity was retried against the same place every time (12
    RunInstances over about 7 minutes of backoff), then failed with no hint."""
    proxy, account = proxied
    for zone in ZONES[:2]:
        no_capacity(proxy, zone)
    target = target_of(account, availability_zones=ZONES)
    run_id = new_run_id()
    state, _ = target.start_prepare(run_id)
    assert zone_of(aws_client, state.resource_id) == "us-east-1c"
    assert proxy.launches == 1
    assert [i["InstanceId"] for i in live_instances(aws_client, run_id)] == [state.resource_id]
    target.teardown(state)
    assert live_instances(aws_client, run_id) == []


def test_no_capacity_anywhere_fails_naming_what_was_tried_and_what_to_change(proxied: Any,
                                                                              aws_client: Any) -> None:
    """Every zone the region offers the type in (DescribeInstanceTypeOfferings, no option given)
    is tried once (botocore's own retries aside), then LaunchRefused, a permanent error."""
    proxy, account = proxied
    offered = sorted({o["Location"] for o in aws_client("ec2").describe_instance_type_offerings(
        LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": ["g4dn.xlarge"]}],
    )["InstanceTypeOfferings"]})
    for zone in offered:
        no_capacity(proxy, zone)
    run_id = new_run_id()
    with pytest.raises(LaunchRefused) as refused:
        target_of(account).start_prepare(run_id)
    message = str(refused.value)
    assert f"tried {len(offered)}:" in message and all(f"zone {zone}: InsufficientInstanceCapacity" in message
                                                         for zone in offered)
    assert "another region" in message and "another instance type" in message and "market spot" in message
    assert proxy.launches == 0 and live_instances(aws_client, run_id) == []


def test_a_quota_error_fails_at_once_naming_the_quota(proxied: Any, aws_client: Any) -> None:
    """Before: VcpuLimitExceeded was retried 4 times though nothing changes until the quota is raised."""
    proxy, account = proxied
    proxy.add("RunInstances", "refuse", times=10**6, code="VcpuLimitExceeded", status=400)
    run_id = new_run_id()
    with pytest.raises(LaunchRefused) as refused:
        target_of(account, availability_zones=ZONES).start_prepare(run_id)
    assert "'Running On-Demand G and VT instances' (L-DB2E81BA)" in str(refused.value)
    assert "request-service-quota-increase" in str(refused.value)
    assert proxy.count("RunInstances") == 1 and live_instances(aws_client, run_id) == []


def test_a_missing_ami_names_the_fleet_option(proxied: Any) -> None:
    """Before: an ``ami`` that failed at DescribeImages did not name the option."""
    proxy, account = proxied
    proxy.add("DescribeImages", "refuse", times=10**6, code="InvalidAMIID.NotFound", status=400)
    with pytest.raises(LaunchRefused, match="check the fleet option ami"):
        target_of(account, availability_zones=ZONES).start_prepare(new_run_id())
    assert proxy.launches == 0


def test_a_retry_whose_lookup_misses_sends_the_first_try_s_request_and_gets_its_instance(
        proxied: Any, aws_client: Any) -> None:
    """Before: the retry recomputed the expires-at tag while its token stayed the same, and AWS
    refused it (IdempotentParameterMismatch): a wasted try, one instance running."""
    proxy, account = proxied
    run_id = new_run_id()
    first, _ = target_of(account, availability_zones=ZONES).start_prepare(run_id)
    time.sleep(1.1)  # a later second: a recomputed expires-at would differ
    proxy.add("DescribeInstances", "empty", times=1)  # the retry's tag lookup does not see it yet
    second, _ = target_of(account, availability_zones=ZONES).start_prepare(run_id)
    assert second.resource_id == first.resource_id and second.extra["expires_at"] == first.extra["expires_at"]
    assert proxy.launches == 1 and proxy.count("RunInstances") == 2
    target_of(account).teardown(second)
    assert live_instances(aws_client, run_id) == []


def test_a_teardown_throttled_past_its_patience_hands_the_instance_to_the_sweeper(
        proxied: Any, aws_client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: five throttled tries ended the teardown; the instance ran 77 minutes more, until
    its expires-at. Patience shortened to 3 s here (TEARDOWN_PATIENCE_S is 10 minutes)."""
    proxy, account = proxied
    monkeypatch.setattr(teardown, "TEARDOWN_PATIENCE_S", 3.0)
    monkeypatch.setattr(teardown, "TEARDOWN_BACKOFF_S", 0.2)
    run_id = new_run_id()
    target = target_of(account, availability_zones=ZONES)
    state, _ = target.start_prepare(run_id)
    proxy.add("TerminateInstances", "throttle", times=10**6)
    handed = f"handed {state.resource_id} to the sweeper \\(tag {SWEEP_NOW_TAG}\\)"
    with pytest.raises(TargetError, match=handed):
        target.teardown(state)
    instance = live_instances(aws_client, run_id)[0]
    tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
    assert SWEEP_NOW_TAG in tags and "throttled" in tags[SWEEP_NOW_TAG]
    expires_at = datetime.fromisoformat(tags[EXPIRES_AT_TAG].replace("Z", "+00:00"))
    assert expires_at > datetime.now(UTC) + timedelta(minutes=30)  # only the marker makes the sweeper take it
    proxy.clear()
    swept = sweeper.sweep_expired_instances(["us-east-1"], aws_conn_id=CONN_ID,
                                            deployment=target.options.deployment, former=())
    assert [item.instance_id for item in swept] == [state.resource_id]
    assert swept[0].reason.startswith("handed to the sweeper by its teardown")
    assert all(i["State"]["Name"] in ("shutting-down", "terminated")
               for i in live_instances(aws_client, run_id))


class SimulatedClock:
    """Real time plus every sleep the teardown asked for, skipped: its backoff passes at once while
    its clock shows the minutes go by; ``at(seconds, call)`` runs ``call`` when that much simulated
    time has passed (checked at each sleep)."""

    def __init__(self) -> None:
        self.skipped = 0.0
        self.started = self.now()
        self.due: list[tuple[float, Any]] = []

    def now(self) -> float:
        return time.monotonic() + self.skipped

    def at(self, seconds: float, call: Any) -> None:
        self.due.append((self.started + seconds, call))

    def sleep(self, seconds: float) -> None:
        self.skipped += seconds
        for item in [item for item in self.due if self.now() >= item[0]]:
            self.due.remove(item)
            item[1]()


def test_a_teardown_throttled_for_four_minutes_terminates_within_its_patience(
        proxied: Any, aws_client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """TerminateInstances throttled for 4 minutes (every call answered RequestLimitExceeded):
    the teardown keeps trying (10 minutes of patience) and terminates the instance. The 4 minutes
    pass on the teardown's clock (``SimulatedClock``: its backoff sleeps are skipped, botocore's
    own retries and the calls take real time), so the test does not wait them."""
    proxy, account = proxied
    run_id = new_run_id()
    target = target_of(account, availability_zones=ZONES)
    state, _ = target.start_prepare(run_id)
    proxy.add("TerminateInstances", "throttle", times=10**6)
    clock = SimulatedClock()
    monkeypatch.setattr(teardown, "CLOCK", clock)
    clock.at(240.0, proxy.clear)
    started, real_start = clock.now(), time.monotonic()
    target.teardown(state)
    took = clock.now() - started
    assert 240 <= took < teardown.TEARDOWN_PATIENCE_S, took
    assert live_instances(aws_client, run_id) == []
    print(f"\nthrottled teardown: terminated after {took:.0f} s on its clock "
          f"({time.monotonic() - real_start:.0f} s real), {proxy.count('TerminateInstances')} "
          "TerminateInstances calls")


def test_start_sweep_sends_nothing_to_a_reclaimed_instance(proxied: Any, aws_client: Any) -> None:
    """Before: after a spot reclaim the task's retry still sent its command to the dead instance."""
    proxy, account = proxied
    run_id = new_run_id()
    target = target_of(account, availability_zones=ZONES)
    state, _ = target.start_prepare(run_id)
    aws_client("ec2").terminate_instances(InstanceIds=[state.resource_id])  # reclaimed
    lost = f"instance {state.resource_id} of run .* is (shutting-down|terminated)"
    with pytest.raises(InstanceLost, match=lost):
        target.start_sweep(state, {"matrix": []}, timeout_s=60)
    assert proxy.count("SendCommand") == 0
