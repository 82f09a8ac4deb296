"""The host channel of an ``ec2`` target (``Ec2Target.channel``): each role is one SSM Run
Command invocation on the instance, through the target's own runner (``ssm.SsmRunner``: the
same error codes and cancelling as the target's steps), each status read by the one state
machine (``states``)."""

from __future__ import annotations

import base64
import logging
import posixpath
from collections.abc import Sequence
from typing import Any

from gpucompare.targets.base import TargetError
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
    stopped_count,
)
from gpucompare.targets.ec2 import states
from gpucompare.targets.ec2.ssm import SsmRunner, exit_code_of

log = logging.getLogger(__name__)


def ssm_role_commands(role: Role, *, point_dir: str, code_dir: str, kill_grace_s: float) -> list[str]:
    """The AWS-RunShellScript commands of one role: write its script (base64, so nothing in
    it reaches the shell unquoted), run it in the foreground, send a worker's record to
    standard output and the end of the role's log to standard error, exit with its status."""
    script = role_script(role, point_dir=point_dir, code_dir=code_dir, kill_grace_s=kill_grace_s)
    path = posixpath.join(point_dir, f"{role.name}.sh")
    base = posixpath.join(point_dir, role.name)
    encoded = base64.b64encode(script.encode()).decode("ascii")
    commands = [
        f"mkdir -p {shell_quote(point_dir)}",
        f"rm -f {shell_quote(base)}.*",
        f"echo {shell_quote(encoded)} | base64 -d > {shell_quote(path)}",
        f"sh {shell_quote(path)}",
        f"rc=$(cat {shell_quote(base + '.exit')} 2>/dev/null || echo 255)",
    ]
    if role.is_worker:
        commands.append(f"cat {shell_quote(base + '.jsonl')} 2>/dev/null")
    commands += [f"tail -n {LOG_TAIL_LINES} {shell_quote(base + '.log')} >&2 2>/dev/null", 'exit "$rc"']
    return commands


class SSMChannel:
    """A host of an ``ec2`` target through SSM Run Command (the target's own SSM client).

    Each role is one command invocation that runs for as long as the role does; its status
    is the invocation's, a worker's record comes back as its standard output. Stopping
    cancels the invocations and sends the stop script (marker-matched kill) as a command.

    The command ids are kept by SSM itself: each role's command carries a comment naming the
    point's marker, the role and the instance, so a retried scaling task (a new channel, this
    one's memory gone) finds them again with a paginated ListCommands (``attach``) and waits
    for them instead of starting the point over.
    """

    def __init__(self, *, runner: SsmRunner, address: str, python: str, code_dir: str,
                 run_dir: str) -> None:
        self.runner = runner
        self.instance_id = runner.instance_id
        self.address = check_address(address, f"{self.instance_id}: private address")
        self.python = python
        self.code_dir = code_dir
        self.run_dir = run_dir
        self.label = f"{self.instance_id} ({self.address})"
        self._commands: dict[tuple[str, str], str] = {}

    def _run(self, commands: list[str], timeout_s: float, comment: str) -> Any:
        try:
            return self.runner.run(commands, timeout_s, comment=f"{comment} on {self.instance_id}")
        except TargetError as exc:
            raise DistributedRunError(f"{self.label}: SSM command ({comment}): {exc}") from exc

    def point_dir(self, marker: str) -> str:
        return posixpath.join(self.run_dir, f"dist-{marker}")

    def free_port(self, start: int) -> int:
        invocation = self._run([port_probe_command(self.python, self.address, start)], COMMAND_TIMEOUT_S,
                               "gpucompare dist port probe")
        text = (invocation.get("StandardOutputContent") or "").strip()
        if invocation.get("Status") != "Success" or not text.isdigit():
            raise DistributedRunError(f"{self.label}: no free port from {start} to "
                                      f"{start + PORT_PROBE_COUNT - 1} (SSM {invocation.get('Status')}: "
                                      f"{(invocation.get('StandardErrorContent') or '').strip()[-300:]})")
        return int(text)

    def _comment(self, marker: str, role: Role) -> str:
        return f"gpucompare dist {marker} {role.name} on {self.instance_id}"

    def attach(self, marker: str, roles: Sequence[Role]) -> bool:
        """Whether every role of the point on this host has an earlier command (by its comment,
        ``SsmRunner.find``: every page of ListCommands) still running or succeeded; if so, they are
        this channel's from now on and nothing is sent. One missing, failed or cancelled: False."""
        found: dict[tuple[str, str], str] = {}
        for role in roles:
            command_id = self.runner.find(self._comment(marker, role))
            if command_id is None:
                return False
            status = self.runner.invocation(command_id).get("Status")
            if states.command_phase(status) == states.FAILED:
                return False
            found[(marker, role.name)] = command_id
        self._commands.update(found)
        for (_, name), command_id in found.items():
            log.info("%s: %s of %s attached to its running command %s", self.label, name, marker, command_id)
        return True

    def launch(self, role: Role, marker: str, kill_grace_s: float) -> None:
        commands = ssm_role_commands(role, point_dir=self.point_dir(marker), code_dir=self.code_dir,
                                     kill_grace_s=kill_grace_s)
        self._commands[(marker, role.name)] = self.runner.send(
            commands, role.timeout_s + kill_grace_s + 60, comment=self._comment(marker, role))

    def statuses(self, marker: str, roles: Sequence[Role]) -> dict[str, RoleStatus]:
        found = {}
        for role in roles:
            command_id = self._commands.get((marker, role.name))
            if command_id is None:
                continue
            invocation = self.runner.invocation(command_id)
            if states.is_final(invocation.get("Status")):
                found[role.name] = RoleStatus("exit", exit_code_of(invocation))
            else:
                found[role.name] = RoleStatus("running")
        return found

    def _output(self, marker: str, role: Role, key: str) -> str:
        command_id = self._commands.get((marker, role.name))
        return (self.runner.invocation(command_id).get(key) or "") if command_id else ""

    def worker_output(self, marker: str, role: Role) -> str:
        return self._output(marker, role, "StandardOutputContent")

    def log_tail(self, marker: str, role: Role) -> str:
        return self._output(marker, role, "StandardErrorContent")

    def stop(self, marker: str, grace_s: float) -> int:
        for (command_marker, _name), command_id in list(self._commands.items()):
            if command_marker == marker:
                self.runner.cancel(command_id)
        invocation = self._run([kill_marked_script(f"{marker}/", grace_s=grace_s)],
                               grace_s + COMMAND_TIMEOUT_S, f"gpucompare dist stop {marker}")
        return stopped_count(invocation.get("StandardOutputContent") or "")


