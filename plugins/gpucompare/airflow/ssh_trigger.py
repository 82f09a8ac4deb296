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
import shlex
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

#: Bytes of progress read per poll at most (a long backlog is read over several polls).
MAX_READ_BYTES = 256 * 1024
#: Seconds a sweep may show no exit status and no live worker before it counts as lost.
LOST_AFTER_S = 300.0


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
        self._pending = b""

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"ssh_conn_id": self.ssh_conn_id, "known_host": self.known_host, "sweep_dir": self.sweep_dir,
                 "files": self.files, "deadline": self.deadline, "poll_interval_s": self.poll_interval_s,
                 "call_timeout_s": self.call_timeout_s, "log_offset": self.log_offset,
                 "lost_after_s": self.lost_after_s})

    # -- the poll ----------------------------------------------------------------------------
    def poll_command(self) -> str:
        """Keep the offset on the host (the larger of ours and the one kept there), print it, the
        sweep's status and the progress bytes from it."""
        d = shlex.quote(self.sweep_dir)
        f = {key: f'"$d"/{shlex.quote(name)}' for key, name in self.files.items()}
        return "\n".join([
            f"d={d}; o={int(self.log_offset)}",
            f'if [ -f {f["offset"]} ]; then k=$(cat {f["offset"]}); '
            '[ "$k" -gt "$o" ] 2>/dev/null && o=$k; fi',
            'echo "offset $o"',
            f'if [ -f {f["exit_code"]} ]; then echo "exit $(cat {f["exit_code"]})";',
            f'elif [ -f {f["pid"]} ] && kill -0 "$(cat {f["pid"]})" 2>/dev/null; then echo running;',
            f'elif [ -d {f["claim"]} ]; then echo claimed; else echo new; fi',
            f'tail -c +$((o + 1)) {f["progress"]} 2>/dev/null | head -c {MAX_READ_BYTES}',
        ])

    def keep_offset_command(self, offset: int) -> str:
        path = f"{shlex.quote(self.sweep_dir)}/{shlex.quote(self.files['offset'])}"
        return f"printf '%s' {int(offset)} > {path}.tmp && mv -f {path}.tmp {path}"

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
        return await asyncssh.connect(**options)

    async def _run(self, connection: Any, command: str) -> str:
        async with asyncio.timeout(self.call_timeout_s):
            result = await connection.run(command, check=False)
        if result.exit_status not in (0, None):
            raise OSError(f"poll command exited {result.exit_status}: {(result.stderr or '')[-300:]}")
        return result.stdout if isinstance(result.stdout, str) else (result.stdout or b"").decode()

    def _take_lines(self, offset: int, data: bytes) -> tuple[int, list[str]]:
        """The new offset (through the last complete line) and the complete lines of ``data``."""
        end = data.rfind(b"\n") + 1
        lines = data[:end].decode("utf-8", "replace").splitlines()
        return offset + end, lines

    async def _poll(self, connection: Any) -> tuple[str, list[str]]:
        """One poll: the status, and the new complete progress lines (their offset kept first)."""
        output = await self._run(connection, self.poll_command())
        head, _, rest = output.partition("\n")
        status, _, data = rest.partition("\n")
        if not head.startswith("offset "):
            raise OSError(f"unexpected answer from the host: {output[:200]!r}")
        self.log_offset = max(self.log_offset, int(head.split()[1]))
        offset, lines = self._take_lines(self.log_offset, data.encode("utf-8", "surrogateescape"))
        if lines:
            await self._run(connection, self.keep_offset_command(offset))
            self.log_offset = offset
        return status.strip(), lines

    # -- the wait ----------------------------------------------------------------------------
    async def run(self) -> AsyncIterator[TriggerEvent]:
        try:
            event = await self._wait()
        except Exception as exc:  # a failure anywhere is an event: the task raises the target's error
            event = {"error": f"run_sweep: the wait in the triggerer failed: {type(exc).__name__}: {exc}"}
        yield TriggerEvent(event)

    async def _wait(self) -> dict[str, Any]:
        import asyncssh

        connection, lost_since, last_error = None, None, ""
        try:
            while True:
                if self.deadline and time.time() > self.deadline:
                    return {"error": f"run_sweep: the time limit was exceeded (deadline passed"
                                     f"{f'; last connection error: {last_error}' if last_error else ''})",
                            "timed_out": True}
                try:
                    if connection is None:
                        async with asyncio.timeout(self.call_timeout_s):
                            connection = await self._connect()
                    status, lines = await self._poll(connection)
                except (asyncssh.HostKeyNotVerifiable, asyncssh.PermissionDenied) as exc:
                    return {"error": f"run_sweep: {self.sweep_dir}: the host refused us or its key is not "
                                     f"the verified one ({type(exc).__name__}: {exc})"}
                except (OSError, TimeoutError, asyncssh.Error) as exc:
                    last_error = f"{type(exc).__name__}: {exc}"
                    self.log.warning("Polling %s: %s (retrying until the deadline)", self.sweep_dir,
                                     last_error)
                    connection = _closed(connection)
                else:
                    for line in lines:
                        self.log.info("%s", line)
                    if status.startswith("exit "):
                        code = status.split()[1]
                        if code.lstrip("-").isdigit():
                            return {"exit_code": int(code)}
                    if status in ("running", "claimed") or status.startswith("exit"):
                        lost_since = None
                    else:
                        lost_since = lost_since or time.monotonic()
                        if time.monotonic() - lost_since > self.lost_after_s:
                            return {"error": f"run_sweep: the sweep in {self.sweep_dir} stopped without an "
                                             f"exit status ({status}); was the host rebooted?"}
                await asyncio.sleep(self.poll_interval_s)
        finally:
            _closed(connection)


def _closed(connection: Any) -> None:
    if connection is not None:
        connection.close()
    return None
