"""The host channel of an ``ssh`` target (``SSHTarget.channel``): roles run detached over the
target's own connection."""

from __future__ import annotations

import base64
import logging
import posixpath
from collections.abc import Sequence
from typing import Any

from gpucompare.targets.channel import (
    COMMAND_TIMEOUT_S,
    LOG_TAIL_LINES,
    PORT_PROBE_COUNT,
    DistributedRunError,
    Role,
    RoleStatus,
    check_address,
    kill_marked_script,
    port_probe_command,
    role_script,
    shell_quote,
    status_script,
    stopped_count,
)

log = logging.getLogger(__name__)


class SSHChannel:
    """A host of an ``ssh`` target, through that target's own connection (host key verified,
    reconnects with backoff). Roles run detached (``setsid nohup``) and leave their exit
    status, output and log in ``<run dir>/dist-<marker>/``, which the launcher polls."""

    def __init__(self, target: Any, state: Any, *, address: str | None = None) -> None:
        if not state.workdir or not state.extra.get("code_dir") or not state.extra.get("python"):
            raise DistributedRunError(f"ssh target {target.spec.name}: prepare and deploy must run before "
                                      "a distributed run (the state has no run directory or worker)")
        self.target = target
        self.run_dir = state.workdir
        self.code_dir = state.extra["code_dir"]
        self.python = state.extra["python"]
        ssh_host = state.resource_id.rsplit("@", 1)[-1].rsplit(":", 1)[0]  # user@host:port (prepare)
        self.address = check_address(address or ssh_host, f"{target.spec.name}: cluster address")
        self.label = f"{target.spec.name} ({self.address})"

    def _run(self, command: str, timeout: float = COMMAND_TIMEOUT_S) -> Any:
        return self.target.connection.run("distributed", command, timeout=timeout, check=False)

    def point_dir(self, marker: str) -> str:
        return posixpath.join(self.run_dir, f"dist-{marker}")

    def attach(self, marker: str, roles: Sequence[Role]) -> bool:
        """An ssh host's roles are not attached to again: a retried point starts over."""
        return False

    def free_port(self, start: int) -> int:
        result = self._run(port_probe_command(self.python, self.address, start))
        text = result.stdout.strip()
        if result.exit_code != 0 or not text.isdigit():
            raise DistributedRunError(f"{self.label}: no free port from {start} to "
                                      f"{start + PORT_PROBE_COUNT - 1} ({result.stderr.strip()[-300:]})")
        return int(text)

    def launch(self, role: Role, marker: str, kill_grace_s: float) -> None:
        directory = self.point_dir(marker)
        script = role_script(role, point_dir=directory, code_dir=self.code_dir, kill_grace_s=kill_grace_s)
        path = posixpath.join(directory, f"{role.name}.sh")
        encoded = base64.b64encode(script.encode()).decode("ascii")
        result = self._run(
            f"mkdir -p {shell_quote(directory)} && rm -f {shell_quote(path[:-3])}.* && "
            f"echo {shell_quote(encoded)} | base64 -d > {shell_quote(path)} && "
            f"{{ setsid nohup sh {shell_quote(path)} > /dev/null 2>&1 < /dev/null & }}")
        if result.exit_code != 0:
            raise DistributedRunError(f"{self.label}: could not start {role.name} in {directory} (exit "
                                      f"{result.exit_code}): {result.stderr.strip()[-300:]}")

    def statuses(self, marker: str, roles: Sequence[Role]) -> dict[str, RoleStatus]:
        result = self._run(status_script(self.point_dir(marker), [r.name for r in roles]))
        if result.exit_code != 0:
            raise DistributedRunError(f"{self.label}: could not read the roles' status (exit "
                                      f"{result.exit_code}): {result.stderr.strip()[-300:]}")
        found = {}
        for line in result.stdout.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] == "exit":
                code = int(parts[2]) if parts[2].lstrip("-").isdigit() else 255
                found[parts[0]] = RoleStatus("exit", code)
            elif len(parts) == 2:
                found[parts[0]] = RoleStatus(parts[1])
        return found

    def worker_output(self, marker: str, role: Role) -> str:
        return self._run(f"cat {shell_quote(posixpath.join(self.point_dir(marker), role.name + '.jsonl'))} "
                         "2>/dev/null").stdout

    def log_tail(self, marker: str, role: Role) -> str:
        log_file = posixpath.join(self.point_dir(marker), role.name + ".log")
        return self._run(f"tail -n {LOG_TAIL_LINES} {shell_quote(log_file)} 2>/dev/null").stdout

    def stop(self, marker: str, grace_s: float) -> int:
        result = self._run(kill_marked_script(f"{marker}/", grace_s=grace_s),
                           timeout=grace_s + COMMAND_TIMEOUT_S)
        return stopped_count(result.stdout)


