"""The ``ssh`` target: a host that is already rented (or on premises), named by an Airflow SSH connection.

The connection comes from the SSH provider's ``SSHHook`` (login, port, ``key_file`` or
``private_key``, ``host_key``...). Host keys are always verified: the key must be in the
connection's ``host_key`` extra, in a known_hosts file (target option or connection extra
``known_hosts_file``) or in the user's ``~/.ssh/known_hosts``. An unknown key and a changed
key are refused at once (``HostKeyError``, no retries) with an error that says which,
unless the connection explicitly opts out with the provider's ``no_host_key_check``
(unknown keys accepted) or ``allow_host_key_change`` (known_hosts files ignored) extras.
That session, with its retries, is ``connection.SSHConnection``; files on the host are
written and read through ``remote_files``; a sweep is started, killed and waited for on the
host by ``sweeps`` (``HostSweeps``, ``SweepPoller``). This module holds the target's steps.

On the host, everything lives under ``remote_dir`` (default ``~/gpucompare``)::

    bench-<code hash>/bench_tasks/   the worker code, uploaded over SFTP once per version
    env-<cpu|gpu>-<hash>/            its virtual environment, created once per requirements file
                                     and reused night after night (``.ready`` last; at most
                                     ``worker_envs_kept`` old ones stay: ``venv_command``)
    runs/<run id>/sweep-<hash>/      one sweep: config, progress.log, results, pid, exit_code

A sweep runs detached from the SSH session (``setsid nohup sh run.sh``) under the remote
``timeout`` command, and writes its progress and exit status to files. The orchestrator
polls those files over SFTP, streaming new progress lines to the line sink. So a dropped
connection loses nothing: the target reconnects with exponential backoff and resumes
reading where it stopped; if the connection stays down past the retries, the task fails but
the sweep keeps running under its time limit, and a retry of ``run_sweep`` with the same
configuration re-attaches to it (or reuses its results if it finished). A sweep whose
earlier attempt failed is started again from scratch. The time limit is enforced on the
host (``timeout`` kills the worker's process group) and, as a backstop, by the orchestrator
(which kills that process group over SSH). ``teardown`` stops any sweep of the run still
running (leaving a ``stop`` request that a launch in flight honours) and, with
``remove_run_dir``, deletes the run's directory; it is safe twice. The paths a state brings
back (it travels through XCom) are checked against ``<remote_dir>/runs/`` first.

Options (``TargetSpec.options``, all validated before anything reaches a shell):

``ssh_conn_id`` (required), ``remote_dir`` (absolute path), ``python`` (absolute path of an
existing worker interpreter on the host: no environment is created), ``base_python``
(interpreter that creates the environment, default ``python3``), ``requirements``
(``cpu`` | ``gpu``, default ``gpu`` when the spec has GPUs), ``use_docker`` (run the worker
image instead, ``docker run --gpus …``), ``image``, ``docker_gpus`` (``all``, a count, or
``device=0,1``), ``known_hosts_file``, ``connect_retries``, ``retry_backoff_s``,
``poll_interval_s``, ``kill_grace_s``, ``env_timeout_s``, ``remove_run_dir``.
"""

from __future__ import annotations

import posixpath
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpucompare import settings
from gpucompare.config import runtime_choice
from gpucompare.targets import container as _container
from gpucompare.targets import runs
from gpucompare.targets.base import (
    DeferrableDeploy,
    DeferrableTarget,
    LineSink,
    Target,
    TargetConfigError,
    TargetError,
    TargetSpec,
    TargetState,
    shell_quote,
)
from gpucompare.targets.bundle import REQUIREMENTS, WorkerBundle, build_bundle
from gpucompare.targets.phases import timed_phase
from gpucompare.targets.polling import poll_until
from gpucompare.targets.ssh.commands import (
    SweepPaths,
    check_python_command,
    docker_image_command,
    job_script,
    launch_command,
    probe_script,
    stop_script,
    unpack_command,
    venv_command,
)
from gpucompare.targets.ssh.connection import SSHConnection
from gpucompare.targets.ssh.options import (
    BACKSTOP_SLACK_S,
    COMMAND_TIMEOUT_S,
    SSHOptions,
    is_absolute_path,
)
from gpucompare.targets.ssh.remote_files import (
    get_file,
    put_file,
    write_text,
)
from gpucompare.targets.ssh.sweeps import HostSweeps, SweepPoller, checked_run_dir

#: The file in a sweep's folder where the triggerer's wait keeps how much progress it logged.
TRIGGER_OFFSET_FILE = "trigger_offset"


class SSHTarget(Target, DeferrableTarget, DeferrableDeploy):
    """Runs the worker on a host reached through an Airflow SSH connection."""

    kind = "ssh"

    def __init__(self, spec: TargetSpec, *, line_sink: LineSink | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        super().__init__(spec, line_sink=line_sink)
        if spec.kind != self.kind:
            raise TargetError(f"kind: expected {self.kind!r} for SSHTarget, got {spec.kind!r}")
        self.options = SSHOptions.parse(spec.options, gpu_count=spec.gpu_count)
        #: the worker runtime (``config.runtime_choice``): a container runtime runs NVIDIA's image
        self.runtime = runtime_choice.choose(spec.to_dict(), spec.worker_runtime)
        self.in_container = _container.is_container_runtime(self.runtime)
        if self.in_container and self.options.use_docker:
            raise TargetConfigError(f"ssh target: use_docker runs the project's own image; worker_runtime "
                                    f"{self.runtime} runs NVIDIA's: choose one")
        self._sleep = sleep
        #: the verified, reconnecting session every step (and the scaling channel) goes through
        self.connection = SSHConnection(self.options, line_sink=self.line_sink, sleep=sleep)
        #: starts, kills, reads and waits for the sweeps on the host (``ssh.sweeps``)
        self.sweeps = HostSweeps(self.connection, self.options, line_sink=self.line_sink,
                                 runtime=self.runtime, in_container=self.in_container)

    # -- the interface -----------------------------------------------------------------
    @timed_phase("provision")
    def prepare(self, run_id: str) -> TargetState:
        """Reach the host (host key verified), find its base directory, create the run's."""
        run_name = runs.run_dir_name(run_id)
        facts = self.connection.run("prepare", 'printf "%s\\n" "$HOME"; id -u; id -g').stdout.split()
        if len(facts) != 3:
            raise TargetError(f"prepare: unexpected answer from the host: {facts!r}")
        home, uid, gid = facts
        base = self.options.remote_dir
        if base is None:
            if not is_absolute_path(home):
                raise TargetError(f"prepare: the remote home {home!r} is not a plain path; "
                                  "set the target option 'remote_dir'")
            base = posixpath.join(home, "gpucompare")
        run_dir = posixpath.join(base, "runs", run_name)
        self.connection.run("prepare", f"mkdir -p {shell_quote(run_dir)}")
        hook = self.connection.hook()
        state = TargetState(spec=self.spec.to_dict(), run_id=run_id,
                            resource_id=f"{hook.username}@{hook.remote_host}:{hook.port}",
                            market=self.spec.market, workdir=run_dir)
        state.extra.update({"remote_base": base, "uid": int(uid), "gid": int(gid)})
        self.line_sink(f"[ssh] {state.resource_id}: run directory {run_dir}")
        return state

    def deploy(self, state: TargetState) -> TargetState:
        """Upload the worker code (once per version) and create its environment (once); for a
        container runtime, the code only, then the image's pull (its own ``pull`` phase)."""
        state = self._deploy_code(state)
        return self._pull_image(state) if self.in_container else state

    @timed_phase("pull")
    def _pull_image(self, state: TargetState) -> TargetState:
        """Pull the runtime's image once per host (reused afterwards); the sweep runs the exact
        digest the host has (``targets.container``)."""
        image = _container.runtime_image(self.runtime)
        self.line_sink(f"[ssh] making sure image {image} is on the host")
        answer = self.connection.run("deploy", _container.pull_script(image),
                                     timeout=self.options.env_timeout_s, stream=True).stdout
        pulled = _container.parse_pull(answer, image)
        self.line_sink(f"[ssh] image {pulled.reference} "
                       f"{'pulled' if pulled.downloaded else 'already on the host'}")
        state.extra.update({"image": pulled.reference, "image_pulled": pulled.downloaded,
                            "worker_runtime": self.runtime})
        return state

    @timed_phase("deploy")
    def _deploy_code(self, state: TargetState) -> TargetState:
        base = self._base(state, "deploy")
        if self.options.use_docker:
            self.line_sink(f"[ssh] making sure image {self.options.image} is on the host")
            self.connection.run("deploy", docker_image_command(self.options.image, self.options.docker_gpus),
                                timeout=self.options.env_timeout_s, stream=True)
            state.extra["image"] = self.options.image
            return state
        bundle = build_bundle()
        code_dir = posixpath.join(base, bundle.name)
        self._upload_bundle(bundle, base, code_dir)
        if self.in_container:  # the image brings MXNet and Python: no environment to make
            state.extra.update({"code_dir": code_dir, "python": None, "env_dir": None})
            return state
        env_dir = None if self.options.python else self._ensure_environment(bundle, base, code_dir)
        python = self.options.python or posixpath.join(env_dir or "", "bin", "python")
        return self._check_python(state, code_dir, python, env_dir)

    @timed_phase("sweep")
    def run_sweep(self, state: TargetState, sweep_config: dict[str, Any], *,
                  timeout_s: float) -> TargetState:
        """Start (or re-attach to, or reuse) the sweep and wait for it in this task."""
        started = self.start_sweep(state, sweep_config, timeout_s=timeout_s)
        if started["decision"] != "reuse":
            poller = self.sweep_poller(state, started)
            # no deadline here: the poller returns an error event itself past the sweep's backstop
            event = poll_until(poller.poll, every_s=self.options.poll_interval_s, deadline=None,
                               sleep=self._sleep)
            return self.finish_sweep(state, started, event)
        return self.finish_sweep(state, started, {"exit_code": 0})

    def start_sweep(self, state: TargetState, sweep_config: dict[str, Any], *,
                    timeout_s: float) -> dict[str, Any]:
        """Start the sweep unless it runs (``attach``) or finished (``reuse``); a short call.

        Returns what its wait needs (``sweep_poller``: in this task, or in a trigger): the
        sweep's folder, the decision and the wall-clock deadline of the orchestrator's backstop.
        """
        if not timeout_s or timeout_s <= 0:
            raise TargetError(f"run_sweep: timeout_s must be > 0, got {timeout_s!r}")
        run_dir = checked_run_dir(state, "run_sweep")
        if not self.options.use_docker:
            for name in ("code_dir",) if self.in_container else ("code_dir", "python"):
                value = state.extra.get(name)
                if not isinstance(value, str) or not is_absolute_path(value):
                    raise TargetError(f"run_sweep: the worker is not deployed (state has no valid "
                                      f"{name}: {value!r}; deploy did not run)")
        if self.in_container and not _container.is_pinned(state.extra.get("image")):
            raise TargetError(f"run_sweep: the state has no pulled image@digest "
                              f"({state.extra.get('image')!r}); deploy did not pull it")
        config = runs.with_run_id(sweep_config, state.run_id)
        sweep_name = runs.sweep_dir_name(config)
        paths = SweepPaths(posixpath.join(run_dir, sweep_name))
        status = self.connection.run("run_sweep", probe_script(paths)).stdout.strip()
        if status == "exit 0":
            self.line_sink(f"[ssh] sweep {sweep_name} already finished; reusing its results")
            decision = "reuse"
        elif status == "running":
            self.line_sink(f"[ssh] sweep {sweep_name} is already running; re-attaching")
            decision = "attach"
        else:
            if status != "new":
                self.line_sink(f"[ssh] sweep {sweep_name} left by an earlier attempt ({status}); "
                               "starting it again")
            self.sweeps.start(state, paths, config, timeout_s)
            decision = "start"
        deadline = time.time() + timeout_s + self.options.kill_grace_s + BACKSTOP_SLACK_S
        return {"sweep_dir": paths.sweep_dir, "decision": decision, "timeout_s": timeout_s,
                "deadline": deadline}

    def sweep_poller(self, state: TargetState, started: dict[str, Any]) -> SweepPoller:
        """Reads the sweep's progress and exit file, one ``poll()`` at a time (see ``SweepPoller``)."""
        run_dir = checked_run_dir(state, "run_sweep")
        paths = SweepPaths(started["sweep_dir"])
        if posixpath.dirname(paths.sweep_dir) != run_dir:
            raise TargetError(f"run_sweep: sweep {paths.sweep_dir!r} is not in the run directory {run_dir}")
        return SweepPoller(self.sweeps, paths, deadline=float(started["deadline"]), close=self.close)

    def sweep_wait(self, state: TargetState, started: dict[str, Any]) -> dict[str, Any]:
        """What the triggerer's wait needs (``airflow.ssh_trigger.SshSweepTrigger``)."""
        self.sweep_poller(state, started)  # the same checks of the sweep's folder
        return self._wait_on(started["sweep_dir"], float(started["deadline"]))

    def _wait_on(self, folder: str, deadline: float) -> dict[str, Any]:
        """The wait for a detached job's folder: the connection id, the host key this task
        verified, the folder's files and the deadline; nothing secret."""
        hook = self.connection.hook()
        key, port = hook.host_key, int(hook.port or 22)
        name = hook.remote_host if port == 22 else f"[{hook.remote_host}]:{port}"
        return {"kind": "ssh", "ssh_conn_id": self.options.ssh_conn_id,
                "known_host": f"{name} {key.get_name()} {key.get_base64()}", "sweep_dir": folder,
                "deadline": deadline, "poll_interval_s": self.options.poll_interval_s,
                "files": {"exit_code": runs.EXIT_CODE_FILE, "progress": runs.PROGRESS_FILE,
                          "pid": runs.PID_FILE, "claim": "claim", "offset": TRIGGER_OFFSET_FILE}}

    def finish_sweep(self, state: TargetState, started: dict[str, Any], event: dict[str, Any]) -> TargetState:
        """After the wait: the sweep's results recorded, or its failure raised (stderr tail). A wait
        that ended at its deadline (``timed_out``) kills the sweep first."""
        paths = SweepPaths(started["sweep_dir"])
        if event.get("timed_out"):
            self.sweeps.kill(paths)
            raise TargetError(f"{event.get('error')}; the sweep was killed. Its stderr ended with:\n"
                              f"{self.sweeps.tail(paths)}")
        if event.get("error"):
            raise TargetError(str(event["error"]))
        exit_code, timeout_s = event.get("exit_code"), float(started["timeout_s"])
        if exit_code != 0:
            tail = self.sweeps.tail(paths)
            if exit_code in runs.TIMEOUT_EXIT_CODES:
                raise TargetError(f"run_sweep: the sweep was stopped on the host (exit {exit_code}: its "
                                  f"time limit of {timeout_s:.0f}s, or it was killed). Its stderr ended "
                                  f"with:\n{tail}")
            if exit_code == _container.LEFT_EXIT_CODE:
                raise TargetError(f"run_sweep: the sweep's container is still running on "
                                  f"{self.connection.describe_host()} after the sweep (docker kill did not "
                                  f"stop it). Its stderr ended with:\n{tail}")
            if exit_code == 98:
                raise TargetError(f"run_sweep: the worker exited with 0 but wrote no results. Its stderr "
                                  f"ended with:\n{tail}")
            raise TargetError(f"run_sweep: the worker failed on {self.connection.describe_host()} with "
                              f"exit status {exit_code}. Its stderr ended with:\n{tail}")
        runs.remember_results(state, paths.results)
        self.close()
        return state

    def collect(self, state: TargetState, local_path: str) -> str:
        """Copy every finished sweep's results back over SFTP, concatenated into ``local_path``."""
        run_dir = checked_run_dir(state, "collect")
        remote_files = runs.result_files(state, "collect")
        outside = [f for f in remote_files if posixpath.dirname(posixpath.dirname(f)) != run_dir]
        if outside:
            raise TargetError(f"collect: results file(s) outside the run directory {run_dir}: "
                              f"{', '.join(outside)}")
        destination = Path(local_path)
        destination.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=destination.parent, prefix=".collect-") as tmp:
            local_files = []
            for index, remote in enumerate(remote_files):
                local = Path(tmp) / f"{index}.jsonl"
                self.connection.retrying("collect", lambda client, r=remote, lf=local:
                                         get_file(self.connection.sftp(client), r, lf))
                local_files.append(local)
            runs.concatenate_files(local_files, destination)
        self.line_sink(f"[ssh] collected {len(remote_files)} results file(s) into {destination}")
        return str(destination)

    def channel(self, state: TargetState, *, address: str | None = None) -> Any:
        """Roles of a scaling run over this target's own connection (``SSHChannel``)."""
        from gpucompare.targets.ssh.channel import SSHChannel

        return SSHChannel(self, state, address=address)

    @timed_phase("teardown")
    def teardown(self, state: TargetState | None) -> None:
        """Stop any sweep of this run still running on the host; remove its directory if asked."""
        try:
            if state is None or not state.workdir:
                return
            run_dir = checked_run_dir(state, "teardown")
            stopped = self.connection.run(
                "teardown", stop_script(run_dir, grace_s=self.options.kill_grace_s),
                timeout=self.options.kill_grace_s + COMMAND_TIMEOUT_S).stdout.split()
            for sweep_dir in stopped:
                self.line_sink(f"[ssh] teardown stopped the sweep still running in {sweep_dir}")
            if self.options.remove_run_dir:
                self.connection.run("teardown", f"rm -rf {shell_quote(run_dir)}")
                self.line_sink(f"[ssh] teardown removed {run_dir}")
        finally:
            self.close()

    def close(self) -> None:
        """Close the SSH connection (the next step opens a new one)."""
        self.connection.close()

    # -- deploy ------------------------------------------------------------------------
    def _base(self, state: TargetState, step: str) -> str:
        base = state.extra.get("remote_base")
        if not base:
            raise TargetError(f"{step}: the state has no remote base directory (prepare did not run)")
        return base

    def _upload_bundle(self, bundle: WorkerBundle, base: str, code_dir: str) -> None:
        worker_dir = shell_quote(posixpath.join(code_dir, "bench_tasks"))
        present = self.connection.run("deploy", f"test -d {worker_dir} && echo yes || echo no").stdout.strip()
        if present == "yes":
            self.line_sink(f"[ssh] worker code {bundle.name} already on the host")
            return
        upload = posixpath.join(base, f".upload-{bundle.content_hash}-{uuid.uuid4().hex[:8]}.tar.gz")
        self.line_sink(f"[ssh] uploading worker code {bundle.name} ({bundle.tarball.stat().st_size} bytes)")
        self.connection.retrying(
            "deploy", lambda client: put_file(self.connection.sftp(client), bundle.tarball, upload))
        self.connection.run("deploy", unpack_command(upload=upload, code_dir=code_dir, base=base))

    def _environment_command(self, bundle: WorkerBundle, base: str, code_dir: str) -> tuple[str, str]:
        """The worker environment's directory on the host and the command that makes it if missing
        (``venv_command``)."""
        kind = self.options.requirements
        requirements_hash = bundle.requirements_hashes.get(kind)
        if requirements_hash is None:
            raise TargetError(f"deploy: the worker has no {REQUIREMENTS[kind]}")
        env_dir = posixpath.join(base, f"env-{kind}-{requirements_hash}")
        self.line_sink(f"[ssh] making sure the worker environment {env_dir} exists "
                       f"({REQUIREMENTS[kind]}; the first time installs MXNet)")
        return env_dir, venv_command(
            base_python=self.options.base_python, env_dir=env_dir,
            requirements_file=posixpath.join(code_dir, "bench_tasks", REQUIREMENTS[kind]),
            lock_file=posixpath.join(base, ".env.lock"), timeout_s=self.options.env_timeout_s,
            keep=settings.worker_envs_kept())

    def _ensure_environment(self, bundle: WorkerBundle, base: str, code_dir: str) -> str:
        """The worker environment's directory on the host, made if missing, in this task."""
        env_dir, command = self._environment_command(bundle, base, code_dir)
        self.connection.run("deploy", command, timeout=self.options.env_timeout_s, stream=True)
        return env_dir

    def _check_python(self, state: TargetState, code_dir: str, python: str,
                      env_dir: str | None) -> TargetState:
        answer = self.connection.run("deploy", check_python_command(python=python, code_dir=code_dir),
                                     timeout=COMMAND_TIMEOUT_S).stdout.strip()
        version = answer.splitlines()[-1] if answer else "?"
        self.line_sink(f"[ssh] worker {posixpath.basename(code_dir)} with {python} (mxnet {version})")
        state.extra.update({"code_dir": code_dir, "python": python, "mxnet_version": version,
                            "env_dir": env_dir})
        return state

    # -- deploy, deferred (DeferrableDeploy) ---------------------------------------------------
    def start_deploy(self, state: TargetState) -> tuple[TargetState, dict[str, Any] | None]:
        """The short part of ``deploy``. When the worker environment may have to be built (a pip
        install of minutes), the code is uploaded, the build starts detached on the host
        (``job_script``, in the run's ``deploy-<env>`` folder, once: a retry re-attaches) and
        what its wait needs is returned; otherwise the whole deploy runs here (None: no wait)."""
        if self.options.use_docker or self.in_container or self.options.python:
            return self.deploy(state), None
        base = self._base(state, "deploy")
        bundle = build_bundle()
        code_dir = posixpath.join(base, bundle.name)
        self._upload_bundle(bundle, base, code_dir)
        env_dir, command = self._environment_command(bundle, base, code_dir)
        job_dir = posixpath.join(checked_run_dir(state, "deploy"), f"deploy-{posixpath.basename(env_dir)}")
        paths = SweepPaths(job_dir)
        status = self.connection.run("deploy", probe_script(paths)).stdout.strip()
        if status not in ("running", "claimed", "exit 0"):
            self.connection.run("deploy", f"rm -rf {shell_quote(job_dir)} && mkdir -p {shell_quote(job_dir)}")
            script = job_script(job_dir=job_dir, command=command)
            self.connection.retrying(
                "deploy", lambda client: write_text(self.connection.sftp(client), paths.script, script))
            self.connection.run("deploy", launch_command(paths))
        state.extra.update({"code_dir": code_dir, "env_dir": env_dir})
        return state, {"job_dir": job_dir, "decision": status,
                       "deadline": time.time() + self.options.env_timeout_s + BACKSTOP_SLACK_S}

    def deploy_wait(self, state: TargetState, started: dict[str, Any]) -> dict[str, Any]:
        """The triggerer's wait for the environment build (as ``sweep_wait``)."""
        return self._wait_on(started["job_dir"], float(started["deadline"]))

    def finish_deploy(self, state: TargetState, started: dict[str, Any],
                      event: dict[str, Any]) -> TargetState:
        """After the build: the interpreter checked and recorded, or the build's failure raised."""
        paths = SweepPaths(started["job_dir"])
        if event.get("timed_out"):
            self.sweeps.kill(paths)
        if event.get("error"):
            raise TargetError(f"deploy: {event['error']}")
        if event.get("exit_code") != 0:
            raise TargetError(f"deploy: building the worker environment failed (exit "
                              f"{event.get('exit_code')}); its output ended with:\n"
                              f"{self.sweeps.tail(paths)}")
        env_dir = state.extra["env_dir"]
        python = posixpath.join(env_dir, "bin", "python")
        return self._check_python(state, state.extra["code_dir"], python, env_dir)
