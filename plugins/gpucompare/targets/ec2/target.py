"""The ``ec2`` target: a GPU instance provisioned for one run, driven through SSM, results via S3.

Built on the amazon provider's hooks (``EC2Hook``, ``SsmHook``, ``S3Hook``), so the AWS
connection (``aws_conn_id``; region, credentials, role, ``endpoint_url`` in its extra)
is the one Airflow already manages. The provider's operators (``EC2CreateInstanceOperator``,
``SsmRunCommandOperator`` …) are whole Airflow tasks; the target's steps are called from
inside the DAG's own tasks, so it uses the same hooks, waiters and calls they do.

This module holds the target's steps and its teardown; the target is composed of a launcher
(``launch.Ec2Launcher``), a storage object for the run's S3 keys and bundle upload
(``storage.RunStorage``) and an SSM runner per instance (``ssm.SsmRunner``, also the host
channel's), over one set of clients (``clients.AwsClients``).

Exactly one sweep per machine and configuration: ``start_sweep`` finds the sweep's earlier
command (its CommandId kept in the state, or found again through SSM by its comment) and
re-attaches to it while it runs, reuses it once it succeeded, and sends it again only when it
failed or was lost; on the instance the sweep's folder (``targets.runs``) holds a ``flock``
lock the worker keeps while it lives and an exit file, so even a command sent twice runs one
worker (``commands.sweep_commands``). ``start_sweep`` is short; the wait is ``run_sweep``'s
(in the task) or a trigger's (``airflow.deferrable``).

What ``prepare`` creates, and why:

* the cost guard runs first (``cost.py``): over budget, nothing is created;
* spot if asked, with on-demand as the fallback when spot capacity is refused
  (``SPOT_CAPACITY_ERRORS``); ``TargetState.market`` records what the run actually got;
* IMDSv2 required, an encrypted root volume deleted on termination,
  ``InstanceInitiatedShutdownBehavior=terminate`` plus ``shutdown -h +TTL`` in the user data:
  an instance nobody tears down powers itself off, and powering off terminates it;
* an idempotency ``ClientToken`` derived from the run and the market (and the run's instances
  already dead), the same on every try: a RunInstances retried by botocore after a lost
  response, or by a task retry whose tag lookup does not see the instance yet, gets the same
  instance back instead of launching a second one;
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
instead of appending twice); ``collect`` downloads that object and ``delete_run_objects`` (after a
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

import logging
import math
import os
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from bench_tasks.configs import ConfigError, parse_sweep
from bench_tasks.constants import WORKER_RUNTIME_ENV
from gpucompare.targets import container, cost, runs
from gpucompare.targets.base import (
    LineSink,
    Target,
    TargetConfigError,
    TargetError,
    TargetSpec,
    TargetState,
    shell_quote,
)
from gpucompare.targets.ec2.aws_errors import client_error_code
from gpucompare.targets.ec2.clients import AwsClients
from gpucompare.targets.ec2.commands import deploy_commands, sweep_commands
from gpucompare.targets.ec2.launch import DEAD_STATES, Ec2Launcher, ReadyPoller
from gpucompare.targets.ec2.options import (
    DEFAULT_TTL_MINUTES,
    DEPLOYMENT_TAG,
    EXPIRES_AT_TAG,
    INSTANCE_ID,
    LIVE_STATES,
    RUN_ID,
    SCRIPT_PREAMBLE,
    Ec2Options,
    run_key,
)
from gpucompare.targets.ec2.ssm import (
    SSM_RUNNING,
    ProgressFollower,
    SsmRunner,
    is_final,
    raise_unless_success,
)
from gpucompare.targets.ec2.storage import RunStorage, build_worker_bundle
from gpucompare.targets.phases import timed_phase

log = logging.getLogger(__name__)

#: Seconds the worker gets after its time limit to stop (then ``timeout`` kills it).
KILL_GRACE_S = 30
#: Seconds beyond the worker's time limit the sweep's command may take (merge, upload).
SWEEP_SLACK_S = 120


@dataclass(frozen=True)
class SweepStart:
    """What ``Ec2Target.start_sweep`` did: the command the sweep's wait follows, and why
    (``start``: sent now; ``attach``: an earlier command still runs; ``reuse``: it succeeded)."""

    command_id: str
    decision: str
    sweep: str
    progress_key: str
    limit_s: float  # the command's own time limit (the worker's, its kill grace, the upload)
    deadline: float  # wall clock (epoch seconds) past which the wait cancels the command

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SweepStart:
        """From ``to_dict()``'s JSON; keys the caller added (the pipeline's) are left out."""
        return cls(**{name: data[name] for name in cls.__dataclass_fields__})


class Ec2Target(Target):
    """Provision, use and terminate one EC2 instance per run (see the module docstring).

    Built from parts, each usable alone: ``launcher`` (``launch.Ec2Launcher``: RunInstances,
    the wait until the instance is usable), ``storage`` (``storage.RunStorage``: the run's S3
    keys, the bundle upload) and, per instance, ``runner()`` (``ssm.SsmRunner``: every SSM
    command), all over one set of clients (``clients.AwsClients``).
    """

    kind = "ec2"

    def __init__(self, spec: TargetSpec, *, line_sink: LineSink | None = None,
                 price_lookup: cost.PriceLookup | None = None, lake_uri: str | None = None) -> None:
        super().__init__(spec, line_sink=line_sink)
        self.options = Ec2Options.from_spec(spec)
        #: the AWS clients every part uses; the launcher; the run's S3 keys and uploads
        self.clients = AwsClients(self.options.aws_conn_id, spec.region)
        self.launcher = Ec2Launcher(spec, self.options, self.clients)
        self.storage = RunStorage(spec, self.options, self.clients, self._instance_id)
        self.price_lookup = price_lookup
        #: where the guard reads current prices and measured throughput (default: the
        #: [gpucompare] lake setting); a given ``price_lookup`` wins over the lake's prices
        self.lake_uri = lake_uri

    # --- the parts and their clients (one boto3 client per service, so tests can hook into its events) ---

    @property
    def ec2_hook(self) -> Any:
        return self.clients.ec2_hook

    @property
    def ssm_hook(self) -> Any:
        return self.clients.ssm_hook

    @property
    def s3_hook(self) -> Any:
        return self.clients.s3_hook

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
    def prepare(self, run_id: str) -> TargetState:
        """Launch (or find) the run's instance and wait until SSM can reach it: ``start_prepare``,
        then its ``prepare_poller`` in this process, then ``finish_prepare`` (the DAG's prepare
        task defers the wait to a trigger instead)."""
        state, started = self.start_prepare(run_id)
        poller = self.prepare_poller(state, started)
        try:
            while (event := poller.poll()) is None:
                time.sleep(self.options.poll_interval_s)
        except BaseException:
            log.exception("Instance %s did not become usable; terminating it", state.resource_id)
            self.teardown(state)
            raise
        return self.finish_prepare(state, event)

    def start_prepare(self, run_id: str) -> tuple[TargetState, dict[str, Any]]:
        """The short part of ``prepare``: the cost guard, then the run's instance found by tag or
        launched; returns its state and what the wait needs (``{"instance_id", "deadline"}``:
        ``launch_timeout_s`` + ``agent_timeout_s`` from now, epoch seconds).

        The launch's idempotency token is the run's, the same on every try (``launch.client_token``):
        a try that does not see the instance an earlier try launched (the lookup by tag is
        eventually consistent) gets that instance back from RunInstances, not a second one.
        """
        if not isinstance(run_id, str) or not RUN_ID.fullmatch(run_id):
            raise TargetConfigError(f"run_id {run_id!r} may hold only letters, digits and _.:+- (1-200)")
        estimate = self.estimate()
        if estimate is not None:
            cost.check_budget(estimate, float(self.options.budget_cap or 0), self.options.budget_currency)
            log.info("Cost guard passed: %s (cap %.2f %s)", estimate.describe(), self.options.budget_cap,
                     self.options.budget_currency)
        known = self.launcher.find(run_id, ("pending", "running", *DEAD_STATES))
        existing = [i for i in known if i["State"]["Name"] in ("pending", "running")]
        dead = tuple(i["InstanceId"] for i in known if i not in existing)
        if existing:
            instance = existing[0]
            instance_id, market = instance["InstanceId"], self.launcher.market_of(instance)
            expires_at = _tag(instance, EXPIRES_AT_TAG)
            log.info("Run %s already has instance %s (%s): reusing it", run_id, instance_id, market)
        else:
            ttl = self.ttl_minutes()
            expires_at = (datetime.now(UTC) + timedelta(minutes=ttl)).strftime("%Y-%m-%dT%H:%M:%SZ")
            image_id = self.launcher.resolve_ami()
            self.storage.record_region()
            instance_id, market = self.launcher.launch(run_id, image_id, ttl, expires_at, dead=dead)
        self.phases.mark_billed()  # an instance exists from here on: the provisioning is paid for
        state = TargetState(
            spec=self.spec.to_dict(), run_id=run_id, resource_id=instance_id, market=market,
            extra={"region": self.spec.region, "expires_at": expires_at,
                   "deployment": self.options.deployment, "results_bucket": self.options.results_bucket},
        )
        try:
            state.extra["writer"] = self.storage.writer_of(instance_id)
            state.extra["results_key"] = self.storage.results_key(state)
        except BaseException:
            log.exception("Instance %s: its results location is unknown; terminating it", instance_id)
            self.teardown(state)
            raise
        deadline = time.time() + self.options.launch_timeout_s + self.options.agent_timeout_s
        return state, {"instance_id": instance_id, "deadline": deadline}

    def prepare_poller(self, state: TargetState, started: dict[str, Any]) -> ReadyPoller:
        """The wait of ``prepare`` (``launch.ReadyPoller``), in the task or in a trigger."""
        return self.launcher.ready_poller(started["instance_id"], float(started["deadline"]))

    def finish_prepare(self, state: TargetState, event: dict[str, Any]) -> TargetState:
        """After the wait: the state, or (the wait's ``{"error": ...}``) the instance terminated
        and a ``TargetError``, so no unusable instance is left to bill."""
        if event.get("error"):
            log.error("Instance %s did not become usable (%s); terminating it", state.resource_id,
                      event["error"])
            self.teardown(state)
            raise TargetError(event["error"])
        return state

    def _instances_of(self, run_id: str, states: tuple[str, ...] = LIVE_STATES) -> list[dict[str, Any]]:
        """This deployment's instances of the run (an instance of another deployment is never ours);
        a failed lookup raises ``InstanceLookupFailed``: prepare launches nothing on a guess."""
        return self.launcher.find(run_id, states)

    # --- deploy ---

    def _bench_python(self, requirements_hash: str) -> str:
        venv = f"{self.options.remote_root}/venv-{requirements_hash}"
        return self.options.bench_python or f"{venv}/bin/python"

    def deploy(self, state: TargetState) -> TargetState:
        """The worker bundle (and venv), then for a container runtime the image's pull, timed as
        its own ``pull`` phase (``targets.container``)."""
        state = self._deploy_bundle(state)
        return self._pull_image(state) if self.in_container else state

    @property
    def in_container(self) -> bool:
        return container.is_container_runtime(self.options.worker_runtime)

    @timed_phase("pull")
    def _pull_image(self, state: TargetState) -> TargetState:
        image = container.runtime_image(self.options.worker_runtime)
        invocation = self._run_commands(state, [*SCRIPT_PREAMBLE, container.pull_script(image)],
                                        self.options.deploy_timeout_s, purpose="pull")
        pulled = container.parse_pull(invocation.get("StandardOutputContent") or "", image)
        state.extra = {**state.extra, "image": pulled.reference,
                       "worker_runtime": self.options.worker_runtime}
        return state

    @timed_phase("deploy")
    def _deploy_bundle(self, state: TargetState) -> TargetState:
        bundle = build_worker_bundle()
        # named by the bytes (not the code hash), checked here and again on the instance
        bundle_key = self.storage.upload_bundle(bundle)
        workdir = f"{self.options.remote_root}/bench-{bundle.content_hash}"
        python = self._bench_python(bundle.requirements_hash)
        # the instance reads it with its own profile: no presigned URL (a credential) in SSM history
        commands = deploy_commands(f"s3://{self.options.results_bucket}/{bundle_key}", bundle.sha256, workdir,
                                   python, check_worker=not self.in_container,
                                   runtime=self.options.worker_runtime,
                                   create_venv=self.options.bench_python is None and not self.in_container)
        self._run_commands(state, commands, self.options.deploy_timeout_s, purpose="deploy")
        state.workdir = workdir
        state.extra = {**state.extra, "bench_python": python, "bundle": bundle.content_hash}
        return state

    # --- run ---

    def _run_commands(self, state: TargetState, commands: list[str], timeout_s: float, *,
                      purpose: str) -> dict[str, Any]:
        """One short SSM command (deploy, pull) through the target's runner: its output lines
        into the task log, a failure raised naming ``purpose``; returns the invocation."""
        instance_id = self._instance_id(state)
        invocation = self.runner(state).run(commands, timeout_s,
                                            comment=f"gpucompare {purpose} {run_key(state.run_id)}",
                                            output_prefix=f"{self.storage.writer_prefix(state)}/ssm")
        for line in ((invocation.get("StandardOutputContent") or "").splitlines()
                     + (invocation.get("StandardErrorContent") or "").splitlines()):
            self.line_sink(line)
        raise_unless_success(invocation, purpose=purpose, instance_id=instance_id)
        return invocation

    def runner(self, state: TargetState) -> SsmRunner:
        """The SSM runner of the run's instance (the one its host channel uses too)."""
        return SsmRunner(self.ssm_hook.conn, self._instance_id(state),
                         poll_interval_s=self.options.poll_interval_s,
                         output_bucket=self.options.results_bucket)

    def run_dir(self, state: TargetState) -> str:
        """The run's folder on the instance (``targets.runs`` names it, as on an ssh host)."""
        return f"{self.options.remote_root}/runs/{runs.run_dir_name(state.run_id)}"

    def sweep_commands(self, state: TargetState, sweep_config: dict[str, Any], *,
                       timeout_s: float = 3600) -> list[str]:
        """The AWS-RunShellScript commands of one sweep (the tests run exactly these in bash)."""
        if not state.workdir or not state.extra.get("bench_python"):
            raise TargetError("run_sweep before deploy: the state has no worker directory")
        # the runtime goes into every record (worker_runtime)
        python = shell_quote(str(state.extra["bench_python"]))
        prefix = f"env {WORKER_RUNTIME_ENV}={shell_quote(self.options.worker_runtime)} {python}"
        if self.in_container:  # NVIDIA's image runs the bundle, mounted read-only
            if not container.PINNED.fullmatch(str(state.extra.get("image"))):
                raise TargetError("run_sweep before the pull: the state has no image@digest")
        config = self._sweep_config(state, sweep_config)
        name = None
        if self.in_container:
            name = container.container_name(runs.run_dir_name(state.run_id), runs.sweep_dir_name(config))
            prefix = container.shell_prefix(
                image=state.extra["image"], runtime=self.options.worker_runtime, code_dir=state.workdir,
                sweep_dir=self.run_dir(state), uid=0, gid=0, name=name)
        destination = f"s3://{self.options.results_bucket}/{self.storage.results_key(state)}"
        progress = f"s3://{self.options.results_bucket}/{self.storage.progress_key(state, config)}"
        return sweep_commands(
            config=config, workdir=state.workdir, run_dir=self.run_dir(state),
            python=str(state.extra["bench_python"]), destination=destination, progress_destination=progress,
            worker_prefix=prefix, timeout_s=max(1, math.ceil(timeout_s)), kill_grace_s=KILL_GRACE_S,
            container_name=name,
        )

    @staticmethod
    def _sweep_config(state: TargetState, sweep_config: dict[str, Any]) -> dict[str, Any]:
        """The sweep config as sent (with the run id), refused here if the worker would refuse it."""
        config = runs.with_run_id(sweep_config, state.run_id)
        try:
            # refused here, with the field named, rather than on the instance after a long wait
            parse_sweep(config, where="sweep_config")
        except ConfigError as exc:
            raise TargetConfigError(str(exc)) from exc
        return config

    def _sweep_comment(self, state: TargetState, config: dict[str, Any]) -> str:
        """How SSM knows the sweep's command again (``SsmRunner.find``) on the run's instance."""
        return f"gpucompare sweep {runs.sweep_dir_name(config)} {run_key(state.run_id)}"[:100]

    def start_sweep(self, state: TargetState, sweep_config: dict[str, Any], *,
                    timeout_s: float) -> SweepStart:
        """Send the sweep's command unless one already covers it; a short call (no waiting).

        The CommandId of the sweep is kept in ``state.extra["sweep_commands"]`` and found again
        through SSM (the command's comment names the sweep) by a retry that lost the state:
        a command still running is re-attached to (``attach``), one that succeeded is reused
        (``reuse``), and only a dead or failed one is sent again (``start``), whose script
        itself re-attaches to a worker still holding the sweep's lock on the instance.
        """
        if not timeout_s or timeout_s <= 0:
            raise TargetError(f"run_sweep: timeout_s must be > 0, got {timeout_s!r}")
        config = self._sweep_config(state, sweep_config)
        commands = self.sweep_commands(state, sweep_config, timeout_s=timeout_s)
        name, comment = runs.sweep_dir_name(config), self._sweep_comment(state, config)
        runner = self.runner(state)
        known = state.extra.get("sweep_commands", {}).get(name) or runner.find(comment)
        decision = "start"
        if known:
            status = runner.invocation(known).get("Status")
            decision = "attach" if status in SSM_RUNNING else "reuse" if status == "Success" else "start"
            log.info("Sweep %s of run %s: command %s is %s: %s", name, state.run_id, known, status, decision)
        limit = timeout_s + KILL_GRACE_S + SWEEP_SLACK_S
        if decision == "start":
            known = runner.send(commands, limit, comment=comment,
                                output_prefix=f"{self.storage.writer_prefix(state)}/ssm")
        state.extra["sweep_commands"] = {**state.extra.get("sweep_commands", {}), name: known}
        log.info("Sweep %s on %s: %s (command %s)", name, runner.instance_id, decision, known)
        # the agent enforces the limit itself; give it time to report before giving up
        grace = max(4 * self.options.poll_interval_s, min(60.0, limit / 10))
        return SweepStart(command_id=str(known), decision=decision, sweep=name,
                          progress_key=self.storage.progress_key(state, config), limit_s=limit,
                          deadline=time.time() + limit + grace)

    def sweep_poller(self, state: TargetState, started: SweepStart | dict[str, Any]) -> CommandPoller:
        """Follows the sweep's command one ``poll()`` at a time (in the task or in a trigger)."""
        if isinstance(started, dict):
            started = SweepStart.from_dict(started)
        return CommandPoller(self, state, started)

    def finish_sweep(self, state: TargetState, started: SweepStart | dict[str, Any],
                     event: dict[str, Any]) -> TargetState:
        """After the sweep's command ended: its output into the log, an error unless it succeeded."""
        if event.get("error"):
            raise TargetError(str(event["error"]))
        invocation = event["invocation"]
        for line in (invocation.get("StandardOutputContent") or "").splitlines():
            self.line_sink(line)
        if not event.get("progress_seen"):
            for line in (invocation.get("StandardErrorContent") or "").splitlines():
                self.line_sink(line)
        raise_unless_success(invocation, purpose="sweep", instance_id=self._instance_id(state))
        state.remote_results = f"s3://{self.options.results_bucket}/{self.storage.results_key(state)}"
        return state

    @timed_phase("sweep")
    def run_sweep(self, state: TargetState, sweep_config: dict[str, Any], *, timeout_s: float) -> TargetState:
        """Start (or re-attach to, or reuse) the sweep and wait for it in this task."""
        started = self.start_sweep(state, sweep_config, timeout_s=timeout_s)
        poller = self.sweep_poller(state, started)
        while (event := poller.poll()) is None:
            time.sleep(self.options.poll_interval_s)
        return self.finish_sweep(state, started, event)

    def _check_alive(self, state: TargetState, command_id: str, status: str | None) -> None:
        """A spot interruption or the TTL timer ends the machine, not the command's status."""
        instance_id = self._instance_id(state)
        instance_state = self.ec2_hook.get_instance_state(instance_id)
        if instance_state not in ("pending", "running"):
            raise TargetError(f"instance {instance_id} is {instance_state} while SSM command "
                              f"{command_id} was {status} (spot interruption or time-to-live?)")

    # --- collect ---

    def collect(self, state: TargetState, local_path: str) -> str:
        key = self.storage.results_key(state)
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
        return SSMChannel(runner=self.runner(state), address=address,
                          python=state.extra["bench_python"], code_dir=state.workdir,
                          run_dir=self.run_dir(state))

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
            if not (isinstance(state.resource_id, str) and INSTANCE_ID.fullmatch(state.resource_id)):
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
                code = client_error_code(exc)
                if code == "InvalidInstanceID.NotFound":
                    log.info("Instance %s of run %s no longer exists", instance_id, state.run_id)
                elif code == "InvalidInstanceID.Malformed":
                    log.warning("Teardown of run %s: AWS calls %r malformed; skipped", state.run_id,
                                instance_id)
                else:
                    failed.append(f"{instance_id}: {exc}")
        if terminated:
            self.ec2_hook.get_waiter("instance_terminated").wait(
                InstanceIds=terminated,
                WaiterConfig=self.launcher.waiter_config(self.options.launch_timeout_s))
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
            if client_error_code(exc) in ("InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"):
                log.info("Instance %s of the state does not exist (any more)", instance_id)
                return False
            raise TargetError(f"DescribeInstances {instance_id} failed: {exc}") from exc
        instances = [i for r in reservations for i in r.get("Instances", [])]
        if instances and _tag(instances[0], DEPLOYMENT_TAG) == self.options.deployment:
            return True
        log.warning("Teardown: instance %s of the state is not of deployment %s (tags %s); not touched",
                    instance_id, self.options.deployment, instances[0].get("Tags") if instances else None)
        return False

    def delete_run_objects(self, run_id: str) -> int:
        """Delete every object of the run (results, progress, SSM output) once its results are
        in the lake; returns how many. The bucket's lifecycle rule catches what this misses."""
        bucket, prefix = self.options.results_bucket, self.storage.run_prefix(run_id) + "/"
        keys = self.s3_hook.list_keys(bucket_name=bucket, prefix=prefix) or []
        if keys:
            self.s3_hook.delete_objects(bucket, keys)
        log.info("Deleted %d object(s) of run %s under s3://%s/%s", len(keys), run_id, bucket, prefix)
        return len(keys)


class CommandPoller:
    """The wait for one sweep's SSM command, one ``poll()`` at a time: progress lines (from S3)
    go to the target's line sink; ``poll`` returns None while the command runs, else the event
    ``finish_sweep`` takes: ``{"invocation": ..., "progress_seen": ...}`` once it ended, or
    ``{"error": ...}`` when the instance is gone (spot interruption, time-to-live) or the
    command ran past its deadline; an abandoned command is cancelled."""

    def __init__(self, target: Ec2Target, state: TargetState, started: SweepStart) -> None:
        self.target, self.state, self.started = target, state, started
        self.runner = target.runner(state)
        self.progress = ProgressFollower(target.s3_hook, target.options.results_bucket, started.progress_key,
                                         target.line_sink)
        self.last_status: str | None = None

    def poll(self) -> dict[str, Any] | None:
        command_id = self.started.command_id
        invocation = self.runner.invocation(command_id)
        status = invocation.get("Status")
        if status != self.last_status:
            log.info("SSM command %s on %s: %s", command_id, self.runner.instance_id, status)
            self.last_status = status
        self.progress.follow()
        if is_final(status):
            keep = ("CommandId", "Status", "ResponseCode", "StandardOutputContent", "StandardErrorContent")
            return {"invocation": {key: invocation.get(key) for key in keep},
                    "progress_seen": self.progress.seen_any}
        try:
            self.target._check_alive(self.state, command_id, status)
        except TargetError as exc:
            self.runner.cancel(command_id)
            return {"error": str(exc)}
        if time.time() >= self.started.deadline:
            self.runner.cancel(command_id)
            return {"error": f"SSM command {command_id} on {self.runner.instance_id} still {status} after "
                             f"{self.started.limit_s:.0f} s: cancelled"}
        return None

    def close(self) -> None:
        """Nothing to close: each poll is a call of the target's clients."""


def _tag(instance: dict[str, Any], key: str) -> str | None:
    for tag in instance.get("Tags") or []:
        if tag.get("Key") == key:
            return tag.get("Value")
    return None
