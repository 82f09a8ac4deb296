"""An ``ec2`` target's deploy: the worker bundle (and its venv) on the instance, and for a
container runtime the image's pull, each one SSM command through the run's ``SsmRunner``.

The instance reads the bundle from S3 with its own profile (no presigned URL, a credential, in
SSM history); its directory is content-addressed, so a complete one is never fetched again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from gpucompare.targets import container, runs
from gpucompare.targets.base import LineSink, TargetState
from gpucompare.targets.ec2.commands import deploy_commands
from gpucompare.targets.ec2.options import SCRIPT_PREAMBLE, Ec2Options
from gpucompare.targets.ec2.ssm import SsmRunner
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

    def run(self, state: TargetState, commands: list[str], *, purpose: str) -> dict[str, Any]:
        """One deploy command (``SsmRunner.run_checked``: output logged, failure raised)."""
        return self.runner(state).run_checked(
            commands, self.options.deploy_timeout_s, purpose=purpose,
            comment=f"gpucompare {purpose} {runs.run_key(state.run_id)}",
            output_prefix=f"{self.storage.writer_prefix(state)}/ssm", line_sink=self.line_sink)

    def bundle(self, state: TargetState) -> TargetState:
        """Upload the bundle (named by its bytes, checked here and again on the instance), fetch
        and check it there, create the worker venv when needed; the state's workdir and python."""
        bundle = build_worker_bundle()
        bundle_key = self.storage.upload_bundle(bundle)
        workdir = f"{self.options.remote_root}/bench-{bundle.content_hash}"
        python = self.bench_python(bundle.requirements_hash)
        commands = deploy_commands(f"s3://{self.options.results_bucket}/{bundle_key}", bundle.sha256, workdir,
                                   python, check_worker=not self.in_container,
                                   runtime=self.options.worker_runtime,
                                   create_venv=self.options.bench_python is None and not self.in_container)
        self.run(state, commands, purpose="deploy")
        state.workdir = workdir
        state.extra = {**state.extra, "bench_python": python, "bundle": bundle.content_hash}
        return state

    def pull(self, state: TargetState) -> TargetState:
        """Pull the runtime's image (``targets.container``); the state keeps its ``image@digest``."""
        image = container.runtime_image(self.options.worker_runtime)
        invocation = self.run(state, [*SCRIPT_PREAMBLE, container.pull_script(image)], purpose="pull")
        pulled = container.parse_pull(invocation.get("StandardOutputContent") or "", image)
        state.extra = {**state.extra, "image": pulled.reference,
                       "worker_runtime": self.options.worker_runtime}
        return state
