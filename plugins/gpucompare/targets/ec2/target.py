"""The ``ec2`` target: a GPU instance provisioned for one run, driven through SSM, results via S3.

Built on the amazon provider's hooks (``EC2Hook``, ``SsmHook``, ``S3Hook``), so the AWS
connection (``aws_conn_id``; region, credentials, role, ``endpoint_url`` in its extra)
is the one Airflow already manages. The provider's operators (``EC2CreateInstanceOperator``,
``SsmRunCommandOperator`` …) are whole Airflow tasks; the target's steps are called from
inside the DAG's own tasks, so it uses the same hooks, waiters and calls they do.

``Ec2Target`` is a thin coordinator: each job is a part of its own, over one set of clients
(``clients.AwsClients``), none reaching into another's private members:

* ``guard.CostGuard``: the cost guard and the instance's time-to-live;
* ``launch.Ec2Launcher``: RunInstances, the launch plan and its idempotency token;
* ``readiness.Readiness``: the instance running and its SSM agent online, and still alive;
* ``ssm.SsmRunner`` (one per instance, ``runner``): every SSM command and its wait;
* ``deploy.Deployer``: the worker bundle and the image pull (one SSM command);
* ``sweeps.Sweeps``: each sweep sent at most once, its wait and its end;
* ``storage.RunStorage``: the run's S3 keys, the bundle upload, the results download;
* ``teardown.Reaper``: termination, patient when throttled, handed to the sweeper if not;
* ``channel.SSMChannel`` (``channel``): the scaling runs' host channel.

Every wait reads statuses through one state machine (``states``).

What ``prepare`` creates, and why:

* the cost guard runs first (``guard.CostGuard``): over budget, nothing is created;
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
``launch_timeout_s`` (900), ``deploy_timeout_s`` (1800), ``tags`` (extra tags), ``max_reclaims`` (2:
replacements a night may launch after losing its instance mid-sweep or during its deploy, ``reclaim``).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from gpucompare.config import patterns
from gpucompare.targets import cost
from gpucompare.targets.base import (
    DeferrableDeploy,
    DeferrablePrepare,
    DeferrableTarget,
    LineSink,
    Target,
    TargetConfigError,
    TargetError,
    TargetSpec,
    TargetState,
)
from gpucompare.targets.ec2 import reclaim, states
from gpucompare.targets.ec2.clients import AwsClients
from gpucompare.targets.ec2.deploy import Deployer
from gpucompare.targets.ec2.guard import CostGuard
from gpucompare.targets.ec2.launch import Ec2Launcher
from gpucompare.targets.ec2.options import Ec2Options
from gpucompare.targets.ec2.readiness import Readiness
from gpucompare.targets.ec2.ssm import SsmRunner
from gpucompare.targets.ec2.storage import RunStorage
from gpucompare.targets.ec2.sweeps import CommandPoller, Sweeps, SweepStart
from gpucompare.targets.ec2.teardown import Reaper
from gpucompare.targets.phases import timed_phase
from gpucompare.targets.polling import poll_until

log = logging.getLogger(__name__)


class Ec2Target(Target, DeferrableTarget, DeferrablePrepare, DeferrableDeploy):
    """Provision, use and terminate one EC2 instance per run (see the module docstring): each
    step hands its work to the part that does it."""

    kind = "ec2"

    def __init__(self, spec: TargetSpec, *, line_sink: LineSink | None = None,
                 price_lookup: cost.PriceLookup | None = None, lake_uri: str | None = None) -> None:
        super().__init__(spec, line_sink=line_sink)
        self.options = Ec2Options.from_spec(spec)
        self.clients = AwsClients(self.options.aws_conn_id, spec.region)
        self.guard = CostGuard(spec, self.options, price_lookup=price_lookup, lake_uri=lake_uri)
        self.launcher = Ec2Launcher(spec, self.options, self.clients)
        self.readiness = Readiness(self.clients, self.options.poll_interval_s)
        self.storage = RunStorage(spec, self.options, self.clients, states.instance_id_of)
        self.deployer = Deployer(self.options, self.storage, self.runner, self.line_sink)
        self.sweeps = Sweeps(self.options, self.storage, self.readiness, self.runner, self.line_sink)
        self.reaper = Reaper(self.launcher)

    @property
    def ec2_hook(self) -> Any:
        return self.clients.ec2_hook

    @property
    def ssm_hook(self) -> Any:
        return self.clients.ssm_hook

    @property
    def s3_hook(self) -> Any:
        return self.clients.s3_hook

    def runner(self, state: TargetState) -> SsmRunner:
        """The SSM runner of the run's instance (the one its host channel uses too)."""
        return SsmRunner(self.ssm_hook.conn, states.instance_id_of(state),
                         poll_interval_s=self.options.poll_interval_s,
                         output_bucket=self.options.results_bucket)

    # --- the cost guard (guard.CostGuard) ---

    def estimate(self) -> cost.CostEstimate | None:
        """The run's cost estimate (None when no budget cap is set)."""
        return self.guard.estimate()

    def night_estimate(self) -> Any:
        """The run's phases, time and cost as ``python -m gpucompare plan`` shows them."""
        return self.guard.night_estimate()

    def ttl_minutes(self) -> int:
        return self.guard.ttl_minutes()

    # --- prepare (launch.Ec2Launcher, readiness.Readiness) ---

    @timed_phase("provision")
    def prepare(self, run_id: str) -> TargetState:
        """Launch (or find) the run's instance and wait until SSM can reach it (``start_prepare``,
        ``Readiness.wait``, ``finish_prepare``; the DAG's prepare task defers the wait instead)."""
        state, started = self.start_prepare(run_id)
        try:
            event = self.readiness.wait(started["instance_id"], float(started["deadline"]))
        except BaseException:
            log.exception("Instance %s did not become usable; terminating it", state.resource_id)
            self.teardown(state)
            raise
        return self.finish_prepare(state, event)

    def start_prepare(self, run_id: str) -> tuple[TargetState, dict[str, Any]]:
        """The short part of ``prepare``: the cost guard, then the run's instance found by tag or
        launched (``Ec2Launcher.find_or_launch``: the same launch plan and token on every try);
        returns its state and what the wait needs (``{"instance_id", "deadline"}``:
        ``launch_timeout_s`` + ``agent_timeout_s`` from now, epoch seconds)."""
        if not isinstance(run_id, str) or not patterns.RUN_ID.fullmatch(run_id):
            raise TargetConfigError(f"run_id: {run_id!r} is not a run id: {patterns.RUN_ID_ALLOWED}")
        self.guard.check()
        instance_id, market, expires_at = self.launcher.find_or_launch(run_id, self.storage, self._fresh_plan)
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

    def _fresh_plan(self) -> dict[str, Any]:
        """A new launch's image, time-to-live and expires-at (kept by ``RunStorage.launch_plan``)."""
        ttl = self.guard.ttl_minutes()
        return {"image_id": self.launcher.resolve_ami(), "ttl_minutes": ttl,
                "expires_at": self.guard.expires_at(ttl)}

    def prepare_wait(self, state: TargetState, started: dict[str, Any]) -> dict[str, Any]:
        """What the triggerer's wait of ``prepare`` needs (``airflow.ssm_trigger.SsmReadyTrigger``):
        the connection id and region, the instance, the deadline; no secret."""
        return {"kind": "ssm_ready", "aws_conn_id": self.options.aws_conn_id, "region": self.spec.region,
                "instance_id": started["instance_id"], "deadline": float(started["deadline"]),
                "poll_interval_s": self.options.poll_interval_s}

    def finish_prepare(self, state: TargetState, event: dict[str, Any]) -> TargetState:
        """After the wait: the state, or (the wait's ``{"error": ...}``) the instance terminated
        and a ``TargetError``, so no unusable instance is left to bill."""
        if event.get("error"):
            log.error("Instance %s did not become usable (%s); terminating it", state.resource_id,
                      event["error"])
            self.teardown(state)
            raise TargetError(event["error"])
        return state

    # --- deploy (deploy.Deployer) ---

    @property
    def in_container(self) -> bool:
        return self.deployer.in_container

    def deploy(self, state: TargetState) -> TargetState:
        """The worker bundle (and venv), for a container runtime then the image's pull, waited for
        in this task (``start_deploy``, ``SsmRunner.wait``, ``finish_deploy``; the DAG's deploy
        task defers the wait instead); an instance lost during it is replaced (``recover_deploy``)."""
        began = time.time()
        try:
            return self._deploy_here(state)
        except TargetError as exc:
            return self.recover_deploy(state, began=began, error=exc)

    def recover_deploy(self, state: TargetState, *, began: float, error: BaseException) -> TargetState:
        """After the deploy failed with ``error``: when its instance is gone, a replacement,
        deployed (``reclaim.Reclaims.redeploy``: at most ``max_reclaims`` a night, in this task);
        any other error is raised again."""
        if not reclaim.is_lost(self, state, error):
            raise error
        return reclaim.Reclaims(self).redeploy(state, began=began, lost=error)

    @timed_phase("deploy")
    def _deploy_here(self, state: TargetState) -> TargetState:
        """One deploy on the state's instance, waited for in this task while the instance lives
        (a lost one ends the wait at the next poll and its command is cancelled)."""
        state, started = self.start_deploy(state)
        command_id, instance_id = str(started["command_id"]), states.instance_id_of(state)
        invocation = self.runner(state).wait(
            command_id, float(started["limit_s"]),
            still_alive=lambda status: self.readiness.check_alive(instance_id, command_id, status))
        return self.finish_deploy(state, started, {"invocation": invocation})

    def start_deploy(self, state: TargetState) -> tuple[TargetState, dict[str, Any]]:
        """The short part of ``deploy`` (``Deployer.start``): its one command sent (or an earlier
        try's attached to), its wait (the fetch, the venv's pip install, a container runtime's
        image pull) a trigger's. A lost instance gets no command (``InstanceLost``)."""
        self.readiness.require_alive(state, purpose="deploy")
        return self.deployer.start(state)

    def deploy_wait(self, state: TargetState, started: dict[str, Any]) -> dict[str, Any]:
        """What the triggerer's wait of the deploy command needs (``SsmSweepTrigger``, without a
        progress object); no secret."""
        return {"kind": "ssm", "aws_conn_id": self.options.aws_conn_id, "region": self.spec.region,
                "instance_id": states.instance_id_of(state), "command_id": started["command_id"],
                "bucket": self.options.results_bucket, "progress_key": "",
                "deadline": float(started["deadline"]), "limit_s": float(started["limit_s"]),
                "poll_interval_s": self.options.poll_interval_s}

    def finish_deploy(self, state: TargetState, started: dict[str, Any],
                      event: dict[str, Any]) -> TargetState:
        """The deploy command's event into the state, or the target's error (``Deployer.finish``);
        a container runtime's ``image@digest`` from its pull's result (``Deployer.pulled``), the
        pull timed as its own ``pull`` phase by the instance's clock (the ``deploy`` phase is the
        rest)."""
        state = self.deployer.finish(state, started, event)
        if not self.in_container:
            return state
        state, began, ended = self.deployer.pulled(state)
        self.phases.split("pull", began, ended)
        return state

    # --- sweeps (sweeps.Sweeps) ---

    def run_dir(self, state: TargetState) -> str:
        """The run's folder on the instance (``targets.runs`` names it, as on an ssh host)."""
        return self.sweeps.run_dir(state)

    def sweep_commands(self, state: TargetState, sweep_config: dict[str, Any], *,
                       timeout_s: float = 3600) -> list[str]:
        """The AWS-RunShellScript commands of one sweep (the tests run exactly these in bash)."""
        return self.sweeps.commands(state, sweep_config, timeout_s=timeout_s)

    def start_sweep(self, state: TargetState, sweep_config: dict[str, Any], *,
                    timeout_s: float) -> SweepStart:
        """Send the sweep's command unless one already covers it (``Sweeps.start``: no waiting)."""
        return self.sweeps.start(state, sweep_config, timeout_s=timeout_s)

    def sweep_poller(self, state: TargetState, started: SweepStart | dict[str, Any]) -> CommandPoller:
        """Follows the sweep's command one ``poll()`` at a time."""
        return self.sweeps.poller(state, started)

    def sweep_wait(self, state: TargetState, started: SweepStart | dict[str, Any]) -> dict[str, Any]:
        """What the triggerer's wait needs (``airflow.ssm_trigger.SsmSweepTrigger``); no secret."""
        return self.sweeps.wait_description(state, started)

    def finish_sweep(self, state: TargetState, started: SweepStart | dict[str, Any],
                     event: dict[str, Any]) -> TargetState:
        """The wait's event into the state, or the target's error (``Sweeps.finish``)."""
        return self.sweeps.finish(state, started, event)

    def run_sweep(self, state: TargetState, sweep_config: dict[str, Any], *, timeout_s: float) -> TargetState:
        """Start (or re-attach to, or reuse) the sweep and wait for it in this task; an instance
        lost mid-sweep is replaced and the rest of the sweep run there (``recover_sweep``)."""
        began = time.time()
        try:
            return self._sweep_here(state, sweep_config, timeout_s=timeout_s)
        except TargetError as exc:
            return self.recover_sweep(state, sweep_config, timeout_s=timeout_s, began=began, error=exc)

    def recover_sweep(self, state: TargetState, sweep_config: dict[str, Any], *, timeout_s: float,
                      began: float, error: BaseException) -> TargetState:
        """After the sweep failed with ``error``: when its instance is gone, a replacement and the
        rest of the sweep on it (``reclaim.Reclaims``: at most ``max_reclaims`` a night, waited
        for in this task); any other error is raised again."""
        if not reclaim.is_lost(self, state, error):
            raise error
        return reclaim.Reclaims(self).recover(state, sweep_config, timeout_s=timeout_s, began=began,
                                              lost=error)

    @timed_phase("sweep")
    def _sweep_here(self, state: TargetState, sweep_config: dict[str, Any], *,
                    timeout_s: float) -> TargetState:
        """One sweep on the state's instance, waited for in this task: its poller every
        ``poll_interval_s`` (the poller ends the wait at the sweep's deadline)."""
        started = self.start_sweep(state, sweep_config, timeout_s=timeout_s)
        event = poll_until(self.sweep_poller(state, started).poll, every_s=self.options.poll_interval_s,
                           deadline=None)
        return self.finish_sweep(state, started, event)

    # --- collect, the scaling channel, teardown ---

    def collect(self, state: TargetState, local_path: str) -> str:
        return self.storage.collect(state, local_path)

    def delete_run_objects(self, run_id: str) -> int:
        """Delete every object of the run once its results are in the lake; returns how many."""
        return self.storage.delete_run_objects(run_id)

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
        """Terminate the run's instance(s) and wait until they are gone (``Reaper.terminate``).
        Safe twice; the instances tagged with the run and this deployment are always reached."""
        if state is None:
            log.info("Teardown without a state: nothing was recorded, nothing to terminate")
            return
        self.reaper.terminate(state)
