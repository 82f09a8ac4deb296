"""The ec2 target against moto's server on 127.0.0.1 (``fixtures_aws``), through the amazon
provider's hooks and an Airflow AWS connection (``AIRFLOW_CONN_AWS_TEST``) pointed at it.

Moto stands in for AWS: it keeps what RunInstances was given and describes it back, but it
runs no machine, no SSM agent and no command (every Run Command reports Success at once).
So these tests check what is asked of AWS and read it back; the one test that needs the
commands to do something runs the exact script SSM would receive through bash on this
machine (see ``test_sent_commands_run_the_real_worker_in_bash``).
"""

from __future__ import annotations

import base64
import json
import os
import shlex
import stat
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from gpucompare.targets.base import TargetError, TargetSpec, TargetState
from gpucompare.targets.ec2 import sweeps
from gpucompare.targets.ec2 import target as ec2
from gpucompare.targets.ec2.launch import client_token
from gpucompare.targets.ec2.options import DEPLOYMENT_TAG, EXPIRES_AT_TAG, RUN_ID_TAG
from gpucompare.targets.ec2.readiness import InstanceLost
from gpucompare.targets.ec2.storage import build_worker_bundle
from gpucompare.targets.runs import run_key
from tests.conftest import BENCH_PYTHON, REPO_ROOT
from tests.support import iam_policy
from tests.support.ec2_support import (
    TINY_SWEEP,
    ec2_spec,
    live_instances,
    new_run_id,
)
from tests.support.ssm_agent import write_aws_cli_shim


def _instance(aws_client: Any, instance_id: str) -> dict[str, Any]:
    return aws_client("ec2").describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]


def _refuse_spot(code: str):
    """A botocore ``before-call`` handler that answers a spot RunInstances with ``code``.

    It stands in for AWS refusing spot capacity (moto always grants spot): the error is the
    very ``ClientError`` botocore raises for such an answer, raised before the request is
    sent; on-demand requests pass through to moto untouched.
    """
    calls: list[str] = []

    def handler(params: dict[str, Any], **_: Any) -> None:
        market = params.get("body", {}).get("InstanceMarketOptions.MarketType")
        calls.append(market or "on_demand")
        if market == "spot":
            raise ClientError({"Error": {"Code": code, "Message": f"injected {code} for the spot request"},
                               "ResponseMetadata": {"HTTPStatusCode": 500}}, "RunInstances")

    return handler, calls


def test_prepare_creates_a_hardened_tagged_instance_and_teardown_terminates_it(aws_account, aws_client):
    run_id = new_run_id()
    target = ec2.Ec2Target(ec2_spec(aws_account["profile"], aws_account["bucket"], ttl_minutes=90))
    before = datetime.now(UTC)
    state = target.prepare(run_id)
    try:
        instance = _instance(aws_client, state.resource_id)
        assert instance["ImageId"] == aws_account["image_id"]  # resolved from the SSM parameter
        assert instance["InstanceType"] == "g4dn.xlarge"
        assert instance["MetadataOptions"]["HttpTokens"] == "required"
        assert instance["IamInstanceProfile"]["Arn"].endswith(f"instance-profile/{aws_account['profile']}")
        assert instance.get("InstanceLifecycle") != "spot" and state.market == "on_demand"

        ebs = instance["BlockDeviceMappings"][0]["Ebs"]
        assert ebs["DeleteOnTermination"] is True
        volume = aws_client("ec2").describe_volumes(VolumeIds=[ebs["VolumeId"]])["Volumes"][0]
        assert volume["Encrypted"] is True

        ec2_client = aws_client("ec2")
        behaviour = ec2_client.describe_instance_attribute(InstanceId=state.resource_id,
                                                           Attribute="instanceInitiatedShutdownBehavior")
        assert behaviour["InstanceInitiatedShutdownBehavior"]["Value"] == "terminate"
        user_data = ec2_client.describe_instance_attribute(InstanceId=state.resource_id, Attribute="userData")
        script = base64.b64decode(user_data["UserData"]["Value"]).decode()
        assert script.startswith("#!/bin/bash\n")
        assert "\nshutdown -h +90 " in script

        tags = {tag["Key"]: tag["Value"] for tag in instance["Tags"]}
        assert tags["gpucompare:run-id"] == run_id
        expires_at = datetime.fromisoformat(tags["gpucompare:expires-at"].replace("Z", "+00:00"))
        assert before + timedelta(minutes=89) <= expires_at <= datetime.now(UTC) + timedelta(minutes=91)
        assert tags["gpucompare:expires-at"].endswith("Z")
        assert tags["Name"].startswith("gpucompare-")
        assert state.extra["expires_at"] == tags["gpucompare:expires-at"]
    finally:
        target.teardown(state)
    assert _instance(aws_client, state.resource_id)["State"]["Name"] == "terminated"
    assert live_instances(aws_client, run_id) == []
    target.teardown(state)  # a second teardown is harmless


def test_state_travels_as_json_and_a_retried_prepare_reuses_the_instance(aws_account, aws_client):
    run_id = new_run_id()
    target = ec2.Ec2Target(ec2_spec(aws_account["profile"], aws_account["bucket"]))
    first = target.prepare(run_id)
    try:
        second = ec2.Ec2Target(ec2_spec(aws_account["profile"], aws_account["bucket"])).prepare(run_id)
        assert second.resource_id == first.resource_id
        assert len(live_instances(aws_client, run_id)) == 1
        assert TargetState.from_dict(json.loads(json.dumps(first.to_dict()))) == first
    finally:
        target.teardown(first)
    assert live_instances(aws_client, run_id) == []


def test_spot_is_asked_for_and_recorded_when_granted(aws_account, aws_client):
    run_id = new_run_id()
    target = ec2.Ec2Target(ec2_spec(aws_account["profile"], aws_account["bucket"], market="spot"))
    state = target.prepare(run_id)
    try:
        assert state.market == "spot"
        assert _instance(aws_client, state.resource_id).get("InstanceLifecycle") == "spot"
    finally:
        target.teardown(state)


@pytest.mark.parametrize("code", ["InsufficientInstanceCapacity", "SpotMaxPriceTooLow",
                                  "MaxSpotInstanceCountExceeded"])
def test_spot_capacity_refused_falls_back_to_on_demand_and_records_it(aws_account, aws_client, code):
    """No spot capacity: spot is asked in every zone the fleet entry allows (here two), then
    on-demand; a spot quota or price cap no other zone changes goes straight to on-demand."""
    run_id = new_run_id()
    target = ec2.Ec2Target(ec2_spec(aws_account["profile"], aws_account["bucket"], market="spot",
                                    availability_zones=["us-east-1a", "us-east-1b"]))
    handler, calls = _refuse_spot(code)
    target.ec2_hook.conn.meta.events.register("before-call.ec2.RunInstances", handler)
    state = target.prepare(run_id)
    try:
        spot_tries = 2 if code == "InsufficientInstanceCapacity" else 1
        assert calls == ["spot"] * spot_tries + ["on_demand"]
        assert state.market == "on_demand"
        assert _instance(aws_client, state.resource_id).get("InstanceLifecycle") != "spot"
        assert len(live_instances(aws_client, run_id)) == 1
    finally:
        target.teardown(state)


def test_other_spot_errors_are_not_mistaken_for_capacity(aws_account, aws_client):
    run_id = new_run_id()
    target = ec2.Ec2Target(ec2_spec(aws_account["profile"], aws_account["bucket"], market="spot"))
    handler, calls = _refuse_spot("UnauthorizedOperation")
    target.ec2_hook.conn.meta.events.register("before-call.ec2.RunInstances", handler)
    with pytest.raises(TargetError, match="UnauthorizedOperation"):
        target.prepare(run_id)
    assert calls == ["spot"]
    assert live_instances(aws_client, run_id) == []


def test_failure_after_provisioning_still_ends_with_the_instance_terminated(aws_account, aws_client):
    """prepare → deploy → run_sweep → collect fails (moto ran nothing, so no results were
    uploaded) → the teardown the DAG always runs leaves no instance of the run alive."""
    run_id = new_run_id()
    target = ec2.Ec2Target(ec2_spec(aws_account["profile"], aws_account["bucket"]))
    state = None
    with pytest.raises(TargetError, match="no results at s3://"):
        try:
            state = target.prepare(run_id)
            state = target.deploy(state)
            state = target.run_sweep(state, TINY_SWEEP, timeout_s=60)
            target.collect(state, "/nonexistent/never-written.jsonl")
        finally:
            target.teardown(state)
    assert state is not None and state.resource_id
    assert live_instances(aws_client, run_id) == []


def test_a_prepare_that_fails_after_run_instances_terminates_what_it_made(aws_account, aws_client):
    """The SSM agent check is refused (AccessDenied injected before the call, standing in for
    an orchestrator role without ssm:DescribeInstanceInformation): prepare raises and has
    already terminated its instance; a teardown with only the run id finds nothing left."""
    run_id = new_run_id()
    target = ec2.Ec2Target(ec2_spec(aws_account["profile"], aws_account["bucket"]))

    def deny(**_: Any) -> None:
        raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "injected"}},
                          "DescribeInstanceInformation")

    target.ssm_hook.conn.meta.events.register("before-call.ssm.DescribeInstanceInformation", deny)
    with pytest.raises(TargetError, match="AccessDenied"):
        target.prepare(run_id)
    assert live_instances(aws_client, run_id) == []
    target.teardown(TargetState(spec=target.spec.to_dict(), run_id=run_id))


def test_teardown_finds_the_instance_by_run_id_when_the_state_lost_its_id(aws_account, aws_client):
    run_id = new_run_id()
    target = ec2.Ec2Target(ec2_spec(aws_account["profile"], aws_account["bucket"]))
    state = target.prepare(run_id)
    target.teardown(TargetState(spec=state.spec, run_id=run_id))  # no resource_id
    assert live_instances(aws_client, run_id) == []
    target.teardown(None)


def _commands_of_run(aws_client: Any, state: TargetState) -> dict[str, dict[str, Any]]:
    """The Run Commands the endpoint received for this run, by purpose (from their comment)."""
    commands = aws_client("ssm").list_commands(InstanceId=state.resource_id)["Commands"]
    return {command["Comment"].split()[1]: command for command in commands
            if run_key(state.run_id) in command["Comment"].split()}


def test_what_run_command_is_sent_and_polled(aws_account, aws_client):
    """Document, commands, quoting, timeout and output location of the sweep's Run Command,
    read back from the endpoint; the polling ends on moto's immediate Success."""
    run_id = new_run_id()
    target = ec2.Ec2Target(ec2_spec(aws_account["profile"], aws_account["bucket"]))
    sweep = TINY_SWEEP
    requested_instances: list[list[str]] = []
    target.ssm_hook.conn.meta.events.register(
        "provide-client-params.ssm.SendCommand",
        lambda params, **_: requested_instances.append(list(params["InstanceIds"])))
    state = target.prepare(run_id)
    try:
        state = target.deploy(state)
        state = target.run_sweep(state, sweep, timeout_s=321)
        writer_prefix = f"{target.storage.run_prefix(run_id)}/{state.extra['writer']}"
        deployment = target.options.deployment
        assert writer_prefix.startswith(f"gpucompare/results/{deployment}/{run_key(run_id)}/")
        assert state.remote_results == f"s3://{aws_account['bucket']}/{writer_prefix}/results.jsonl"
        commands = _commands_of_run(aws_client, state)
        assert sorted(commands) == ["deploy", "sweep"]
        sent = commands["sweep"]
        assert sent["DocumentName"] == "AWS-RunShellScript"
        # moto adds every instance it knows to a command's InstanceIds: check what went out
        assert requested_instances == [[state.resource_id]] * 2
        # the worker's own limit plus its kill grace and the time to merge and upload
        limit = 321 + sweeps.KILL_GRACE_S + sweeps.SWEEP_SLACK_S
        assert sent["Parameters"]["executionTimeout"] == [str(limit)]
        assert sent["OutputS3BucketName"] == aws_account["bucket"]
        assert sent["OutputS3KeyPrefix"] == f"{writer_prefix}/ssm"
        lines = sent["Parameters"]["commands"]
        assert lines == target.sweep_commands(state, sweep, timeout_s=321)
        assert any(line.strip().startswith("timeout --kill-after=30 321 ") for line in lines)
        assert lines[:2] == ["#!/bin/bash", "set -euo pipefail"]
        script = "\n".join(lines)
        assert '"matrix"' not in script  # the config travels only base64-encoded
        encoded = next(line for line in lines if "base64 -d" in line).split()[1]
        config = json.loads(base64.b64decode(shlex.split(encoded)[0]))
        assert config == {**sweep, "run_id": run_id}
        assert any(" -m bench_tasks sweep --config " in line for line in lines)
        assert lines[-1].startswith("aws s3 cp ") and lines[-1].endswith(state.remote_results)
        # every line parses as shell words: nothing left unquoted or unbalanced
        for line in lines[2:]:
            shlex.split(line)
        assert state.extra["sweep_commands"] == {sent["Comment"].split()[2]: sent["CommandId"]}
        invocation = target.runner(state).wait(sent["CommandId"], 5)
        assert invocation["Status"] == "Success"

        # a config the worker would refuse is refused here, before anything is sent
        hostile = {**TINY_SWEEP, "matrix": [{**TINY_SWEEP["matrix"][0], "networks": ["x'; rm -rf / #"]}]}
        with pytest.raises(TargetError, match="networks"):
            target.run_sweep(state, hostile, timeout_s=60)
        assert len(requested_instances) == 2
    finally:
        target.teardown(state)


def test_bad_options_are_refused_with_the_field_named():
    from gpucompare.targets import make_target

    base = {"ami": "ami-0123456789abcdef0", "instance_profile": "p", "results_bucket": "my-bucket"}
    good = TargetSpec(name="t", kind="ec2", provider="aws", instance_type="g4dn.xlarge", region="us-east-1",
                      options=base)
    assert isinstance(make_target(good.to_dict()), ec2.Ec2Target)  # the registry builds it from XCom JSON
    cases = [
        ({**base, "ami": "ubuntu; rm -rf /"}, r"options\.ami: 'ubuntu; rm -rf /' is not allowed"),
        ({**base, "results_bucket": "Bad_Bucket"}, r"options\.results_bucket: 'Bad_Bucket' is not allowed"),
        ({**base, "security_group_ids": ["sg-1; echo"]}, r"options\.security_group_ids\[0\]: "),
        ({**base, "subnet_id": "vpc-123"}, r"options\.subnet_id: 'vpc-123' is not allowed"),
        ({**base, "ttl_minutes": 1}, r"options\.ttl_minutes: 1 is not allowed \(out of range\)"),
        ({**base, "budget_cap": 5}, r"options\.budget_cap needs options\.sweep_configs"),
        ({**base, "remote_root": "relative/path"}, r"options\.remote_root: 'relative/path' is not allowed"),
        ({**base, "remote_root": "/opt/../etc"}, r"options\.remote_root: '/opt/\.\./etc' is not allowed"),
        ({**base, "instance_profil": "typo"}, "options.instance_profil: unknown key; allowed: ami, "),
    ]
    for options, message in cases:
        spec = TargetSpec(name="t", kind="ec2", provider="aws", instance_type="g4dn.xlarge",
                          region="us-east-1", options=options)
        with pytest.raises(TargetError, match=message):
            ec2.Ec2Target(spec)
    with pytest.raises(TargetError, match="region"):
        ec2.Ec2Target(TargetSpec(name="t", kind="ec2", provider="aws", instance_type="g4dn.xlarge",
                                 region="mars-1", options=base))
    with pytest.raises(TargetError, match="market"):
        ec2.Ec2Target(TargetSpec(name="t", kind="ec2", provider="aws", instance_type="g4dn.xlarge",
                                 region="us-east-1", market="reserved", options=base))


def _run_like_the_ssm_agent(commands: list[str], workdir: Path,
                            env: dict[str, str]) -> subprocess.CompletedProcess:
    """AWS-RunShellScript writes the commands, one a line, to _script.sh and runs `sh -c` on it."""
    script = workdir / "_script.sh"
    script.write_text("\n".join(commands) + "\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return subprocess.run(["sh", "-c", str(script)], cwd=workdir, env=env, capture_output=True, text=True,
                          timeout=600)


@pytest.mark.slow
def test_sent_commands_run_the_real_worker_in_bash(aws_account, aws_client, tmp_path):
    """The deploy and sweep scripts exactly as sent to SSM, run here with bash as the agent
    would: the bundle comes from moto's S3 through `aws s3 cp` (a shim), its checksum is
    verified, the real worker runs a tiny sweep with .venv-bench's python, and the ``aws``
    command (a shim: a real PutObject to moto) uploads the results; collect then reads them
    back through the S3 hook and every record passes the contract's validation."""
    from bench_tasks.record import validate_record

    run_id = new_run_id()
    root = tmp_path / "instance"
    target = ec2.Ec2Target(ec2_spec(aws_account["profile"], aws_account["bucket"], remote_root=str(root),
                                    bench_python=str(BENCH_PYTHON)))
    shim_dir = write_aws_cli_shim(tmp_path / "bin").parent
    env = {**os.environ, "PATH": f"{shim_dir}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": ""}
    state = target.prepare(run_id)
    try:
        state = target.deploy(state)
        state = target.run_sweep(state, TINY_SWEEP, timeout_s=300)
        sent = {purpose: command["Parameters"]["commands"]
                for purpose, command in _commands_of_run(aws_client, state).items()}
        deploy_run = _run_like_the_ssm_agent(sent["deploy"], tmp_path, env)
        assert deploy_run.returncode == 0, deploy_run.stderr
        assert (Path(state.workdir) / "bench_tasks" / "record.py").is_file()
        assert Path(state.workdir).resolve().parent == root.resolve()

        sweep_run = _run_like_the_ssm_agent(sent["sweep"], tmp_path, env)
        assert sweep_run.returncode == 0, sweep_run.stderr[-3000:]
        # the worker's progress went to S3 (what run_sweep follows) and its tail to stderr (SSM's copy)
        progress_keys = [o["Key"] for o in aws_client("s3").list_objects_v2(
            Bucket=aws_account["bucket"],
            Prefix=f"{target.storage.run_prefix(run_id)}/{state.extra['writer']}/progress/"
        )["Contents"]]
        assert len(progress_keys) == 1
        body = aws_client("s3").get_object(Bucket=aws_account["bucket"], Key=progress_keys[0])["Body"]
        progress = body.read().decode()
        assert "alexnet" in progress and progress.strip().splitlines()[-1] in sweep_run.stderr

        local = target.collect(state, str(tmp_path / "collected" / "results.jsonl"))
        records = [validate_record(json.loads(line)) for line in Path(local).read_text().splitlines()]
        assert len(records) == 1
        assert records[0]["run_id"] == run_id and records[0]["network"] == "alexnet"
        assert records[0]["status"] == "ok" and records[0]["images_per_sec"] > 0

        # a second sweep of the run adds its records; re-running the first replaces, never doubles
        second = {**TINY_SWEEP, "matrix": [{**TINY_SWEEP["matrix"][0], "batch_sizes": [2]}]}
        assert _run_like_the_ssm_agent(target.sweep_commands(state, second), tmp_path, env).returncode == 0
        assert _run_like_the_ssm_agent(sent["sweep"], tmp_path, env).returncode == 0
        target.collect(state, local)
        batches = sorted(json.loads(line)["batch_size"] for line in Path(local).read_text().splitlines())
        assert batches == [1, 2]
    finally:
        target.teardown(state)
    assert live_instances(aws_client, run_id) == []


def _policy(name: str, deployment: str, bucket: str) -> dict[str, Any]:
    return iam_policy.load_policy(REPO_ROOT / "docker" / "iam" / name, ACCOUNT_ID=iam_policy.ACCOUNT,
                                  RESULTS_BUCKET=bucket, DEPLOYMENT=deployment)


def launch_image(calls: list[tuple[str, str, dict[str, Any]]]) -> str:
    """The AMI the recorded run launched from."""
    return next(params["ImageId"] for _, operation, params in calls if operation == "RunInstances")


def test_the_iam_policies_allow_every_call_of_a_run_and_refuse_foreign_instances(aws_account, aws_client,
                                                                                tmp_path):
    """A whole run (prepare → deploy → run_sweep → collect → delete_run_objects → teardown) and a sweeper
    pass with every AWS call recorded on the clients: each authorization request AWS would make
    for it (resource, request tags, instance type, volume size, resource tags, the instance's
    profile, the AMI's owner as moto reports it) must be granted by the policy ``gpucompare
    iam-policy`` generates for this test's fleet (one g4dn.xlarge target, its instance profile)
    with this deployment filled in (``tests/support/iam_policy.py`` stands in for IAM, which moto
    does not enforce). The same policy refuses another deployment's instance, an instance tagged
    only ``expires-at``, a type outside the fleet, a foreign AMI owner, a volume above the
    option's limit and terminating an instance of ours tagged after launch without the worker
    profile; the instance-profile policy lets an instance read the bundles and write below its
    own ``aws:userid`` only."""
    from gpucompare.targets import sweeper
    from gpucompare.targets.ec2 import iam

    run_id = new_run_id()
    target = ec2.Ec2Target(ec2_spec(aws_account["profile"], aws_account["bucket"], market="spot",
                                    results_prefix="gpucompare"))
    deployment = target.options.deployment
    calls: list[tuple[str, str, dict[str, Any]]] = []

    def record(params: dict[str, Any], model: Any, **_: Any) -> None:
        calls.append((model.service_model.endpoint_prefix, model.name, dict(params)))

    for client in (target.ec2_hook.conn, target.ssm_hook.conn, target.s3_hook.conn,
                   target.clients.iam_client):
        client.meta.events.register("provide-client-params", record)
    state = target.prepare(run_id)
    launched_profiles = {
        state.resource_id: _instance(aws_client, state.resource_id)["IamInstanceProfile"]["Arn"]}
    try:
        state = target.deploy(state)
        state = target.run_sweep(state, TINY_SWEEP, timeout_s=60)
        # what the instance's `aws s3 cp` would have put there
        key = state.remote_results.split("/", 3)[3]
        aws_client("s3").put_object(Bucket=aws_account["bucket"], Key=key, Body=b"{}\n")
        target.collect(state, str(tmp_path / "results.jsonl"))
        assert target.delete_run_objects(run_id) >= 1
    finally:
        target.teardown(state)

    def tags_of(instance_id: str) -> dict[str, str]:
        return {t["Key"]: t["Value"] for t in _instance(aws_client, instance_id).get("Tags", [])}

    def profile_of(instance_id: str) -> str | None:
        # read while the instance ran (moto drops the association at termination, as AWS does)
        return launched_profiles.get(instance_id) or (
            _instance(aws_client, instance_id).get("IamInstanceProfile") or {}).get("Arn")

    def owner_of(image_id: str) -> str:  # ec2:Owner: the alias of Amazon's images, else the account
        image = aws_client("ec2").describe_images(ImageIds=[image_id])["Images"][0]
        return image.get("ImageOwnerAlias") or image["OwnerId"]

    orchestrator = iam.orchestrator_policy([target.spec.instance_type],
                                           instance_profiles=[aws_account["profile"]],
                                           account=iam_policy.ACCOUNT, deployment=deployment,
                                           bucket=aws_account["bucket"])
    seen = {"instance_profile": profile_of, "image_owner": owner_of}
    refused = []
    operations = set()
    for service, operation, params in calls:
        operations.add(f"{service}:{operation}")
        if (service, operation) == ("ssm", "GetParameter"):
            # the test account's own parameter stands in for AWS's public one (see ec2_support)
            params = {**params, "Name": "/aws/service/deeplearning/ami/x86_64/base/latest/ami-id"}
        for request in iam_policy.requests_of_call(service, operation, params, region="us-east-1",
                                                   instance_tags=tags_of, **seen):
            if not iam_policy.allows(orchestrator, request):
                refused.append(request)
    assert {"ec2:RunInstances", "ec2:TerminateInstances", "ssm:SendCommand", "s3:PutObject", "s3:GetObject",
            "iam:GetInstanceProfile", "s3:DeleteObjects"} <= operations
    assert refused == []

    # the sweeper's calls: describe, terminate an expired instance of this deployment
    sweeper_calls = [("ec2", "DescribeInstances", {}), ("ec2", "TerminateInstances",
                                                      {"InstanceIds": [state.resource_id]}),
                     ("s3", "ListObjectsV2", {"Bucket": aws_account["bucket"],
                                              "Prefix": f"gpucompare/{deployment}/regions/"})]
    for service, operation, params in sweeper_calls:
        for request in iam_policy.requests_of_call(service, operation, params, region="us-east-1",
                                                   instance_tags=tags_of, **seen):
            assert iam_policy.allows(orchestrator, request), request
    assert sweeper.DEPLOYMENT_TAG == DEPLOYMENT_TAG
    # tag-then-terminate: an instance of the same account launched without the worker profile,
    # then tagged with this deployment (moto lets the test tag it), is not terminable by the role,
    # and the role itself may not add that tag after launch
    foreign = aws_client("ec2").run_instances(ImageId=launch_image(calls), MinCount=1, MaxCount=1,
                                              InstanceType="g4dn.xlarge")["Instances"][0]["InstanceId"]
    aws_client("ec2").create_tags(Resources=[foreign], Tags=[
        {"Key": DEPLOYMENT_TAG, "Value": deployment},
        {"Key": EXPIRES_AT_TAG, "Value": "2026-01-01T00:00:00Z"}])
    tagging = iam_policy.requests_of_call("ec2", "CreateTags", {"Resources": [foreign], "Tags": [
        {"Key": DEPLOYMENT_TAG, "Value": deployment}]}, region="us-east-1", instance_tags=tags_of)
    assert not any(iam_policy.allows(orchestrator, r) for r in tagging)
    assert all(iam_policy.denies(iam.tag_guard_policy(), r) for r in tagging)
    terminating = iam_policy.requests_of_call("ec2", "TerminateInstances", {"InstanceIds": [foreign]},
                                              region="us-east-1", instance_tags=tags_of, **seen)
    assert tags_of(foreign)[DEPLOYMENT_TAG] == deployment
    assert not all(iam_policy.allows(orchestrator, r) for r in terminating)
    aws_client("ec2").terminate_instances(InstanceIds=[foreign])

    # foreign instances, types and volumes are refused
    arn = f"arn:aws:ec2:us-east-1:{iam_policy.ACCOUNT}:instance/i-0123456789abcdef0"
    for tags in ({DEPLOYMENT_TAG: "other-deployment", RUN_ID_TAG: run_id},
                 {EXPIRES_AT_TAG: "2026-01-01T00:00:00Z"}, {}):
        for action, key in (("ec2:TerminateInstances", "aws:ResourceTag"),
                            ("ssm:SendCommand", "ssm:resourceTag")):
            request = iam_policy.Request(action, arn, {f"{key}/{k}": v for k, v in tags.items()})
            assert not iam_policy.allows(orchestrator, request), request
    launch = next(params for service, operation, params in calls if operation == "RunInstances")
    for changed in ({**launch, "InstanceType": "x2iedn.32xlarge"},
                    {**launch, "InstanceType": "g4dn.12xlarge"},  # the family, not the fleet's type
                    {**launch, "BlockDeviceMappings": [{**launch["BlockDeviceMappings"][0], "Ebs": {
                        **launch["BlockDeviceMappings"][0]["Ebs"], "VolumeSize": 2000}}]},
                    {**launch, "TagSpecifications": [
                        {**spec, "Tags": [t for t in spec["Tags"] if t["Key"] != DEPLOYMENT_TAG]
                         + [{"Key": DEPLOYMENT_TAG, "Value": "other-deployment"}]}
                        for spec in launch["TagSpecifications"]]}):
        requests = iam_policy.requests_of_call("ec2", "RunInstances", changed, region="us-east-1",
                                               instance_tags=tags_of, **seen)
        assert not all(iam_policy.allows(orchestrator, r) for r in requests)
    foreign_owner = iam_policy.requests_of_call("ec2", "RunInstances", launch, region="us-east-1",
                                                instance_tags=tags_of, instance_profile=profile_of,
                                                image_owner=lambda _: "aws-marketplace")
    assert not all(iam_policy.allows(orchestrator, r) for r in foreign_owner)
    other_prefix = f"arn:aws:s3:::{aws_account['bucket']}/gpucompare/other-deployment/run/x"
    assert not iam_policy.allows(orchestrator, iam_policy.Request("s3:PutObject", other_prefix))

    # the instance profile: bundles read, its own prefix written, nothing else
    instance = _policy("instance-profile-policy.json", deployment, aws_account["bucket"])
    writer = state.extra["writer"]
    me = {"aws:userid": writer}
    bucket_arn = f"arn:aws:s3:::{aws_account['bucket']}"
    bundle = f"{bucket_arn}/{target.storage.bundle_key('0' * 64)}"
    own = f"{bucket_arn}/{target.storage.run_prefix(run_id)}/{writer}/results.jsonl"
    other_instance = (f"{bucket_arn}/{target.storage.run_prefix(run_id)}"
                      "/AROAOTHER:i-0fffffffffffffff0/results.jsonl")
    assert iam_policy.allows(instance, iam_policy.Request("s3:GetObject", bundle, me))
    assert iam_policy.allows(instance, iam_policy.Request("s3:PutObject", own, me))
    assert not iam_policy.allows(instance, iam_policy.Request("s3:PutObject", bundle, me))
    assert not iam_policy.allows(instance, iam_policy.Request("s3:PutObject", other_instance, me))
    assert not iam_policy.allows(instance, iam_policy.Request("s3:GetObject", own, me))
    assert not iam_policy.allows(instance, iam_policy.Request("s3:DeleteObject", own, me))
    another = {"aws:userid": "AROAX:i-0fffffffffffffff0"}  # another instance writing to this one's prefix
    assert not iam_policy.allows(instance, iam_policy.Request("s3:PutObject", own, another))


def _rewrite_invocations(target: ec2.Ec2Target, statuses: list[dict[str, Any]]) -> list[str]:
    """Replace moto's instant Success by the given answers, one per poll (the last repeats).

    Stands in for a command that runs for a while on a real instance (InProgress), fails
    (Failed, exit code, stderr) or hangs: moto finishes every command at once.
    """
    seen: list[str] = []

    def rewrite(parsed: dict[str, Any], **_: Any) -> None:
        answer = statuses[min(len(seen), len(statuses) - 1)]
        seen.append(answer["Status"])
        parsed.update(answer)

    target.ssm_hook.conn.meta.events.register("after-call.ssm.GetCommandInvocation", rewrite)
    return seen


def test_polling_follows_the_command_until_it_ends(aws_account, aws_client):
    run_id = new_run_id()
    lines: list[str] = []
    target = ec2.Ec2Target(ec2_spec(aws_account["profile"], aws_account["bucket"]), line_sink=lines.append)
    state = target.prepare(run_id)
    try:
        state = target.deploy(state)
        seen = _rewrite_invocations(target, [
            {"Status": "Pending"}, {"Status": "InProgress"}, {"Status": "InProgress"},
            {"Status": "Success", "ResponseCode": 0, "StandardOutputContent": "",
             "StandardErrorContent": "[1/1] score alexnet b1 cpu: ok 12.3 img/s\n"}])
        target.run_sweep(state, TINY_SWEEP, timeout_s=30)
        assert seen == ["Pending", "InProgress", "InProgress", "Success"]
        assert lines == ["[1/1] score alexnet b1 cpu: ok 12.3 img/s"]
    finally:
        target.teardown(state)


def test_a_failed_command_raises_with_its_stderr_tail(aws_account, aws_client):
    run_id = new_run_id()
    target = ec2.Ec2Target(ec2_spec(aws_account["profile"], aws_account["bucket"]), line_sink=lambda _: None)
    state = target.prepare(run_id)
    try:
        state = target.deploy(state)
        stderr = "\n".join(f"line {n}" for n in range(100)) + "\nModuleNotFoundError: No module named 'mxnet'"
        failure = {"Status": "Failed", "ResponseCode": 1, "StandardErrorContent": stderr}
        _rewrite_invocations(target, [failure])
        with pytest.raises(TargetError) as failed:
            target.run_sweep(state, TINY_SWEEP, timeout_s=30)
        message = str(failed.value)
        assert "sweep on" in message and "Failed" in message and "exit code 1" in message
        assert "No module named 'mxnet'" in message and "line 99" in message and "line 10\n" not in message
    finally:
        target.teardown(state)
    assert live_instances(aws_client, run_id) == []


def test_a_command_past_its_time_limit_is_cancelled(aws_account, aws_client, monkeypatch):
    # no kill grace nor upload slack beyond the worker's limit: the wait gives up after ~1 s
    monkeypatch.setattr(sweeps, "KILL_GRACE_S", 0)
    monkeypatch.setattr(sweeps, "SWEEP_SLACK_S", 0)
    run_id = new_run_id()
    target = ec2.Ec2Target(ec2_spec(aws_account["profile"], aws_account["bucket"]))
    state = target.prepare(run_id)
    try:
        state = target.deploy(state)
        cancelled: list[str] = []
        target.ssm_hook.conn.meta.events.register(
            "provide-client-params.ssm.CancelCommand",
            lambda params, **_: cancelled.append(params["CommandId"]))
        seen = _rewrite_invocations(target, [{"Status": "InProgress"}])
        with pytest.raises(TargetError, match="still InProgress after 1 s: cancelled"):
            target.run_sweep(state, TINY_SWEEP, timeout_s=1)
        assert len(cancelled) == 1 and len(seen) >= 2
    finally:
        target.teardown(state)


def test_an_instance_that_dies_mid_command_ends_the_wait(aws_account, aws_client):
    """The instance is terminated (standing in for a spot interruption) while the command
    still reads InProgress: the wait ends at the next poll instead of at the time limit."""
    run_id = new_run_id()
    target = ec2.Ec2Target(ec2_spec(aws_account["profile"], aws_account["bucket"]))
    state = target.prepare(run_id)
    try:
        state = target.deploy(state)
        _rewrite_invocations(target, [{"Status": "InProgress"}])
        sweep = target.start_sweep(state, TINY_SWEEP, timeout_s=600)  # sent while it is alive
        aws_client("ec2").terminate_instances(InstanceIds=[state.resource_id])
        started = time.monotonic()
        poller = target.sweep_poller(state, sweep)
        with pytest.raises(TargetError, match=r"is (shutting-down|terminated) while SSM command"):
            while (event := poller.poll()) is None:
                time.sleep(0.2)
            target.finish_sweep(state, sweep, event)
        assert time.monotonic() - started < 60
        with pytest.raises(InstanceLost):  # and a retry sends it nothing more
            target.start_sweep(state, TINY_SWEEP, timeout_s=600)
    finally:
        target.teardown(state)


def test_progress_lines_are_followed_while_the_sweep_runs(aws_account, aws_client):
    """The instance's progress uploads are stood in for by writing the progress object between
    polls (moto runs nothing); each new line reaches the task log once, while the command is
    still InProgress, and SSM's copy of stderr is not logged a second time."""
    run_id = new_run_id()
    logged: list[tuple[str, str]] = []
    target = ec2.Ec2Target(ec2_spec(aws_account["profile"], aws_account["bucket"]),
                           line_sink=lambda line: logged.append(
        (line, status_seen[-1] if status_seen else "")))
    status_seen: list[str] = []
    state = target.prepare(run_id)
    try:
        state = target.deploy(state)
        key = target.storage.progress_key(state, sweeps.checked_sweep_config(state, TINY_SWEEP))
        progress_lines = ["[1/2] score alexnet b1: warming up", "[1/2] score alexnet b1: ok",
                          "[2/2] score alexnet b2: ok"]
        answers = [{"Status": "InProgress"}] * 4 + [
            {"Status": "Success", "ResponseCode": 0, "StandardErrorContent": "\n".join(progress_lines)}]

        def rewrite(parsed: dict[str, Any], **_: Any) -> None:
            poll = len(status_seen)
            # the file grows by one line per poll, as the instance's uploads would make it
            aws_client("s3").put_object(Bucket=aws_account["bucket"], Key=key,
                                        Body="\n".join(progress_lines[:poll]).encode())
            parsed.update(answers[min(poll, len(answers) - 1)])
            status_seen.append(parsed["Status"])

        target.ssm_hook.conn.meta.events.register("after-call.ssm.GetCommandInvocation", rewrite)
        target.run_sweep(state, TINY_SWEEP, timeout_s=30)
        assert [line for line, _ in logged] == progress_lines
        assert [status for _, status in logged[:2]] == ["InProgress", "InProgress"]
    finally:
        target.teardown(state)


def test_teardown_skips_a_malformed_id_and_still_reaches_the_tagged_instance(aws_account, aws_client):
    """A state whose id is garbage (or names an instance that is gone) must not block the
    termination of the run's tagged instance: each id is terminated on its own."""
    run_id = new_run_id()
    target = ec2.Ec2Target(ec2_spec(aws_account["profile"], aws_account["bucket"]))
    state = target.prepare(run_id)
    bad = TargetState(spec=state.spec, run_id=run_id, resource_id="i-nothex; rm -rf /")
    terminated: list[list[str]] = []
    target.ec2_hook.conn.meta.events.register(
        "provide-client-params.ec2.TerminateInstances",
        lambda params, **_: terminated.append(list(params["InstanceIds"])))
    target.teardown(bad)
    assert terminated == [[state.resource_id]]  # the garbage id never reached AWS
    assert live_instances(aws_client, run_id) == []
    gone = TargetState(spec=state.spec, run_id=run_id, resource_id="i-0123456789abcdef0")
    target.teardown(gone)  # an id that does not exist: nothing to do, no error


def test_launch_carries_a_client_token_per_run_and_market_the_same_on_every_try(aws_account):
    """The idempotency token: the same run and market give the same token whatever the try (a
    retried call, or a retry that did not see the first instance yet, gets that instance back);
    another market, deployment, or a dead instance of the run (launch anew) gives another."""
    target = ec2.Ec2Target(ec2_spec(aws_account["profile"], aws_account["bucket"]))
    run_id = new_run_id()
    launcher = target.launcher
    image_id = aws_account["image_id"]
    request = launcher.run_instances_request(run_id, image_id, 60, "2026-11-30T04:00:00Z", spot=False)
    again = launcher.run_instances_request(run_id, image_id, 60, "2026-11-30T04:00:01Z", spot=False)
    token = request["ClientToken"]
    assert token == again["ClientToken"] and len(token) <= 64 and token.isascii()

    def token_of(spot: bool, dead: tuple[str, ...] = ()) -> str:
        return target.launcher.run_instances_request(run_id, aws_account["image_id"], 60, "x", spot=spot,
                                            dead=dead)["ClientToken"]

    others = {token_of(True), token_of(False, ("i-0123456789abcdef0",)),
              client_token("other", run_id, "on_demand")}
    assert token not in others and len(others) == 3
    assert token_of(False, ("i-1", "i-2")) == token_of(False, ("i-2", "i-1"))
    tags = {t["Key"]: t["Value"] for t in request["TagSpecifications"][0]["Tags"]}
    assert tags[DEPLOYMENT_TAG] == target.options.deployment


def test_a_poisoned_bundle_is_replaced_and_the_region_is_recorded(aws_account, aws_client):
    """An object at the bundle's content-addressed key whose bytes do not match its name is
    uploaded again by deploy; the deploy command fetches it with the instance's own profile
    (no presigned URL, no credential in SSM history). prepare recorded its region first."""
    run_id = new_run_id()
    target = ec2.Ec2Target(ec2_spec(aws_account["profile"], aws_account["bucket"]))
    bundle = build_worker_bundle()
    key = target.storage.bundle_key(bundle.sha256)
    aws_client("s3").put_object(Bucket=aws_account["bucket"], Key=key, Body=b"poisoned")
    state = target.prepare(run_id)
    try:
        markers = aws_client("s3").list_objects_v2(Bucket=aws_account["bucket"],
                                                   Prefix=f"gpucompare/results/{target.options.deployment}/regions/")
        assert [o["Key"].rsplit("/", 1)[1] for o in markers["Contents"]] == ["us-east-1"]
        state = target.deploy(state)
        body = aws_client("s3").get_object(Bucket=aws_account["bucket"], Key=key)["Body"].read()
        assert body == bundle.data
        sent = _commands_of_run(aws_client, state)["deploy"]["Parameters"]["commands"]
        script = "\n".join(sent)
        assert f"aws s3 cp --only-show-errors s3://{aws_account['bucket']}/{key} bundle.tar.gz" in script
        assert "X-Amz-" not in script and "Signature" not in script and "curl" not in script
    finally:
        target.teardown(state)


@pytest.mark.parametrize(("option", "value"), [
    ("ami", "ami-0123456789abcdef0\n"), ("results_bucket", "my-bucket\n"), ("results_prefix", "gpucompare\n"),
    ("remote_root", "/opt/gpucompare\n"), ("bench_python", "/usr/bin/python3\n"),
    ("instance_profile", "p\n"), ("subnet_id", "subnet-0123456789abcdef0\n"), ("deployment", "prod\n")])
def test_a_trailing_newline_is_refused_in_every_option(option, value):
    base = {"ami": "ami-0123456789abcdef0", "instance_profile": "p", "results_bucket": "my-bucket"}
    spec = TargetSpec(name="t", kind="ec2", provider="aws", instance_type="g4dn.xlarge", region="us-east-1",
                      options={**base, option: value})
    with pytest.raises(TargetError, match=rf"options\.{option}: .* is not allowed"):
        ec2.Ec2Target(spec)
    with pytest.raises(TargetError, match="instance_type"):
        ec2.Ec2Target(TargetSpec(name="t", kind="ec2", provider="aws", instance_type="g4dn.xlarge\n",
                                 region="us-east-1", options=base))
