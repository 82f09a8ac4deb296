"""An ``ec2`` target's deploy: the worker bundle (and its venv) on the instance, and for a
container runtime the image's pull, in ONE SSM command through the run's ``SsmRunner``.

The instance reads the bundle from S3 with its own profile (no presigned URL, a credential, in
SSM history); its directory is content-addressed, so a complete one is never fetched again.
``start`` sends the command (or attaches to an earlier try's), a trigger (the DAG's deploy task)
or the task itself (``Ec2Target.deploy``) waits, ``finish`` reads its end: the pip install of
minutes or the multi-GB image pull never holds a worker slot. A container runtime's pull leaves
a small result in S3 (``pull_key``: the image's digest, the pull's start and end), which
``pulled`` reads: SSM's own answer keeps only 24,000 characters of the output.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from gpucompare.targets import container, runs
from gpucompare.targets.base import LineSink, TargetError, TargetState
from gpucompare.targets.ec2 import states
from gpucompare.targets.ec2.commands import PULL_BEGAN, PULL_ENDED, deploy_commands, pull_commands
from gpucompare.targets.ec2.options import Ec2Options
from gpucompare.targets.ec2.ssm import SsmRunner, raise_unless_success
from gpucompare.targets.ec2.storage import RunStorage, build_worker_bundle

log = logging.getLogger(__name__)


class Deployer:
    """Puts the worker on the run's instance (see the module docstring)."""

    def __init__(self, options: Ec2Options, storage: RunStorage, runner: Callable[[TargetState], SsmRunner],
                 line_sink: LineSink) -> None:
        self.options, self.storage, self.runner, self.line_sink = options, storage, runner, line_sink

    @property
    def in_container(self) -> bool:
        return container.is_container_runtime(self.options.worker_runtime)

    def bench_python(self, requirements_hash: str) -> str:
        """The worker's interpreter: the option, else the venv named by its requirements."""
        venv = f"{self.options.remote_root}/venv-{requirements_hash}"
        return self.options.bench_python or f"{venv}/bin/python"

    def _prepared(self, state: TargetState) -> tuple[TargetState, list[str]]:
        """Upload the bundle (named by its bytes, checked here and again on the instance); the
        state with its workdir and python, and the commands that fetch and check it there and
        create the worker venv when needed."""
        bundle = build_worker_bundle()
        bundle_key = self.storage.upload_bundle(bundle)
        workdir = f"{self.options.remote_root}/bench-{bundle.content_hash}"
        python = self.bench_python(bundle.requirements_hash)
        commands = deploy_commands(f"s3://{self.options.results_bucket}/{bundle_key}", bundle.sha256, workdir,
                                   python, check_worker=not self.in_container,
                                   runtime=self.options.worker_runtime,
                                   create_venv=self.options.bench_python is None and not self.in_container)
        state.workdir = workdir
        state.extra = {**state.extra, "bench_python": python, "bundle": bundle.content_hash}
        if self.in_container:
            image = container.runtime_image(self.options.worker_runtime)
            commands += pull_commands(image, f"s3://{self.options.results_bucket}/{self.pull_key(state)}")
        return state, commands

    def pull_key(self, state: TargetState) -> str:
        """Where the deploy command leaves its pull's result (``commands.pull_commands``)."""
        return f"{self.storage.writer_prefix(state)}/deploy-{state.extra['bundle']}.pull"

    def start(self, state: TargetState) -> tuple[TargetState, dict[str, Any]]:
        """The bundle's command sent, not waited for (a trigger waits): an earlier try's command
        still running or succeeded is attached to (found by its comment), a failed one sent again.
        Returns the state and ``{"command_id", "limit_s", "deadline"}``."""
        state, commands = self._prepared(state)
        runner = self.runner(state)
        comment = f"gpucompare deploy {runs.run_key(state.run_id)} {state.extra['bundle']}"
        known = runner.find(comment)
        if known and states.command_phase(runner.invocation(known).get("Status")) != states.FAILED:
            log.info("Deploy on %s: attaching to its running command %s", runner.instance_id, known)
        else:
            known = runner.send(commands, self.options.deploy_timeout_s, comment=comment,
                                output_prefix=f"{self.storage.writer_prefix(state)}/ssm")
        limit = self.options.deploy_timeout_s
        return state, {"command_id": known, "limit_s": limit,
                       "deadline": time.time() + limit + runner.grace_s(limit)}

    def finish(self, state: TargetState, started: dict[str, Any], event: dict[str, Any]) -> TargetState:
        """After the deploy's wait: its output into the log, the target's error unless it
        succeeded (a wait that gave up cancels the command first)."""
        runner = self.runner(state)
        if event.get("cancel"):
            runner.cancel(str(started["command_id"]))
        if event.get("error"):
            raise TargetError(str(event["error"]))
        invocation = event["invocation"]
        for line in ((invocation.get("StandardOutputContent") or "").splitlines()
                     + (invocation.get("StandardErrorContent") or "").splitlines()):
            self.line_sink(line)
        raise_unless_success(invocation, purpose="deploy", instance_id=runner.instance_id)
        return state

    def pulled(self, state: TargetState) -> tuple[TargetState, float, float]:
        """After a container runtime's deploy succeeded: the pull's result (``pull_key``, written
        by the command) read from S3; the state keeps the ``image@digest`` it names. Returns the
        state and the pull's start and end (epoch seconds, for its ``pull`` phase)."""
        from botocore.exceptions import BotoCoreError, ClientError

        image = container.runtime_image(self.options.worker_runtime)
        bucket, key = self.options.results_bucket, self.pull_key(state)
        try:
            body = self.storage.s3_hook.conn.get_object(Bucket=bucket, Key=key)["Body"].read()
        except (BotoCoreError, ClientError) as exc:
            raise TargetError(f"pull of {image}: no result at s3://{bucket}/{key} "
                              f"({type(exc).__name__}: {exc})") from exc
        text = body.decode("utf-8", errors="replace")
        times = dict(line.split(" ", 1) for line in text.splitlines()
                     if line.startswith((f"{PULL_BEGAN} ", f"{PULL_ENDED} ")))
        try:
            began, ended = float(times[PULL_BEGAN]), float(times[PULL_ENDED])
        except (KeyError, ValueError) as exc:
            raise TargetError(f"pull of {image}: no {PULL_BEGAN}/{PULL_ENDED} in its result "
                              f"{text[-300:]!r}") from exc
        pulled = container.parse_pull(text, image)
        state.extra = {**state.extra, "image": pulled.reference,
                       "worker_runtime": self.options.worker_runtime}
        return state, began, ended
