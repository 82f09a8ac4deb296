"""Assumed-role sessions that really expire, in front of moto's server.

Moto's STS hands out role sessions that last an hour (or ``DurationSeconds``, at least 900 s) and
its S3 accepts their keys for ever, so nothing a test can run in minutes would notice credentials
that are never refreshed. ``ExpiringSessionProxy`` is the fault proxy with AWS's rule added: every
``AssumeRole`` answer is rewritten to expire ``lifetime_s`` seconds after it was issued, and a
later request signed with that session's key is refused with HTTP 400 ``ExpiredToken``, as AWS
refuses it. ``scaled_refresh_windows`` shrinks botocore's refresh windows (15 minutes advisory,
10 minutes mandatory before expiry) in the same proportion, so the code under test refreshes as it
would against hour-long sessions, only faster.

What it stands in for: STS's session lifetime and S3's refusal of an expired session key.

The proxy runs in a process of its own (``ProxyProcess``; ``python -m tests.support.expiring_sessions``):
delta-rs holds the GIL while it waits for an answer, so a proxy thread in the process whose tasks
call delta-rs (``dag.test()`` runs them in the test's process) could never answer. The test reads
the proxy's counts from ``GET /__proxy_state`` (JSON).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.support.fault_proxy import FaultProxy

_EXPIRATION = re.compile(rb"<Expiration>[^<]*</Expiration>")
_ACCESS_KEY = re.compile(rb"<AccessKeyId>([^<]+)</AccessKeyId>")


class ExpiringSessionProxy(FaultProxy):
    """The fault proxy whose assumed-role sessions end after ``lifetime_s`` (module docstring)."""

    def __init__(self, upstream: str, *, lifetime_s: float, read_timeout_s: float = 60) -> None:
        super().__init__(upstream, read_timeout_s=read_timeout_s)
        self.lifetime_s = lifetime_s
        self.sessions: dict[str, float] = {}  # access key of each session -> when it expires
        self.expired_requests: list[str] = []  # operations refused because their session ended
        self.session_lock = threading.Lock()

    @property
    def issued(self) -> int:
        with self.session_lock:
            return len(self.sessions)

    @staticmethod
    def access_key_of(handler: BaseHTTPRequestHandler) -> str | None:
        """The key a request is signed with (SigV4 header or presigned query)."""
        signed = handler.headers.get("Authorization") or ""
        if "Credential=" not in signed:
            signed = handler.path.replace("%2F", "/")
            if "X-Amz-Credential=" not in signed:
                return None
            return signed.partition("X-Amz-Credential=")[2].split("/")[0]
        return signed.partition("Credential=")[2].split("/")[0]

    def _expired(self, handler: BaseHTTPRequestHandler) -> bool:
        key = self.access_key_of(handler)
        with self.session_lock:
            ends = self.sessions.get(key or "")
        return ends is not None and time.time() >= ends

    def state(self) -> dict[str, Any]:
        with self.session_lock:
            return {"issued": len(self.sessions), "expired_requests": list(self.expired_requests),
                    "requests_seen": dict(self.requests_seen)}

    def serve(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        if handler.path == "/__proxy_state":
            data = json.dumps(self.state()).encode()
            self._answer(handler, 200, [("Content-Type", "application/json")], data)
            return
        operation, _ = self.operation_of(handler, body)
        if self._expired(handler):
            with self.session_lock:
                self.expired_requests.append(operation)
            self._error(handler, operation, 400, "ExpiredToken")
            return
        if operation != "AssumeRole":
            super().serve(handler, body)
            return
        status, headers, data = self._forward(handler, body)
        if status == 200:
            ends = time.time() + self.lifetime_s
            stamp = datetime.fromtimestamp(ends, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            data = _EXPIRATION.sub(b"<Expiration>" + stamp.encode() + b"</Expiration>", data)
            found = _ACCESS_KEY.search(data)
            assert found, data[:300]
            with self.session_lock:
                self.sessions[found.group(1).decode()] = ends
        self._answer(handler, status, headers, data)


@contextmanager
def scaled_refresh_windows(advisory_s: float, mandatory_s: float) -> Iterator[None]:
    """botocore refreshes a session ``advisory_s`` before it ends (and must, ``mandatory_s``
    before): the same rule as its 15 and 10 minutes, on this test's clock."""
    from botocore.credentials import RefreshableCredentials

    saved = (RefreshableCredentials._advisory_refresh_timeout,
             RefreshableCredentials._mandatory_refresh_timeout)
    RefreshableCredentials._advisory_refresh_timeout = advisory_s
    RefreshableCredentials._mandatory_refresh_timeout = mandatory_s
    try:
        yield
    finally:
        (RefreshableCredentials._advisory_refresh_timeout,
         RefreshableCredentials._mandatory_refresh_timeout) = saved


class ProxyProcess:
    """An ``ExpiringSessionProxy`` in a process of its own (module docstring): ``url`` for the
    clients, ``state()`` for the test."""

    def __init__(self, upstream: str, *, lifetime_s: float) -> None:
        from tests.conftest import REPO_ROOT

        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.expiring_sessions", upstream, str(lifetime_s)],
            cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        self.url = self.process.stdout.readline().strip()
        assert self.url.startswith("http://"), f"the proxy did not start: {self.url!r}"

    def state(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.url}/__proxy_state", timeout=30) as answer:
            return json.loads(answer.read())

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description="An ExpiringSessionProxy in front of UPSTREAM.")
    parser.add_argument("upstream")
    parser.add_argument("lifetime_s", type=float)
    args = parser.parse_args()
    proxy = ExpiringSessionProxy(args.upstream, lifetime_s=args.lifetime_s)
    print(proxy.url, flush=True)
    proxy.thread.join()


if __name__ == "__main__":
    main()
