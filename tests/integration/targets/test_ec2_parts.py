"""The parts ``Ec2Target`` is built from, each alone against moto's server on 127.0.0.1
(``fixtures_aws``, standing in for EC2, SSM, S3 and IAM): the launcher
(``launch.Ec2Launcher``) and the run's storage (``storage.RunStorage``), given only a spec, its
options and the clients (``clients.AwsClients``). The SSM runner has its own tests
(``test_ec2_sweep_retry.py``, ``test_distributed_training.py``).
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

import pytest

from gpucompare.targets.base import TargetError, TargetState
from gpucompare.targets.ec2.clients import AwsClients
from gpucompare.targets.ec2.launch import Ec2Launcher, client_token
from gpucompare.targets.ec2.options import DEPLOYMENT_TAG, RUN_ID_TAG, Ec2Options
from gpucompare.targets.ec2.readiness import Readiness
from gpucompare.targets.ec2.storage import RunStorage, UploadableBundle
from gpucompare.targets.runs import run_key, sweep_dir_name
from tests.support.ec2_support import (
    CONN_ID,
    ec2_spec,
    live_instances,
    new_run_id,
)


@pytest.fixture
def parts(aws_account: dict[str, Any]) -> Any:
    spec = ec2_spec(aws_account["profile"], aws_account["bucket"])
    options = Ec2Options.from_spec(spec)
    clients = AwsClients(CONN_ID, spec.region)

    def instance_id(state: TargetState) -> str:
        if not state.resource_id:
            raise TargetError("no instance")
        return state.resource_id

    return spec, options, Ec2Launcher(spec, options, clients), RunStorage(spec, options, clients, instance_id)


def test_the_launcher_alone_launches_finds_and_waits_for_the_run_instance(parts: Any,
                                                                          aws_client: Any) -> None:
    spec, options, launcher, _ = parts
    run_id = new_run_id()
    image_id = launcher.resolve_ami()
    assert image_id.startswith("ami-")
    assert launcher.find(run_id, ("pending", "running")) == []
    instance_id, market = launcher.launch(run_id, image_id, 60, "2026-11-30T04:00:00Z")
    assert market == "on_demand"
    found = launcher.find(run_id, ("pending", "running"))
    assert [i["InstanceId"] for i in found] == [instance_id]
    tags = {t["Key"]: t["Value"] for t in found[0]["Tags"]}
    assert tags[RUN_ID_TAG] == run_id and tags[DEPLOYMENT_TAG] == options.deployment
    # launched in the first zone offering the type (no subnets or zones given): that place's token
    zone = found[0]["Placement"]["AvailabilityZone"]
    token = client_token(options.deployment, run_id, "on_demand", placement=f"zone {zone}")
    assert found[0]["ClientToken"] == token
    readiness = Readiness(launcher.clients, options.poll_interval_s)
    assert readiness.poller(instance_id, float("inf")).poll() == {"ready": instance_id}
    assert readiness.wait(instance_id, time.time() + 60) == {"ready": instance_id}  # the waiter's way
    aws_client("ec2").terminate_instances(InstanceIds=[instance_id])
    assert live_instances(aws_client, run_id) == []


def test_the_storage_alone_names_the_run_keys_and_uploads_a_bundle_once(parts: Any,
                                                                        aws_client: Any) -> None:
    spec, options, _, storage = parts
    run_id = new_run_id()
    state = TargetState(spec=spec.to_dict(), run_id=run_id, resource_id="i-0123456789abcdef0")
    writer = storage.writer_of("i-0123456789abcdef0")
    role_id = aws_client("iam").get_instance_profile(
        InstanceProfileName=options.instance_profile)["InstanceProfile"]["Roles"][0]["RoleId"]
    assert writer == f"{role_id}:i-0123456789abcdef0"
    run_prefix = f"{options.results_prefix}/{options.deployment}/{run_key(run_id)}"
    assert storage.run_prefix(run_id) == run_prefix
    assert storage.results_key(state) == f"{run_prefix}/{writer}/results.jsonl"
    assert state.extra["writer"] == writer  # kept in the state for the next step
    with pytest.raises(TargetError, match="no instance"):
        storage.results_key(TargetState(spec=spec.to_dict(), run_id=run_id))
    storage.record_region()
    s3 = aws_client("s3")
    s3.head_object(Bucket=options.results_bucket, Key=storage.region_marker_key())
    data = b"worker code"
    bundle = UploadableBundle(data=data, content_hash="c" * 12, sha256=hashlib.sha256(data).hexdigest(),
                              requirements_hash="r" * 12)
    puts: list[str] = []
    storage.s3_hook.conn.meta.events.register("provide-client-params.s3.PutObject",
                                              lambda params, **_: puts.append(params["Key"]))
    key = storage.upload_bundle(bundle)
    assert key == storage.bundle_key(bundle.sha256) and puts == [key]
    assert storage.upload_bundle(bundle) == key and puts == [key]  # exactly its bytes: not sent again
    s3.put_object(Bucket=options.results_bucket, Key=key, Body=b"poisoned")
    assert storage.upload_bundle(bundle) == key and puts == [key, key]
    assert s3.get_object(Bucket=options.results_bucket, Key=key)["Body"].read() == data


def _record(config_id: str, status: str = "ok", value: float = 1.0) -> dict[str, Any]:
    return {"config_id": config_id, "status": status, "value": value}


def _lines(*records: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(record).encode() + b"\n" for record in records)


def test_the_lost_records_are_the_whole_ok_lines_of_results_and_partial_objects_once_each(
        parts: Any, aws_client: Any) -> None:
    """A lost writer's finished sweeps (``results.jsonl``) and the sweep it was running (its
    ``partial/`` object, copied while the worker wrote: the last line cut mid-write): each
    configuration's ``ok`` record once, the cut line and the failed record left out; a writer
    never lost is not read; ``delete_run_objects`` removes the partial objects too."""
    spec, options, _, storage = parts
    run_id, s3, bucket = new_run_id(), aws_client("s3"), options.results_bucket
    lost, other = storage.writer_of("i-0123456789abcdef0"), storage.writer_of("i-0fedcba9876543210")
    prefix = storage.run_prefix(run_id)
    state = TargetState(spec=spec.to_dict(), run_id=run_id, resource_id="i-0fedcba9876543210",
                        extra={"writer": other, "reclaims": [{"writer": lost}, {"writer": None}]})
    assert storage.lost_records(state) == []  # nothing uploaded yet
    s3.put_object(Bucket=bucket, Key=f"{prefix}/{lost}/results.jsonl",
                  Body=_lines(_record("a"), _record("b", "oom")))
    cut = json.dumps(_record("e")).encode()[:-7]
    sweep = {"matrix": [{"modes": ["score"], "networks": ["alexnet"]}]}
    assert storage.partial_key(state, sweep) == f"{prefix}/{other}/partial/{sweep_dir_name(sweep)}.jsonl"
    s3.put_object(Bucket=bucket, Key=f"{prefix}/{lost}/partial/{sweep_dir_name(sweep)}.jsonl",
                  Body=_lines(_record("a", value=2.0), _record("b"), _record("c", "timeout"),
                              _record("d")) + cut)
    s3.put_object(Bucket=bucket, Key=f"{prefix}/{other}/partial/sweep-x.jsonl", Body=_lines(_record("z")))
    kept = storage.lost_records(state)
    assert sorted(r["config_id"] for r in kept) == ["a", "b", "d"]
    assert next(r for r in kept if r["config_id"] == "a")["value"] == 1.0  # results.jsonl's first
    assert storage.delete_run_objects(run_id) == 3
    assert s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("KeyCount") == 0
