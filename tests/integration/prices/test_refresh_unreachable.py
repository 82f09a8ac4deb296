"""``gpucompare refresh-prices`` against an AWS endpoint nothing answers: exit 2 with the endpoint
named and what to check, like the lake's own S3 errors (before: the generic "unexpected
EndpointConnectionError … a bug in gpucompare", exit 1).

Real parts: the command as a process, botocore's own client and retries, a TCP port on 127.0.0.1
that was just closed (stands in for a mistyped AWS_ENDPOINT_URL or a network that drops AWS).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_an_unreachable_endpoint_is_named_with_exit_2_and_nothing_is_written(tmp_path: Path) -> None:
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GPUCOMPARE_"))},
           "AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_REGION": "us-east-1", "GPUCOMPARE_DEPLOYMENT": "refresh-test",
           "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "plugins")])}
    lake = tmp_path / "lake"
    done = subprocess.run([sys.executable, "-m", "gpucompare", "refresh-prices", "--provider", "aws",
                           "--region", "us-east-1", "--lake", str(lake)],
                          env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 2, done.stderr
    error = done.stderr.split("error: ", 1)[1]
    assert error.startswith(f"the AWS endpoint {endpoint}/ cannot be reached (EndpointConnectionError"), error
    assert "check AWS_ENDPOINT_URL" in error and "the network" in error and "region" in error, error
    assert "unexpected" not in error and "Traceback" not in done.stderr
    assert not (lake / "prices").exists()
