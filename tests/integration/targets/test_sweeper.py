"""The sweeper against moto's server on 127.0.0.1: expired gpucompare instances go, the rest stay.

Moto stands in for EC2 in two regions; instances are created with the tags the ec2 target
writes (and one by the target itself), then the sweeper runs through the Airflow AWS
connection like the sweeper DAG does.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpucompare import settings
from gpucompare.targets import sweeper
from gpucompare.targets.ec2 import target as ec2
from gpucompare.targets.ec2.options import DEPLOYMENT_TAG, EXPIRES_AT_TAG, RUN_ID_TAG
from tests.support.ec2_support import (
    CONN_ID,
    any_image_id,
    ec2_spec,
    live_instances,
    new_run_id,
    point_airflow_connection,
)


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _launch(aws_client: Any, region: str, tags: dict[str, str]) -> str:
    client = aws_client("ec2", region_name=region)
    image_id = any_image_id(aws_client, region)
    spec = [{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]
    kwargs = {"TagSpecifications": spec} if tags else {}
    return client.run_instances(ImageId=image_id, MinCount=1, MaxCount=1, InstanceType="g4dn.xlarge",
                                **kwargs)["Instances"][0]["InstanceId"]


def _state(aws_client: Any, region: str, instance_id: str) -> str:
    reservations = aws_client("ec2", region_name=region).describe_instances(InstanceIds=[instance_id])
    return reservations["Reservations"][0]["Instances"][0]["State"]["Name"]


def test_sweeper_terminates_expired_instances_and_leaves_the_rest(aws_endpoint, aws_client, monkeypatch):
    point_airflow_connection(monkeypatch, aws_endpoint)
    now = datetime.now(UTC)
    ours = {DEPLOYMENT_TAG: settings.deployment()}
    expired = _launch(aws_client, "us-east-1", {**ours, RUN_ID_TAG: "old-run",
                                                EXPIRES_AT_TAG: _iso(now - timedelta(minutes=5))})
    fresh = _launch(aws_client, "us-east-1", {**ours, RUN_ID_TAG: "new-run",
                                              EXPIRES_AT_TAG: _iso(now + timedelta(hours=2))})
    garbled = _launch(aws_client, "us-east-1", {**ours, RUN_ID_TAG: "bad-run",
                                                EXPIRES_AT_TAG: "soon"})
    not_ours = _launch(aws_client, "us-east-1", {"Name": "someone-elses-box"})
    # expired, but another deployment's (a staging Airflow in the same account): its own sweeper's
    foreign = _launch(aws_client, "us-east-1", {DEPLOYMENT_TAG: "staging", RUN_ID_TAG: "old-run",
                                                EXPIRES_AT_TAG: _iso(now - timedelta(minutes=5))})
    expired_west = _launch(aws_client, "us-west-2", {**ours, RUN_ID_TAG: "west-run",
                                                     EXPIRES_AT_TAG: _iso(now - timedelta(days=1))})

    swept = sweeper.sweep_expired_instances(["us-east-1", "us-west-2"], aws_conn_id=CONN_ID, wait=True,
                                            poll_interval_s=0.2)

    by_id = {item.instance_id: item for item in swept}
    assert {expired, garbled, expired_west} <= set(by_id)
    assert fresh not in by_id and not_ours not in by_id and foreign not in by_id
    assert by_id[expired].region == "us-east-1" and by_id[expired].run_id == "old-run"
    assert by_id[expired].reason.startswith("expired at ")
    assert by_id[garbled].reason == "unreadable gpucompare:expires-at tag 'soon'"
    assert by_id[expired_west].region == "us-west-2"
    assert _state(aws_client, "us-east-1", expired) == "terminated"
    assert _state(aws_client, "us-west-2", expired_west) == "terminated"
    assert _state(aws_client, "us-east-1", fresh) == "running"
    assert _state(aws_client, "us-east-1", not_ours) == "running"
    assert _state(aws_client, "us-east-1", foreign) == "running"

    # a second pass finds nothing more to do among these
    again = {item.instance_id for item in sweeper.sweep_expired_instances(["us-east-1", "us-west-2"],
                                                                          aws_conn_id=CONN_ID)}
    assert not again & {expired, garbled, expired_west, fresh, not_ours}
    aws_client("ec2").terminate_instances(InstanceIds=[fresh, not_ours, foreign])


def test_a_region_s_terminations_are_one_summary_line_and_each_instance_is_logged_at_debug(
        aws_endpoint, aws_client, monkeypatch, caplog):
    """Before: one warning line per terminated instance (a backlog of hundreds flooded the log)."""
    point_airflow_connection(monkeypatch, aws_endpoint)
    expired = _iso(datetime.now(UTC) - timedelta(minutes=5))
    launched = {_launch(aws_client, "eu-north-1", {DEPLOYMENT_TAG: settings.deployment(),
                                                  RUN_ID_TAG: f"run-{n}", EXPIRES_AT_TAG: expired})
                for n in range(5)}
    with caplog.at_level("DEBUG", logger=sweeper.log.name):
        swept = sweeper.sweep_expired_instances(["eu-north-1"], aws_conn_id=CONN_ID)
    assert {item.instance_id for item in swept} == launched
    mine = [r for r in caplog.records if r.name == sweeper.log.name and "terminated" in r.getMessage()]
    summaries = [r.getMessage() for r in mine if r.levelname == "WARNING"]
    assert len(summaries) == 1, summaries
    assert summaries[0].startswith("Sweeper terminated 5 instance(s) in eu-north-1: "), summaries
    assert summaries[0].endswith(" and 2 more"), summaries
    assert sum(instance in summaries[0] for instance in launched) == sweeper.SUMMARY_IDS
    per_instance = {r.getMessage().split()[2] for r in mine if r.levelname == "DEBUG"}
    assert per_instance == launched


def test_a_refused_batch_is_retried_per_instance_and_the_refused_one_is_named(aws_endpoint, aws_client,
                                                                              monkeypatch):
    """One expired instance the orchestrator may not terminate (AWS refuses the whole batch
    then: stood in for by a botocore handler refusing every call that names it, as IAM would):
    the others are terminated one by one, the refused one is named, and the sweep fails."""
    from botocore.exceptions import ClientError

    point_airflow_connection(monkeypatch, aws_endpoint)
    now = datetime.now(UTC)
    ours = {DEPLOYMENT_TAG: settings.deployment(), EXPIRES_AT_TAG: _iso(now - timedelta(minutes=1))}
    first = _launch(aws_client, "eu-west-1", {**ours, RUN_ID_TAG: "a"})
    protected = _launch(aws_client, "eu-west-1", {**ours, RUN_ID_TAG: "protected"})
    second = _launch(aws_client, "eu-west-1", {**ours, RUN_ID_TAG: "b"})
    calls: list[list[str]] = []

    def deny(params: dict[str, Any], **_: Any) -> None:
        calls.append(list(params["InstanceIds"]))
        if protected in params["InstanceIds"]:
            raise ClientError({"Error": {"Code": "UnauthorizedOperation", "Message": "injected"}},
                              "TerminateInstances")

    from airflow.providers.amazon.aws.hooks.ec2 import EC2Hook

    original = EC2Hook.terminate_instances

    def terminate(self: Any, instance_ids: list[str]) -> Any:
        deny({"InstanceIds": instance_ids})
        return original(self, instance_ids=instance_ids)

    monkeypatch.setattr(EC2Hook, "terminate_instances", terminate)
    with pytest.raises(sweeper.SweepIncomplete) as failed:
        sweeper.sweep_expired_instances(["eu-west-1"], aws_conn_id=CONN_ID)
    assert protected in str(failed.value) and first not in str(failed.value)
    assert {item.instance_id for item in failed.value.swept} == {first, second}
    assert len(calls[0]) == 3 and sorted(calls[1:]) == sorted([[first], [protected], [second]])
    assert _state(aws_client, "eu-west-1", first) in ("shutting-down", "terminated")
    assert _state(aws_client, "eu-west-1", protected) == "running"
    monkeypatch.setattr(EC2Hook, "terminate_instances", original)
    aws_client("ec2", region_name="eu-west-1").terminate_instances(InstanceIds=[protected])


def test_sweep_locations_cover_every_ec2_target_its_connection_and_recorded_regions(
        aws_endpoint, aws_client, monkeypatch, s3_bucket):
    """Disabled targets, a target with its own connection, the setting's regions and a region
    only a manual run used (recorded in the bucket when it launched) are all swept."""
    from gpucompare.config import fleet

    point_airflow_connection(monkeypatch, aws_endpoint)
    monkeypatch.setenv("AIRFLOW_CONN_AWS_OTHER", __import__("os").environ["AIRFLOW_CONN_AWS_TEST"])
    deployment = settings.deployment()
    aws_client("s3").put_object(Bucket=s3_bucket, Key=f"gpucompare/{deployment}/regions/ap-south-1", Body=b"")
    aws_client("s3").put_object(Bucket=s3_bucket, Key="gpucompare/other/regions/sa-east-1", Body=b"")
    base = {"kind": "ec2", "provider": "aws", "instance_type": "g5.xlarge", "gpu_count": 1, "profile": "p"}
    document = {
        "profiles": {"p": {"networks": ["alexnet"], "batch_sizes": [1], "modes": ["score"]}},
        "defaults": {"ec2": {"aws_conn_id": CONN_ID, "ami": "ami-0123456789abcdef0", "instance_profile": "p",
                             "results_bucket": s3_bucket}},
        "targets": [{**base, "name": "east", "region": "us-east-1", "enabled": False},
                    {**base, "name": "west", "region": "us-west-2", "enabled": False,
                     "options": {"aws_conn_id": "aws_other"}}],
    }
    loaded = fleet.parse_fleet(document)
    locations = sweeper.sweep_locations([t.spec for t in loaded.targets], ["eu-central-1"],
                                        deployment=deployment, defaults=loaded.defaults["ec2"])
    # the bucket is reached through both connections: a recorded region is swept under each
    assert locations.regions == {CONN_ID: {"us-east-1", "eu-central-1", "ap-south-1"},
                                 "aws_other": {"us-west-2", "ap-south-1"}}
    assert locations.unreadable == []
    # a former name's markers are read too (a renamed deployment's manual runs)
    aws_client("s3").put_object(Bucket=s3_bucket, Key="gpucompare/d0123456789/regions/ca-central-1", Body=b"")
    renamed = sweeper.sweep_locations([t.spec for t in loaded.targets], deployment=deployment,
                                      former=["d0123456789"], defaults=loaded.defaults["ec2"])
    assert "ca-central-1" in renamed.regions[CONN_ID] and "sa-east-1" not in renamed.regions[CONN_ID]


def test_a_missing_marker_bucket_is_named_and_the_fleet_regions_are_still_swept(
        aws_endpoint, aws_client, monkeypatch, s3_bucket):
    """A results bucket that does not exist (NoSuchBucket from moto) is recorded as unreadable;
    the other bucket's markers and every fleet region are still returned; the shipped
    placeholder bucket is never listed."""
    from gpucompare.config.models import PLACEHOLDER_BUCKET

    point_airflow_connection(monkeypatch, aws_endpoint)
    deployment = settings.deployment()
    aws_client("s3").put_object(Bucket=s3_bucket, Key=f"gpucompare/{deployment}/regions/ap-south-1", Body=b"")
    specs = [{"region": "us-east-1", "options": {"results_bucket": "no-such-bucket-for-gpucompare"}},
             {"region": "eu-west-1", "options": {"results_bucket": s3_bucket}},
             {"region": "us-west-2", "options": {"results_bucket": PLACEHOLDER_BUCKET}}]
    found = sweeper.sweep_locations(specs, deployment=deployment, defaults={"aws_conn_id": CONN_ID})
    assert found.regions == {CONN_ID: {"us-east-1", "eu-west-1", "us-west-2", "ap-south-1"}}
    assert len(found.unreadable) == 1
    assert "s3://no-such-bucket-for-gpucompare/gpucompare/" in found.unreadable[0]
    assert "NoSuchBucket" in found.unreadable[0]
    assert PLACEHOLDER_BUCKET not in " ".join(found.unreadable)


def test_an_instance_made_by_the_target_is_swept_once_its_ttl_has_passed(aws_account, aws_client):
    run_id = new_run_id()
    target = ec2.Ec2Target(ec2_spec(aws_account["profile"], aws_account["bucket"], ttl_minutes=30))
    state = target.prepare(run_id)
    try:
        assert state.resource_id not in {item.instance_id for item in
                                         sweeper.sweep_expired_instances(["us-east-1"], aws_conn_id=CONN_ID)}
        assert len(live_instances(aws_client, run_id)) == 1
        later = datetime.now(UTC) + timedelta(minutes=31)
        swept = sweeper.sweep_expired_instances(["us-east-1"], aws_conn_id=CONN_ID, now=later, wait=True,
                                                poll_interval_s=0.2)
        assert state.resource_id in {item.instance_id for item in swept}
        assert live_instances(aws_client, run_id) == []
    finally:
        target.teardown(state)  # after the sweeper: nothing left, and no error


def test_expires_at_parsing():
    assert sweeper.parse_expires_at("2026-11-30T04:00:00Z") == datetime(2026, 11, 30, 4, tzinfo=UTC)
    assert sweeper.parse_expires_at("2026-11-30T05:00:00+01:00") == datetime(2026, 11, 30, 4, tzinfo=UTC)
    assert sweeper.parse_expires_at("2026-11-30T04:00:00") == datetime(2026, 11, 30, 4, tzinfo=UTC)
    assert sweeper.parse_expires_at("tomorrow") is None
    assert sweeper.parse_expires_at(None) is None
    with pytest.raises(ValueError, match="regions"):
        sweeper.sweep_expired_instances([], aws_conn_id=CONN_ID)


def test_instances_of_a_former_name_are_swept_only_when_it_is_listed(aws_endpoint, aws_client, monkeypatch):
    """Migration (issue 19): an instance launched under the name an older release derived
    (d + 10 hex digits) is this deployment's once GPUCOMPARE_FORMER_DEPLOYMENTS lists it."""
    point_airflow_connection(monkeypatch, aws_endpoint)
    old = _iso(datetime.now(UTC) - timedelta(minutes=5))
    legacy = _launch(aws_client, "ap-northeast-1", {DEPLOYMENT_TAG: "d0123456789", RUN_ID_TAG: "legacy",
                                                     EXPIRES_AT_TAG: old})
    monkeypatch.delenv("GPUCOMPARE_FORMER_DEPLOYMENTS", raising=False)
    assert sweeper.sweep_expired_instances(["ap-northeast-1"], aws_conn_id=CONN_ID) == []
    assert _state(aws_client, "ap-northeast-1", legacy) == "running"
    monkeypatch.setenv("GPUCOMPARE_FORMER_DEPLOYMENTS", "d0123456789")
    swept = sweeper.sweep_expired_instances(["ap-northeast-1"], aws_conn_id=CONN_ID)
    assert [item.instance_id for item in swept] == [legacy]
    assert _state(aws_client, "ap-northeast-1", legacy) in ("shutting-down", "terminated")
