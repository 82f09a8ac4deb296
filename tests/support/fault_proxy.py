"""An HTTP proxy in front of moto's server that injects the faults a real AWS endpoint shows.

Clients (boto3 through the amazon provider's hooks) are pointed at the proxy with the Airflow
connection's ``endpoint_url``; the proxy forwards every request to moto's server on 127.0.0.1
and returns its answer, unless a rule says otherwise for that operation:

* ``throttle``: answered at once with the service's throttling error (nothing reaches moto);
* ``error500``: answered at once with HTTP 500 ``InternalError`` (nothing reaches moto);
* ``lose``: forwarded (moto acts), then the connection is closed without an answer, the
  way a response lost on the network looks to the client;
* ``timeout``: forwarded (moto acts), then held past the client's read timeout and closed;
* ``hold``: held for ``seconds`` before being forwarded (a slow call, e.g. to SIGKILL the
  client while it waits);
* ``slow``: forwarded (moto acts), then answered only after ``seconds`` (the client can be
  killed after the server acted and before it heard back);
* ``empty``: DescribeInstances answered at once with no reservations (nothing reaches moto), as
  an eventually consistent read that does not see a just-launched instance yet;
* ``refuse``: answered with HTTP 403 ``UnauthorizedOperation`` (not retried by botocore), or
  with the rule's ``code`` and ``status`` (e.g. ``InvalidAMIID.NotFound`` with 400, as AWS
  answers a bad request; ``OptInRequired`` for a region not opted in).

A rule applies to the ``times`` requests of its operation after the first ``after`` ones; a rule
with a ``region`` only to requests signed for that region (the SigV4 credential scope), the way
an SCP or a region not opted in refuses one region of an account; a rule with ``where`` only to
requests carrying those query parameters (``{"Placement.AvailabilityZone": "us-east-1a"}``: a
zone without capacity).
Operations are named as in the API: ``RunInstances`` (query protocol: the ``Action``
parameter), ``SendCommand`` (JSON protocol: the ``X-Amz-Target`` header), ``S3:PUT``/``S3:GET``
(REST: the method).

With an ``agent`` (``tests/support/ssm_agent.py``) the SSM commands moto accepts also run on
this machine, as the agent on the instance would run them.

What it stands in for beyond faults (moto lacks both): the SSM agent, whose registration
``DescribeInstanceInformation`` reports (moto answers HTTP 500 "not implemented"; the proxy
answers ``Online`` for the instance asked about, as an agent that came up would); and
RunInstances' idempotency. Moto stores a ``ClientToken``
but launches again on every call; AWS answers a repeated token with the first call's
instance. The proxy does what AWS does: the answer to a token it has seen is replayed
without reaching moto when the request is the same, and a request with the same token but other
parameters is refused with ``IdempotentParameterMismatch``. A call without a token is always
forwarded (and launches).
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.support.ssm_agent import SsmAgent

Answer = tuple[int, list[tuple[str, str]], bytes]

FAULT_KINDS = ("throttle", "error500", "lose", "timeout", "hold", "slow", "refuse", "empty")


@dataclass
class Rule:
    operation: str
    kind: str
    times: int = 1
    after: int = 0
    seconds: float = 0.0
    seen: int = 0
    region: str | None = None
    code: str = "UnauthorizedOperation"
    status: int = 403
    where: dict[str, str] | None = None  # query parameters the request must carry (e.g. a zone)

    def applies(self) -> bool:
        """Count one request of the operation; True when this one gets the fault."""
        self.seen += 1
        return self.after < self.seen <= self.after + self.times


class FaultProxy:
    """The proxy server (see the module docstring); ``url`` is what clients are given."""

    def __init__(self, upstream: str, *, read_timeout_s: float, agent: SsmAgent | None = None) -> None:
        self.agent = agent
        parsed = urllib.parse.urlparse(upstream)
        self.upstream_host, self.upstream_port = parsed.hostname or "127.0.0.1", parsed.port or 80
        self.read_timeout_s = read_timeout_s
        self.rules: list[Rule] = []
        self.lock = threading.Lock()
        self.log: list[tuple[str, str]] = []  # (operation, what happened)
        self.tokens: dict[str, Answer] = {}
        self.token_requests: dict[str, bytes] = {}  # the first request of each token, as sent
        # one lock per token: a retry that arrives while the first call is still at moto (a
        # client read timeout on a loaded machine) waits for it and gets its answer, as on AWS
        self.token_locks: dict[str, threading.Lock] = {}
        self.launches = 0  # RunInstances calls that reached moto (each launches an instance)
        self.requests_seen: dict[str, int] = {}
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_: Any) -> None:
                pass

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    chunks = []
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return b"".join(chunks)
                        chunks.append(self.rfile.read(size))
                        self.rfile.readline()
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _handle(self) -> None:
                body = self._body()
                proxy.serve(self, body)

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _handle  # noqa: N815

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def add(self, operation: str, kind: str, *, times: int = 1, after: int = 0, seconds: float = 0.0,
            region: str | None = None, code: str = "UnauthorizedOperation", status: int = 403,
            where: dict[str, str] | None = None) -> None:
        assert kind in FAULT_KINDS, kind
        with self.lock:
            self.rules.append(Rule(operation, kind, times, after, seconds, region=region, code=code,
                                   status=status, where=where))

    def clear(self) -> None:
        with self.lock:
            self.rules.clear()

    def count(self, operation: str) -> int:
        with self.lock:
            return self.requests_seen.get(operation, 0)

    # --- serving ---

    @staticmethod
    def operation_of(handler: BaseHTTPRequestHandler, body: bytes) -> tuple[str, dict[str, str]]:
        target = handler.headers.get("X-Amz-Target")
        if target:
            return target.split(".")[-1], {}
        if handler.command == "POST" and b"Action=" in body:
            params = dict(urllib.parse.parse_qsl(body.decode("utf-8", "replace")))
            return params.get("Action", "?"), params
        return f"S3:{handler.command}", {}

    @staticmethod
    def region_of(handler: BaseHTTPRequestHandler) -> str | None:
        """The region a request is signed for: ``Credential=<key>/<date>/<region>/<service>/…``."""
        authorization = handler.headers.get("Authorization") or ""
        scope = authorization.partition("Credential=")[2].split(",")[0].split("/")
        return scope[2] if len(scope) > 2 else None

    def _fault(self, operation: str, region: str | None = None,
               params: dict[str, str] | None = None) -> Rule | None:
        with self.lock:
            self.requests_seen[operation] = self.requests_seen.get(operation, 0) + 1
            for rule in self.rules:
                matches = all((params or {}).get(k) == v for k, v in (rule.where or {}).items())
                if (rule.operation == operation and rule.region in (None, region) and matches
                        and rule.applies()):
                    return rule
        return None

    def _forward(self, handler: BaseHTTPRequestHandler, body: bytes) -> Answer:
        connection = http.client.HTTPConnection(self.upstream_host, self.upstream_port, timeout=120)
        headers = {k: v for k, v in handler.headers.items()
                   if k.lower() not in ("transfer-encoding", "connection")}
        headers["Content-Length"] = str(len(body))
        connection.request(handler.command, handler.path, body=body, headers=headers)
        response = connection.getresponse()
        data = response.read()
        # a HEAD answer has no body but says the object's size: keep its Content-Length
        dropped = ("transfer-encoding", "connection")
        dropped += () if handler.command == "HEAD" else ("content-length",)
        kept = [(k, v) for k, v in response.getheaders() if k.lower() not in dropped]
        connection.close()
        return response.status, kept, data

    @staticmethod
    def _answer(handler: BaseHTTPRequestHandler, status: int, headers: list[tuple[str, str]],
                data: bytes) -> None:
        handler.send_response(status)
        for key, value in headers:
            handler.send_header(key, value)
        if not any(key.lower() == "content-length" for key, _ in headers):
            handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(data)

    @staticmethod
    def _error(handler: BaseHTTPRequestHandler, operation: str, status: int, code: str) -> None:
        if handler.headers.get("X-Amz-Target"):
            data = json.dumps({"__type": code, "message": f"injected {code}"}).encode()
            headers = [("Content-Type", "application/x-amz-json-1.1")]
        else:
            data = (f"<?xml version=\"1.0\"?><Response><Errors><Error><Code>{code}</Code><Message>injected "
                    f"{code}</Message></Error></Errors><RequestID>injected</RequestID></Response>").encode()
            if operation.startswith("S3:"):
                data = f"<Error><Code>{code}</Code><Message>injected {code}</Message></Error>".encode()
            headers = [("Content-Type", "text/xml")]
        FaultProxy._answer(handler, status, headers, data)

    @staticmethod
    def _drop(handler: BaseHTTPRequestHandler) -> None:
        handler.close_connection = True
        try:
            handler.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _forward_once(self, handler: BaseHTTPRequestHandler, body: bytes, operation: str,
                      token: str | None) -> Answer:
        """Forward the request, or replay the answer of a RunInstances token already seen."""
        with self.lock:
            replay = self.tokens.get(token) if token else None
            first = self.token_requests.get(token) if token else None
        if replay is not None:
            if first != body:  # AWS: the same token with other parameters is refused
                data = (b'<?xml version="1.0"?><Response><Errors><Error>'
                        b"<Code>IdempotentParameterMismatch</Code>"
                        b"<Message>injected: the token was used with other parameters</Message>"
                        b"</Error></Errors>"
                        b"<RequestID>injected</RequestID></Response>")
                return 400, [("Content-Type", "text/xml")], data
            return replay
        answer = self._forward(handler, body)
        if operation == "RunInstances" and answer[0] == 200:
            with self.lock:
                self.launches += 1
                if token:
                    self.tokens[token] = answer
                    self.token_requests[token] = body
        return answer

    def _exchange(self, handler: BaseHTTPRequestHandler, body: bytes, operation: str,
                  token: str | None) -> Answer:
        """Moto's answer, or the agent's (a command it runs); the agent sees what moto accepted."""
        if self.agent is None or operation not in self.agent.OPERATIONS:
            return self._forward_once(handler, body, operation, token)
        local = self.agent.local_answer(operation, body)
        if local is not None:
            return 200, [("Content-Type", "application/x-amz-json-1.1")], local
        answer = self._forward_once(handler, body, operation, token)
        if answer[0] == 200:
            self.agent.observe(operation, body, answer[2])
        return answer

    def serve(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        operation, params = self.operation_of(handler, body)
        rule = self._fault(operation, self.region_of(handler), params)
        kind = rule.kind if rule else "pass"
        with self.lock:
            self.log.append((operation, kind))
        if kind == "throttle":
            code = "SlowDown" if operation.startswith("S3:") else (
                "ThrottlingException" if handler.headers.get("X-Amz-Target") else "RequestLimitExceeded")
            self._error(handler, operation, 503 if operation.startswith("S3:") else 400, code)
            return
        if kind == "error500":
            self._error(handler, operation, 500, "InternalError")
            return
        if kind == "refuse":
            self._error(handler, operation, rule.status, rule.code)
            return
        if kind == "empty":
            assert operation == "DescribeInstances", operation
            data = (b'<?xml version="1.0" encoding="UTF-8"?><DescribeInstancesResponse '
                    b'xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>injected</requestId>'
                    b'<reservationSet/></DescribeInstancesResponse>')
            self._answer(handler, 200, [("Content-Type", "text/xml")], data)
            return
        if kind == "hold":
            time.sleep(rule.seconds)
        if operation == "DescribeInstanceInformation":
            asked = json.loads(body or b"{}").get("Filters", [{}])[0].get("Values", [])
            data = json.dumps({"InstanceInformationList": [
                {"InstanceId": instance_id, "PingStatus": "Online"} for instance_id in asked]}).encode()
            self._answer(handler, 200, [("Content-Type", "application/x-amz-json-1.1")], data)
            return
        token = params.get("ClientToken") if operation == "RunInstances" else None
        with self.lock:
            token_lock = self.token_locks.setdefault(token, threading.Lock()) if token else threading.Lock()
        with token_lock:
            status, headers, data = self._exchange(handler, body, operation, token)
        if kind == "lose":
            self._drop(handler)
            return
        if kind == "timeout":
            time.sleep(self.read_timeout_s + 1.0)
            self._drop(handler)
            return
        if kind == "slow":
            time.sleep(rule.seconds)
        self._answer(handler, status, headers, data)
