"""Whether the run's instance is ready, and still alive: the ``ec2`` target's readiness part.

``Readiness.wait`` (in the task) waits through botocore's ``instance_running`` waiter, then for
the SSM agent to report Online (commands are refused before) through
``targets.polling.poll_until``; ``ReadyPoller`` is the same wait one ``poll()`` at a time, for a trigger.
``require_alive`` (before a command is sent) and ``check_alive`` (while one runs) read the
instance's state through the state machine (``states``): a spot reclaim or the time-to-live
ends the machine, not the command's status.

Fallback, for AWS-compatible test endpoints only (``custom_endpoint``: SSM calls go outside
``*.amazonaws.com``): an endpoint that does not implement DescribeInstanceInformation (moto's
server answers HTTP 500 "not implemented") counts a running instance as ready, with a warning.
Against AWS any error is raised.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any
from urllib.parse import urlparse

from gpucompare.errors import PermanentError
from gpucompare.targets.base import TargetError, TargetState
from gpucompare.targets.ec2 import states
from gpucompare.targets.ec2.aws_errors import client_error_code, http_status
from gpucompare.targets.polling import poll_until

log = logging.getLogger(__name__)


class InstanceLost(TargetError, PermanentError):
    """The run's instance is gone (a spot reclaim, its time-to-live): no retry of this task can
    bring it back; a new instance is the target's prepare's work."""


def waiter_config(timeout_s: float, delay_s: float) -> dict[str, float]:
    """A botocore waiter's config: every ``delay_s`` for at most ``timeout_s`` (the stated bound)."""
    return {"Delay": delay_s, "MaxAttempts": max(1, math.ceil(timeout_s / delay_s))}


class Readiness:
    """The instance's readiness and liveness through the target's clients (``AwsClients``)."""

    def __init__(self, clients: Any, poll_interval_s: float) -> None:
        self.clients, self.poll_interval_s = clients, poll_interval_s

    def endpoint_is_custom(self) -> bool:
        """True when SSM calls go to an endpoint that is not AWS's own (a test endpoint)."""
        host = urlparse(self.clients.ssm_hook.conn.meta.endpoint_url).hostname or ""
        return not (host.endswith(".amazonaws.com") or host.endswith(".amazonaws.com.cn"))

    def poller(self, instance_id: str, deadline: float) -> ReadyPoller:
        """The wait one ``poll()`` at a time (a trigger's)."""
        return ReadyPoller(self.clients.ec2_hook.conn, self.clients.ssm_hook.conn, instance_id, deadline,
                           custom_endpoint=self.endpoint_is_custom())

    def wait(self, instance_id: str, deadline: float) -> dict[str, Any]:
        """In the task: ``instance_running`` (botocore's waiter), then the agent Online, both by
        ``deadline`` (epoch seconds); a ``TargetError`` when it died or the deadline passed."""
        from botocore.exceptions import WaiterError

        try:
            self.clients.ec2_hook.conn.get_waiter("instance_running").wait(
                InstanceIds=[instance_id],
                WaiterConfig=waiter_config(max(1.0, deadline - time.time()), self.poll_interval_s))
        except WaiterError as exc:
            state = self.state_of(instance_id)
            if states.instance_phase(state) == states.FAILED:
                raise TargetError(f"instance {instance_id} is {state} before it was ready (spot "
                                  "capacity reclaimed, or the launch failed after RunInstances)") from exc
            raise TargetError(f"instance {instance_id} not running in time ({exc})") from exc
        log.info("Instance %s is running", instance_id)
        poller = self.poller(instance_id, deadline)
        poller.running = True
        # the poller raises past ``deadline``: that is the wait's stop
        return poll_until(poller.poll, every_s=self.poll_interval_s, deadline=None)

    def state_of(self, instance_id: str) -> str:
        """The instance's state; ``gone`` when EC2 no longer knows it."""
        from botocore.exceptions import ClientError

        try:
            return self.clients.ec2_hook.get_instance_state(instance_id)
        except ClientError as exc:
            if client_error_code(exc) != "InvalidInstanceID.NotFound":
                raise
            return "gone"

    def require_alive(self, state: TargetState, *, purpose: str = "sweep") -> None:
        """Before any command is sent: the run's instance still runs. A reclaimed spot instance
        (or one its time-to-live ended) gets no command: ``InstanceLost`` says so, and that a new
        instance needs the target's prepare again (this try cannot get one)."""
        instance_id = states.instance_id_of(state)
        instance_state = self.state_of(instance_id)
        if not states.is_alive(instance_state):
            raise InstanceLost(
                f"instance {instance_id} of run {state.run_id} is {instance_state} ({state.market}: a spot "
                f"reclaim or the time-to-live): no {purpose} sent to it. The records swept so far are in S3; "
                "the rest of the night needs a new instance (the target launches one, up to max_reclaims; "
                "past them: clear the target's task group from prepare)")

    def check_alive(self, instance_id: str, command_id: str, status: str | None) -> None:
        """While a command runs: a ``TargetError`` when the instance is gone."""
        instance_state = self.clients.ec2_hook.get_instance_state(instance_id)
        if not states.is_alive(instance_state):
            raise TargetError(states.lost_message(instance_id, instance_state, command_id, status))


class ReadyPoller:
    """The wait until a launched instance is ``running`` and its SSM agent reports Online, one
    ``poll()`` at a time: None while it is not ready, else ``{"ready": instance_id}``; raises
    ``TargetError`` when the instance died or ``deadline`` (epoch seconds) passed. An instance id
    not known yet (DescribeInstances right after RunInstances is eventually consistent) counts
    as pending (``states.instance_phase``)."""

    def __init__(self, ec2: Any, ssm: Any, instance_id: str, deadline: float, *,
                 custom_endpoint: bool = False) -> None:
        self.ec2, self.ssm, self.instance_id = ec2, ssm, instance_id
        self.deadline, self.custom_endpoint = deadline, custom_endpoint
        self.running = False
        self.pings: list[Any] = []

    def poll(self) -> dict[str, Any] | None:
        if not self.running:
            state = self._instance_state()
            phase = states.instance_phase(state)
            if phase == states.FAILED:
                raise TargetError(f"instance {self.instance_id} is {state} before it was ready "
                                  "(spot capacity reclaimed, or the launch failed after RunInstances)")
            self.running = phase == states.FINAL
            if self.running:
                log.info("Instance %s is running", self.instance_id)
        if self.running and self._agent_online():
            log.info("SSM agent on %s is online", self.instance_id)
            return {"ready": self.instance_id}
        if time.time() >= self.deadline:
            if not self.running:
                raise TargetError(f"instance {self.instance_id} not running in time")
            raise TargetError(
                f"SSM agent on {self.instance_id} not online in time "
                f"(status {self.pings or 'not registered'}): "
                "check the instance profile has AmazonSSMManagedInstanceCore and the subnet reaches "
                "the SSM endpoints")
        return None

    def close(self) -> None:
        """Nothing to close: each poll is a call of the clients."""

    def _instance_state(self) -> str | None:
        from botocore.exceptions import ClientError

        try:
            reservations = self.ec2.describe_instances(InstanceIds=[self.instance_id])["Reservations"]
        except ClientError as exc:
            if client_error_code(exc) == "InvalidInstanceID.NotFound":
                return None  # not visible yet
            raise
        found = [i["State"]["Name"] for r in reservations for i in r.get("Instances", [])]
        return found[0] if found else None

    def _agent_online(self) -> bool:
        from botocore.exceptions import ClientError

        try:
            info = self.ssm.describe_instance_information(
                Filters=[{"Key": "InstanceIds", "Values": [self.instance_id]}])
        except ClientError as exc:
            unimplemented = http_status(exc) in (500, 501) or client_error_code(exc) in (
                "NotImplemented", "InvalidAction", "UnknownOperationException")
            if unimplemented and self.custom_endpoint:
                log.warning("The endpoint does not implement DescribeInstanceInformation (%s); "
                            "treating running instance %s as ready", exc, self.instance_id)
                return True
            raise TargetError(
                f"SSM DescribeInstanceInformation for {self.instance_id} failed: {exc}") from exc
        self.pings = [item.get("PingStatus") for item in info.get("InstanceInformationList", [])]
        return "Online" in self.pings
