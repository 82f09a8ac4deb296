"""An AWS API endpoint on 127.0.0.1 for tests: moto's server, shared by the whole session.

No cloud is reachable from CI, so tests talk to moto's server (``python -m moto.server``
in its own process: a real HTTP server speaking the AWS wire protocols) through the
ordinary clients: boto3, the amazon provider's hooks, ``pyarrow.fs.S3FileSystem`` and
delta-rs. It stands in for AWS itself; everything
on our side of the HTTP connection is the production code path.

Fixtures:

* ``aws_endpoint`` (session): starts the server on a free loopback port, points the process
  at it and returns its URL (``http://127.0.0.1:PORT``). While the session runs the
  environment holds fake credentials (``AWS_ACCESS_KEY_ID`` …), ``AWS_DEFAULT_REGION`` =
  ``us-east-1`` and ``AWS_ENDPOINT_URL`` = the server, so boto3, botocore-based hooks and
  pyarrow (which all read ``AWS_ENDPOINT_URL``) reach moto without any extra argument, and
  no ``~/.aws`` file of the machine is read.
* ``aws_client`` (function): a factory, ``aws_client("ec2", region_name=...)`` → a boto3
  client bound to the endpoint.
* ``s3_bucket`` (function): the name of a fresh, empty S3 bucket (unique per test, so tests
  sharing the session server never see each other's objects).
* ``moto_reset`` (function): call it to wipe every service's state on the server (for tests
  that count EC2 instances and the like); it resets all accounts, so use it sparingly.
* ``aws_account`` (function): an account as a user has it on the server (the Airflow
  connection, an instance profile, the AMI parameter, a bucket: ``account_on``);
  ``moto_account``: the same as the ec2 defaults of a fleet file (``fleet_defaults``).
* ``working_instances`` (function): the same, through the fault proxy with a stand-in SSM agent,
  so that the instances moto launches run their commands on this machine.

Moto has no AWS Price List API (``pricing``); tests of price parsing use recorded responses
in ``tests/support/data/aws_pricing/`` instead.
"""

from __future__ import annotations

import os
import socket
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

FAKE_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",  # noqa: S105 - moto's documented fake credentials
    "AWS_SESSION_TOKEN": "testing",  # noqa: S105
    "AWS_SECURITY_TOKEN": "testing",  # noqa: S105
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    # never read the developer's real profiles
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    "AWS_EC2_METADATA_DISABLED": "true",
}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class _ServerProcess:
    """moto's server in a process of its own (``python -m moto.server``).

    Not a thread of the test process: delta-rs (the lake) holds the interpreter lock during some
    of its blocking S3 calls, so a server thread in the same interpreter could never answer them
    (the call hangs until its 180 s timeout). A process also is how a real endpoint looks."""

    def __init__(self, port: int) -> None:
        import subprocess
        import sys

        self.port = port
        command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
        self.process = subprocess.Popen(command,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def wait_ready(self, timeout_s: float = 30.0) -> bool:
        import time

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/moto-api/", timeout=2):  # noqa: S310
                    return True
            except OSError:
                time.sleep(0.1)
        return False

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except Exception:  # noqa: BLE001 - last resort below
            self.process.kill()
            self.process.wait(timeout=10)


def _start_server() -> tuple[Any, str]:
    last_error: Exception | None = None
    # another session may grab the port between probe and bind: try a few
    for _ in range(5):
        port = _free_port()
        server = _ServerProcess(port)
        if server.wait_ready():
            return server, f"http://127.0.0.1:{port}"
        server.stop()
        last_error = OSError(f"moto's server did not start on port {port}")
    raise RuntimeError(f"could not start moto's server on a free port: {last_error}")


@pytest.fixture(scope="session")
def aws_endpoint() -> Iterator[str]:
    """URL of moto's server on 127.0.0.1; the environment points every AWS client at it."""
    server, url = _start_server()
    patch = pytest.MonkeyPatch()
    for name, value in FAKE_AWS_ENV.items():
        patch.setenv(name, value)
    patch.setenv("AWS_ENDPOINT_URL", url)
    try:
        yield url
    finally:
        patch.undo()
        server.stop()


@pytest.fixture
def aws_client(aws_endpoint: str) -> Callable[..., Any]:
    """Factory of boto3 clients bound to the moto endpoint: ``aws_client("s3")``."""
    import boto3

    def make(service: str, region_name: str = "us-east-1") -> Any:
        return boto3.client(service, region_name=region_name, endpoint_url=aws_endpoint)

    return make


@pytest.fixture
def s3_bucket(aws_client: Callable[..., Any]) -> str:
    """Name of a new, empty bucket in us-east-1 on the moto server."""
    name = f"gpucompare-test-{uuid.uuid4().hex[:12]}"
    aws_client("s3").create_bucket(Bucket=name)
    return name


@pytest.fixture(params=["local", "s3"])
def lake_uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A new, empty lake, once of each kind: a local folder, and a prefix in a fresh bucket on
    moto's server (standing in for S3)."""
    if request.param == "local":
        return str(tmp_path / "lake")
    return f"s3://{request.getfixturevalue('s3_bucket')}/lake"


@pytest.fixture
def moto_reset(aws_endpoint: str) -> Callable[[], None]:
    """A function that wipes all state held by the moto server (every service, every account)."""

    def reset() -> None:
        request = urllib.request.Request(f"{aws_endpoint}/moto-api/reset", method="POST")
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - loopback only
            response.read()

    return reset


def account_on(endpoint_url: str, aws_client: Callable[..., Any], monkeypatch: pytest.MonkeyPatch,
               bucket: str) -> dict[str, Any]:
    """What an AWS account a user runs ec2 targets from has, set up on the endpoint: the Airflow
    connection aimed at ``endpoint_url``, an instance profile, the AMI parameter, the bucket."""
    from tests.support.ec2_support import (
        create_instance_profile,
        point_airflow_connection,
        publish_ami_parameter,
    )

    return {"endpoint": endpoint_url, "conn_id": point_airflow_connection(monkeypatch, endpoint_url),
            "profile": create_instance_profile(aws_client), "image_id": publish_ami_parameter(aws_client),
            "bucket": bucket}


def fleet_defaults(account: dict[str, Any]) -> dict[str, Any]:
    """The ec2 defaults of a fleet file for ``account`` (``account_on``), with short waits."""
    from tests.support.ec2_support import AMI_PARAMETER

    return {"aws_conn_id": account["conn_id"], "ami": f"resolve:ssm:{AMI_PARAMETER}",
            "instance_profile": account["profile"], "results_bucket": account["bucket"],
            "poll_interval_s": 0.2, "agent_timeout_s": 5, "launch_timeout_s": 30}


@pytest.fixture
def aws_account(aws_endpoint: str, aws_client: Callable[..., Any], monkeypatch: pytest.MonkeyPatch,
                s3_bucket: str) -> dict[str, Any]:
    """An account on moto's server (``account_on``): ``endpoint``, ``conn_id``, ``profile``,
    ``image_id``, ``bucket``."""
    return account_on(aws_endpoint, aws_client, monkeypatch, s3_bucket)


@pytest.fixture
def moto_account(aws_account: dict[str, Any]) -> dict[str, Any]:
    """The ec2 defaults of a fleet file for an AWS account on moto's server (the stand-in for a
    real account: no cloud is reachable here): the Airflow connection, an instance profile, the
    AMI parameter, the results bucket, short waits."""
    return fleet_defaults(aws_account)


@pytest.fixture
def working_instances(aws_endpoint: str, aws_client: Any, monkeypatch: pytest.MonkeyPatch, s3_bucket: str,
                      tmp_path: Path) -> Iterator[dict[str, Any]]:
    """As ``moto_account``, but the instances moto launches run their SSM commands: the Airflow
    connection goes through the fault proxy with an ``SsmAgent`` (``tests/support/ssm_agent.py``:
    the agent on each instance, run on this machine). Yields ``defaults`` (the fleet's ec2
    defaults), ``agent`` and ``proxy``; every command still running is killed at the end."""
    from tests.support.fault_proxy import FaultProxy
    from tests.support.ssm_agent import SsmAgent

    agent = SsmAgent(tmp_path / "instances", aws_endpoint)
    proxy = FaultProxy(aws_endpoint, read_timeout_s=60, agent=agent)
    try:
        account = account_on(proxy.url, aws_client, monkeypatch, s3_bucket)
        yield {"defaults": fleet_defaults(account), "account": account, "agent": agent, "proxy": proxy}
    finally:
        proxy.close()
        agent.close()
