"""Two deployments under one name, through the DAGs (``dag.test()``: real Airflow on SQLite).

Moto's server stands in for AWS. "The other deployment" is a lease record written beforehand with
another identity (what its first night would have left in the shared results bucket); this
deployment's identity is the Airflow Variable its own first task creates.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpucompare import settings
from gpucompare.targets import name_lease

pytestmark = pytest.mark.dag

OTHER = "5b1f0c2e-9999-4ccc-8ccc-cccccccccccc"
TINY = {"networks": ["alexnet"], "batch_sizes": [1], "modes": ["score"], "warmup": 1, "batches": 1,
        "repeats": 1, "timeout_s": 120}


EC2_TARGET = {"name": "aws-g4dn", "kind": "ec2", "provider": "aws", "instance_type": "g4dn.xlarge",
              "region": "us-east-1", "gpu_count": 1, "profile": "tiny", "options": {"budget_cap": 20}}
LOCAL_TARGET = {"name": "local", "kind": "local", "provider": "local", "instance_type": "local-cpu",
                "profile": "tiny"}


def fleet_of(account: dict[str, Any], target: dict[str, Any]) -> dict[str, Any]:
    """A fleet file of one target, with ``account``'s ec2 defaults (the results bucket)."""
    return {"defaults": {"ec2": account}, "profiles": {"tiny": TINY}, "targets": [target]}


def held_elsewhere(aws_client: Any, bucket: str) -> name_lease.NameLease:
    return name_lease.hold_name(aws_client("s3"), bucket, "gpucompare", settings.deployment(), OTHER)


def stored_identity() -> str | None:
    """The identity Variable as the metadata database holds it."""
    from airflow.models.variable import Variable as VariableRow
    from airflow.utils.session import create_session

    with create_session() as session:
        row = session.query(VariableRow).filter(VariableRow.key == name_lease.IDENTITY_VARIABLE).one_or_none()
        return None if row is None else row.val


def instances(aws_client: Any, region: str, **tags: str) -> list[dict[str, Any]]:
    filters = [{"Name": f"tag:{key}", "Values": [value]} for key, value in tags.items()]
    reservations = aws_client("ec2", region_name=region).describe_instances(Filters=filters)["Reservations"]
    return [instance for reservation in reservations for instance in reservation["Instances"]]


def test_a_night_under_a_name_another_deployment_holds_launches_nothing(
        run_dag, write_fleet, gpucompare_dirs, moto_account, aws_client) -> None:
    held = held_elsewhere(aws_client, moto_account["results_bucket"])
    write_fleet(fleet_of(moto_account, EC2_TARGET))

    night = run_dag("gpucompare_nightly")

    assert (night.state, night.task_states("load_fleet")) == ("failed", ["failed"])
    assert night.task_states("target.prepare") in ([], ["upstream_failed"])
    ours = instances(aws_client, "us-east-1", **{"gpucompare:deployment": settings.deployment()})
    assert [i for i in ours if night.run_id in str(i["Tags"])] == []
    after, _ = name_lease.read_lease(aws_client("s3"), moto_account["results_bucket"], "gpucompare",
                                     settings.deployment())
    assert after == held  # the holder's record is untouched
    mine = stored_identity()  # created by the refused first task
    assert name_lease.check_identity(mine) != OTHER


def test_after_release_the_next_night_takes_the_name_and_launches(
        run_dag, write_fleet, gpucompare_dirs, moto_account, aws_client) -> None:
    """Moto runs no command, so the night fails at ``collect`` after provisioning (and tears down)."""
    from gpucompare import cli

    bucket = moto_account["results_bucket"]
    held_elsewhere(aws_client, bucket)
    write_fleet(fleet_of(moto_account, EC2_TARGET))
    assert cli.main(["release-name", "--bucket", bucket, "--aws-conn-id", moto_account["aws_conn_id"]]) == 0

    night = run_dag("gpucompare_nightly")

    for step in ("load_fleet", "target.prepare", "target.terminate"):
        assert night.task_states(step) == ["success"], (step, night.states)
    after, _ = name_lease.read_lease(aws_client("s3"), bucket, "gpucompare", settings.deployment())
    assert after is not None and after.identity == stored_identity() != OTHER


def test_the_sweeper_terminates_nothing_under_a_name_another_deployment_holds(
        run_dag, write_fleet, gpucompare_dirs, moto_account, aws_client, monkeypatch) -> None:
    """An expired instance tagged with the name stands in for one the holder launched."""
    held_elsewhere(aws_client, moto_account["results_bucket"])
    ec2 = aws_client("ec2", region_name="eu-west-1")
    image_id = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    expired = (datetime.now(UTC) - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    tags = [{"Key": "gpucompare:expires-at", "Value": expired},
            {"Key": "gpucompare:deployment", "Value": settings.deployment()},
            {"Key": "gpucompare:run-id", "Value": "lease-sweeper-test"}]
    theirs = ec2.run_instances(ImageId=image_id, MinCount=1, MaxCount=1, InstanceType="g4dn.xlarge",
                               TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
                               )["Instances"][0]["InstanceId"]
    write_fleet(fleet_of(moto_account, LOCAL_TARGET))
    monkeypatch.setenv("GPUCOMPARE_SWEEPER_REGIONS", "eu-west-1")

    try:
        result = run_dag("gpucompare_sweeper")
        (instance,) = ec2.describe_instances(InstanceIds=[theirs])["Reservations"][0]["Instances"]
        state = instance["State"]["Name"]
    finally:  # the session's moto is shared: later sweeper tests must not find it
        ec2.terminate_instances(InstanceIds=[theirs])

    assert result.state == "failed" and result.task_states("sweep_expired") == ["failed"], result.states
    assert state == "running"
