"""The ``ssh`` target: a host that is already rented (or on premises), named by an Airflow SSH connection.

The connection comes from the SSH provider's ``SSHHook`` (login, port, ``key_file`` or
``private_key``, ``host_key``...). Host keys are always verified: the key must be in the
connection's ``host_key`` extra, in a known_hosts file (target option or connection extra
``known_hosts_file``) or in the user's ``~/.ssh/known_hosts``. An unknown key and a changed
key are refused at once (``HostKeyError``, no retries) with an error that says which,
unless the connection explicitly opts out with the provider's ``no_host_key_check``
(unknown keys accepted) or ``allow_host_key_change`` (known_hosts files ignored) extras.

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

import errno
import posixpath
import random
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import paramiko

from gpucompare import settings
from gpucompare.config import models, validation
from gpucompare.errors import PermanentError
from gpucompare.targets import runs as _runs
from gpucompare.targets.base import LineSink, Target, TargetError, TargetSpec, TargetState, q
from gpucompare.targets.bundle import REQUIREMENTS, WorkerBundle, build_bundle
from gpucompare.targets.phases import timed_phase

if TYPE_CHECKING:
    from airflow.providers.ssh.hooks.ssh import SSHHook

from gpucompare.targets.ssh.commands import (
    SweepPaths,
    check_python_command,
    container_name,
    docker_command,
    docker_image_command,
    launch_command,
    probe_script,
    run_script,
    stop_script,
    unpack_command,
    venv_command,
    venv_worker_command,
)
from gpucompare.targets.ssh.options import (
    _TAIL_BYTES,
    BACKSTOP_SLACK_S,
    COMMAND_TIMEOUT_S,
    DEFAULT_CONN_TIMEOUT_S,
    LIVENESS_EVERY_POLLS,
    LOST_AFTER_S,
    SSHOptions,
    T,
    _is_absolute_path,
)

# -- connection errors -------------------------------------------------------------------------

class HostKeyError(TargetError, PermanentError):
    """The host's key is unknown or changed: a configuration problem no retry can fix.

    Also a ValueError, so callers that fail bad input at once (no Airflow retry) do so here.
    """


class _TransientError(Exception):
    """A connection failure worth retrying (refused, reset, timed out, dropped)."""


_REMOTE_FILE_ERRNOS = {errno.ENOENT, errno.EACCES, errno.EPERM, errno.EEXIST, errno.ENOTDIR,
                       errno.EISDIR, errno.ENOSPC}


@dataclass
class ExecResult:
    exit_code: int
    stdout: str
    stderr: str


class SSHTarget(Target):
    """Runs the worker on a host reached through an Airflow SSH connection."""

    kind = "ssh"

    def __init__(self, spec: TargetSpec, *, line_sink: LineSink | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        super().__init__(spec, line_sink=line_sink)
        if spec.kind != self.kind:
            raise TargetError(f"kind: expected {self.kind!r} for SSHTarget, got {spec.kind!r}")
        self.options = SSHOptions.parse(spec.options, gpu_count=spec.gpu_count)
        self._sleep = sleep
        self._hook: SSHHook | None = None
        self._client: paramiko.SSHClient | None = None
        self._sftp: paramiko.SFTPClient | None = None

    # -- the interface -----------------------------------------------------------------
    @timed_phase("provision")
    def prepare(self, run_id: str) -> TargetState:
        """Reach the host (host key verified), find its base directory, create the run's."""
        run_name = _runs.run_dir_name(run_id)
        facts = self._run("prepare", 'printf "%s\\n" "$HOME"; id -u; id -g').stdout.split()
        if len(facts) != 3:
            raise TargetError(f"prepare: unexpected answer from the host: {facts!r}")
        home, uid, gid = facts
        base = self.options.remote_dir
        if base is None:
            if not _is_absolute_path(home):
                raise TargetError(f"prepare: the remote home {home!r} is not a plain path; "
                                  "set the target option 'remote_dir'")
            base = posixpath.join(home, "gpucompare")
        run_dir = posixpath.join(base, "runs", run_name)
        self._run("prepare", f"mkdir -p {q(run_dir)}")
        hook = self._get_hook()
        state = TargetState(spec=self.spec.to_dict(), run_id=run_id,
                            resource_id=f"{hook.username}@{hook.remote_host}:{hook.port}",
                            market=self.spec.market, workdir=run_dir)
        state.extra.update({"remote_base": base, "uid": int(uid), "gid": int(gid)})
        self.line_sink(f"[ssh] {state.resource_id}: run directory {run_dir}")
        return state

    @timed_phase("deploy")
    def deploy(self, state: TargetState) -> TargetState:
        """Upload the worker code (once per version) and create its environment (once)."""
        base = self._base(state, "deploy")
        if self.options.use_docker:
            self.line_sink(f"[ssh] making sure image {self.options.image} is on the host")
            self._run("deploy", docker_image_command(self.options.image, self.options.docker_gpus),
                      timeout=self.options.env_timeout_s, stream=True)
            state.extra["image"] = self.options.image
            return state
        bundle = build_bundle()
        code_dir = posixpath.join(base, bundle.name)
        self._upload_bundle(bundle, base, code_dir)
        env_dir = None if self.options.python else self._ensure_environment(bundle, base, code_dir)
        python = self.options.python or posixpath.join(env_dir or "", "bin", "python")
        answer = self._run("deploy", check_python_command(python=python, code_dir=code_dir),
                           timeout=COMMAND_TIMEOUT_S).stdout.strip()
        version = answer.splitlines()[-1] if answer else "?"
        self.line_sink(f"[ssh] worker {bundle.name} with {python} (mxnet {version})")
        state.extra.update({"code_dir": code_dir, "python": python, "mxnet_version": version,
                            "env_dir": env_dir})
        return state

    @timed_phase("sweep")
    def run_sweep(self, state: TargetState, sweep_config: dict[str, Any], *,
                  timeout_s: float) -> TargetState:
        if not timeout_s or timeout_s <= 0:
            raise TargetError(f"run_sweep: timeout_s must be > 0, got {timeout_s!r}")
        run_dir = _checked_run_dir(state, "run_sweep")
        if not self.options.use_docker:
            for name in ("code_dir", "python"):
                value = state.extra.get(name)
                if not isinstance(value, str) or not _is_absolute_path(value):
                    raise TargetError(f"run_sweep: the worker is not deployed (state has no valid "
                                      f"{name}: {value!r}; deploy did not run)")
        config = _runs.with_run_id(sweep_config, state.run_id)
        sweep_name = _runs.sweep_dir_name(config)
        paths = SweepPaths(posixpath.join(run_dir, sweep_name))
        status = self._run("run_sweep", probe_script(paths)).stdout.strip()
        if status == "exit 0":
            self.line_sink(f"[ssh] sweep {sweep_name} already finished; reusing its results")
        elif status == "running":
            self.line_sink(f"[ssh] sweep {sweep_name} is already running; re-attaching")
            self._follow(paths, timeout_s)
        else:
            if status != "new":
                self.line_sink(f"[ssh] sweep {sweep_name} left by an earlier attempt ({status}); "
                               "starting it again")
            self._start(state, paths, config, timeout_s)
            self._follow(paths, timeout_s)
        _runs.remember_results(state, paths.results)
        return state

    def collect(self, state: TargetState, local_path: str) -> str:
        """Copy every finished sweep's results back over SFTP, concatenated into ``local_path``."""
        run_dir = _checked_run_dir(state, "collect")
        remote_files = _runs.result_files(state, "collect")
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
                self._retrying("collect", lambda client, r=remote, lf=local: self._get(client, r, lf))
                local_files.append(local)
            _runs.concatenate_files(local_files, destination)
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
            run_dir = _checked_run_dir(state, "teardown")
            stopped = self._run("teardown", stop_script(run_dir, grace_s=self.options.kill_grace_s),
                                timeout=self.options.kill_grace_s + COMMAND_TIMEOUT_S).stdout.split()
            for sweep_dir in stopped:
                self.line_sink(f"[ssh] teardown stopped the sweep still running in {sweep_dir}")
            if self.options.remove_run_dir:
                self._run("teardown", f"rm -rf {q(run_dir)}")
                self.line_sink(f"[ssh] teardown removed {run_dir}")
        finally:
            self.close()

    def close(self) -> None:
        """Close the SSH connection (the next step opens a new one)."""
        for closable in (self._sftp, self._client):
            if closable is not None:
                try:
                    closable.close()
                except Exception:  # noqa: S110 - closing a connection that is already broken
                    pass
        self._sftp = None
        self._client = None
        if self._hook is not None:
            self._hook.client = None

    def run_command(self, command: str, *, step: str = "command", timeout: float = COMMAND_TIMEOUT_S,
                    check: bool = True) -> ExecResult:
        """Run a shell command on the host through the target's verified, retrying connection.

        For code that drives the host beyond the interface (the distributed launcher). The
        caller quotes every value it puts in ``command`` (``base.q``). With ``check`` a
        non-zero exit status raises TargetError with the command's stderr tail.
        """
        return self._run(step, command, timeout=timeout, check=check)

    # -- deploy ------------------------------------------------------------------------
    def _base(self, state: TargetState, step: str) -> str:
        base = state.extra.get("remote_base")
        if not base:
            raise TargetError(f"{step}: the state has no remote base directory (prepare did not run)")
        return base

    def _upload_bundle(self, bundle: WorkerBundle, base: str, code_dir: str) -> None:
        present = self._run("deploy", f"test -d {q(posixpath.join(code_dir, 'bench_tasks'))} && echo yes"
                            " || echo no").stdout.strip()
        if present == "yes":
            self.line_sink(f"[ssh] worker code {bundle.name} already on the host")
            return
        upload = posixpath.join(base, f".upload-{bundle.content_hash}-{uuid.uuid4().hex[:8]}.tar.gz")
        self.line_sink(f"[ssh] uploading worker code {bundle.name} ({bundle.tarball.stat().st_size} bytes)")
        self._retrying("deploy", lambda client: self._put(client, bundle.tarball, upload))
        self._run("deploy", unpack_command(upload=upload, code_dir=code_dir, base=base))

    def _ensure_environment(self, bundle: WorkerBundle, base: str, code_dir: str) -> str:
        """The worker environment's directory on the host, made if missing (``venv_command``)."""
        kind = self.options.requirements
        requirements_hash = bundle.requirements_hashes.get(kind)
        if requirements_hash is None:
            raise TargetError(f"deploy: the worker has no {REQUIREMENTS[kind]}")
        env_dir = posixpath.join(base, f"env-{kind}-{requirements_hash}")
        self.line_sink(f"[ssh] making sure the worker environment {env_dir} exists "
                       f"({REQUIREMENTS[kind]}; the first time installs MXNet)")
        self._run("deploy", venv_command(
            base_python=self.options.base_python, env_dir=env_dir,
            requirements_file=posixpath.join(code_dir, "bench_tasks", REQUIREMENTS[kind]),
            lock_file=posixpath.join(base, ".env.lock"), timeout_s=self.options.env_timeout_s,
            keep=validation.check("GPUCOMPARE_WORKER_ENVS_KEPT", models.WorkerEnvsKept,
                                  settings.setting("worker_envs_kept")),
        ), timeout=self.options.env_timeout_s, stream=True)
        return env_dir

    # -- run_sweep ---------------------------------------------------------------------
    def _start(self, state: TargetState, paths: SweepPaths, config: dict[str, Any],
               timeout_s: float) -> None:
        """Clear what an earlier attempt left, write config and script, launch detached."""
        if self.options.use_docker:
            container = container_name(posixpath.basename(state.workdir or ""),
                                       posixpath.basename(paths.sweep_dir))
            argv = docker_command(image=self.options.image, gpus=self.options.docker_gpus,
                                  sweep_dir=paths.sweep_dir, container=container,
                                  uid=int(state.extra.get("uid", 0)), gid=int(state.extra.get("gid", 0)))
            cwd, env = paths.sweep_dir, {}
        else:
            container = None
            code_dir = state.extra["code_dir"]
            env_dir = state.extra.get("env_dir")
            if env_dir is not None and not (isinstance(env_dir, str) and _is_absolute_path(env_dir)):
                raise TargetError(f"run_sweep: the state's env_dir {env_dir!r} is not an absolute path")
            argv = venv_worker_command(python=state.extra["python"], paths=paths, env_dir=env_dir)
            cwd, env = code_dir, {"PYTHONPATH": code_dir, "PYTHONUNBUFFERED": "1"}
        script = run_script(paths=paths, cwd=cwd, worker_argv=argv, env=env,
                            timeout_s=max(1, round(timeout_s)), kill_grace_s=self.options.kill_grace_s,
                            container=container)
        self._run("run_sweep", f"rm -rf {q(paths.sweep_dir)} && mkdir -p {q(paths.sweep_dir)}")
        self._retrying("run_sweep", lambda client: self._write(client, paths.config,
                                                               _runs.config_json(config)))
        self._retrying("run_sweep", lambda client: self._write(client, paths.script, script))
        self.line_sink(f"[ssh] starting sweep {posixpath.basename(paths.sweep_dir)} "
                       f"(time limit {timeout_s:.0f}s)")
        self._run("run_sweep", launch_command(paths))

    def _follow(self, paths: SweepPaths, timeout_s: float) -> None:
        """Stream the sweep's progress until it exits; raise if it failed or ran out of time."""
        reader = _ProgressReader(paths.progress)
        deadline = time.monotonic() + timeout_s + self.options.kill_grace_s + BACKSTOP_SLACK_S
        polls = 0
        not_alive_since: float | None = None
        while True:
            exit_code = self._retrying("run_sweep", lambda client: self._poll(client, reader, paths))
            for line in reader.take_lines():
                self.line_sink(line)
            if exit_code is not None:
                break
            if time.monotonic() > deadline:
                self._kill_sweep(paths)
                raise TargetError(f"run_sweep: time limit of {timeout_s:.0f}s exceeded and the host did "
                                  "not stop the sweep; it was killed. Its stderr ended with:\n"
                                  f"{self._remote_tail(paths)}")
            polls += 1
            if polls % LIVENESS_EVERY_POLLS == 0:
                status = self._run("run_sweep", probe_script(paths)).stdout.strip()
                if status in {"running"} or status.startswith("exit"):
                    not_alive_since = None
                else:
                    not_alive_since = not_alive_since or time.monotonic()
                    if time.monotonic() - not_alive_since > LOST_AFTER_S:
                        raise TargetError(f"run_sweep: the sweep in {paths.sweep_dir} stopped without "
                                          f"an exit status ({status}); was the host rebooted? Its "
                                          f"stderr ended with:\n{self._remote_tail(paths)}\n"
                                          f"Its launcher said:\n"
                                          f"{self._remote_tail(paths, paths.launcher)}")
            self._sleep(self.options.poll_interval_s)
        for line in reader.flush():
            self.line_sink(line)
        if exit_code == 0:
            return
        tail = self._remote_tail(paths)
        if exit_code in _runs.TIMEOUT_EXIT_CODES:
            raise TargetError(f"run_sweep: the sweep was stopped on the host (exit {exit_code}: its time "
                              f"limit of {timeout_s:.0f}s, or it was killed). Its stderr ended with:\n{tail}")
        if exit_code == 98:
            raise TargetError(f"run_sweep: the worker exited with 0 but wrote no results. Its stderr "
                              f"ended with:\n{tail}")
        raise TargetError(f"run_sweep: the worker failed on {self._describe_host()} with exit status "
                          f"{exit_code}. Its stderr ended with:\n{tail}")

    def _poll(self, client: paramiko.SSHClient, reader: _ProgressReader, paths: SweepPaths) -> int | None:
        sftp = self._get_sftp(client)
        reader.read_from(sftp)
        try:
            with sftp.open(paths.exit_code, "r") as handle:
                text = handle.read().decode().strip()
        except FileNotFoundError:
            return None
        # The exit status is written before the last progress lines may have been read.
        reader.read_from(sftp)
        try:
            return int(text)
        except ValueError:
            return None  # being written (never happens with mv, but harmless)

    def _kill_sweep(self, paths: SweepPaths) -> None:
        self._run("run_sweep", stop_script(posixpath.dirname(paths.sweep_dir),
                                           grace_s=self.options.kill_grace_s, only=paths.sweep_dir),
                  timeout=self.options.kill_grace_s + COMMAND_TIMEOUT_S)

    def _remote_tail(self, paths: SweepPaths, path: str | None = None) -> str:
        """The last lines of the sweep's progress log (or of ``path``), for an error message."""
        path = path or paths.progress
        try:
            text = self._retrying("run_sweep", lambda client: _read_tail(self._get_sftp(client), path))
        except TargetError as exc:
            return f"(could not read {path}: {exc})"
        return _runs.tail_text(text)

    # -- SFTP helpers ------------------------------------------------------------------
    def _write(self, client: paramiko.SSHClient, remote: str, text: str) -> None:
        sftp = self._get_sftp(client)
        tmp = f"{remote}.tmp-{uuid.uuid4().hex[:8]}"
        with sftp.open(tmp, "w") as handle:
            handle.write(text.encode())
        sftp.posix_rename(tmp, remote)

    def _put(self, client: paramiko.SSHClient, local: Path, remote: str) -> None:
        self._get_sftp(client).put(str(local), remote)

    def _get(self, client: paramiko.SSHClient, remote: str, local: Path) -> None:
        try:
            self._get_sftp(client).get(remote, str(local))
        except FileNotFoundError as exc:
            raise TargetError(
                f"collect: {remote} is not on the host (was the run directory removed?)") from exc

    # -- the connection ------------------------------------------------------------------
    def _describe_host(self) -> str:
        hook = self._hook
        if hook is None:
            return f"connection {self.options.ssh_conn_id!r}"
        return f"{hook.username}@{hook.remote_host}:{hook.port} (connection {self.options.ssh_conn_id!r})"

    def _get_hook(self) -> SSHHook:
        if self._hook is None:
            self._hook = self._make_hook()
        return self._hook

    def _make_hook(self) -> SSHHook:
        from airflow.providers.ssh.hooks.ssh import SSHHook

        conn_id = self.options.ssh_conn_id
        try:
            # Our own retry loop (with backoff, and none for refused host keys) replaces the hook's.
            hook = SSHHook(ssh_conn_id=conn_id, conn_retry_attempts=1, keepalive_interval=10,
                           cmd_timeout=None)
        except Exception as exc:  # the provider raises several types for a bad connection
            raise TargetError(f"ssh connection {conn_id!r}: {exc}") from exc
        if hook.conn_timeout is None:
            hook.conn_timeout = DEFAULT_CONN_TIMEOUT_S
        if hook.no_host_key_check or hook.allow_host_key_change:
            self.line_sink(f"[ssh] WARNING: connection {conn_id!r} turns host key verification off "
                           "(no_host_key_check / allow_host_key_change)")
            return hook
        if hook.host_key is None:
            known_hosts = (self.options.known_hosts_file
                           or self._connection_extra(conn_id).get("known_hosts_file"))
            if known_hosts:
                key = known_host_key(str(known_hosts), hook.remote_host, int(hook.port))
                if key is not None:
                    hook.host_key = key
        return hook

    @staticmethod
    def _connection_extra(conn_id: str) -> dict[str, Any]:
        from airflow.providers.ssh.hooks.ssh import SSHHook

        return SSHHook.get_connection(conn_id).extra_dejson

    def _connect(self) -> paramiko.SSHClient:
        """The open client, or a new connection; refused host keys and logins are final."""
        if self._client is not None:
            transport = self._client.get_transport()
            if transport is not None and transport.is_active():
                return self._client
            self.close()
        hook = self._get_hook()
        name = self._describe_host()
        try:
            self._client = hook.get_conn()
        except paramiko.BadHostKeyException as exc:
            raise HostKeyError(
                f"ssh {name}: the host key CHANGED (the host offers {_fingerprint(exc.key)}, the known "
                f"key is {_fingerprint(exc.expected_key)}). Refusing to connect. If the host was "
                "really reinstalled, put its new key in the connection's host_key extra or the "
                "known_hosts file; allow_host_key_change turns this check off") from exc
        except paramiko.AuthenticationException as exc:
            raise TargetError(f"ssh {name}: login refused: {exc}") from exc
        except paramiko.SSHException as exc:
            if "not found in known_hosts" in str(exc):
                raise HostKeyError(
                    f"ssh {name}: the host key is UNKNOWN. Refusing to connect. Put the host's key in "
                    "the connection's host_key extra (\"ssh-ed25519 AAAA...\", e.g. from "
                    "`ssh-keyscan -p PORT HOST`, checked out of band) or in a known_hosts file "
                    "(target option or connection extra known_hosts_file)") from exc
            raise _TransientError(f"{type(exc).__name__}: {exc}") from exc
        except (OSError, EOFError) as exc:
            raise _TransientError(f"{type(exc).__name__}: {exc}") from exc
        return self._client

    def _get_sftp(self, client: paramiko.SSHClient) -> paramiko.SFTPClient:
        if self._sftp is None:
            self._sftp = client.open_sftp()
            channel = self._sftp.get_channel()
            if channel is not None:
                channel.settimeout(60)
        return self._sftp

    def _connection_lost(self) -> bool:
        transport = self._client.get_transport() if self._client is not None else None
        return transport is None or not transport.is_active()

    def _retrying(self, step: str, operation: Callable[[paramiko.SSHClient], T]) -> T:
        """Run ``operation`` on a live connection, reconnecting with backoff when it drops.

        Operations must be safe to repeat (they are: writes go to a temporary name and are
        renamed, the launch is guarded by the claim directory, reads resume at an offset).
        """
        attempts = self.options.connect_retries
        for attempt in range(1, attempts + 1):
            try:
                client = self._connect()
                return operation(client)
            except _TransientError as exc:
                reason = str(exc)
            except (OSError, EOFError, paramiko.SSHException) as exc:
                remote_file_error = isinstance(exc, OSError) and exc.errno in _REMOTE_FILE_ERRNOS
                if remote_file_error or not self._connection_lost():
                    raise TargetError(
                        f"{step}: {self._describe_host()}: {type(exc).__name__}: {exc}") from exc
                reason = f"connection lost ({type(exc).__name__}: {exc})"
            self.close()
            if attempt == attempts:
                raise TargetError(
                    f"{step}: {self._describe_host()} unreachable after {attempts} attempts: {reason}. "
                    "A sweep already started keeps running on the host under its time limit; a retry "
                    "of this step re-attaches to it")
            delay = min(self.options.retry_backoff_s * 2 ** (attempt - 1), 60.0)
            delay *= 1 + random.uniform(0, 0.25)  # jitter: parallel tasks do not retry in step
            self.line_sink(f"[ssh] {step}: {reason}; reconnecting in {delay:.1f}s "
                           f"(attempt {attempt + 1} of {attempts})")
            self._sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    def _run(self, step: str, command: str, *, timeout: float = COMMAND_TIMEOUT_S,
             stream: bool = False, check: bool = True) -> ExecResult:
        """Run a shell command on the host (retrying dropped connections); raise if it fails."""
        result = self._retrying(step, lambda client: self._exec(client, command, timeout, stream))
        if check and result.exit_code != 0:
            raise TargetError(f"{step}: a command failed on {self._describe_host()} with exit status "
                              f"{result.exit_code}; its stderr ended with:\n"
                              f"{_runs.tail_text(result.stderr or result.stdout)}")
        return result

    def _exec(self, client: paramiko.SSHClient, command: str, timeout: float, stream: bool) -> ExecResult:
        transport = client.get_transport()
        if transport is None:
            raise _TransientError("no transport")
        channel = transport.open_session()
        try:
            channel.settimeout(1.0)
            channel.exec_command(command)
            channel.shutdown_write()
            out, err = bytearray(), bytearray()
            splitter = _runs.LineSplitter()
            deadline = time.monotonic() + timeout
            while True:
                got = False
                while channel.recv_ready():
                    chunk = channel.recv(65536)
                    got = got or bool(chunk)
                    out += chunk
                    if stream:
                        for line in splitter.feed(chunk):
                            self.line_sink(line)
                while channel.recv_stderr_ready():
                    chunk = channel.recv_stderr(65536)
                    got = got or bool(chunk)
                    err += chunk
                drained = not channel.recv_ready() and not channel.recv_stderr_ready()
                if channel.exit_status_ready() and drained:
                    break
                if channel.closed or not transport.is_active():
                    raise EOFError("the SSH channel closed before the command finished")
                if time.monotonic() > deadline:
                    raise TargetError(f"a command on {self._describe_host()} took over {timeout:.0f}s")
                if not got:
                    time.sleep(0.05)
            if stream:
                for line in splitter.flush():
                    self.line_sink(line)
            return ExecResult(channel.recv_exit_status(), out.decode(errors="replace"),
                              err.decode(errors="replace"))
        finally:
            channel.close()


def _checked_run_dir(state: TargetState, step: str) -> str:
    """The state's run directory, if it is what ``prepare`` makes: ``<remote base>/runs/<name>``.

    The state travels through XCom; this keeps anything else out of ``rm -rf`` and kill.
    """
    run_dir, base = state.workdir, state.extra.get("remote_base")
    if not (isinstance(run_dir, str) and isinstance(base, str) and _is_absolute_path(run_dir)
            and _is_absolute_path(base) and posixpath.dirname(run_dir) == posixpath.join(base, "runs")):
        raise TargetError(f"{step}: the state's run directory {run_dir!r} is not <remote_base>/runs/<run> "
                          f"(remote_base {base!r}); was prepare run by this target?")
    return run_dir


class _ProgressReader:
    """Reads a remote progress file from where it stopped, across reconnections."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.offset = 0
        self._splitter = _runs.LineSplitter()
        self._lines: list[str] = []

    def read_from(self, sftp: paramiko.SFTPClient) -> None:
        try:
            handle = sftp.open(self.path, "r")
        except FileNotFoundError:
            return  # not started yet
        with handle:
            handle.seek(self.offset)
            while True:
                chunk = handle.read(65536)
                if not chunk:
                    break
                # Offset and lines advance together, chunk by chunk: a connection dropped
                # mid-read neither repeats nor skips a line when the read resumes.
                self.offset += len(chunk)
                self._lines.extend(self._splitter.feed(chunk))

    def take_lines(self) -> list[str]:
        lines, self._lines = self._lines, []
        return lines

    def flush(self) -> list[str]:
        return self.take_lines() + self._splitter.flush()


def _read_tail(sftp: paramiko.SFTPClient, path: str) -> str:
    try:
        with sftp.open(path, "r") as handle:
            size = handle.stat().st_size or 0
            handle.seek(max(0, size - _TAIL_BYTES))
            return handle.read().decode(errors="replace")
    except FileNotFoundError:
        return ""


def known_host_key(known_hosts_file: str, host: str, port: int) -> paramiko.PKey | None:
    """The key a known_hosts file holds for ``host:port`` (``[host]:port`` unless port 22)."""
    try:
        host_keys = paramiko.HostKeys(known_hosts_file)
    except OSError as exc:
        raise TargetError(f"known_hosts_file: cannot read {known_hosts_file}: {exc}") from exc
    name = host if port == 22 else f"[{host}]:{port}"
    entry = host_keys.lookup(name)
    if not entry:
        return None
    preferred = ("ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521",
                 "ssh-rsa")
    for key_type in preferred:
        if key_type in entry:
            return entry[key_type]
    return None


def _fingerprint(key: paramiko.PKey | None) -> str:
    if key is None:
        return "(none)"
    return f"{key.get_name()} {key.fingerprint}"

