"""Running commands on an ``ec2`` target's instance through SSM Run Command.

``send_commands`` sends them (the ``AWS-RunShellScript`` document, the full output to the
instance's own S3 prefix), ``wait_for_command`` polls until a final status (cancelling past
the time limit, failing at once when the instance itself is gone), ``_run_commands`` does
both and streams the output; ``ProgressFollower`` reads the worker's progress file from S3
as the instance uploads it, so progress lines arrive while the sweep runs.
``SsmCommandsMixin`` needs the target's hooks and options; ``Ec2Target`` mixes it in.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any

from gpucompare.targets.base import LineSink, TargetError, TargetState
from gpucompare.targets.ec2.aws_errors import client_error_code
from gpucompare.targets.ec2.channel import SSM_DOCUMENT
from gpucompare.targets.ec2.options import SSM_FINAL_STATUSES, Ec2Options, run_key
from gpucompare.targets.runs import STDERR_TAIL_LINES

log = logging.getLogger(__name__)


class SsmCommandsMixin:
    """Send commands to the run's instance and wait for them (see the module docstring)."""

    # provided by Ec2Target
    line_sink: LineSink
    options: Ec2Options
    ec2_hook: Any
    ssm_hook: Any

    _writer_prefix: Callable[[TargetState], str]  # RunStorageMixin's

    def _run_commands(self, state: TargetState, instance_id: str, commands: list[str], timeout_s: float,
                      *, purpose: str, progress: ProgressFollower | None = None) -> dict[str, Any]:
        """Send the commands through SSM Run Command, poll until done, stream the output.

        With a ``progress`` follower the worker's progress lines arrive while it runs (the
        instance uploads its progress file every ``PROGRESS_UPLOAD_S``); SSM's own copy of
        standard error is then only used for the error message.
        """
        command_id = self.send_commands(state, instance_id, commands, timeout_s, purpose=purpose)
        invocation = self.wait_for_command(command_id, instance_id, timeout_s,
                                           on_poll=progress.follow if progress else None)
        if progress:
            progress.follow()
        for line in (invocation.get("StandardOutputContent") or "").splitlines():
            self.line_sink(line)
        stderr = invocation.get("StandardErrorContent") or ""
        if not (progress and progress.seen_any):
            for line in stderr.splitlines():
                self.line_sink(line)
        if invocation.get("Status") != "Success":
            tail = "\n".join(stderr.splitlines()[-STDERR_TAIL_LINES:])
            raise TargetError(
                f"{purpose} on {instance_id} ended {invocation.get('Status')} (exit code "
                f"{invocation.get('ResponseCode')}, command {command_id}); stderr tail:\n{tail}")
        return invocation

    def send_commands(self, state: TargetState, instance_id: str, commands: list[str], timeout_s: float,
                      *, purpose: str) -> str:
        # the agent uploads with the instance's credentials: below the instance's own prefix
        output_prefix = f"{self._writer_prefix(state)}/ssm"
        response = self.ssm_hook.conn.send_command(
            InstanceIds=[instance_id],
            DocumentName=SSM_DOCUMENT,
            Comment=f"gpucompare {purpose} {run_key(state.run_id)}"[:100],
            Parameters={"commands": commands, "executionTimeout": [str(int(math.ceil(timeout_s)))]},
            # full stdout/stderr land here (the API returns only the first 24,000 characters)
            OutputS3BucketName=self.options.results_bucket,
            OutputS3KeyPrefix=output_prefix,
        )
        command_id = response["Command"]["CommandId"]
        log.info("Sent SSM %s command %s to %s (%d commands, timeout %.0f s)", purpose, command_id,
                 instance_id, len(commands), timeout_s)
        return command_id

    def wait_for_command(self, command_id: str, instance_id: str, timeout_s: float, *,
                         on_poll: Callable[[], None] | None = None) -> dict[str, Any]:
        """Poll GetCommandInvocation until a final status; cancel and raise past the time limit."""
        from botocore.exceptions import ClientError

        # the agent enforces executionTimeout itself; give it time to report before we give up
        grace = max(4 * self.options.poll_interval_s, min(60.0, timeout_s / 10))
        deadline = time.monotonic() + timeout_s + grace
        last_status = None
        while True:
            try:
                invocation = self.ssm_hook.get_command_invocation(command_id, instance_id)
            except ClientError as exc:
                # right after SendCommand the invocation may not exist yet
                if client_error_code(exc) != "InvocationDoesNotExist":
                    raise TargetError(f"SSM GetCommandInvocation {command_id} failed: {exc}") from exc
                invocation = {"Status": "Pending"}
            status = invocation.get("Status")
            if status != last_status:
                log.info("SSM command %s on %s: %s", command_id, instance_id, status)
                last_status = status
            if status in SSM_FINAL_STATUSES:
                return invocation
            if on_poll:
                on_poll()
            # a spot interruption or the TTL timer ends the machine, not the command's status
            instance_state = self.ec2_hook.get_instance_state(instance_id)
            if instance_state not in ("pending", "running"):
                raise TargetError(f"instance {instance_id} is {instance_state} while SSM command "
                                  f"{command_id} was {status} (spot interruption or time-to-live?)")
            if time.monotonic() >= deadline:
                try:
                    self.ssm_hook.conn.cancel_command(CommandId=command_id, InstanceIds=[instance_id])
                except ClientError as exc:
                    log.warning("Could not cancel SSM command %s: %s", command_id, exc)
                raise TargetError(f"SSM command {command_id} on {instance_id} still {status} after "
                                  f"{timeout_s:.0f} s: cancelled")
            time.sleep(self.options.poll_interval_s)


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
