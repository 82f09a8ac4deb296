"""The one SSM Run Command runner of the ``ec2`` target and of its host channel.

``SsmRunner`` sends ``AWS-RunShellScript`` commands to one instance, reads an invocation
(``InvocationDoesNotExist`` right after SendCommand counts as ``Pending``: decided by the
error code, never by message text), finds an earlier command of the same purpose again
(``find``: a retried task re-attaches to it instead of sending a second one), waits until a
final status (``CommandWait``: the one wait of a command, one ``poll()`` at a time, over the
state machine of ``states``: an unknown status counts as running until the time limit), and
cancels (``CancelCommand``) every command it abandons: past its time limit, or when the wait is
interrupted. ``ProgressFollower`` reads the worker's progress file from S3 as the instance
uploads it, so progress lines arrive while the sweep runs.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any

from gpucompare.targets.base import LineSink, TargetError
from gpucompare.targets.ec2 import states
from gpucompare.targets.ec2.aws_errors import client_error_code
from gpucompare.targets.polling import poll_until
from gpucompare.targets.runs import STDERR_TAIL_LINES

log = logging.getLogger(__name__)

SSM_DOCUMENT = "AWS-RunShellScript"
#: Error codes of GetCommandInvocation that mean "not registered yet" (right after SendCommand).
NOT_YET = frozenset({"InvocationDoesNotExist"})
#: Error codes of CancelCommand that mean there is nothing (left) to cancel.
NOTHING_TO_CANCEL = frozenset({"InvalidCommandId", "InvalidInstanceId", "DuplicateInstanceId"})


def exit_code_of(invocation: dict[str, Any]) -> int:
    """The command's exit status; 255 when SSM ended it (cancelled, timed out) without one."""
    code = invocation.get("ResponseCode")
    failed = states.command_phase(invocation.get("Status")) != states.FINAL
    if not isinstance(code, int) or code < 0 or (failed and code == 0):
        return 255
    return code


class SsmRunner:
    """Commands on one instance through SSM Run Command (see the module docstring).

    :param ssm_client: a boto3 SSM client (the target's ``SsmHook().conn``)
    :param instance_id: the instance every command goes to
    :param poll_interval_s: seconds between two reads of a running invocation
    :param output_bucket: where the agent writes the full output (the API keeps 24,000 characters)
    """

    def __init__(self, ssm_client: Any, instance_id: str, *, poll_interval_s: float = 15.0,
                 output_bucket: str | None = None) -> None:
        self.ssm = ssm_client
        self.instance_id = instance_id
        self.poll_interval_s = poll_interval_s
        self.output_bucket = output_bucket

    def send(self, commands: list[str], timeout_s: float, *, comment: str,
             output_prefix: str | None = None) -> str:
        """Send the commands; returns the CommandId. ``comment`` is how ``find`` knows it again."""
        request: dict[str, Any] = {
            "InstanceIds": [self.instance_id], "DocumentName": SSM_DOCUMENT, "Comment": comment[:100],
            "Parameters": {"commands": commands, "executionTimeout": [str(int(math.ceil(timeout_s)))]},
        }
        if self.output_bucket and output_prefix:
            request.update(OutputS3BucketName=self.output_bucket, OutputS3KeyPrefix=output_prefix)
        command_id = self.ssm.send_command(**request)["Command"]["CommandId"]
        log.info("Sent SSM command %s to %s (%s; %d lines, timeout %.0f s)", command_id, self.instance_id,
                 comment[:100], len(commands), timeout_s)
        return command_id

    def invocation(self, command_id: str) -> dict[str, Any]:
        """The command's invocation on the instance (``Pending`` while SSM has not registered it)."""
        from botocore.exceptions import ClientError

        try:
            return self.ssm.get_command_invocation(CommandId=command_id, InstanceId=self.instance_id)
        except ClientError as exc:
            if client_error_code(exc) in NOT_YET:
                return {"Status": "Pending", "CommandId": command_id}
            raise TargetError(f"SSM GetCommandInvocation {command_id} on {self.instance_id} failed: "
                              f"{exc}") from exc

    def find(self, comment: str) -> str | None:
        """The newest command sent to the instance with exactly this comment, if any (every page of
        ListCommands: an instance with many commands lists them over several)."""
        from botocore.exceptions import ClientError

        try:
            pages = self.ssm.get_paginator("list_commands").paginate(InstanceId=self.instance_id)
            commands = [command for page in pages for command in page.get("Commands", [])]
        except ClientError as exc:
            raise TargetError(f"SSM ListCommands on {self.instance_id} failed: {exc}") from exc
        mine = [c for c in commands if c.get("Comment") == comment[:100]]
        if not mine:
            return None
        return max(mine, key=lambda c: c.get("RequestedDateTime") or 0)["CommandId"]

    def cancel(self, command_id: str) -> None:
        """Cancel the command on the instance; one that already ended is fine."""
        from botocore.exceptions import ClientError

        try:
            self.ssm.cancel_command(CommandId=command_id, InstanceIds=[self.instance_id])
            log.info("Cancelled SSM command %s on %s", command_id, self.instance_id)
        except ClientError as exc:
            if client_error_code(exc) in NOTHING_TO_CANCEL:
                log.info("SSM command %s on %s: nothing left to cancel", command_id, self.instance_id)
            else:
                log.warning("Could not cancel SSM command %s on %s: %s", command_id, self.instance_id, exc)

    def grace_s(self, timeout_s: float) -> float:
        """Time past a command's own limit for the agent to report its ``executionTimeout``."""
        return max(4 * self.poll_interval_s, min(60.0, timeout_s / 10))

    def wait(self, command_id: str, timeout_s: float, *, on_poll: Callable[[], None] | None = None,
             still_alive: Callable[[str | None], None] | None = None) -> dict[str, Any]:
        """Poll until a final status (``CommandWait`` every ``poll_interval_s``). Past ``timeout_s``
        (plus ``grace_s``), or when the wait is interrupted (an exception from ``still_alive`` or
        ``on_poll``, a kill of the task), the command is cancelled."""
        grace = self.grace_s(timeout_s)
        waiting = CommandWait(self, command_id, deadline=time.time() + timeout_s + grace, limit_s=timeout_s,
                              on_poll=on_poll, still_alive=still_alive)
        finished = False
        try:
            # the poll raises past its deadline: that is the wait's stop
            invocation = poll_until(waiting.poll, every_s=self.poll_interval_s, deadline=None)
            finished = True
            return invocation
        finally:
            if not finished:
                self.cancel(command_id)

    def run(self, commands: list[str], timeout_s: float, *, comment: str,
            output_prefix: str | None = None) -> dict[str, Any]:
        """Send, then wait for the final status (cancelled if abandoned)."""
        return self.wait(self.send(commands, timeout_s, comment=comment, output_prefix=output_prefix),
                         timeout_s)

    def run_checked(self, commands: list[str], timeout_s: float, *, purpose: str, comment: str,
                    output_prefix: str | None, line_sink: LineSink) -> dict[str, Any]:
        """One short command (deploy, pull): its output lines to ``line_sink``, a ``TargetError``
        naming ``purpose`` unless it succeeded; returns the invocation."""
        invocation = self.run(commands, timeout_s, comment=comment, output_prefix=output_prefix)
        for line in ((invocation.get("StandardOutputContent") or "").splitlines()
                     + (invocation.get("StandardErrorContent") or "").splitlines()):
            line_sink(line)
        raise_unless_success(invocation, purpose=purpose, instance_id=self.instance_id)
        return invocation


class CommandWait:
    """The wait for one SSM command, one ``poll()`` at a time: the invocation once its status is
    final (``states``), None while it runs; ``on_poll`` and ``still_alive(status)`` are called on
    each poll that found it running (an exception from them ends the wait), and past ``deadline``
    (epoch seconds) a ``TargetError`` says it ran too long. Cancelling is the caller's."""

    def __init__(self, runner: SsmRunner, command_id: str, *, deadline: float, limit_s: float,
                 on_poll: Callable[[], None] | None = None,
                 still_alive: Callable[[str | None], None] | None = None) -> None:
        self.runner, self.command_id = runner, command_id
        self.deadline, self.limit_s = deadline, limit_s
        self.on_poll, self.still_alive = on_poll, still_alive
        self.last_status: str | None = None

    def poll(self) -> dict[str, Any] | None:
        invocation = self.runner.invocation(self.command_id)
        status = invocation.get("Status")
        if status != self.last_status:
            log.info("SSM command %s on %s: %s", self.command_id, self.runner.instance_id, status)
            self.last_status = status
        if states.is_final(status):
            return invocation
        if self.on_poll:
            self.on_poll()
        if self.still_alive:
            self.still_alive(status)
        if time.time() >= self.deadline:
            raise TargetError(f"SSM command {self.command_id} on {self.runner.instance_id} still {status} "
                              f"after {self.limit_s:.0f} s: cancelled")
        return None


def raise_unless_success(invocation: dict[str, Any], *, purpose: str, instance_id: str) -> None:
    """A ``TargetError`` with the command's status, exit code and stderr tail unless it succeeded."""
    if states.command_phase(invocation.get("Status")) == states.FINAL:
        return
    stderr = invocation.get("StandardErrorContent") or ""
    tail = "\n".join(stderr.splitlines()[-STDERR_TAIL_LINES:])
    raise TargetError(
        f"{purpose} on {instance_id} ended {invocation.get('Status')} (exit code "
        f"{invocation.get('ResponseCode')}, command {invocation.get('CommandId')}); stderr tail:\n{tail}")


class ProgressFollower:
    """Reads the sweep's progress file from S3 as it grows and passes new lines on."""

    def __init__(self, s3_hook: Any, bucket: str, key: str, line_sink: LineSink) -> None:
        self.s3_hook, self.bucket, self.key, self.line_sink = s3_hook, bucket, key, line_sink
        self.emitted = 0
        self.seen_any = False

    def follow(self) -> None:
        from botocore.exceptions import ClientError

        try:
            body = self.s3_hook.conn.get_object(Bucket=self.bucket, Key=self.key)["Body"].read()
        except ClientError as exc:
            if client_error_code(exc) in ("NoSuchKey", "404"):
                return  # not uploaded yet
            log.warning("Could not read progress s3://%s/%s: %s", self.bucket, self.key, exc)
            return
        self.seen_any = True
        lines = body.decode("utf-8", errors="replace").splitlines()
        for line in lines[self.emitted:]:
            self.line_sink(line)
        self.emitted = max(self.emitted, len(lines))
