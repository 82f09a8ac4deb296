"""A stand-in for the SSM agent of every instance moto launches: it runs the commands.

Moto's server accepts ``SendCommand`` and reports ``Success`` at once, running nothing, so an
``ec2`` target on moto can launch, deploy and sweep but never produces a result. ``SsmAgent``,
plugged into the fault proxy in front of moto (``FaultProxy(..., agent=SsmAgent(...))``),
does what the agent on the instance does with an ``AWS-RunShellScript`` command:

* ``SendCommand`` is forwarded to moto (which keeps it: ``ListCommands`` finds it by its
  comment, as a retried task does); then, for each instance the request named, the commands
  are written one a line to ``<root>/<instance id>/<command id>/_script.sh`` and run with
  ``sh -c`` in that folder, in a process group of their own, on this machine;
* ``GetCommandInvocation`` of such a command is answered from that process: ``InProgress``
  while it runs, then ``Success`` or ``Failed`` with its exit code and the tails of its
  standard output and error (the API's 24,000 characters); past the command's
  ``executionTimeout`` the group is killed and the status is ``TimedOut``;
* ``CancelCommand`` of such a command kills its process group (``Cancelled``) and is answered
  here (moto's server does not implement it);
  ``TerminateInstances`` kills every command of the instances it ends (``Terminated``).

What the script finds on "the instance": ``aws`` is ``AWS_CLI_SHIM`` (``aws s3 cp`` to and
from moto's S3 with boto3), the credentials are moto's fake ones (the instance profile's), and
the paths are the target's own options (``remote_root``, ``bench_python``: a folder and the
worker interpreter of this machine). Several instances share this machine; each target's
``remote_root`` keeps their files apart.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.fixtures_aws import FAKE_AWS_ENV

#: what the SSM API keeps of a command's standard output and error
OUTPUT_LIMIT = 24_000

AWS_CLI_SHIM = textwrap.dedent("""\
    #!{python}
    # Stands in for the AWS CLI on the instance: `aws s3 cp [--only-show-errors] FILE s3://B/K`
    # does a real PutObject, `aws s3 cp s3://B/K FILE` a real GetObject, on the test endpoint
    # (AWS_ENDPOINT_URL) with boto3 and the environment's credentials (the instance profile's).
    import sys
    import boto3
    args = [a for a in sys.argv[1:] if a != "--only-show-errors"]
    assert args[:2] == ["s3", "cp"] and len(args) == 4, args
    if args[2].startswith("s3://"):
        bucket, key = args[2][len("s3://"):].split("/", 1)
        boto3.client("s3").download_file(bucket, key, args[3])
    else:
        assert args[3].startswith("s3://"), args
        bucket, key = args[3][len("s3://"):].split("/", 1)
        boto3.client("s3").upload_file(args[2], bucket, key)
    """)


def write_aws_cli_shim(folder: Path) -> Path:
    """``folder/aws``: the shim, run by this interpreter (which has boto3); put ``folder`` first on PATH."""
    folder.mkdir(parents=True, exist_ok=True)
    shim = folder / "aws"
    shim.write_text(AWS_CLI_SHIM.format(python=sys.executable))
    shim.chmod(0o755)
    return shim


@dataclass
class Invocation:
    """One command on one instance, running (or ended) on this machine."""

    command_id: str
    instance_id: str
    comment: str
    folder: Path
    process: subprocess.Popen
    timeout_s: float
    started: float = field(default_factory=time.monotonic)
    ended_as: str | None = None  # "Cancelled" / "TimedOut" when the agent ended it

    def kill(self, status: str) -> None:
        if self.process.poll() is None:
            self.ended_as = status
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait()

    def status(self) -> str:
        if self.process.poll() is None and time.monotonic() - self.started > self.timeout_s:
            self.kill("TimedOut")
        if self.process.poll() is None:
            return "InProgress"
        if self.ended_as:
            return self.ended_as
        return "Success" if self.process.returncode == 0 else "Failed"

    def _tail(self, name: str) -> str:
        data = (self.folder / name).read_bytes()[-OUTPUT_LIMIT:]
        return data.decode("utf-8", errors="replace")

    def answer(self) -> dict[str, Any]:
        """GetCommandInvocation's answer, as the agent would have reported it."""
        status = self.status()
        ended = status != "InProgress"
        code = self.process.returncode if ended and self.ended_as is None else -1
        return {"CommandId": self.command_id, "InstanceId": self.instance_id, "Comment": self.comment,
                "DocumentName": "AWS-RunShellScript", "PluginName": "aws:runShellScript",
                "Status": status, "StatusDetails": status, "ResponseCode": code,
                "StandardOutputContent": self._tail("stdout") if ended else "",
                "StandardErrorContent": self._tail("stderr") if ended else ""}


class SsmAgent:
    """Runs the SSM commands moto receives (see the module docstring).

    :param root: where each instance's command folders go
    :param endpoint_url: the AWS endpoint the scripts' ``aws`` calls reach (moto's server)
    """

    #: the operations the agent acts on or answers
    OPERATIONS = frozenset({"SendCommand", "GetCommandInvocation", "CancelCommand", "TerminateInstances"})

    def __init__(self, root: Path, endpoint_url: str) -> None:
        self.root = root
        self.bin = write_aws_cli_shim(root / "bin").parent
        self.env = {"PATH": f"{self.bin}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
                    "HOME": str(root), "LANG": "C.UTF-8", **FAKE_AWS_ENV,
                    "AWS_ENDPOINT_URL": endpoint_url,
                    # the "instance" runs .venv-bench's CPU build under a GPU runtime's label
                    "GPUCOMPARE_WORKER_RUNTIME_CHECK": "warn"}
        self.invocations: dict[tuple[str, str], Invocation] = {}
        self.lock = threading.Lock()

    def started(self, request: dict[str, Any], response: dict[str, Any]) -> None:
        """SendCommand reached moto: run its commands on each instance the request named."""
        command_id = response["Command"]["CommandId"]
        parameters = request.get("Parameters", {})
        script = "\n".join(parameters.get("commands", [])) + "\n"
        timeout_s = float((parameters.get("executionTimeout") or ["3600"])[0])
        for instance_id in request.get("InstanceIds", []):
            folder = self.root / instance_id / command_id
            folder.mkdir(parents=True)
            (folder / "_script.sh").write_text(script)
            (folder / "_script.sh").chmod(0o755)
            with open(folder / "stdout", "wb") as out, open(folder / "stderr", "wb") as err:
                process = subprocess.Popen(["sh", "-c", str(folder / "_script.sh")], cwd=folder, env=self.env,
                                           stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                           start_new_session=True)
            with self.lock:
                self.invocations[(command_id, instance_id)] = Invocation(
                    command_id, instance_id, request.get("Comment", ""), folder, process, timeout_s)

    def invocation(self, command_id: str, instance_id: str) -> Invocation | None:
        with self.lock:
            return self.invocations.get((command_id, instance_id))

    def _end(self, status: str, *, command_id: str | None = None,
             instance_ids: list[str] | None = None) -> None:
        with self.lock:
            mine = [i for i in self.invocations.values() if command_id in (None, i.command_id)
                    and (not instance_ids or i.instance_id in instance_ids)]
        for invocation in mine:
            invocation.kill(status)

    def local_answer(self, operation: str, body: bytes) -> bytes | None:
        """The agent's own answer to a GetCommandInvocation or CancelCommand of a command it
        runs (moto's server does not implement CancelCommand); None: moto answers."""
        if operation not in ("GetCommandInvocation", "CancelCommand"):
            return None
        request = json.loads(body or b"{}")
        command_id = request.get("CommandId", "")
        if operation == "CancelCommand":
            with self.lock:
                known = any(key[0] == command_id for key in self.invocations)
            if not known:
                return None
            self._end("Cancelled", command_id=command_id, instance_ids=request.get("InstanceIds"))
            return b"{}"
        invocation = self.invocation(command_id, request.get("InstanceId", ""))
        return None if invocation is None else json.dumps(invocation.answer()).encode()

    def observe(self, operation: str, body: bytes, answer: bytes) -> None:
        """Moto accepted the request: start (SendCommand) or stop (TerminateInstances) the local runs."""
        if operation == "SendCommand":
            self.started(json.loads(body), json.loads(answer))
        elif operation == "TerminateInstances":
            params = urllib.parse.parse_qsl(body.decode("utf-8", "replace"))
            ended = [value for key, value in params if key.startswith("InstanceId.")]
            if ended:
                self._end("Terminated", instance_ids=ended)

    def running(self) -> list[Invocation]:
        with self.lock:
            return [i for i in self.invocations.values() if i.process.poll() is None]

    def close(self) -> None:
        """Kill whatever still runs (an instance's commands die with it)."""
        self._end("Cancelled")


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.support.ssm_agent UPSTREAM ROOT``: the fault proxy with an agent in front of
    moto's server at UPSTREAM, in a process of its own (its threads' CPU is not the caller's);
    prints the proxy's URL, serves until its standard input closes, then kills what still runs."""
    import argparse

    from tests.support.fault_proxy import FaultProxy

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("upstream")
    parser.add_argument("root", type=Path)
    args = parser.parse_args(argv)
    agent = SsmAgent(args.root, args.upstream)
    proxy = FaultProxy(args.upstream, read_timeout_s=60, agent=agent)
    print(proxy.url, flush=True)
    try:
        sys.stdin.read()
    finally:
        proxy.close()
        agent.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
