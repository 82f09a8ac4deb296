"""S3 failures of the lake commands exit 2 with a message that says what to do (issue 23).

Stands in for AWS S3: moto's server on 127.0.0.1 (the shared fixture, and one of our own with
moto's request authentication switched on for wrong credentials), and a closed loopback port for
an unreachable endpoint. Before, every case here exited 1 with "OSError: Generic S3 error" and
a traceback. The instance metadata endpoint is pointed at a closed loopback port, so a client
looking for credentials never leaves this machine.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.lake_support import REPO_ROOT, ingest_command, run_records, write_records
from tests.support.target_helpers import wait_for

RUN = "r1"


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run(command: list[str], **env: str | None) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "plugins")]),
                   "AWS_METADATA_ENDPOINT": f"http://127.0.0.1:{_closed_port()}",
                   "AWS_EC2_METADATA_SERVICE_ENDPOINT": f"http://127.0.0.1:{_closed_port()}"}
    for name, value in env.items():
        if value is None:
            environment.pop(name, None)
        else:
            environment[name] = value
    return subprocess.run(command, cwd=REPO_ROOT, env=environment, capture_output=True, text=True,
                          timeout=900, check=False)


def gpucompare(*args: str, **env: str | None) -> subprocess.CompletedProcess[str]:
    return run([sys.executable, "-m", "gpucompare", *args], **env)


@pytest.fixture
def results(tmp_path: Path) -> Path:
    return write_records(tmp_path / "r.jsonl", run_records(RUN, 2))


def test_a_missing_bucket_exits_2_for_every_lake_command(
    aws_endpoint: str, results: Path, tmp_path: Path
) -> None:
    uri = "s3://no-such-bucket-gpucompare/lake"
    for done in (
        run(ingest_command(uri, results, RUN)),
        gpucompare("lake-info", "--lake", uri),
        gpucompare("report", "--lake", uri, "--out", str(tmp_path / "out")),
        gpucompare("compact", "--lake", uri),
    ):
        assert done.returncode == 2, done.stderr
        assert "the bucket does not exist: create it" in done.stderr, done.stderr
        assert "NoSuchBucket" in done.stderr and "Traceback" not in done.stderr


def test_missing_credentials_exit_2_saying_how_to_give_them(aws_endpoint: str, s3_bucket: str) -> None:
    done = gpucompare("lake-info", "--lake", f"s3://{s3_bucket}/lake", AWS_ACCESS_KEY_ID=None,
                      AWS_SECRET_ACCESS_KEY=None, AWS_SESSION_TOKEN=None, AWS_SECURITY_TOKEN=None)
    assert done.returncode == 2, done.stderr
    assert "credentials are missing, expired or not allowed" in done.stderr, done.stderr


@pytest.fixture
def authenticating_s3() -> Iterator[str]:
    """moto's server with request authentication on: unknown access keys are refused (403
    InvalidAccessKeyId), as AWS refuses wrong or expired credentials."""
    port = _closed_port()
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "0"}
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def up() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/moto-api/", timeout=2):  # noqa: S310
                return True
        except OSError:
            return False

    try:
        wait_for(up, timeout_s=60, what="moto's server with authentication")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_wrong_credentials_exit_2(authenticating_s3: str, results: Path) -> None:
    env = {"AWS_ENDPOINT_URL": authenticating_s3, "AWS_ACCESS_KEY_ID": "AKIAWRONGWRONGWRONG1",
           "AWS_SECRET_ACCESS_KEY": "wrong", "AWS_SESSION_TOKEN": None, "AWS_SECURITY_TOKEN": None}
    done = run(ingest_command("s3://some-bucket/lake", results, RUN), **env)
    assert done.returncode == 2, done.stderr
    assert "credentials are missing, expired or not allowed" in done.stderr, done.stderr


def test_an_unreachable_endpoint_exits_2(aws_endpoint: str, results: Path) -> None:
    closed = f"http://127.0.0.1:{_closed_port()}"
    done = gpucompare("lake-info", "--lake", "s3://bucket/lake", AWS_ENDPOINT_URL=closed)
    assert done.returncode == 2, done.stderr
    assert "the storage endpoint cannot be reached: check AWS_ENDPOINT_URL" in done.stderr, done.stderr
    assert closed in done.stderr
