"""The wait of an ssh sweep in the triggerer: a small asyncio poller of the sweep's files on the host.

``SshSweepTrigger`` holds only what the wait needs: the Airflow SSH connection's id, the host key
the task verified (``known_host``, a known_hosts line: public), the sweep's files on the host,
the wall-clock deadline and the progress log's offset. It imports no target module: the task
described the wait (``SSHTarget.sweep_wait``) and the trigger reads it with asyncssh, one SSH
connection kept across polls, every call bounded by ``call_timeout_s`` (``asyncio.timeout``),
so a host that accepts TCP and never answers costs the loop a pending coroutine, never a thread.

Each poll is one shell command: the sweep's status (``exit N``, ``running``, ``claimed``, ``new``)
and the progress log's bytes from the offset. Complete lines go to the trigger's log (Airflow shows
it in the task's log). The offset is also kept on the host (``offset_file``), written before the
lines are logged, so a trigger rebuilt by a restarted triggerer from its original kwargs starts
where the last one stopped: no progress line is logged twice (a crash between the two loses at
most that poll's lines from the log; the progress file keeps them).

Events (what ``SSHTarget.finish_sweep`` takes): ``{"exit_code": N}``; or ``{"error": …}``: the
deadline passed (``"timed_out": true``: the task kills the sweep and raises), the sweep stopped
without an exit status for ``lost_after_s``, the host key or login was refused, or the trigger
itself failed. A connection that drops or stalls is retried on the next poll until the deadline.
"""

from __future__ import annotations

import asyncio
import random
import shlex
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from gpucompare.airflow.call_timeout import call_timeout

#: Bytes of progress read per poll at most (a long backlog is read over several polls).
MAX_READ_BYTES = 256 * 1024
#: Seconds a sweep may show no exit status and no live worker before it counts as lost.
LOST_AFTER_S = 300.0
#: Commands at once on one shared connection (OpenSSH refuses channels past MaxSessions, 10).
MAX_CHANNELS = 8
#: The longest wait between two tries after failed calls.
MAX_BACKOFF_S = 60.0
#: Every this many polls, a command checks that the sweep's worker still lives (the exit file
#: and the progress are read over SFTP, which runs no process on the host).
PROBE_EVERY_POLLS = 10


@dataclass(frozen=True)
class _Sftp:
    client: Any
    channels: asyncio.Semaphore


@dataclass
class _Shared:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    channels: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(MAX_CHANNELS))
    connection: Any = None


class SharedConnections:
    """One SSH connection per (connection id, host key) and event loop, shared by its triggers."""

    def __init__(self) -> None:
        self._by_loop: weakref.WeakKeyDictionary[Any, dict[tuple[str, str], _Shared]] = \
            weakref.WeakKeyDictionary()

    def entry(self, key: tuple[str, str]) -> _Shared:
        entries = self._by_loop.setdefault(asyncio.get_running_loop(), {})
        return entries.setdefault(key, _Shared())

    async def connection(self, key: tuple[str, str], connect: Callable[[], Awaitable[Any]]) -> Any:
        """The shared connection, opened by the first caller that finds none."""
        entry = self.entry(key)
        async with entry.lock:
            if entry.connection is None:
                entry.connection = await connect()
            return entry.connection

    def drop(self, key: tuple[str, str], connection: Any) -> None:
        """Close ``connection`` if it is still the shared one (a call on it failed)."""
        entry = self.entry(key)
        if connection is not None and entry.connection is connection:
            entry.connection = None
            connection.close()


SHARED = SharedConnections()


class SshSweepTrigger(BaseTrigger):
    """Waits for one sweep on an ssh host (see the module docstring).

    :param ssh_conn_id: the Airflow SSH connection of the host
    :param known_host: the host's key as a known_hosts line, verified by the task
    :param sweep_dir: the sweep's folder on the host
    :param files: the names of its ``exit_code``, ``progress``, ``pid`` and ``claim`` entries
        and of the offset file the trigger keeps there
    :param deadline: wall clock (epoch seconds) past which the wait ends with an error event
        (0: no deadline of its own; the deferral's timeout still bounds it)
    :param poll_interval_s: seconds between two polls
    :param call_timeout_s: seconds any one connect or command may take
    :param log_offset: bytes of the progress log already logged
    """

    def __init__(self, *, ssh_conn_id: str, known_host: str, sweep_dir: str, files: dict[str, str],
                 deadline: float, poll_interval_s: float = 2.0, call_timeout_s: float = 30.0,
                 log_offset: int = 0, lost_after_s: float = LOST_AFTER_S) -> None:
        super().__init__()
        self.ssh_conn_id, self.known_host = ssh_conn_id, known_host
        self.sweep_dir, self.files = sweep_dir, dict(files)
        self.deadline, self.poll_interval_s = float(deadline), float(poll_interval_s)
        self.call_timeout_s, self.log_offset = float(call_timeout_s), int(log_offset)
        self.lost_after_s = float(lost_after_s)
        self._key = (ssh_conn_id, known_host)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"ssh_conn_id": self.ssh_conn_id, "known_host": self.known_host, "sweep_dir": self.sweep_dir,
                 "files": self.files, "deadline": self.deadline, "poll_interval_s": self.poll_interval_s,
                 "call_timeout_s": self.call_timeout_s, "log_offset": self.log_offset,
                 "lost_after_s": self.lost_after_s})

    # -- the poll ----------------------------------------------------------------------------
    def _path(self, key: str) -> str:
        return f"{self.sweep_dir.rstrip('/')}/{self.files[key]}"

    def probe_command(self) -> str:
        """Prints ``running``, ``claimed`` or ``new``: whether a worker still holds the sweep."""
        pid, claim = shlex.quote(self._path("pid")), shlex.quote(self._path("claim"))
        return (f'if [ -f {pid} ] && kill -0 "$(cat {pid})" 2>/dev/null; then echo running; '
                f"elif [ -d {claim} ]; then echo claimed; else echo new; fi")

    async def _connect(self) -> Any:
        """One SSH connection to the host, its key checked against ``known_host``."""
        import asyncssh
        from airflow.providers.common.compat.connection import get_async_connection

        conn = await get_async_connection(self.ssh_conn_id)
        extra = conn.extra_dejson
        options: dict[str, Any] = {"host": conn.host, "port": int(conn.port or 22), "username": conn.login,
                                   "known_hosts": asyncssh.import_known_hosts(self.known_host + "\n"),
                                   "connect_timeout": self.call_timeout_s, "keepalive_interval": 30}
        if extra.get("private_key"):
            options["client_keys"] = [asyncssh.import_private_key(
                extra["private_key"], extra.get("private_key_passphrase") or None)]
        elif extra.get("key_file"):
            options["client_keys"] = [extra["key_file"]]
        if conn.password:
            options["password"] = conn.password
        connection = await asyncssh.connect(**options)
        # one SFTP session per connection carries every trigger's reads (no process per poll)
        connection.gpucompare_sftp = await connection.start_sftp_client()
        return connection

    async def _read(self, sftp: Any, key: str, offset: int = 0, size: int = MAX_READ_BYTES) -> bytes | None:
        """Up to ``size`` bytes of a file of the sweep from ``offset``; None if it does not exist."""
        import asyncssh

        try:
            async with sftp.channels, await sftp.client.open(self._path(key), "rb") as handle:
                return await handle.read(size, offset)
        except asyncssh.SFTPNoSuchFile:
            return None

    def _take_lines(self, offset: int, data: bytes) -> tuple[int, list[str]]:
        """The new offset (through the last complete line) and the complete lines of ``data``."""
        end = data.rfind(b"\n") + 1
        return offset + end, data[:end].decode("utf-8", "replace").splitlines()

    async def _poll(self, connection: Any, probe: bool) -> tuple[str, list[str]]:
        """One poll over SFTP: the status (``exit N``; else, when ``probe``, the worker's state by a
        command) and the new complete progress lines, their offset kept on the host first."""
        sftp = _Sftp(connection.gpucompare_sftp, SHARED.entry(self._key).channels)
        async with call_timeout(self.call_timeout_s):
            kept = await self._read(sftp, "offset", size=32)
            if kept and kept.strip().isdigit():
                self.log_offset = max(self.log_offset, int(kept))
            exit_text = await self._read(sftp, "exit_code", size=32)
            data = await self._read(sftp, "progress", self.log_offset) or b""
        offset, lines = self._take_lines(self.log_offset, data)
        if lines:
            async with call_timeout(self.call_timeout_s), sftp.channels:
                temporary = self._path("offset") + ".tmp"
                async with await sftp.client.open(temporary, "wb") as handle:
                    await handle.write(str(offset).encode())
                await sftp.client.posix_rename(temporary, self._path("offset"))
            self.log_offset = offset
        if exit_text is not None:
            return f"exit {exit_text.decode(errors='replace').strip()}", lines
        if not probe:
            return "running", lines
        async with call_timeout(self.call_timeout_s), sftp.channels:
            result = await connection.run(self.probe_command(), check=False)
        return str(result.stdout or "").strip(), lines

    # -- the wait ----------------------------------------------------------------------------
    async def run(self) -> AsyncIterator[TriggerEvent]:
        try:
            event = await self._wait()
        except Exception as exc:  # a failure anywhere is an event: the task raises the target's error
            event = {"error": f"run_sweep: the wait in the triggerer failed: {type(exc).__name__}: {exc}"}
        yield TriggerEvent(event)

    async def _wait(self) -> dict[str, Any]:
        import asyncssh

        lost_since, last_error, failures, polls = None, "", 0, 1
        while True:
            if self.deadline and time.time() > self.deadline:
                return {"error": f"run_sweep: the time limit was exceeded (deadline passed"
                                 f"{f'; last connection error: {last_error}' if last_error else ''})",
                        "timed_out": True}
            connection = None
            try:
                async with call_timeout(self.call_timeout_s):
                    connection = await SHARED.connection(self._key, self._connect)
                status, lines = await self._poll(connection, probe=polls % PROBE_EVERY_POLLS == 0)
                polls += 1
            except (asyncssh.HostKeyNotVerifiable, asyncssh.PermissionDenied) as exc:
                return {"error": f"run_sweep: {self.sweep_dir}: the host refused us or its key is not "
                                 f"the verified one ({type(exc).__name__}: {exc})"}
            except (OSError, TimeoutError, asyncssh.Error) as exc:
                last_error, failures = f"{type(exc).__name__}: {exc}", failures + 1
                self.log.warning("Polling %s: %s (retrying until the deadline)", self.sweep_dir, last_error)
                if not isinstance(exc, TimeoutError):  # a slow call leaves the connection to the others;
                    SHARED.drop(self._key, connection)  # asyncssh's keepalive ends a dead one
                backoff = min(MAX_BACKOFF_S, self.poll_interval_s * 2 ** min(failures, 10))
                await self._sleep_until_deadline(backoff * random.uniform(0.5, 1.0))
                continue
            failures = 0
            for line in lines:
                self.log.info("%s", line)
            if status.startswith("exit ") and status.split()[1].lstrip("-").isdigit():
                return {"exit_code": int(status.split()[1])}
            if status in ("running", "claimed"):
                lost_since = None
            else:
                lost_since = lost_since or time.monotonic()
                if time.monotonic() - lost_since > self.lost_after_s:
                    return {"error": f"run_sweep: the sweep in {self.sweep_dir} stopped without an "
                                     f"exit status ({status}); was the host rebooted?"}
            await self._sleep_until_deadline(self.poll_interval_s)

    async def _sleep_until_deadline(self, seconds: float) -> None:
        """Sleep ``seconds``, but not past the deadline (its event is due then)."""
        if self.deadline:
            seconds = max(0.0, min(seconds, self.deadline - time.time() + 0.01))
        await asyncio.sleep(seconds)
