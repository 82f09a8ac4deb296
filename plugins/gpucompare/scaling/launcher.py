"""Multi-node training with MXNet's parameter server, launched across a group of targets.

A *scaling run* measures one training configuration on 1, 2, 4, … devices of one host and
on several hosts, the way the published scaling studies did (MXNet on 1 to 16 P100s over
4 nodes). Each *point* of the run (``ScalingPoint``: nodes × devices per node, weak or
strong scaling) gives one result record.

A point on one node is an ordinary multi-device run (kvstore ``device``). A point on
several nodes is a parameter-server job (kvstore ``dist_sync`` or ``dist_device_sync``) with
the roles MXNet's ``tools/launch.py`` starts, here started by the orchestrator itself over
each target's own channel (SSH for rented hosts, SSM Run Command for EC2):

* one **scheduler**: ``python -c "import mxnet"`` with ``DMLC_ROLE=scheduler`` (importing
  mxnet with a server or scheduler role runs that role and exits when the job ends);
* **servers** (default: one per worker host, as launch.py does), the same command with
  ``DMLC_ROLE=server``;
* one **worker** per node: ``python -m bench_tasks train … --kvstore dist_sync`` with
  ``DMLC_ROLE=worker``; each measures its own throughput exactly as single-host training
  does and writes one record whose ``batch_size``/``gpu_count``/``num_nodes`` describe the
  whole job (see ``bench_tasks.sweep``).

Every role gets ``DMLC_PS_ROOT_URI``/``DMLC_PS_ROOT_PORT`` (the scheduler's address and port),
``DMLC_NUM_SERVER``, ``DMLC_NUM_WORKER``, and either ``DMLC_NODE_HOST`` (the host's cluster
address, the default) or ``DMLC_INTERFACE`` (option ``interface``: the NIC the job talks
over), plus ``PS_VERBOSE`` when asked. Placement: workers on the first *nodes* hosts of the
group, servers round-robin over the worker hosts, the scheduler on the next host of the
group when there is one (else with worker 0).

**Ports.** Only the scheduler needs a known port (servers and workers bind ports of their
own choosing and register with it). Its port is probed on the scheduler's host (the first
port from a start that binds on its cluster address) and the start is derived from the run:
``SCHEDULER_PORT_LOW + sha256(run id, point) mod SCHEDULER_PORT_SPAN`` (below Linux's
ephemeral range). Two concurrent runs therefore probe from different places and do not race
for the same free port; a port taken by anything else is skipped by the probe.

**Stopping.** Every process of a point carries ``GPUCOMPARE_DIST=<marker>/<role>`` in its
environment (the marker also appears on the command lines, for ``pgrep -f``), and each role
runs in its own session under the host's ``timeout``. When the point ends (success,
failure, time limit, or an exception in the orchestrator) a stop script runs on *every*
host of the group in a ``finally``: TERM to every process whose environment names the
marker, KILL after a grace period. Matching the environment, not the process group, also
reaches the worker's measuring process, which ``bench_tasks`` runs in a session of its own.
A role that ends also stops what it left behind on its host, so a lost orchestrator still
leaves nothing running past the time limit.

**Failure.** The first role that exits with a non-zero status, a worker whose record is not
``ok``, or the time limit ends the point: everything is stopped and ``DistributedRunError``
says which role on which host failed, with the end of its log. Nothing reaches the lake
(the caller ingests only after every point succeeded).

**Aggregation** (``bench_tasks.aggregate.merge_worker_records``): the run's record has
``images_per_sec`` = the sum of the workers', ``per_worker_images_per_sec`` = each worker's,
``num_nodes`` = workers, ``gpu_count`` = devices per worker × workers, ``scaling`` = weak
(per-device batch held) or strong (global batch held).
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import posixpath
import re
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from bench_tasks.aggregate import merge_worker_records
from bench_tasks.record import RecordError, validate_record

# What to measure lives in scaling_plan (the fleet parses it without importing this module);
# the names are re-exported here for the launcher's callers.
from gpucompare.config.scaling import (  # noqa: F401
    DIST_KVSTORES,
    GROUP_SLACK_S,
    INTERFACE_PATTERN,
    MAX_NODES,
    SCALING_GROUP_KEYS,
    SCALING_PROFILE_KEYS,
    SINGLE_NODE_KVSTORE,
    ScalingGroup,
    ScalingPoint,
    ScalingProfile,
    group_points,
    parse_scaling_group,
    parse_scaling_profile,
    plan_scaling_group,
    points_as_sweep,
    scaling_points,
)
from gpucompare.config.validation import ValidationError

log = logging.getLogger(__name__)

MARKER_VARIABLE = "GPUCOMPARE_DIST"
#: Scheduler ports are probed from a run-derived start in [LOW, LOW + SPAN + PROBE) —
#: below the Linux ephemeral range (32768+), so client sockets do not take them.
SCHEDULER_PORT_LOW = 20000
SCHEDULER_PORT_SPAN = 12000
PORT_PROBE_COUNT = 200
#: A launched role that has neither a live process nor an exit status after this long is lost.
LOST_AFTER_S = 20.0
COMMAND_TIMEOUT_S = 120.0
LOG_TAIL_LINES = 30

_ADDRESS = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.:-]{0,252}$")


class DistributedRunError(RuntimeError):
    """A point of a scaling run failed; the message names the role, the host and why."""


def q(value: str | int | float) -> str:
    return shlex.quote(str(value))


def marker_for(run_id: str, point: ScalingPoint) -> str:
    """The tag every process of one point carries: stable for a run and point (a retry of
    the point first stops what an earlier attempt may have left)."""
    return "gcd-" + hashlib.sha256(f"{run_id}\0{point.point_id}".encode()).hexdigest()[:12]


def scheduler_port_start(run_id: str, point: ScalingPoint) -> int:
    """Where the scheduler-port probe starts: spread over the range by the run and point."""
    digest = hashlib.sha256(f"port\0{run_id}\0{point.point_id}".encode()).hexdigest()
    return SCHEDULER_PORT_LOW + int(digest[:8], 16) % SCHEDULER_PORT_SPAN


# -- roles -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Role:
    """One process of a point on one host: its name (``worker-0``), environment and command."""

    name: str
    kind: str  # scheduler | server | worker
    host_index: int
    env: dict[str, str]
    argv: tuple[str, ...]
    timeout_s: int

    @property
    def is_worker(self) -> bool:
        return self.kind == "worker"


def placement(point: ScalingPoint, host_count: int) -> dict[str, int]:
    """Which host (index in the group) runs each role (see the module docstring)."""
    if point.nodes > host_count:
        raise DistributedRunError(f"point {point.point_id}: {point.nodes} nodes asked, the group has "
                                  f"{host_count} host(s)")
    hosts = {f"worker-{i}": i for i in range(point.nodes)}
    if point.distributed:
        hosts["scheduler-0"] = point.nodes if host_count > point.nodes else 0
        for i in range(point.server_count):
            hosts[f"server-{i}"] = i % point.nodes
    return hosts


def worker_argv(point: ScalingPoint, *, python: str, run_id: str, output: str) -> tuple[str, ...]:
    """``bench_tasks train`` for one worker; ``output`` lies in the point's directory, whose
    name holds the marker (so ``pgrep -f <marker>`` finds the worker too)."""
    kvstore = point.kvstore if point.distributed else SINGLE_NODE_KVSTORE
    return (python, "-m", "bench_tasks", "train", "--networks", point.network,
            "--batch-sizes", str(point.worker_batch_flag), "--devices", ",".join(point.devices),
            "--dtypes", point.dtype, "--kvstore", kvstore, "--scaling", point.scaling,
            "--warmup", str(point.warmup), "--batches", str(point.batches),
            "--repeats", str(point.repeats), "--timeout", str(int(point.timeout_s)),
            "--isolation", "config", "--run-id", run_id, "--output", output)


def ps_role_argv(python: str, marker: str) -> tuple[str, ...]:
    # Importing mxnet with DMLC_ROLE=scheduler|server runs that role until the job ends.
    # The marker argument is ignored by Python (sys.argv[1]) but lets ps/pgrep -f find it.
    return (python, "-c", "import mxnet", marker)


def build_roles(point: ScalingPoint, hosts: Sequence[HostChannel], *, run_id: str, marker: str,
                scheduler_port: int | None, interface: str | None = None,
                ps_verbose: int = 0) -> list[Role]:
    """Every role of a point with its full environment (pure: what the tests check)."""
    where = placement(point, len(hosts))
    timeout = int(point.timeout_s) + 30  # the worker's own limit fires first
    roles = []
    for name, host_index in where.items():
        kind = name.split("-")[0]
        host = hosts[host_index]
        env = {"PYTHONPATH": host.code_dir, "PYTHONUNBUFFERED": "1",
               MARKER_VARIABLE: f"{marker}/{name}"}
        if point.distributed:
            scheduler = hosts[where["scheduler-0"]]
            env.update({
                "DMLC_ROLE": kind,
                "DMLC_PS_ROOT_URI": scheduler.address,
                "DMLC_PS_ROOT_PORT": str(scheduler_port),
                "DMLC_NUM_SERVER": str(point.server_count),
                "DMLC_NUM_WORKER": str(point.nodes),
            })
            if interface:
                env["DMLC_INTERFACE"] = interface
            else:
                env["DMLC_NODE_HOST"] = host.address
            if ps_verbose:
                env["PS_VERBOSE"] = str(ps_verbose)
        if kind == "worker":
            output = posixpath.join(host.point_dir(marker), f"{name}.jsonl")
            argv = worker_argv(point, python=host.python, run_id=run_id, output=output)
        else:
            argv = ps_role_argv(host.python, marker)
        roles.append(Role(name, kind, host_index, env, argv, timeout))
    return roles


# -- shell scripts (every value quoted; pure functions, tested) -------------------------------

def kill_marked_script(tag: str, *, grace_s: float, exact: bool = False) -> str:
    """TERM every process of this user whose environment has ``GPUCOMPARE_DIST=<tag>`` (exactly,
    or starting with ``tag`` unless ``exact``), KILL what is left after ``grace_s``; prints
    ``stopped N``. Tags hold only letters, digits, ``-`` and ``/`` (no regex specials)."""
    if not re.fullmatch(r"[a-z0-9/-]+", tag):
        raise DistributedRunError(f"marker: {tag!r} holds characters a marker never has")
    wanted = f"{MARKER_VARIABLE}={tag}"
    match = f"grep -qx {q(wanted)}" if exact else f"grep -q {q('^' + wanted)}"
    return "\n".join([
        "marked() {",
        "  for e in /proc/[0-9]*/environ; do",
        '    p=${e#/proc/}; p=${p%/environ}',
        '    [ "$p" = "$$" ] && continue',
        f"    tr '\\000' '\\n' < \"$e\" 2>/dev/null | {match} && echo \"$p\"",
        "  done",
        "}",
        'pids=$(marked); n=0',
        'for p in $pids; do kill -TERM "$p" 2>/dev/null && n=$((n+1)); done',
        f"i=0; while [ $i -lt {max(1, int(grace_s * 5))} ] && [ -n \"$(marked)\" ]; do",
        "  sleep 0.2; i=$((i+1))",
        "done",
        'for p in $(marked); do kill -KILL "$p" 2>/dev/null; done',
        'echo "stopped $n"',
    ])


def role_script(role: Role, *, point_dir: str, code_dir: str, kill_grace_s: float) -> str:
    """The shell script that runs one role on its host and records how it ended.

    It runs the role under ``timeout`` (the host's own limit), writes the exit status last
    (atomically), and stops anything of this role that outlived it.
    """
    base = posixpath.join(point_dir, role.name)
    assignments = " ".join(f"{k}={q(v)}" for k, v in sorted(role.env.items()))
    argv = " ".join(q(a) for a in role.argv)
    return "\n".join([
        "#!/bin/sh",
        f"# Written by gpucompare (plugins/gpucompare/distributed.py): {role.name}, marker in its env.",
        f"cd {q(code_dir)} || exit 97",
        f"echo $$ > {q(base + '.pid')}",
        f"env {assignments} timeout --kill-after={int(kill_grace_s)} {role.timeout_s} {argv} "
        f"> {q(base + '.out')} 2> {q(base + '.log')} < /dev/null",
        "rc=$?",
        "(",
        kill_marked_script(role.env[MARKER_VARIABLE], grace_s=kill_grace_s, exact=True),
        ") > /dev/null 2>&1",
        f"echo $rc > {q(base + '.exit.tmp')} && mv {q(base + '.exit.tmp')} {q(base + '.exit')}",
        "",
    ])


def status_script(point_dir: str, names: Sequence[str]) -> str:
    """One line per role: ``<name> exit N``, ``<name> running`` or ``<name> missing``."""
    return "\n".join([
        f"d={q(point_dir)}",
        f"for n in {' '.join(q(n) for n in names)}; do",
        '  if [ -f "$d/$n.exit" ]; then echo "$n exit $(cat "$d/$n.exit")";',
        '  elif [ -f "$d/$n.pid" ] && kill -0 "$(cat "$d/$n.pid")" 2>/dev/null; then echo "$n running";',
        '  else echo "$n missing"; fi',
        "done",
    ])


PORT_PROBE = (
    "import socket, sys\n"
    "host, start, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])\n"
    "for port in range(start, start + count):\n"
    "    with socket.socket() as s:\n"
    "        try:\n"
    "            s.bind((host, port))\n"
    "        except OSError:\n"
    "            continue\n"
    "    print(port)\n"
    "    break\n"
)


def port_probe_command(python: str, bind_host: str, start: int, count: int = PORT_PROBE_COUNT) -> str:
    return f"{q(python)} -c {q(PORT_PROBE)} {q(bind_host)} {int(start)} {int(count)}"


# -- channels: how the orchestrator reaches a host ----------------------------------------------

@dataclass(frozen=True)
class RoleStatus:
    state: str  # running | exit | missing
    exit_code: int | None = None


class HostChannel(Protocol):
    """One host of the group as the launcher sees it (SSH or SSM underneath)."""

    label: str
    address: str  # how the other hosts of the group reach this one
    python: str
    code_dir: str

    def point_dir(self, marker: str) -> str: ...
    def free_port(self, start: int) -> int: ...
    def launch(self, role: Role, marker: str, kill_grace_s: float) -> None: ...
    def statuses(self, marker: str, roles: Sequence[Role]) -> dict[str, RoleStatus]: ...
    def worker_output(self, marker: str, role: Role) -> str: ...
    def log_tail(self, marker: str, role: Role) -> str: ...
    def stop(self, marker: str, grace_s: float) -> int: ...


def check_address(value: Any, what: str) -> str:
    if not isinstance(value, str) or not _ADDRESS.fullmatch(value):
        raise DistributedRunError(f"{what}: {value!r} is not a host name or IP address")
    return value


class SSHChannel:
    """A host of an ``ssh`` target, through that target's own connection (host key verified,
    reconnects with backoff). Roles run detached (``setsid nohup``) and leave their exit
    status, output and log in ``<run dir>/dist-<marker>/``, which the launcher polls."""

    def __init__(self, target: Any, state: Any, *, address: str | None = None) -> None:
        if not state.workdir or not state.extra.get("code_dir") or not state.extra.get("python"):
            raise DistributedRunError(f"ssh target {target.spec.name}: prepare and deploy must run before "
                                      "a distributed run (the state has no run directory or worker)")
        self.target = target
        self.run_dir = state.workdir
        self.code_dir = state.extra["code_dir"]
        self.python = state.extra["python"]
        ssh_host = state.resource_id.rsplit("@", 1)[-1].rsplit(":", 1)[0]  # user@host:port (prepare)
        self.address = check_address(address or ssh_host, f"{target.spec.name}: cluster address")
        self.label = f"{target.spec.name} ({self.address})"

    def _run(self, command: str, timeout: float = COMMAND_TIMEOUT_S) -> Any:
        return self.target.run_command(command, step="distributed", timeout=timeout, check=False)

    def point_dir(self, marker: str) -> str:
        return posixpath.join(self.run_dir, f"dist-{marker}")

    def free_port(self, start: int) -> int:
        result = self._run(port_probe_command(self.python, self.address, start))
        text = result.stdout.strip()
        if result.exit_code != 0 or not text.isdigit():
            raise DistributedRunError(f"{self.label}: no free port from {start} to "
                                      f"{start + PORT_PROBE_COUNT - 1} ({result.stderr.strip()[-300:]})")
        return int(text)

    def launch(self, role: Role, marker: str, kill_grace_s: float) -> None:
        directory = self.point_dir(marker)
        script = role_script(role, point_dir=directory, code_dir=self.code_dir, kill_grace_s=kill_grace_s)
        path = posixpath.join(directory, f"{role.name}.sh")
        encoded = base64.b64encode(script.encode()).decode("ascii")
        result = self._run(
            f"mkdir -p {q(directory)} && rm -f {q(path[:-3])}.* && "
            f"echo {q(encoded)} | base64 -d > {q(path)} && "
            f"{{ setsid nohup sh {q(path)} > /dev/null 2>&1 < /dev/null & }}")
        if result.exit_code != 0:
            raise DistributedRunError(f"{self.label}: could not start {role.name} in {directory} (exit "
                                      f"{result.exit_code}): {result.stderr.strip()[-300:]}")

    def statuses(self, marker: str, roles: Sequence[Role]) -> dict[str, RoleStatus]:
        result = self._run(status_script(self.point_dir(marker), [r.name for r in roles]))
        if result.exit_code != 0:
            raise DistributedRunError(f"{self.label}: could not read the roles' status (exit "
                                      f"{result.exit_code}): {result.stderr.strip()[-300:]}")
        found = {}
        for line in result.stdout.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] == "exit":
                code = int(parts[2]) if parts[2].lstrip("-").isdigit() else 255
                found[parts[0]] = RoleStatus("exit", code)
            elif len(parts) == 2:
                found[parts[0]] = RoleStatus(parts[1])
        return found

    def worker_output(self, marker: str, role: Role) -> str:
        return self._run(f"cat {q(posixpath.join(self.point_dir(marker), role.name + '.jsonl'))} "
                         "2>/dev/null").stdout

    def log_tail(self, marker: str, role: Role) -> str:
        log_file = posixpath.join(self.point_dir(marker), role.name + ".log")
        return self._run(f"tail -n {LOG_TAIL_LINES} {q(log_file)} 2>/dev/null").stdout

    def stop(self, marker: str, grace_s: float) -> int:
        result = self._run(kill_marked_script(f"{marker}/", grace_s=grace_s),
                           timeout=grace_s + COMMAND_TIMEOUT_S)
        match = re.search(r"stopped (\d+)", result.stdout)
        return int(match.group(1)) if match else 0


SSM_DOCUMENT = "AWS-RunShellScript"
SSM_RUNNING = frozenset({"Pending", "InProgress", "Delayed"})


def ssm_role_commands(role: Role, *, point_dir: str, code_dir: str, kill_grace_s: float) -> list[str]:
    """The AWS-RunShellScript commands of one role: write its script (base64, so nothing in
    it reaches the shell unquoted), run it in the foreground, send a worker's record to
    standard output and the end of the role's log to standard error, exit with its status."""
    script = role_script(role, point_dir=point_dir, code_dir=code_dir, kill_grace_s=kill_grace_s)
    path = posixpath.join(point_dir, f"{role.name}.sh")
    base = posixpath.join(point_dir, role.name)
    encoded = base64.b64encode(script.encode()).decode("ascii")
    commands = [
        f"mkdir -p {q(point_dir)}",
        f"rm -f {q(base)}.*",
        f"echo {q(encoded)} | base64 -d > {q(path)}",
        f"sh {q(path)}",
        f"rc=$(cat {q(base + '.exit')} 2>/dev/null || echo 255)",
    ]
    if role.is_worker:
        commands.append(f"cat {q(base + '.jsonl')} 2>/dev/null")
    commands += [f"tail -n {LOG_TAIL_LINES} {q(base + '.log')} >&2 2>/dev/null", 'exit "$rc"']
    return commands


class SSMChannel:
    """A host of an ``ec2`` target through SSM Run Command (the target's own SSM client).

    Each role is one command invocation that runs for as long as the role does; its status
    is the invocation's, a worker's record comes back as its standard output. Stopping
    cancels the invocations and sends the stop script (marker-matched kill) as a command.
    """

    def __init__(self, *, ssm_client: Any, instance_id: str, address: str, python: str, code_dir: str,
                 run_dir: str, poll_interval_s: float = 2.0) -> None:
        self.ssm = ssm_client
        self.instance_id = instance_id
        self.address = check_address(address, f"{instance_id}: private address")
        self.python = python
        self.code_dir = code_dir
        self.run_dir = run_dir
        self.poll_interval_s = poll_interval_s
        self.label = f"{instance_id} ({self.address})"
        self._commands: dict[tuple[str, str], str] = {}

    @classmethod
    def for_target(cls, target: Any, state: Any, *, address: str | None = None) -> SSMChannel:
        from gpucompare.targets.ec2 import run_key

        instance_id = state.resource_id
        if not instance_id or not state.workdir or not state.extra.get("bench_python"):
            raise DistributedRunError(f"ec2 target {target.spec.name}: prepare and deploy must run before "
                                      "a distributed run (the state has no instance or worker)")
        if address is None:
            reservations = target.ec2_hook.conn.describe_instances(InstanceIds=[instance_id])["Reservations"]
            address = reservations[0]["Instances"][0].get("PrivateIpAddress")
        return cls(ssm_client=target.ssm_hook.conn, instance_id=instance_id, address=address,
                   python=state.extra["bench_python"], code_dir=state.workdir,
                   run_dir=f"{target.options.remote_root}/runs/{run_key(state.run_id)}",
                   poll_interval_s=target.options.poll_interval_s)

    def _send(self, commands: list[str], timeout_s: float, comment: str) -> str:
        response = self.ssm.send_command(
            InstanceIds=[self.instance_id], DocumentName=SSM_DOCUMENT,
            Comment=f"{comment} on {self.instance_id}"[:100],
            Parameters={"commands": commands, "executionTimeout": [str(int(timeout_s))]})
        return response["Command"]["CommandId"]

    def _invocation(self, command_id: str) -> dict[str, Any]:
        try:
            return self.ssm.get_command_invocation(CommandId=command_id, InstanceId=self.instance_id)
        except Exception as exc:  # botocore's ClientError: right after SendCommand it may not exist
            if "InvocationDoesNotExist" in str(exc):
                return {"Status": "Pending"}
            raise

    def _run(self, commands: list[str], timeout_s: float, comment: str) -> dict[str, Any]:
        command_id = self._send(commands, timeout_s, comment)
        deadline = time.monotonic() + timeout_s + 60
        while True:
            invocation = self._invocation(command_id)
            if invocation.get("Status") not in SSM_RUNNING:
                return invocation
            if time.monotonic() > deadline:
                raise DistributedRunError(f"{self.label}: SSM command {command_id} ({comment}) did not "
                                          f"finish in {timeout_s:.0f}s")
            time.sleep(self.poll_interval_s)

    def point_dir(self, marker: str) -> str:
        return posixpath.join(self.run_dir, f"dist-{marker}")

    def free_port(self, start: int) -> int:
        invocation = self._run([port_probe_command(self.python, self.address, start)], COMMAND_TIMEOUT_S,
                               "gpucompare dist port probe")
        text = (invocation.get("StandardOutputContent") or "").strip()
        if invocation.get("Status") != "Success" or not text.isdigit():
            raise DistributedRunError(f"{self.label}: no free port from {start} to "
                                      f"{start + PORT_PROBE_COUNT - 1} (SSM {invocation.get('Status')}: "
                                      f"{(invocation.get('StandardErrorContent') or '').strip()[-300:]})")
        return int(text)

    def launch(self, role: Role, marker: str, kill_grace_s: float) -> None:
        commands = ssm_role_commands(role, point_dir=self.point_dir(marker), code_dir=self.code_dir,
                                     kill_grace_s=kill_grace_s)
        self._commands[(marker, role.name)] = self._send(
            commands, role.timeout_s + kill_grace_s + 60, f"gpucompare dist {marker} {role.name}")

    def statuses(self, marker: str, roles: Sequence[Role]) -> dict[str, RoleStatus]:
        found = {}
        for role in roles:
            command_id = self._commands.get((marker, role.name))
            if command_id is None:
                continue
            invocation = self._invocation(command_id)
            status = invocation.get("Status")
            if status in SSM_RUNNING:
                found[role.name] = RoleStatus("running")
            else:
                code = invocation.get("ResponseCode")
                if not isinstance(code, int) or (status != "Success" and code == 0):
                    code = 255  # cancelled or timed out by SSM: no status of its own
                found[role.name] = RoleStatus("exit", code)
        return found

    def _output(self, marker: str, role: Role, key: str) -> str:
        command_id = self._commands.get((marker, role.name))
        return (self._invocation(command_id).get(key) or "") if command_id else ""

    def worker_output(self, marker: str, role: Role) -> str:
        return self._output(marker, role, "StandardOutputContent")

    def log_tail(self, marker: str, role: Role) -> str:
        return self._output(marker, role, "StandardErrorContent")

    def stop(self, marker: str, grace_s: float) -> int:
        for (command_marker, _name), command_id in list(self._commands.items()):
            if command_marker == marker:
                try:
                    self.ssm.cancel_command(CommandId=command_id, InstanceIds=[self.instance_id])
                except Exception as exc:  # already finished: nothing to cancel
                    log.debug("cancel %s: %s", command_id, exc)
        invocation = self._run([kill_marked_script(f"{marker}/", grace_s=grace_s)],
                               grace_s + COMMAND_TIMEOUT_S, f"gpucompare dist stop {marker}")
        match = re.search(r"stopped (\d+)", invocation.get("StandardOutputContent") or "")
        return int(match.group(1)) if match else 0


# -- the launcher ------------------------------------------------------------------------------

@dataclass
class PointOutcome:
    record: dict[str, Any]
    worker_records: list[dict[str, Any]] = field(default_factory=list)
    scheduler_port: int | None = None
    seconds: float = 0.0


class ParameterServerLauncher:
    """Runs the points of a scaling run on a group of hosts, one point at a time.

    :param hosts: the group's hosts, in the order of the fleet entry (placement follows it).
    :param run_id: the run id every record carries.
    :param interface: ``DMLC_INTERFACE`` for every role (default: ``DMLC_NODE_HOST`` = address).
    :param ps_verbose: ``PS_VERBOSE`` (0 = off, 1, 2).
    :param poll_interval_s: how often the roles' statuses are read.
    :param kill_grace_s: TERM → KILL delay when stopping.
    """

    def __init__(self, hosts: Sequence[HostChannel], *, run_id: str, interface: str | None = None,
                 ps_verbose: int = 0, poll_interval_s: float = 1.0, kill_grace_s: float = 5.0,
                 line_sink: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not hosts:
            raise DistributedRunError("a scaling run needs at least one host")
        if interface is not None and not INTERFACE_PATTERN.fullmatch(interface):
            raise DistributedRunError(f"interface: {interface!r} is not a network interface name")
        if ps_verbose not in (0, 1, 2):
            raise DistributedRunError(f"ps_verbose: expected 0, 1 or 2, got {ps_verbose!r}")
        self.hosts = list(hosts)
        self.run_id = run_id
        self.interface = interface
        self.ps_verbose = ps_verbose
        self.poll_interval_s = poll_interval_s
        self.kill_grace_s = kill_grace_s
        self.line_sink = line_sink or log.info
        self._clock = clock

    def run_point(self, point: ScalingPoint) -> PointOutcome:
        """Launch every role of ``point``, wait, merge the workers' records; always stop all."""
        marker = marker_for(self.run_id, point)
        started = self._clock()
        self.stop_everywhere(marker)  # what an earlier attempt of this point may have left
        try:
            port = None
            roles = []
            if point.distributed:
                where = placement(point, len(self.hosts))
                scheduler_host = self.hosts[where["scheduler-0"]]
                port = scheduler_host.free_port(scheduler_port_start(self.run_id, point))
            roles = build_roles(point, self.hosts, run_id=self.run_id, marker=marker, scheduler_port=port,
                                interface=self.interface, ps_verbose=self.ps_verbose)
            where_text = f", scheduler {scheduler_host.address}:{port}" if point.distributed else ""
            self.line_sink(f"[dist] {point.point_id}: {len(roles)} role(s), marker {marker}{where_text}")
            for role in sorted(roles, key=lambda r: r.kind != "scheduler"):
                self.hosts[role.host_index].launch(role, marker, self.kill_grace_s)
                self.line_sink(f"[dist] started {role.name} on {self.hosts[role.host_index].label}")
            workers = self._wait(point, marker, roles, started)
        finally:
            stopped = self.stop_everywhere(marker)
            if stopped:
                self.line_sink(f"[dist] {point.point_id}: stopped {stopped} leftover process(es)")
        record = self._merge(point, workers)
        seconds = self._clock() - started
        per_worker = ", ".join(f"{v:.2f}" for v in record["per_worker_images_per_sec"])
        self.line_sink(f"[dist] {point.point_id}: {record['images_per_sec']:.2f} img/s over "
                       f"{record['gpu_count']} device(s) on {record['num_nodes']} node(s) "
                       f"(per worker: {per_worker or '-'}), {seconds:.1f} s")
        return PointOutcome(record, workers, port, seconds)

    def stop_everywhere(self, marker: str) -> int:
        """Stop every process of the point on every host; errors are logged, not raised, so
        one unreachable host does not keep the others from being cleaned."""
        total = 0
        for host in self.hosts:
            try:
                total += host.stop(marker, self.kill_grace_s)
            except Exception as exc:  # cleanup must reach every host
                self.line_sink(f"[dist] WARNING: could not stop {marker} on {host.label}: {exc}")
        return total

    def _wait(self, point: ScalingPoint, marker: str, roles: list[Role],
              started: float) -> list[dict[str, Any]]:
        deadline = started + point.timeout_s
        by_host: dict[int, list[Role]] = {}
        for role in roles:
            by_host.setdefault(role.host_index, []).append(role)
        records: dict[str, dict[str, Any]] = {}
        missing_since: dict[str, float] = {}
        while True:
            for host_index, host_roles in by_host.items():
                host = self.hosts[host_index]
                statuses = host.statuses(marker, host_roles)
                for role in host_roles:
                    status = statuses.get(role.name, RoleStatus("missing"))
                    if status.state == "exit":
                        missing_since.pop(role.name, None)
                        if status.exit_code != 0:
                            self._fail(point, marker, role, f"exited with status {status.exit_code}"
                                       f"{_signal_hint(status.exit_code)}")
                        if role.is_worker and role.name not in records:
                            records[role.name] = self._worker_record(point, marker, role)
                    elif status.state == "missing":
                        first = missing_since.setdefault(role.name, self._clock())
                        if self._clock() - first > LOST_AFTER_S:
                            self._fail(point, marker, role, "is gone: no process and no exit status")
                    else:
                        missing_since.pop(role.name, None)
            if len(records) == point.nodes:
                return [records[f"worker-{i}"] for i in range(point.nodes)]
            if self._clock() > deadline:
                running = [r.name for r in roles if r.is_worker and r.name not in records]
                raise DistributedRunError(
                    f"point {point.point_id}: time limit of {point.timeout_s:.0f}s exceeded; "
                    f"{', '.join(running)} still running; every process was stopped")
            time.sleep(self.poll_interval_s)

    def _worker_record(self, point: ScalingPoint, marker: str, role: Role) -> dict[str, Any]:
        host = self.hosts[role.host_index]
        lines = [line for line in host.worker_output(marker, role).splitlines() if line.strip()]
        if len(lines) != 1:
            self._fail(point, marker, role, f"wrote {len(lines)} records instead of 1")
        try:
            record = validate_record(json.loads(lines[0]))
        except (json.JSONDecodeError, RecordError) as exc:
            self._fail(point, marker, role, f"wrote a bad record: {exc}")
        if record["status"] != "ok":
            self._fail(point, marker, role, f"measured nothing: {record['status']}: {record['error']}")
        return record

    def _fail(self, point: ScalingPoint, marker: str, role: Role, what: str) -> None:
        host = self.hosts[role.host_index]
        try:
            tail = host.log_tail(marker, role).strip() or "(empty)"
        except Exception as exc:  # the message must still be raised
            tail = f"(could not read the log: {exc})"
        raise DistributedRunError(f"point {point.point_id}: {role.name} on {host.label} {what}; "
                                  f"every process of the point was stopped. Its log ended with:\n{tail}")

    def _merge(self, point: ScalingPoint, workers: list[dict[str, Any]]) -> dict[str, Any]:
        if not point.distributed:
            return workers[0]
        try:
            merged = merge_worker_records(workers)
        except RecordError as exc:
            raise DistributedRunError(
                f"point {point.point_id}: the workers' records do not agree: {exc}") from exc
        if merged["status"] != "ok":
            raise DistributedRunError(f"point {point.point_id}: {merged['status']}: {merged['error']}")
        return merged


def _signal_hint(code: int | None) -> str:
    hints = {124: " (its time limit on the host ran out)", 137: " (killed: SIGKILL)", 143: " (SIGTERM)"}
    return hints.get(code or 0, "")


# -- the run of a group ------------------------------------------------------------------------

def host_run_id(run_id: str, spec: Mapping[str, Any]) -> str:
    """Each host's own run id for its target (an ec2 target finds its instance by run id, so
    the hosts of one group must not share one); the records carry the group's run id."""
    return f"{run_id}.{spec['name']}"


def run_scaling_plan(plan: Mapping[str, Any], *, lake_uri: str, results_path: str,
                     dag_run_id: str | None = None, line_sink: Callable[[str], None] | None = None,
                     poll_interval_s: float = 2.0) -> list[str]:
    """One group's whole scaling run: prepare and deploy every host, run the points, ingest;
    and, whatever happened, tear every host down (a paid instance is always given back)."""
    from gpucompare.lake.tables import RunContext
    from gpucompare.targets import make_target

    sink = line_sink or log.info
    targets = [make_target(spec, line_sink=sink) for spec in plan["specs"]]
    states: list[Any] = [None] * len(targets)
    try:
        for index, target in enumerate(targets):
            states[index] = target.prepare(host_run_id(plan["run_id"], plan["specs"][index]))
            states[index] = target.deploy(states[index])
        launcher = ParameterServerLauncher(
            [channel_for(t, s) for t, s in zip(targets, states, strict=True)], run_id=plan["run_id"],
            interface=plan.get("interface"), ps_verbose=int(plan.get("ps_verbose") or 0),
            poll_interval_s=poll_interval_s, line_sink=sink)
        points = [ScalingPoint(**{**p, "devices": tuple(p["devices"])}) for p in plan["points"]]
        spec = plan["specs"][0]
        markets = {s.market for s in states if s.market}
        # a spot group whose hosts fell back to on-demand (some or all) is recorded as asked
        market = markets.pop() if len(markets) == 1 else spec.get("market", "on_demand")
        context = RunContext(provider=spec["provider"], instance_type=spec["instance_type"],
                             region=spec.get("region"), market=market, target=spec["kind"],
                             dag_run_id=dag_run_id, source=f"gpucompare scaling group {plan['group']}")
        return measure_and_ingest(launcher, points, results_path=results_path, lake_uri=lake_uri,
                                  context=context)
    finally:
        _teardown_all(targets, states, plan["run_id"], sink)


def _teardown_all(targets: Sequence[Any], states: Sequence[Any], run_id: str,
                  sink: Callable[[str], None]) -> None:
    from gpucompare.targets.base import TargetState

    failures = []
    for target, state in zip(targets, states, strict=True):
        spec = target.spec.to_dict()
        try:
            target.teardown(state or TargetState(spec=spec, run_id=host_run_id(run_id, spec)))
        except Exception as exc:  # every host must get its teardown, then the error is raised
            failures.append(f"{target.spec.name}: {exc}")
            sink(f"[dist] teardown of {target.spec.name} failed: {exc}")
    if failures:
        raise DistributedRunError("teardown failed on " + "; ".join(failures))


def channel_for(target: Any, state: Any, *, address: str | None = None) -> HostChannel:
    """The channel of a prepared and deployed target: SSH for ``ssh``, SSM for ``ec2``."""
    if target.kind == "ssh":
        return SSHChannel(target, state, address=address)
    if target.kind == "ec2":
        return SSMChannel.for_target(target, state, address=address)
    raise DistributedRunError(f"kind: a scaling group runs on ssh or ec2 targets, not {target.kind!r}")


def run_points(launcher: ParameterServerLauncher, points: Sequence[ScalingPoint],
               results_path: str) -> str:
    """Run every point; write their records (JSON Lines) to ``results_path`` only if all
    succeeded, atomically, and return the path. Any failure raises before anything is written."""
    from pathlib import Path

    records = [launcher.run_point(point).record for point in points]
    destination = Path(results_path)
    destination.parent.mkdir(parents=True, exist_ok=True)
    partial = destination.with_name(f".{destination.name}.partial")
    partial.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
    partial.replace(destination)
    return str(destination)


def measure_and_ingest(launcher: ParameterServerLauncher, points: Sequence[ScalingPoint], *,
                       results_path: str, lake_uri: str, context: Any) -> list[str]:
    """Run the points, then ingest their records into the lake (``context``: the lake's
    ``RunContext``: provider, instance type, target kind…). A failed point raises before
    anything is written, so a failed run leaves the lake as it was."""
    from gpucompare.lake.tables import ingest_results, open_lake
    from gpucompare.targets.bundle import local_code_hash

    path = run_points(launcher, points, results_path)
    # the launcher's run id is the orchestrator's (plan["run_id"]): the records must carry it
    summary = ingest_results(open_lake(lake_uri), path, context, run_id=launcher.run_id,
                             code_hash=local_code_hash())
    return [summary.describe()]


# -- command line: python -m gpucompare scaling-run ---------------------------------------------

def add_cli(subparsers: Any) -> None:
    """``scaling-run``: one scaling group of the fleet file, now (enabled or not)."""
    parser = subparsers.add_parser(
        "scaling-run", help="run one scaling group of the fleet file now and ingest its records",
        description="Prepare and deploy the group's hosts, run every point of its scaling profile "
                    "(MXNet's parameter server across the hosts), ingest, tear the hosts down.")
    parser.add_argument("--group", required=True, help="name of a scaling_groups entry")
    parser.add_argument("--fleet", help="fleet file (default: $GPUCOMPARE_FLEET or dags/config/fleet.yaml)")
    parser.add_argument("--lake", default="./lake", help="lake URI: a local path or s3://bucket/prefix")
    parser.add_argument("--results", default="scaling-results.jsonl",
                        help="where the run's records are written before ingest")
    parser.add_argument("--run-id", help="run id (default: scaling-<group>-<UTC time>)")
    parser.set_defaults(func=_run_cli)


def _run_cli(args: Any) -> int:
    import datetime as dt
    import sys

    from gpucompare.config import fleet
    from gpucompare.prices.tables import shipped_fx_rate

    try:
        parsed = fleet.load_fleet(args.fleet, fx_rate=shipped_fx_rate)
        groups = {g.name: g for g in parsed.scaling_groups}
        if args.group not in groups:
            raise ValidationError("--group", f"{args.group!r} is not a scaling group of {parsed.source}",
                                  ", ".join(groups) or "(none defined)")
        group = groups[args.group]
        specs = {t.name: t.spec for t in parsed.targets}
        run_id = args.run_id or f"scaling-{group.name}-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%SZ}"
        plan = plan_scaling_group(group, [specs[n] for n in group.targets],
                                  parsed.scaling_profiles[group.profile], fleet.target_run_id(run_id, "cli"))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    written = run_scaling_plan(plan, lake_uri=args.lake, results_path=args.results,
                               line_sink=lambda line: print(line, file=sys.stderr, flush=True))
    print(f"{len(plan['points'])} point(s) of {group.name} ingested: {', '.join(written)}")
    return 0
