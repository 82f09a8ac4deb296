"""The ec2 target's waits in the triggerer: small asyncio pollers over signed AWS calls.

``SsmReadyTrigger`` waits for ``prepare`` (the instance running, its SSM agent online);
``SsmSweepTrigger`` for a sweep's SSM command, as follows.

``SsmSweepTrigger`` holds only what the wait needs: the AWS connection's id and the region, the
instance and command ids, where the progress object is in S3, the deadline and the progress
log's offset. It imports no target module, only the ec2 state machine (``targets.ec2.states``,
standard library only: the statuses every wait of the target reads): the task described the
wait (``Ec2Target.sweep_wait``).

Its calls are read-only and asynchronous: botocore signs each request (SigV4, the connection's
credentials) and aiohttp sends it, every call bounded by ``call_timeout_s``, so an AWS endpoint
that stalls costs the loop a pending coroutine, never a thread. (The amazon provider's async hooks
need aiobotocore, and no aiobotocore release works with the botocore this project pins.) Each
poll reads the invocation (``GetCommandInvocation``), the progress object from the offset
(``GetObject`` with a ``Range``) and, while the command runs, the instance's state
(``DescribeInstances``): a spot interruption or the time-to-live ends the machine, not the
command. The offset is kept in S3 beside the progress object (``<key>.offset``) before the new
lines are logged, so a trigger rebuilt by a restarted triggerer logs no line twice.

Events (what ``Ec2Target.finish_sweep`` takes): ``{"invocation": …, "progress_seen": …}`` once the
command ended; ``{"error": …, "cancel": true}`` when the instance is gone or the deadline passed
(the resumed task cancels the command, raises, and ``terminate`` tears the instance down); an
``{"error": …}`` for any other failure of the wait itself. A failed or slow call is tried again
on the next poll until the deadline.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import urllib.parse
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from gpucompare.airflow.call_timeout import call_timeout
from gpucompare.targets.ec2 import states

MAX_READ_BYTES = 256 * 1024


class AwsCallError(OSError):
    """An AWS call answered with an error status (its code and message)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"HTTP {status} {code}: {message[:300]}")
        self.status, self.code = status, code


class SignedAws:
    """Signed AWS calls over one aiohttp session (botocore signs, aiohttp sends)."""

    def __init__(self, credentials: Any, region: str, endpoints: dict[str, str], timeout_s: float) -> None:
        import aiohttp

        self.credentials, self.region = credentials, region
        self.endpoints, self.timeout_s = endpoints, timeout_s
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s))

    def endpoint(self, service: str) -> str:
        return self.endpoints.get(service) or f"https://{service}.{self.region}.amazonaws.com"

    def endpoint_is_custom(self, service: str) -> bool:
        """True when the service's calls go outside AWS's own endpoints (a test endpoint)."""
        host = urllib.parse.urlparse(self.endpoint(service)).hostname or ""
        return not (host.endswith(".amazonaws.com") or host.endswith(".amazonaws.com.cn"))

    async def call(self, service: str, method: str, url: str, *, body: bytes = b"",
                   headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        from botocore.auth import S3SigV4Auth, SigV4Auth
        from botocore.awsrequest import AWSRequest

        request = AWSRequest(method=method, url=url, data=body, headers=dict(headers or {}))
        signer = S3SigV4Auth if service == "s3" else SigV4Auth
        signer(self.credentials, service, self.region).add_auth(request)
        async with call_timeout(self.timeout_s), self.session.request(
                method, url, data=body or None, headers=dict(request.headers)) as answer:
            return answer.status, await answer.read()

    async def ssm(self, action: str, payload: dict[str, Any]) -> dict[str, Any]:
        headers = {"X-Amz-Target": f"AmazonSSM.{action}", "Content-Type": "application/x-amz-json-1.1"}
        status, data = await self.call("ssm", "POST", self.endpoint("ssm") + "/",
                                       body=json.dumps(payload).encode(), headers=headers)
        if status != 200:
            try:
                answer = json.loads(data or b"{}")
            except ValueError:  # not JSON (a proxy's page, a test endpoint's "not implemented")
                answer = {"message": data.decode(errors="replace")}
            code = str(answer.get("__type", "")).split("#")[-1]
            raise AwsCallError(status, code, str(answer.get("message", "")))
        return json.loads(data or b"{}")

    async def instance_state(self, instance_id: str) -> str | None:
        body = urllib.parse.urlencode({"Action": "DescribeInstances", "Version": "2016-11-15",
                                       "InstanceId.1": instance_id}).encode()
        status, data = await self.call("ec2", "POST", self.endpoint("ec2") + "/", body=body,
                                       headers={"Content-Type": "application/x-www-form-urlencoded"})
        text = data.decode(errors="replace")
        if status != 200:
            code = re.search(r"<Code>([^<]+)</Code>", text)
            if code and code.group(1) == "InvalidInstanceID.NotFound":
                return None  # right after RunInstances: not visible yet
            raise AwsCallError(status, code.group(1) if code else "", text)
        found = re.search(r"<instanceState>.*?<name>([a-z-]+)</name>", text, re.S)
        return found.group(1) if found else None

    def object_url(self, bucket: str, key: str) -> str:
        return f"{self.endpoint('s3')}/{bucket}/{urllib.parse.quote(key)}"

    async def get_object(self, bucket: str, key: str, offset: int = 0) -> bytes | None:
        """The object's bytes from ``offset`` (at most ``MAX_READ_BYTES``); None if it is missing."""
        status, data = await self.call("s3", "GET", self.object_url(bucket, key),
                                       headers={"Range": f"bytes={offset}-{offset + MAX_READ_BYTES - 1}"})
        if status in (404, 416):  # not uploaded yet, or nothing past the offset
            return None if status == 404 else b""
        if status not in (200, 206):
            raise AwsCallError(status, "", data.decode(errors="replace"))
        return data

    async def put_object(self, bucket: str, key: str, body: bytes) -> None:
        status, data = await self.call("s3", "PUT", self.object_url(bucket, key), body=body)
        if status != 200:
            raise AwsCallError(status, "", data.decode(errors="replace"))

    async def close(self) -> None:
        await self.session.close()


async def signed_aws(aws_conn_id: str, region: str, timeout_s: float) -> SignedAws:
    """Signed calls with the connection's identity: its key (and session token) as they are, or,
    for a role, profile or the execution role, the credentials the amazon provider resolves
    (once, in a thread: the only blocking step, bounded by botocore's own timeouts)."""
    from airflow.providers.common.compat.connection import get_async_connection
    from botocore.credentials import ReadOnlyCredentials

    conn = await get_async_connection(aws_conn_id)
    extra = conn.extra_dejson
    services = extra.get("service_config") or {}
    endpoints = {name: (services.get(name) or {}).get("endpoint_url") or extra.get("endpoint_url")
                 for name in ("ssm", "ec2", "s3")}
    if conn.login and conn.password and not extra.get("role_arn"):
        credentials = ReadOnlyCredentials(conn.login, conn.password, extra.get("aws_session_token"))
    else:
        credentials = await asyncio.to_thread(_resolved_credentials, aws_conn_id)
    return SignedAws(credentials, region, {k: v.rstrip("/") for k, v in endpoints.items() if v}, timeout_s)


def _resolved_credentials(aws_conn_id: str) -> Any:
    from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

    return AwsBaseHook(aws_conn_id=aws_conn_id, client_type="ssm").get_session().get_credentials() \
        .get_frozen_credentials()


class SignedPollTrigger(BaseTrigger):
    """The loop both triggers share: the connection's signed calls, a ``_poll`` every
    ``poll_interval_s`` until it returns an event or ``deadline`` passes (``_expired``); a failed or
    slow call (each bounded by ``call_timeout_s``) is tried again on the next poll, and a failure
    anywhere else becomes an error event (``_failed``)."""

    aws_conn_id: str
    region: str
    deadline: float
    poll_interval_s: float
    call_timeout_s: float

    async def run(self) -> AsyncIterator[TriggerEvent]:
        aws = None
        try:
            async with call_timeout(self.call_timeout_s):
                aws = await signed_aws(self.aws_conn_id, self.region, self.call_timeout_s)
            event = await self._wait(aws)
        except Exception as exc:  # a failure anywhere is an event: the task raises the target's error
            event = self._failed(exc)
        finally:
            if aws is not None:
                await aws.close()
        yield TriggerEvent(event)

    async def _poll(self, aws: SignedAws) -> dict[str, Any] | None:
        raise NotImplementedError

    def _expired(self, last_error: str) -> dict[str, Any]:
        raise NotImplementedError

    def _failed(self, exc: BaseException) -> dict[str, Any]:
        raise NotImplementedError

    async def _wait(self, aws: SignedAws) -> dict[str, Any]:
        import aiohttp

        last_error = ""
        while True:
            if self.deadline and time.time() >= self.deadline:
                return self._expired(last_error)
            try:
                event = await self._poll(aws)
            except (OSError, TimeoutError, aiohttp.ClientError) as exc:
                last_error = f"{type(exc).__name__}: {exc}"
                self.log.warning("%s: %s (retrying until the deadline)", type(self).__name__, last_error)
                event = None
            if event is not None:
                return event
            pause = self.poll_interval_s
            if self.deadline:
                pause = max(0.0, min(pause, self.deadline - time.time() + 0.01))
            await asyncio.sleep(pause)


class SsmSweepTrigger(SignedPollTrigger):
    """Waits for one sweep's SSM command (see the module docstring).

    :param aws_conn_id: the Airflow AWS connection; :param region: the instance's region
    :param instance_id: the instance; :param command_id: the sweep's command
    :param bucket: :param progress_key: where the instance uploads the progress log ("": none,
        the deploy's command)
    :param deadline: wall clock past which the wait ends with a ``cancel`` error event (0: none)
    :param limit_s: the command's own time limit (for the message)
    :param poll_interval_s: seconds between two polls; :param call_timeout_s: seconds per call
    :param log_offset: bytes of the progress log already logged
    """

    def __init__(self, *, aws_conn_id: str, region: str, instance_id: str, command_id: str, bucket: str,
                 progress_key: str, deadline: float, limit_s: float = 0.0,
                 poll_interval_s: float = 15.0, call_timeout_s: float = 30.0, log_offset: int = 0) -> None:
        super().__init__()
        self.aws_conn_id, self.region = aws_conn_id, region
        self.instance_id, self.command_id = instance_id, command_id
        self.bucket, self.progress_key = bucket, progress_key
        self.deadline, self.limit_s = float(deadline), float(limit_s)
        self.poll_interval_s, self.call_timeout_s = float(poll_interval_s), float(call_timeout_s)
        self.log_offset = int(log_offset)
        self.progress_seen = False

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"aws_conn_id": self.aws_conn_id, "region": self.region, "instance_id": self.instance_id,
                 "command_id": self.command_id, "bucket": self.bucket, "progress_key": self.progress_key,
                 "deadline": self.deadline, "limit_s": self.limit_s,
                 "poll_interval_s": self.poll_interval_s,
                 "call_timeout_s": self.call_timeout_s, "log_offset": self.log_offset})

    def _failed(self, exc: BaseException) -> dict[str, Any]:
        return {"error": f"SSM command {self.command_id}: the wait in the triggerer failed: "
                         f"{type(exc).__name__}: {exc}", "cancel": True}

    def _expired(self, last_error: str) -> dict[str, Any]:
        why = f" (last error: {last_error})" if last_error else ""
        return {"error": f"SSM command {self.command_id} on {self.instance_id} still not finished "
                         f"after {self.limit_s:.0f} s{why}: cancelled", "cancel": True}

    async def _follow(self, aws: SignedAws) -> None:
        """New complete progress lines into the log, their offset kept in S3 first (a command
        without a progress object, the ec2 deploy's, has ``progress_key`` "")."""
        if not self.progress_key:
            return
        kept = await aws.get_object(self.bucket, f"{self.progress_key}.offset")
        if kept and kept.strip().isdigit():
            self.log_offset = max(self.log_offset, int(kept))
        data = await aws.get_object(self.bucket, self.progress_key, self.log_offset)
        if data is None:
            return
        self.progress_seen = True
        end = data.rfind(b"\n") + 1
        if end:
            kept = str(self.log_offset + end).encode()
            await aws.put_object(self.bucket, f"{self.progress_key}.offset", kept)
            self.log_offset += end
            for line in data[:end].decode("utf-8", "replace").splitlines():
                self.log.info("%s", line)

    async def _poll(self, aws: SignedAws) -> dict[str, Any] | None:
        try:
            invocation = await aws.ssm("GetCommandInvocation", {"CommandId": self.command_id,
                                                                "InstanceId": self.instance_id})
        except AwsCallError as exc:
            if exc.code != "InvocationDoesNotExist":  # right after SendCommand: not registered yet
                raise
            invocation = {"Status": "Pending"}
        await self._follow(aws)
        status = invocation.get("Status")
        if states.is_final(status):
            return {"invocation": invocation, "progress_seen": self.progress_seen}
        state = await aws.instance_state(self.instance_id)
        if not states.is_alive(state):
            return {"error": states.lost_message(self.instance_id, state, self.command_id, status),
                    "cancel": True}
        return None


class SsmReadyTrigger(SignedPollTrigger):
    """Waits until an ec2 run's instance is ``running`` and its SSM agent reports Online (the
    deferred ``prepare``; ``Ec2Target.prepare_wait`` describes it). Events: ``{"ready": id}``, or
    ``{"error": …}`` when the instance died first (``states.instance_phase``) or ``deadline``
    passed; the resumed task (``finish_prepare``) then terminates the instance.

    An instance id not visible yet counts as pending. An AWS-compatible test endpoint (outside
    ``*.amazonaws.com``) that does not implement DescribeInstanceInformation (moto's server)
    counts a running instance as ready, with a warning; against AWS any error is retried until
    the deadline.

    :param aws_conn_id: :param region: :param instance_id: as ``SsmSweepTrigger``
    :param deadline: wall clock (epoch seconds) by which it must be ready
    :param poll_interval_s: seconds between two polls; :param call_timeout_s: seconds per call
    """

    def __init__(self, *, aws_conn_id: str, region: str, instance_id: str, deadline: float,
                 poll_interval_s: float = 15.0, call_timeout_s: float = 30.0) -> None:
        super().__init__()
        self.aws_conn_id, self.region, self.instance_id = aws_conn_id, region, instance_id
        self.deadline = float(deadline)
        self.poll_interval_s, self.call_timeout_s = float(poll_interval_s), float(call_timeout_s)
        self.running = False
        self.pings: list[Any] = []

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"aws_conn_id": self.aws_conn_id, "region": self.region, "instance_id": self.instance_id,
                 "deadline": self.deadline, "poll_interval_s": self.poll_interval_s,
                 "call_timeout_s": self.call_timeout_s})

    def _failed(self, exc: BaseException) -> dict[str, Any]:
        return {"error": f"instance {self.instance_id}: the wait in the triggerer failed: "
                         f"{type(exc).__name__}: {exc}"}

    def _expired(self, last_error: str) -> dict[str, Any]:
        why = f" (last error: {last_error})" if last_error else ""
        if not self.running:
            return {"error": f"instance {self.instance_id} not running in time{why}"}
        return {"error": f"SSM agent on {self.instance_id} not online in time (status "
                         f"{self.pings or 'not registered'}){why}: check the instance profile has "
                         "AmazonSSMManagedInstanceCore and the subnet reaches the SSM endpoints"}

    async def _poll(self, aws: SignedAws) -> dict[str, Any] | None:
        if not self.running:
            state = await aws.instance_state(self.instance_id)
            phase = states.instance_phase(state)
            if phase == states.FAILED:
                return {"error": f"instance {self.instance_id} is {state} before it was ready (spot "
                                 "capacity reclaimed, or the launch failed after RunInstances)"}
            self.running = phase == states.FINAL
        if self.running and await self._agent_online(aws):
            return {"ready": self.instance_id}
        return None

    async def _agent_online(self, aws: SignedAws) -> bool:
        try:
            info = await aws.ssm("DescribeInstanceInformation",
                                 {"Filters": [{"Key": "InstanceIds", "Values": [self.instance_id]}]})
        except AwsCallError as exc:
            unimplemented = exc.status in (500, 501) or exc.code in (
                "NotImplemented", "InvalidAction", "UnknownOperationException")
            if unimplemented and aws.endpoint_is_custom("ssm"):
                self.log.warning("The endpoint does not implement DescribeInstanceInformation (%s); "
                                 "treating running instance %s as ready", exc, self.instance_id)
                return True
            raise
        self.pings = [item.get("PingStatus") for item in info.get("InstanceInformationList", [])]
        return "Online" in self.pings
