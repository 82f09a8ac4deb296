"""An ``ec2`` target's sweeps: the command of one sweep, sent at most once, and its wait.

Exactly one sweep per machine and configuration: ``Sweeps.start`` finds the sweep's earlier
command (its CommandId kept in the state, or found again through SSM by its comment) and
re-attaches to it while it runs, reuses it once it succeeded, and sends it again only when it
failed or was lost; on the instance the sweep's folder (``targets.runs``) holds a ``flock``
lock the worker keeps while it lives and an exit file, so even a command sent twice runs one
worker (``commands.sweep_commands``). ``start`` is short; the wait is ``CommandPoller``'s (in
the task) or a trigger's (``airflow.ssm_trigger``, described by ``wait_description``), and
``finish`` turns the wait's event into the state or the target's error.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from bench_tasks.configs import ConfigError, parse_sweep
from bench_tasks.constants import WORKER_RUNTIME_ENV
from gpucompare.targets import container, runs
from gpucompare.targets.base import LineSink, TargetConfigError, TargetError, TargetState, shell_quote
from gpucompare.targets.ec2 import states
from gpucompare.targets.ec2.commands import sweep_commands
from gpucompare.targets.ec2.options import Ec2Options
from gpucompare.targets.ec2.readiness import Readiness
from gpucompare.targets.ec2.ssm import CommandWait, ProgressFollower, SsmRunner, raise_unless_success
from gpucompare.targets.ec2.storage import RunStorage

log = logging.getLogger(__name__)

#: Seconds the worker gets after its time limit to stop (then ``timeout`` kills it).
KILL_GRACE_S = 30
#: Seconds beyond the worker's time limit the sweep's command may take (merge, upload).
SWEEP_SLACK_S = 120


@dataclass(frozen=True)
class SweepStart:
    """What ``Sweeps.start`` did: the command the sweep's wait follows, and why
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
    def from_dict(cls, data: SweepStart | dict[str, Any]) -> SweepStart:
        """From ``to_dict()``'s JSON; keys the caller added (the pipeline's) are left out."""
        if isinstance(data, SweepStart):
            return data
        return cls(**{name: data[name] for name in cls.__dataclass_fields__})


def checked_sweep_config(state: TargetState, sweep_config: dict[str, Any]) -> dict[str, Any]:
    """The sweep config as sent (with the run id), refused here if the worker would refuse it."""
    config = runs.with_run_id(sweep_config, state.run_id)
    try:
        # refused here, with the field named, rather than on the instance after a long wait
        parse_sweep(config, where="sweep_config")
    except ConfigError as exc:
        raise TargetConfigError(str(exc)) from exc
    return config


class Sweeps:
    """Starts, follows and finishes the run's sweeps (see the module docstring)."""

    def __init__(self, options: Ec2Options, storage: RunStorage, readiness: Readiness,
                 runner: Callable[[TargetState], SsmRunner], line_sink: LineSink) -> None:
        self.options, self.storage, self.readiness = options, storage, readiness
        self.runner, self.line_sink = runner, line_sink

    @property
    def in_container(self) -> bool:
        return container.is_container_runtime(self.options.worker_runtime)

    def run_dir(self, state: TargetState) -> str:
        """The run's folder on the instance (``targets.runs`` names it, as on an ssh host)."""
        return f"{self.options.remote_root}/runs/{runs.run_dir_name(state.run_id)}"

    def commands(self, state: TargetState, sweep_config: dict[str, Any], *,
                 timeout_s: float = 3600) -> list[str]:
        """The AWS-RunShellScript commands of one sweep (the tests run exactly these in bash)."""
        if not state.workdir or not state.extra.get("bench_python"):
            raise TargetError("run_sweep before deploy: the state has no worker directory")
        # the runtime goes into every record (worker_runtime)
        python = shell_quote(str(state.extra["bench_python"]))
        prefix = f"env {WORKER_RUNTIME_ENV}={shell_quote(self.options.worker_runtime)} {python}"
        if self.in_container and not container.is_pinned(state.extra.get("image")):
            raise TargetError("run_sweep before the pull: the state has no image@digest")
        config = checked_sweep_config(state, sweep_config)
        name = None
        if self.in_container:  # NVIDIA's image runs the bundle, mounted read-only
            name = container.container_name(runs.run_dir_name(state.run_id), runs.sweep_dir_name(config))
            prefix = container.shell_prefix(
                image=state.extra["image"], runtime=self.options.worker_runtime, code_dir=state.workdir,
                sweep_dir=self.run_dir(state), uid=0, gid=0, name=name)
        bucket = self.options.results_bucket
        return sweep_commands(
            config=config, workdir=state.workdir, run_dir=self.run_dir(state),
            python=str(state.extra["bench_python"]), destination=f"s3://{bucket}/{self.storage.results_key(state)}",
            progress_destination=f"s3://{bucket}/{self.storage.progress_key(state, config)}",
            partial_destination=f"s3://{bucket}/{self.storage.partial_key(state, config)}",
            worker_prefix=prefix, timeout_s=max(1, math.ceil(timeout_s)), kill_grace_s=KILL_GRACE_S,
            container_name=name,
        )

    @staticmethod
    def comment(state: TargetState, config: dict[str, Any]) -> str:
        """How SSM knows the sweep's command again (``SsmRunner.find``) on the run's instance."""
        return f"gpucompare sweep {runs.sweep_dir_name(config)} {runs.run_key(state.run_id)}"[:100]

    def start(self, state: TargetState, sweep_config: dict[str, Any], *, timeout_s: float) -> SweepStart:
        """Send the sweep's command unless one already covers it; a short call (no waiting).

        The CommandId of the sweep is kept in ``state.extra["sweep_commands"]`` and found again
        through SSM (the command's comment names the sweep) by a retry that lost the state:
        a command still running is re-attached to (``attach``), one that succeeded is reused
        (``reuse``), and only a dead or failed one is sent again (``start``), whose script
        itself re-attaches to a worker still holding the sweep's lock on the instance.
        """
        if not timeout_s or timeout_s <= 0:
            raise TargetError(f"run_sweep: timeout_s must be > 0, got {timeout_s!r}")
        self.readiness.require_alive(state)
        config = checked_sweep_config(state, sweep_config)
        commands = self.commands(state, sweep_config, timeout_s=timeout_s)
        name, comment = runs.sweep_dir_name(config), self.comment(state, config)
        runner = self.runner(state)
        known = state.extra.get("sweep_commands", {}).get(name) or runner.find(comment)
        decision = "start"
        if known:
            status = runner.invocation(known).get("Status")
            phase = states.command_phase(status)
            decision = {states.RUNNING: "attach", states.FINAL: "reuse"}.get(phase, "start")
            log.info("Sweep %s of run %s: command %s is %s: %s", name, state.run_id, known, status, decision)
        limit = timeout_s + KILL_GRACE_S + SWEEP_SLACK_S
        if decision == "start":
            known = runner.send(commands, limit, comment=comment,
                                output_prefix=f"{self.storage.writer_prefix(state)}/ssm")
        state.extra["sweep_commands"] = {**state.extra.get("sweep_commands", {}), name: known}
        log.info("Sweep %s on %s: %s (command %s)", name, runner.instance_id, decision, known)
        # the agent enforces the limit itself; give it time to report before giving up
        return SweepStart(command_id=str(known), decision=decision, sweep=name,
                          progress_key=self.storage.progress_key(state, config), limit_s=limit,
                          deadline=time.time() + limit + runner.grace_s(limit))

    def poller(self, state: TargetState, started: SweepStart | dict[str, Any]) -> CommandPoller:
        """Follows the sweep's command one ``poll()`` at a time (in the task)."""
        started = SweepStart.from_dict(started)
        runner = self.runner(state)
        progress = ProgressFollower(self.storage.s3_hook, self.options.results_bucket, started.progress_key,
                                    self.line_sink)
        return CommandPoller(runner, started, progress, self.readiness.check_alive)

    def wait_description(self, state: TargetState, started: SweepStart | dict[str, Any]) -> dict[str, Any]:
        """What the triggerer's wait needs (``airflow.ssm_trigger.SsmSweepTrigger``): the connection
        id and region, the instance and command, the progress object, the deadline; no secret."""
        started = SweepStart.from_dict(started)
        return {"kind": "ssm", "aws_conn_id": self.options.aws_conn_id, "region": self.storage.spec.region,
                "instance_id": states.instance_id_of(state), "command_id": started.command_id,
                "bucket": self.options.results_bucket, "progress_key": started.progress_key,
                "deadline": started.deadline, "limit_s": started.limit_s,
                "poll_interval_s": self.options.poll_interval_s}

    def finish(self, state: TargetState, started: SweepStart | dict[str, Any],
               event: dict[str, Any]) -> TargetState:
        """After the sweep's command ended: its output into the log, an error unless it succeeded.
        A wait that gave up (``cancel``: the instance is gone, or the deadline passed) cancels the
        command first, so nothing runs on that the run no longer follows."""
        if event.get("cancel"):
            self.runner(state).cancel(SweepStart.from_dict(started).command_id)
        if event.get("error"):
            raise TargetError(str(event["error"]))
        invocation = event["invocation"]
        for line in (invocation.get("StandardOutputContent") or "").splitlines():
            self.line_sink(line)
        if not event.get("progress_seen"):
            for line in (invocation.get("StandardErrorContent") or "").splitlines():
                self.line_sink(line)
        raise_unless_success(invocation, purpose="sweep", instance_id=states.instance_id_of(state))
        state.remote_results = f"s3://{self.options.results_bucket}/{self.storage.results_key(state)}"
        return state


class CommandPoller:
    """The wait for one sweep's SSM command, one ``poll()`` at a time (``ssm.CommandWait``):
    progress lines (from S3) go to the line sink; ``poll`` returns None while the command runs,
    else the event ``Sweeps.finish`` takes: ``{"invocation": ..., "progress_seen": ...}`` once it
    ended, or ``{"error": ...}`` when the instance is gone (spot interruption, time-to-live) or
    the command ran past its deadline; an abandoned command is cancelled."""

    def __init__(self, runner: SsmRunner, started: SweepStart, progress: ProgressFollower,
                 check_alive: Callable[[str, str, str | None], None]) -> None:
        self.runner, self.started, self.progress = runner, started, progress
        self.command = CommandWait(runner, started.command_id, deadline=started.deadline,
                                   limit_s=started.limit_s, on_poll=None,
                                   still_alive=lambda status: check_alive(runner.instance_id,
                                                                          started.command_id, status))

    def poll(self) -> dict[str, Any] | None:
        try:
            invocation = self.command.poll()
        except TargetError as exc:
            self.runner.cancel(self.started.command_id)
            return {"error": str(exc)}
        finally:
            self.progress.follow()
        if invocation is None:
            return None
        keep = ("CommandId", "Status", "ResponseCode", "StandardOutputContent", "StandardErrorContent")
        return {"invocation": {key: invocation.get(key) for key in keep},
                "progress_seen": self.progress.seen_any}

    def close(self) -> None:
        """Nothing to close: each poll is a call of the runner's client."""
