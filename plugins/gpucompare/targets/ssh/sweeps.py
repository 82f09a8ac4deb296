"""A sweep's life on an ssh target's host, after deploy: start it detached (``HostSweeps.start``:
the worker in a venv, the project's image or NVIDIA's container, under ``timeout``), kill it,
read the tail of its logs for an error message, and wait for it one ``poll()`` at a time
(``SweepPoller``, used by the task's own wait and by the deferred task's trigger).

``ssh.target.SSHTarget`` decides whether to start, re-attach or reuse and what a finished sweep
means; this module only acts on the host, through the target's ``SSHConnection``. ``checked_run_dir``
keeps a run directory that came back through XCom inside ``<remote_base>/runs/``.
"""

from __future__ import annotations

import posixpath
import time
from collections.abc import Callable
from typing import Any

from bench_tasks.constants import WORKER_RUNTIME_ENV
from gpucompare.targets import container as _container
from gpucompare.targets import runs
from gpucompare.targets.base import LineSink, TargetError, TargetState, shell_quote
from gpucompare.targets.ssh.commands import (
    SweepPaths,
    docker_command,
    launch_command,
    probe_script,
    run_script,
    stop_script,
    venv_worker_command,
)
from gpucompare.targets.ssh.connection import SSHConnection
from gpucompare.targets.ssh.options import (
    COMMAND_TIMEOUT_S,
    LIVENESS_EVERY_POLLS,
    LOST_AFTER_S,
    SSHOptions,
    is_absolute_path,
)
from gpucompare.targets.ssh.remote_files import ProgressReader, poll_exit_code, read_tail, write_text


class HostSweeps:
    """Starts, kills and reads the sweeps of one ssh target on its host."""

    def __init__(self, connection: SSHConnection, options: SSHOptions, *, line_sink: LineSink,
                 runtime: str, in_container: bool) -> None:
        self.connection, self.options, self.line_sink = connection, options, line_sink
        self.runtime, self.in_container = runtime, in_container

    def start(self, state: TargetState, paths: SweepPaths, config: dict[str, Any],
              timeout_s: float) -> None:
        """Clear what an earlier attempt left, write config and script, launch detached."""
        container: str | None = _container.container_name(posixpath.basename(state.workdir or ""),
                                                           posixpath.basename(paths.sweep_dir))
        if self.in_container:
            argv = _container.run_argv(
                image=state.extra["image"], runtime=self.runtime, code_dir=state.extra["code_dir"],
                sweep_dir=paths.sweep_dir, uid=int(state.extra.get("uid", 0)),
                gid=int(state.extra.get("gid", 0)), name=container, gpus=self.options.docker_gpus,
                worker_args=["sweep", "--config", paths.config, "--output", paths.partial])
            cwd, env = paths.sweep_dir, {}
        elif self.options.use_docker:
            argv = docker_command(image=self.options.image, gpus=self.options.docker_gpus,
                                  sweep_dir=paths.sweep_dir, container_name=str(container),
                                  uid=int(state.extra.get("uid", 0)), gid=int(state.extra.get("gid", 0)))
            cwd, env = paths.sweep_dir, {}
        else:
            container = None
            code_dir = state.extra["code_dir"]
            env_dir = state.extra.get("env_dir")
            if env_dir is not None and not (isinstance(env_dir, str) and is_absolute_path(env_dir)):
                raise TargetError(f"run_sweep: the state's env_dir {env_dir!r} is not an absolute path")
            argv = venv_worker_command(python=state.extra["python"], paths=paths, env_dir=env_dir)
            cwd, env = code_dir, {"PYTHONPATH": code_dir, "PYTHONUNBUFFERED": "1",
                                  WORKER_RUNTIME_ENV: self.runtime}
        script = run_script(paths=paths, cwd=cwd, worker_argv=argv, env=env,
                            timeout_s=max(1, round(timeout_s)), kill_grace_s=self.options.kill_grace_s,
                            container_name=container)
        self.connection.run("run_sweep", f"rm -rf {shell_quote(paths.sweep_dir)} "
                                         f"&& mkdir -p {shell_quote(paths.sweep_dir)}")
        for remote, text in ((paths.config, runs.config_json(config)), (paths.script, script)):
            self.connection.retrying("run_sweep", lambda client, r=remote, t=text:
                                     write_text(self.connection.sftp(client), r, t))
        self.line_sink(f"[ssh] starting sweep {posixpath.basename(paths.sweep_dir)} "
                       f"(time limit {timeout_s:.0f}s)")
        self.connection.run("run_sweep", launch_command(paths))

    def kill(self, paths: SweepPaths) -> None:
        """Stop the sweep in ``paths`` (its process group; SIGKILL after the grace period)."""
        self.connection.run("run_sweep", stop_script(posixpath.dirname(paths.sweep_dir),
                                                     grace_s=self.options.kill_grace_s, only=paths.sweep_dir),
                            timeout=self.options.kill_grace_s + COMMAND_TIMEOUT_S)

    def tail(self, paths: SweepPaths, path: str | None = None) -> str:
        """The last lines of the sweep's progress log (or of ``path``), for an error message."""
        path = path or paths.progress
        try:
            text = self.connection.retrying(
                "run_sweep", lambda client: read_tail(self.connection.sftp(client), path))
        except TargetError as exc:
            return f"(could not read {path}: {exc})"
        return runs.tail_text(text)


class SweepPoller:
    """The wait for one sweep on the host, one ``poll()`` at a time: new progress lines go to
    the target's line sink; ``poll`` returns None while the sweep runs, else the event
    the target's ``finish_sweep`` takes (``{"exit_code": N}``, or ``{"error": ...}`` when the sweep ran past
    the orchestrator's backstop (it is killed) or stopped without an exit status). Used by
    ``run_sweep`` in the task and by the deferred task's trigger (``airflow.triggers``)."""

    def __init__(self, sweeps: HostSweeps, paths: SweepPaths, *, deadline: float,
                 close: Callable[[], None]) -> None:
        self.sweeps, self.paths, self.deadline, self._close = sweeps, paths, deadline, close
        self.reader = ProgressReader(paths.progress)
        self.polls = 0
        self.not_alive_since: float | None = None

    def poll(self) -> dict[str, Any] | None:
        connection, paths = self.sweeps.connection, self.paths
        exit_code = connection.retrying(
            "run_sweep", lambda client: poll_exit_code(connection.sftp(client), self.reader, paths))
        for line in self.reader.take_lines():
            self.sweeps.line_sink(line)
        if exit_code is not None:
            for line in self.reader.flush():
                self.sweeps.line_sink(line)
            return {"exit_code": exit_code}
        if time.time() > self.deadline:
            self.sweeps.kill(paths)
            return {"error": "run_sweep: the time limit was exceeded and the host did not stop the sweep; "
                             f"it was killed. Its stderr ended with:\n{self.sweeps.tail(paths)}"}
        self.polls += 1
        if self.polls % LIVENESS_EVERY_POLLS == 0:
            status = connection.run("run_sweep", probe_script(paths)).stdout.strip()
            if status == "running" or status.startswith("exit"):
                self.not_alive_since = None
            else:
                self.not_alive_since = self.not_alive_since or time.monotonic()
                if time.monotonic() - self.not_alive_since > LOST_AFTER_S:
                    return {"error": f"run_sweep: the sweep in {paths.sweep_dir} stopped without an exit "
                                     f"status ({status}); was the host rebooted? Its stderr ended with:\n"
                                     f"{self.sweeps.tail(paths)}\nIts launcher said:\n"
                                     f"{self.sweeps.tail(paths, paths.launcher)}"}
        return None

    def close(self) -> None:
        """Close the target's connection (the wait is over)."""
        self._close()


def checked_run_dir(state: TargetState, step: str) -> str:
    """The state's run directory, if it is what ``prepare`` makes: ``<remote base>/runs/<name>``.

    The state travels through XCom; this keeps anything else out of ``rm -rf`` and kill.
    """
    run_dir, base = state.workdir, state.extra.get("remote_base")
    if not (isinstance(run_dir, str) and isinstance(base, str) and is_absolute_path(run_dir)
            and is_absolute_path(base) and posixpath.dirname(run_dir) == posixpath.join(base, "runs")):
        raise TargetError(f"{step}: the state's run directory {run_dir!r} is not <remote_base>/runs/<run> "
                          f"(remote_base {base!r}); was prepare run by this target?")
    return run_dir
