"""The connection to an ``ssh`` target's host: one verified, reconnecting SSH session.

``SSHConnection`` owns the SSH provider's ``SSHHook``, the paramiko client and its SFTP
session. It verifies the host key (the connection's ``host_key`` extra, a known_hosts file
named by the target option or the connection extra ``known_hosts_file``, or
``~/.ssh/known_hosts``) and refuses an unknown or changed key at once (``HostKeyError``, no
retries). Every operation runs through ``retrying``: a dropped connection is reopened with
exponential backoff and jitter, a refused key or login is final. ``run`` executes a shell
command on the host (its output optionally streamed to the line sink); the target's steps
and its scaling channel (``SSHChannel``) both go through it.
"""

from __future__ import annotations

import errno
import select
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import paramiko
import tenacity

from gpucompare.errors import PermanentError
from gpucompare.targets import runs
from gpucompare.targets.base import LineSink, TargetError
from gpucompare.targets.ssh.options import COMMAND_TIMEOUT_S, DEFAULT_CONN_TIMEOUT_S, SSHOptions, T

if TYPE_CHECKING:
    from airflow.providers.ssh.hooks.ssh import SSHHook


class HostKeyError(TargetError, PermanentError):
    """The host's key is unknown or changed: a configuration problem no retry can fix.

    Also a ValueError, so callers that fail bad input at once (no Airflow retry) do so here.
    """


class ConnectionDropped(Exception):
    """A connection failure worth retrying (refused, reset, timed out, dropped)."""


#: The known_hosts file paramiko's ``load_system_host_keys`` reads (the SSH hook loads it).
SYSTEM_KNOWN_HOSTS = Path("~/.ssh/known_hosts")

_REMOTE_FILE_ERRNOS = {errno.ENOENT, errno.EACCES, errno.EPERM, errno.EEXIST, errno.ENOTDIR,
                       errno.EISDIR, errno.ENOSPC}
#: How long a failed operation waits for paramiko to finish closing a dead connection before
#: calling the failure final (see ``SSHConnection._connection_lost``).
CLOSING_WAIT_S = 2.0


@dataclass
class ExecResult:
    exit_code: int
    stdout: str
    stderr: str


class SSHConnection:
    """The SSH session to one host, named by an Airflow SSH connection (see the module docstring).

    Nothing connects until the first operation; ``close`` drops the session and the next
    operation opens a new one.
    """

    def __init__(self, options: SSHOptions, *, line_sink: LineSink,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.options = options
        self.line_sink = line_sink
        self._sleep = sleep
        self._hook: SSHHook | None = None
        self._client: paramiko.SSHClient | None = None
        self._sftp: paramiko.SFTPClient | None = None

    def close(self) -> None:
        """Close the SSH session (the next operation opens a new one)."""
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

    def describe_host(self, hook: SSHHook | None = None) -> str:
        hook = hook or self._hook
        if hook is None:
            return f"connection {self.options.ssh_conn_id!r}"
        return f"{hook.username}@{hook.remote_host}:{hook.port} (connection {self.options.ssh_conn_id!r})"

    def hook(self) -> SSHHook:
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
            system = SYSTEM_KNOWN_HOSTS.expanduser()
            files = [str(known_hosts)] if known_hosts else []
            for path in [*files, *([str(system)] if system.is_file() else [])]:
                hook.host_key = known_host_key(path, hook.remote_host, int(hook.port))
                if hook.host_key is not None:
                    break
        if hook.host_key is None:
            # decided here, before connecting, rather than from paramiko's error text
            raise HostKeyError(
                f"ssh {self.describe_host(hook)}: the host key is UNKNOWN. Refusing to connect. Put the "
                "host's key in the connection's host_key extra (\"ssh-ed25519 AAAA...\", e.g. from "
                "`ssh-keyscan -p PORT HOST`, checked out of band) or in a known_hosts file "
                "(target option or connection extra known_hosts_file)")
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
        hook = self.hook()
        name = self.describe_host()
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
        except (paramiko.SSHException, OSError, EOFError) as exc:
            self.close()
            raise ConnectionDropped(f"{type(exc).__name__}: {exc}") from exc
        return self._client

    def sftp(self, client: paramiko.SSHClient) -> paramiko.SFTPClient:
        if self._sftp is None:
            self._sftp = client.open_sftp()
            channel = self._sftp.get_channel()
            if channel is not None:
                channel.settimeout(60)
        return self._sftp

    def _connection_lost(self) -> bool:
        """Whether the session is gone, asked after an operation failed.

        When a connection dies, paramiko's transport thread first closes its channels (which
        wakes the operation that then fails) and only then marks the transport inactive: asked
        at once, a dead connection can still look active, and its failure was taken for final
        (seen under load: no reconnect). So an active transport is given ``CLOSING_WAIT_S`` to
        end its thread; a live one goes on running and the failure is the operation's own.
        """
        transport = self._client.get_transport() if self._client is not None else None
        if transport is not None and transport.is_active():
            transport.join(CLOSING_WAIT_S)  # returns as soon as a dying transport's thread ends
        return transport is None or not transport.is_active()

    def retrying(self, step: str, operation: Callable[[paramiko.SSHClient], T]) -> T:
        """Run ``operation`` on a live connection, reconnecting with backoff when it drops.

        Operations must be safe to repeat (they are: writes go to a temporary name and are
        renamed, the launch is guarded by the claim directory, reads resume at an offset).
        """
        attempts = self.options.connect_retries

        def attempt() -> T:
            try:
                return operation(self._connect())
            except (OSError, EOFError, paramiko.SSHException) as exc:
                remote_file_error = isinstance(exc, OSError) and exc.errno in _REMOTE_FILE_ERRNOS
                if remote_file_error or not self._connection_lost():
                    raise TargetError(
                        f"{step}: {self.describe_host()}: {type(exc).__name__}: {exc}") from exc
                self.close()
                raise ConnectionDropped(f"connection lost ({type(exc).__name__}: {exc})") from exc

        def announce(state: tenacity.RetryCallState) -> None:
            delay = state.next_action.sleep if state.next_action else 0.0
            self.line_sink(f"[ssh] {step}: {state.outcome.exception() if state.outcome else ''}; "
                           f"reconnecting in {delay:.1f}s (attempt {state.attempt_number + 1} of {attempts})")

        try:
            return reconnect_retries(attempts, self.options.retry_backoff_s, sleep=self._sleep,
                                     before_sleep=announce)(attempt)
        except ConnectionDropped as exc:
            raise TargetError(
                f"{step}: {self.describe_host()} unreachable after {attempts} attempts: {exc}. "
                "A sweep already started keeps running on the host under its time limit; a retry "
                "of this step re-attaches to it") from exc

    def run(self, step: str, command: str, *, timeout: float = COMMAND_TIMEOUT_S,
            stream: bool = False, check: bool = True) -> ExecResult:
        """Run a shell command on the host (retrying dropped connections); raise if it fails.

        The target's steps and code that drives the host beyond them (the scaling channel)
        run commands through here. The caller quotes every value it puts in ``command``
        (``base.shell_quote``). With ``check`` a non-zero exit status raises TargetError with the
        command's stderr tail; ``stream`` passes stdout lines to the line sink as they come.
        """
        result = self.retrying(step, lambda client: self._exec(client, command, timeout, stream))
        if check and result.exit_code != 0:
            raise TargetError(f"{step}: a command failed on {self.describe_host()} with exit status "
                              f"{result.exit_code}; its stderr ended with:\n"
                              f"{runs.tail_text(result.stderr or result.stdout)}")
        return result

    def _exec(self, client: paramiko.SSHClient, command: str, timeout: float, stream: bool) -> ExecResult:
        transport = client.get_transport()
        if transport is None:
            raise ConnectionDropped("no transport")
        channel = transport.open_session()
        try:
            channel.settimeout(1.0)
            channel.exec_command(command)
            channel.shutdown_write()
            out, err = bytearray(), bytearray()
            splitter = runs.LineSplitter()
            deadline = time.monotonic() + timeout
            while True:
                while channel.recv_ready():
                    chunk = channel.recv(65536)
                    out += chunk
                    if stream:
                        for line in splitter.feed(chunk):
                            self.line_sink(line)
                while channel.recv_stderr_ready():
                    err += channel.recv_stderr(65536)
                drained = not channel.recv_ready() and not channel.recv_stderr_ready()
                if channel.exit_status_ready() and drained:
                    break
                if channel.closed or not transport.is_active():
                    raise EOFError("the SSH channel closed before the command finished")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TargetError(f"a command on {self.describe_host()} took over {timeout:.0f}s")
                # No sleep: wait (a second at most) for what comes next. Paramiko signals output
                # and the end of output on the channel's file descriptor, the exit status (which
                # follows the end of output) on its status event.
                if channel.eof_received:
                    channel.status_event.wait(min(left, 1.0))
                else:
                    select.select([channel], [], [], min(left, 1.0))
            if stream:
                for line in splitter.flush():
                    self.line_sink(line)
            return ExecResult(channel.recv_exit_status(), out.decode(errors="replace"),
                              err.decode(errors="replace"))
        finally:
            channel.close()


def reconnect_retries(
        attempts: int, backoff_s: float, *, sleep: Callable[[float], None] = time.sleep,
        before_sleep: Callable[[tenacity.RetryCallState], None] | None = None) -> tenacity.Retrying:
    """The one retry policy of ssh operations: only a dropped or refused connection
    (``ConnectionDropped``) is retried, ``attempts`` times in all, waiting ``backoff_s`` doubling up
    to 60 s plus up to a quarter of ``backoff_s`` of jitter (parallel tasks do not retry in step).
    A refused host key or login, and a failing remote file operation, are final."""
    return tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(ConnectionDropped),
        stop=tenacity.stop_after_attempt(attempts),
        wait=(tenacity.wait_exponential(multiplier=backoff_s, max=60.0)
              + tenacity.wait_random(0, backoff_s / 4)),
        sleep=sleep,
        before_sleep=before_sleep,
        reraise=True,
    )


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
