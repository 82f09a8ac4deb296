"""The ``ec2`` target: a GPU instance provisioned for one run, driven through SSM, results via S3.

Built on the amazon provider's hooks (``EC2Hook``, ``SsmHook``, ``S3Hook``), so the AWS
connection (``aws_conn_id``; region, credentials, role, ``endpoint_url`` in its extra)
is the one Airflow already manages. The provider's operators (``EC2CreateInstanceOperator``,
``SsmRunCommandOperator`` …) are whole Airflow tasks; the target's steps are called from
inside the DAG's own tasks, so it uses the same hooks, waiters and calls they do.

What ``prepare`` creates, and why:

* the cost guard runs first (``cost.py``): over budget, nothing is created;
* spot if asked, with on-demand as the fallback when spot capacity is refused
  (``SPOT_CAPACITY_ERRORS``); ``TargetState.market`` records what the run actually got;
* IMDSv2 required, an encrypted root volume deleted on termination,
  ``InstanceInitiatedShutdownBehavior=terminate`` plus ``shutdown -h +TTL`` in the user data:
  an instance nobody tears down powers itself off, and powering off terminates it;
* an idempotency ``ClientToken`` derived from the run, the attempt and the market: a
  RunInstances retried by botocore after a lost response gets the same instance back
  instead of launching a second one;
* tags ``gpucompare:run-id``, ``gpucompare:deployment`` (``settings.deployment()``: two
  Airflow deployments in one account never reuse, terminate or sweep each other's
  instances; the IAM policy conditions TerminateInstances and SendCommand on it),
  ``gpucompare:expires-at`` (ISO 8601 UTC; the sweeper's clock), ``Name``; run id and
  deployment are how a retried ``prepare`` finds its instance and how ``teardown`` finds
  one a failed ``prepare`` left without recording its id;
* the region is recorded under ``<prefix>/<deployment>/regions/`` before launching, so the
  sweeper looks there too (manual runs use regions the fleet file does not name);
* the instance profile (``docker/iam/instance-profile-policy.json``) reads the deployment's
  bundles and writes only below ``<run prefix>/<role id>:<instance id>/`` (its own
  ``aws:userid``): no presigned URL or credential travels in an SSM command.

Results: each ``run_sweep`` writes ``sweep-<config hash>.jsonl`` on the instance, then
concatenates all of the run's sweep files into ``results.jsonl`` and copies it to
``s3://<results_bucket>/<results_prefix>/<deployment>/<run key>/<writer>/results.jsonl``
(``<writer>`` = the instance's ``aws:userid``; a retried sweep replaces its own file
instead of appending twice); ``collect`` downloads that object and ``forget`` (after a
successful ingest) deletes everything under the run's prefix.

Options (``TargetSpec.options``; validated when the target is built):
``ami`` (id or SSM parameter name, e.g.
``/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id``,
also as ``resolve:ssm:<name>``), ``instance_profile``, ``results_bucket`` (required);
``aws_conn_id`` (aws_default), ``subnet_id``, ``security_group_ids``, ``results_prefix``
(gpucompare), ``ttl_minutes`` (the plan derives it from the sweeps' time limits; else from
the sweep estimate, else 240), ``deployment`` (the plan sets it; default
``settings.deployment()``), ``volume_size_gb`` (150),
``remote_root`` (/opt/gpucompare), ``bench_python`` (use this interpreter instead of
creating a venv), ``budget_cap`` + ``budget_currency`` (USD) + ``sweep_configs`` (the sweeps
the run will execute, for the estimate), ``poll_interval_s`` (15), ``agent_timeout_s`` (900),
``launch_timeout_s`` (900), ``deploy_timeout_s`` (1800), ``tags`` (extra tags).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import Any
from urllib.parse import urlparse

from bench_tasks.configs import ConfigError, parse_sweep
from gpucompare.targets import cost
from gpucompare.targets.base import (
    LineSink,
    Target,
    TargetConfigError,
    TargetError,
    TargetSpec,
    TargetState,
)
from gpucompare.targets.ec2.channel import SSM_DOCUMENT
from gpucompare.targets.ec2.commands import (
    deploy_commands,
    sweep_commands,
    sweep_name,
)
from gpucompare.targets.ec2.options import (
    _AMI_ID,
    _INSTANCE_ID,
    _RUN_ID,
    _WRITER,
    DEFAULT_TTL_MINUTES,
    DEPLOYMENT_TAG,
    EXPIRES_AT_TAG,
    LIVE_STATES,
    RUN_ID_TAG,
    SPOT_CAPACITY_ERRORS,
    SSM_FINAL_STATUSES,
    STDERR_TAIL_LINES,
    Ec2Options,
    run_key,
)
from gpucompare.targets.phases import timed_phase

log = logging.getLogger(__name__)

def _client_error_code(exc: BaseException) -> str | None:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code") or "") or None
    return None


def _http_status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return None


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


class Ec2Target(Target):
    """Provision, use and terminate one EC2 instance per run (see the module docstring)."""

    kind = "ec2"

    def __init__(self, spec: TargetSpec, *, line_sink: LineSink | None = None,
                 price_lookup: cost.PriceLookup | None = None, lake_uri: str | None = None) -> None:
        super().__init__(spec, line_sink=line_sink)
        self.options = Ec2Options.from_spec(spec)
        self.price_lookup = price_lookup
        #: where the guard reads current prices and measured throughput (default: the
        #: [gpucompare] lake setting); a given ``price_lookup`` wins over the lake's prices
        self.lake_uri = lake_uri

    # --- hooks (cached: one boto3 client each, so tests can hook into its events) ---

    @cached_property
    def ec2_hook(self) -> Any:
        from airflow.providers.amazon.aws.hooks.ec2 import EC2Hook

        return EC2Hook(aws_conn_id=self.options.aws_conn_id, region_name=self.spec.region,
                       api_type="client_type")

    @cached_property
    def ssm_hook(self) -> Any:
        from airflow.providers.amazon.aws.hooks.ssm import SsmHook

        return SsmHook(aws_conn_id=self.options.aws_conn_id, region_name=self.spec.region)

    @cached_property
    def s3_hook(self) -> Any:
        from airflow.providers.amazon.aws.hooks.s3 import S3Hook

        return S3Hook(aws_conn_id=self.options.aws_conn_id)

    @cached_property
    def iam_client(self) -> Any:
        from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

        return AwsBaseHook(aws_conn_id=self.options.aws_conn_id, client_type="iam").conn

    # --- the cost guard ---

    def estimate(self) -> cost.CostEstimate | None:
        """The run's cost estimate (None when no budget cap is set): the night estimate that
        ``python -m gpucompare plan`` shows (``targets.night``), from the lake's recorded phases."""
        if self.options.budget_cap is None:
            return None
        night = self.night_estimate()
        if night.cost_estimate is None:
            raise TargetConfigError(night.unpriced_reason or "cost guard: no price")
        return night.cost_estimate

    def night_estimate(self) -> Any:
        """The run's phases, time and cost as ``plan`` shows them (``targets.night``)."""
        from gpucompare import settings
        from gpucompare.targets.night import estimate_night

        return estimate_night(self.spec.to_dict(), self.options.sweep_configs,
                              lake_uri=self.lake_uri or settings.lake_uri(),
                              currency=self.options.budget_currency, price_lookup=self.price_lookup)

    def ttl_minutes(self) -> int:
        """The instance's time-to-live: the option, else derived from the sweep estimate."""
        expected_minutes = None
        if self.options.sweep_configs:
            expected_minutes = cost.estimate_sweep_time(self.options.sweep_configs).hours * 60
        if self.options.ttl_minutes is not None:
            if expected_minutes is not None and expected_minutes > self.options.ttl_minutes:
                # a warning, not a refusal: the estimate assumes the slowest published GPU
                log.warning("ttl_minutes=%d is shorter than the estimated %.0f min of the run: the "
                            "instance may power off before the sweeps end", self.options.ttl_minutes,
                            expected_minutes)
            return self.options.ttl_minutes
        if expected_minutes is not None:
            # half as long again as expected, plus time to collect: late, never early
            return max(60, math.ceil(expected_minutes * 1.5) + 30)
        return DEFAULT_TTL_MINUTES

    # --- prepare ---

    @timed_phase("provision")
    def prepare(self, run_id: str, *, attempt: int | None = None) -> TargetState:
        """Launch (or find) the run's instance and wait until SSM can reach it.

        ``attempt`` (default: the Airflow task's try number, else 1) goes into the launch's
        idempotency token: retries inside one attempt (botocore's, after a lost response)
        get the same instance back; a later attempt first looks the run's instance up by tag.
        """
        if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id):
            raise TargetConfigError(f"run_id {run_id!r} may hold only letters, digits and _.:+- (1-200)")
        estimate = self.estimate()
        if estimate is not None:
            cost.check_budget(estimate, float(self.options.budget_cap or 0), self.options.budget_currency)
            log.info("Cost guard passed: %s (cap %.2f %s)", estimate.describe(), self.options.budget_cap,
                     self.options.budget_currency)
        existing = self._instances_of(run_id, ("pending", "running"))
        if existing:
            instance = existing[0]
            instance_id, market = instance["InstanceId"], self._market_of(instance)
            expires_at = _tag(instance, EXPIRES_AT_TAG)
            log.info("Run %s already has instance %s (%s): reusing it", run_id, instance_id, market)
        else:
            ttl = self.ttl_minutes()
            expires_at = (datetime.now(UTC) + timedelta(minutes=ttl)).strftime("%Y-%m-%dT%H:%M:%SZ")
            image_id = self.resolve_ami()
            self.record_region()
            instance_id, market = self._launch(run_id, image_id, ttl, expires_at,
                                               attempt=current_attempt() if attempt is None else attempt)
        self.phases.mark_billed()  # an instance exists from here on: the provisioning is paid for
        state = TargetState(
            spec=self.spec.to_dict(), run_id=run_id, resource_id=instance_id, market=market,
            extra={"region": self.spec.region, "expires_at": expires_at,
                   "deployment": self.options.deployment, "results_bucket": self.options.results_bucket},
        )
        try:
            state.extra["writer"] = self._writer_of(instance_id)
            state.extra["results_key"] = self._results_key(state)
            self._wait_running(instance_id)
            self._wait_for_ssm_agent(instance_id)
        except BaseException:
            log.exception("Instance %s did not become usable; terminating it", instance_id)
            self.teardown(state)
            raise
        return state

    def _writer_of(self, instance_id: str) -> str:
        """The instance's ``aws:userid`` (``<role id>:<instance id>``): the one S3 prefix of the
        run its instance profile may write (``docker/iam/instance-profile-policy.json``)."""
        try:
            profile = self.iam_client.get_instance_profile(InstanceProfileName=self.options.instance_profile)
            role_id = profile["InstanceProfile"]["Roles"][0]["RoleId"]
        except Exception as exc:
            raise TargetError(f"IAM GetInstanceProfile {self.options.instance_profile!r}: {exc}") from exc
        return f"{role_id}:{instance_id}"

    def region_marker_key(self) -> str:
        return f"{self.options.results_prefix}/{self.options.deployment}/regions/{self.spec.region}"

    def record_region(self) -> None:
        """Leave ``<prefix>/<deployment>/regions/<region>`` before launching: the sweeper reads
        these, so an instance in a region no fleet entry names is still swept."""
        try:
            self.s3_hook.conn.put_object(Bucket=self.options.results_bucket, Key=self.region_marker_key(),
                                         Body=b"")
        except Exception as exc:
            raise TargetError(f"could not record region {self.spec.region} at s3://"
                              f"{self.options.results_bucket}/{self.region_marker_key()} before launching: "
                              f"{exc}") from exc

    def resolve_ami(self) -> str:
        """The AMI id: given directly, or read from the SSM parameter that names it."""
        ami = self.options.ami
        if _AMI_ID.fullmatch(ami):
            return ami
        name = ami.removeprefix("resolve:ssm:")
        try:
            value = self.ssm_hook.get_parameter_value(name)
        except Exception as exc:
            raise TargetError(f"ec2 option 'ami': cannot read SSM parameter {name!r} in "
                              f"{self.spec.region}: {exc}") from exc
        if not _AMI_ID.fullmatch(value.strip()):
            raise TargetError(f"ec2 option 'ami': SSM parameter {name!r} holds {value!r}, not an AMI id")
        return value.strip()

    def _root_device_name(self, image_id: str) -> str:
        images = self.ec2_hook.conn.describe_images(ImageIds=[image_id]).get("Images", [])
        if not images:
            raise TargetError(f"AMI {image_id} does not exist in {self.spec.region}")
        return images[0].get("RootDeviceName") or "/dev/sda1"

    def run_instances_request(self, run_id: str, image_id: str, ttl_minutes: int, expires_at: str,
                              *, spot: bool, attempt: int = 1) -> dict[str, Any]:
        """The RunInstances parameters (everything the module docstring promises)."""
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
                code = _client_error_code(exc)
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

    def _instances_of(self, run_id: str, states: tuple[str, ...] = LIVE_STATES) -> list[dict[str, Any]]:
        """This deployment's instances of the run (an instance of another deployment is never ours)."""
        return self.ec2_hook.get_instances(filters=[
            {"Name": f"tag:{RUN_ID_TAG}", "Values": [run_id]},
            {"Name": f"tag:{DEPLOYMENT_TAG}", "Values": [self.options.deployment]},
            {"Name": "instance-state-name", "Values": list(states)},
        ])

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
                unimplemented = _http_status(exc) in (500, 501) or _client_error_code(exc) in (
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

    # --- deploy ---

    def run_prefix(self, run_id: str) -> str:
        """Everything of one run lives below this key prefix (the deployment's own prefix first)."""
        return f"{self.options.results_prefix}/{self.options.deployment}/{run_key(run_id)}"

    def _writer_prefix(self, state: TargetState) -> str:
        """The run's keys the instance may write: below its own ``aws:userid``."""
        writer = state.extra.get("writer")
        if not isinstance(writer, str) or not _WRITER.fullmatch(writer):
            writer = self._writer_of(self._instance_id(state))
            state.extra["writer"] = writer
        return f"{self.run_prefix(state.run_id)}/{writer}"

    def _results_key(self, state: TargetState) -> str:
        return f"{self._writer_prefix(state)}/results.jsonl"

    def bundle_key(self, sha256: str) -> str:
        return f"{self.options.results_prefix}/{self.options.deployment}/bundles/{sha256}.tar.gz"

    def _bench_python(self, requirements_hash: str) -> str:
        venv = f"{self.options.remote_root}/venv-{requirements_hash}"
        return self.options.bench_python or f"{venv}/bin/python"

    def upload_bundle(self, bundle: UploadableBundle) -> str:
        """Put the bundle at its content-addressed key unless an object with exactly its bytes
        is there already; an object with other bytes (poisoned, truncated) is replaced."""
        from botocore.exceptions import ClientError

        key, bucket = self.bundle_key(bundle.sha256), self.options.results_bucket
        try:
            present = self.s3_hook.conn.get_object(Bucket=bucket, Key=key)["Body"].read()
        except ClientError as exc:
            if _client_error_code(exc) not in ("NoSuchKey", "404"):
                raise TargetError(f"could not read s3://{bucket}/{key}: {exc}") from exc
            present = None
        if present is not None and hashlib.sha256(present).hexdigest() == bundle.sha256:
            return key
        if present is not None:
            log.warning("s3://%s/%s does not hold the bytes its name promises (sha256 %s): "
                        "uploading it again", bucket, key, hashlib.sha256(present).hexdigest())
        self.s3_hook.load_bytes(bundle.data, key, bucket, replace=True)
        return key

    @timed_phase("deploy")
    def deploy(self, state: TargetState) -> TargetState:
        instance_id = self._instance_id(state)
        bundle = build_worker_bundle()
        # named by the bytes (not the code hash), checked here and again on the instance
        bundle_key = self.upload_bundle(bundle)
        workdir = f"{self.options.remote_root}/bench-{bundle.content_hash}"
        python = self._bench_python(bundle.requirements_hash)
        # the instance reads it with its own profile: no presigned URL (a credential) in SSM history
        commands = deploy_commands(f"s3://{self.options.results_bucket}/{bundle_key}", bundle.sha256, workdir,
                                   python, create_venv=self.options.bench_python is None)
        self._run_commands(state, instance_id, commands, self.options.deploy_timeout_s, purpose="deploy")
        state.workdir = workdir
        state.extra = {**state.extra, "bench_python": python, "bundle": bundle.content_hash}
        return state

    # --- run ---

    def sweep_commands(self, state: TargetState, sweep_config: dict[str, Any]) -> list[str]:
        """The AWS-RunShellScript commands of one sweep (the tests run exactly these in bash)."""
        if not state.workdir or not state.extra.get("bench_python"):
            raise TargetError("run_sweep before deploy: the state has no worker directory")
        config_json = self._config_json(state, sweep_config)
        rundir = f"{self.options.remote_root}/runs/{run_key(state.run_id)}"
        destination = f"s3://{self.options.results_bucket}/{self._results_key(state)}"
        progress = f"s3://{self.options.results_bucket}/{self._progress_key(state, config_json)}"
        return sweep_commands(
            config_json=config_json, workdir=state.workdir, rundir=rundir,
            python=str(state.extra["bench_python"]), destination=destination, progress_destination=progress,
        )

    @staticmethod
    def _config_json(state: TargetState, sweep_config: dict[str, Any]) -> str:
        """The sweep config as sent (with the run id), refused here if the worker would refuse it."""
        config = {"run_id": state.run_id, **sweep_config}
        try:
            # refused here, with the field named, rather than on the instance after a long wait
            parse_sweep(config, where="sweep_config")
        except ConfigError as exc:
            raise TargetConfigError(str(exc)) from exc
        return json.dumps(config, sort_keys=True)

    def _progress_key(self, state: TargetState, config_json: str) -> str:
        return f"{self._writer_prefix(state)}/progress/{sweep_name(config_json)}.log"

    @timed_phase("sweep")
    def run_sweep(self, state: TargetState, sweep_config: dict[str, Any], *, timeout_s: float) -> TargetState:
        instance_id = self._instance_id(state)
        commands = self.sweep_commands(state, sweep_config)
        config_json = self._config_json(state, sweep_config)
        progress = ProgressFollower(self.s3_hook, self.options.results_bucket,
                                    self._progress_key(state, config_json), self.line_sink)
        self._run_commands(state, instance_id, commands, timeout_s, purpose="sweep", progress=progress)
        state.remote_results = f"s3://{self.options.results_bucket}/{self._results_key(state)}"
        return state

    def _run_commands(self, state: TargetState, instance_id: str, commands: list[str], timeout_s: float,
                      *, purpose: str, progress: ProgressFollower | None = None) -> dict[str, Any]:
        """Send the commands through SSM Run Command, poll until done, stream the output.

        With a ``progress`` follower the worker's progress lines arrive while it runs (the
        instance uploads its progress file every ``PROGRESS_UPLOAD_S``); SSM's own copy of
        standard error is then only used for the error message.
        """
        command_id = self.send_commands(state, instance_id, commands, timeout_s, purpose=purpose)
        invocation = self.wait_for_command(command_id, instance_id, timeout_s,
                                           on_poll=progress.follow if progress else None)
        if progress:
            progress.follow()
        for line in (invocation.get("StandardOutputContent") or "").splitlines():
            self.line_sink(line)
        stderr = invocation.get("StandardErrorContent") or ""
        if not (progress and progress.seen_any):
            for line in stderr.splitlines():
                self.line_sink(line)
        if invocation.get("Status") != "Success":
            tail = "\n".join(stderr.splitlines()[-STDERR_TAIL_LINES:])
            raise TargetError(
                f"{purpose} on {instance_id} ended {invocation.get('Status')} (exit code "
                f"{invocation.get('ResponseCode')}, command {command_id}); stderr tail:\n{tail}")
        return invocation

    def send_commands(self, state: TargetState, instance_id: str, commands: list[str], timeout_s: float,
                      *, purpose: str) -> str:
        # the agent uploads with the instance's credentials: below the instance's own prefix
        output_prefix = f"{self._writer_prefix(state)}/ssm"
        response = self.ssm_hook.conn.send_command(
            InstanceIds=[instance_id],
            DocumentName=SSM_DOCUMENT,
            Comment=f"gpucompare {purpose} {run_key(state.run_id)}"[:100],
            Parameters={"commands": commands, "executionTimeout": [str(int(math.ceil(timeout_s)))]},
            # full stdout/stderr land here (the API returns only the first 24,000 characters)
            OutputS3BucketName=self.options.results_bucket,
            OutputS3KeyPrefix=output_prefix,
        )
        command_id = response["Command"]["CommandId"]
        log.info("Sent SSM %s command %s to %s (%d commands, timeout %.0f s)", purpose, command_id,
                 instance_id, len(commands), timeout_s)
        return command_id

    def wait_for_command(self, command_id: str, instance_id: str, timeout_s: float, *,
                         on_poll: Callable[[], None] | None = None) -> dict[str, Any]:
        """Poll GetCommandInvocation until a final status; cancel and raise past the time limit."""
        from botocore.exceptions import ClientError

        # the agent enforces executionTimeout itself; give it time to report before we give up
        grace = max(4 * self.options.poll_interval_s, min(60.0, timeout_s / 10))
        deadline = time.monotonic() + timeout_s + grace
        last_status = None
        while True:
            try:
                invocation = self.ssm_hook.get_command_invocation(command_id, instance_id)
            except ClientError as exc:
                # right after SendCommand the invocation may not exist yet
                if _client_error_code(exc) != "InvocationDoesNotExist":
                    raise TargetError(f"SSM GetCommandInvocation {command_id} failed: {exc}") from exc
                invocation = {"Status": "Pending"}
            status = invocation.get("Status")
            if status != last_status:
                log.info("SSM command %s on %s: %s", command_id, instance_id, status)
                last_status = status
            if status in SSM_FINAL_STATUSES:
                return invocation
            if on_poll:
                on_poll()
            # a spot interruption or the TTL timer ends the machine, not the command's status
            instance_state = self.ec2_hook.get_instance_state(instance_id)
            if instance_state not in ("pending", "running"):
                raise TargetError(f"instance {instance_id} is {instance_state} while SSM command "
                                  f"{command_id} was {status} (spot interruption or time-to-live?)")
            if time.monotonic() >= deadline:
                try:
                    self.ssm_hook.conn.cancel_command(CommandId=command_id, InstanceIds=[instance_id])
                except ClientError as exc:
                    log.warning("Could not cancel SSM command %s: %s", command_id, exc)
                raise TargetError(f"SSM command {command_id} on {instance_id} still {status} after "
                                  f"{timeout_s:.0f} s: cancelled")
            time.sleep(self.options.poll_interval_s)

    # --- collect ---

    def collect(self, state: TargetState, local_path: str) -> str:
        key = self._results_key(state)
        bucket = self.options.results_bucket
        if not self.s3_hook.check_for_key(key, bucket):
            raise TargetError(f"no results at s3://{bucket}/{key}: the sweep did not upload them "
                              f"(did run_sweep succeed on {state.resource_id}?)")
        directory = os.path.dirname(os.path.abspath(local_path))
        os.makedirs(directory, exist_ok=True)
        # download beside the destination, then rename: a reader never sees half a file
        fd, partial = tempfile.mkstemp(prefix=".results-", suffix=".partial", dir=directory)
        os.close(fd)
        try:
            self.s3_hook.conn.download_file(Bucket=bucket, Key=key, Filename=partial)
            os.replace(partial, local_path)
        finally:
            if os.path.exists(partial):
                os.unlink(partial)
        log.info("Collected s3://%s/%s to %s", bucket, key, local_path)
        return local_path

    # --- teardown ---

    def _instance_id(self, state: TargetState) -> str:
        if not state.resource_id:
            raise TargetError(f"no instance in the state of run {state.run_id}: prepare did not succeed")
        return state.resource_id

    def channel(self, state: TargetState, *, address: str | None = None) -> Any:
        """Roles of a scaling run through this target's SSM client (``SSMChannel``); the
        group's other hosts reach the instance at its private address unless told otherwise."""
        from gpucompare.targets.channel import DistributedRunError
        from gpucompare.targets.ec2.channel import SSMChannel

        instance_id = state.resource_id
        if not instance_id or not state.workdir or not state.extra.get("bench_python"):
            raise DistributedRunError(f"ec2 target {self.spec.name}: prepare and deploy must run before "
                                      "a distributed run (the state has no instance or worker)")
        if address is None:
            reservations = self.ec2_hook.conn.describe_instances(InstanceIds=[instance_id])["Reservations"]
            address = reservations[0]["Instances"][0].get("PrivateIpAddress")
        return SSMChannel(ssm_client=self.ssm_hook.conn, instance_id=instance_id, address=address,
                          python=state.extra["bench_python"], code_dir=state.workdir,
                          run_dir=f"{self.options.remote_root}/runs/{run_key(state.run_id)}",
                          poll_interval_s=self.options.poll_interval_s)

    @timed_phase("teardown")
    def teardown(self, state: TargetState | None) -> None:
        """Terminate the run's instance(s) and wait until they are gone. Safe twice.

        Each id is terminated on its own call, so one bad id (malformed: skipped with a
        warning; already gone: fine) never keeps another instance running; the instances
        tagged with the run and this deployment are always reached, also when the state's
        id is wrong or missing. Only this deployment's instances are looked up.
        """
        from botocore.exceptions import ClientError

        if state is None:
            log.info("Teardown without a state: nothing was recorded, nothing to terminate")
            return
        # by tag too: a prepare that failed after RunInstances may not have recorded the id
        ids = [instance["InstanceId"] for instance in self._instances_of(state.run_id)]
        if state.resource_id and state.resource_id not in ids:
            if not (isinstance(state.resource_id, str) and _INSTANCE_ID.fullmatch(state.resource_id)):
                log.warning("Teardown of run %s: ignoring malformed instance id %r in the state",
                            state.run_id, state.resource_id)
            elif self._is_ours(state.resource_id):
                ids.append(state.resource_id)
        if not ids:
            log.info("Run %s has no instance left", state.run_id)
            return
        failed: list[str] = []
        terminated: list[str] = []
        for instance_id in ids:
            try:
                self.ec2_hook.terminate_instances(instance_ids=[instance_id])
                terminated.append(instance_id)
            except ClientError as exc:
                code = _client_error_code(exc)
                if code == "InvalidInstanceID.NotFound":
                    log.info("Instance %s of run %s no longer exists", instance_id, state.run_id)
                elif code == "InvalidInstanceID.Malformed":
                    log.warning("Teardown of run %s: AWS calls %r malformed; skipped", state.run_id,
                                instance_id)
                else:
                    failed.append(f"{instance_id}: {exc}")
        if terminated:
            self.ec2_hook.get_waiter("instance_terminated").wait(
                InstanceIds=terminated, WaiterConfig=self._waiter_config(self.options.launch_timeout_s))
            log.info("Terminated %s (run %s)", ", ".join(terminated), state.run_id)
        if failed:
            raise TargetError(f"TerminateInstances failed for run {state.run_id}: " + "; ".join(failed))

    def _is_ours(self, instance_id: str) -> bool:
        """Whether an id the state holds (but the tag lookup did not return) is this
        deployment's: its tags say so. Another deployment's instance is never terminated."""
        from botocore.exceptions import ClientError

        try:
            reservations = self.ec2_hook.conn.describe_instances(InstanceIds=[instance_id])["Reservations"]
        except ClientError as exc:
            if _client_error_code(exc) in ("InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"):
                log.info("Instance %s of the state does not exist (any more)", instance_id)
                return False
            raise TargetError(f"DescribeInstances {instance_id} failed: {exc}") from exc
        instances = [i for r in reservations for i in r.get("Instances", [])]
        if instances and _tag(instances[0], DEPLOYMENT_TAG) == self.options.deployment:
            return True
        log.warning("Teardown: instance %s of the state is not of deployment %s (tags %s); not touched",
                    instance_id, self.options.deployment, instances[0].get("Tags") if instances else None)
        return False

    def forget(self, run_id: str) -> int:
        """Delete every object of the run (results, progress, SSM output) once its results are
        in the lake; returns how many. The bucket's lifecycle rule catches what this misses."""
        bucket, prefix = self.options.results_bucket, self.run_prefix(run_id) + "/"
        keys = self.s3_hook.list_keys(bucket_name=bucket, prefix=prefix) or []
        if keys:
            self.s3_hook.delete_objects(bucket, keys)
        log.info("Deleted %d object(s) of run %s under s3://%s/%s", len(keys), run_id, bucket, prefix)
        return len(keys)


def _tag(instance: dict[str, Any], key: str) -> str | None:
    for tag in instance.get("Tags") or []:
        if tag.get("Key") == key:
            return tag.get("Value")
    return None


class ProgressFollower:
    """Reads the sweep's progress file from S3 as it grows and passes new lines on."""

    def __init__(self, s3_hook: Any, bucket: str, key: str, line_sink: LineSink) -> None:
        self.s3_hook, self.bucket, self.key, self.line_sink = s3_hook, bucket, key, line_sink
        self.emitted = 0
        self.seen_any = False

    def follow(self) -> None:
        from botocore.exceptions import ClientError

        try:
            body = self.s3_hook.conn.get_object(Bucket=self.bucket, Key=self.key)["Body"].read()
        except ClientError as exc:
            if _client_error_code(exc) in ("NoSuchKey", "404"):
                return  # not uploaded yet
            log.warning("Could not read progress s3://%s/%s: %s", self.bucket, self.key, exc)
            return
        self.seen_any = True
        lines = body.decode("utf-8", errors="replace").splitlines()
        for line in lines[self.emitted:]:
            self.line_sink(line)
        self.emitted = max(self.emitted, len(lines))


@dataclass(frozen=True)
class UploadableBundle:
    """The worker bundle as bytes, with the hashes that name it here and check it there."""

    data: bytes
    content_hash: str  # the shared helper's name of this code version
    sha256: str  # of the tarball's bytes: checked on the instance after download
    requirements_hash: str  # of requirements-gpu.txt: names the worker venv


def build_worker_bundle() -> UploadableBundle:
    """The worker code (``bench_tasks/``) from the targets' shared bundle helper."""
    from gpucompare.targets import bundle as _worker_bundle

    bundle = _worker_bundle.build_bundle()
    data = bundle.tarball.read_bytes()
    return UploadableBundle(data=data, content_hash=bundle.content_hash,
                            sha256=hashlib.sha256(data).hexdigest(),
                            requirements_hash=bundle.requirements_hashes.get("gpu", bundle.content_hash))
