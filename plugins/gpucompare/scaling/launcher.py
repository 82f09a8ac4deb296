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

**Retries.** A retried scaling task whose first try was killed mid-run asks every host first
(``HostChannel.attach``): on ec2 each role's SSM command is found again by its comment (marker,
role, instance; a paginated ListCommands), and when every role of the point is still running
or succeeded the launcher follows those commands instead of stopping them and sending new
ones. Otherwise (an ssh host, a role missing, failed or cancelled) the point starts over.

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

import hashlib
import json
import logging
import posixpath
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench_tasks.aggregate import merge_worker_records
from bench_tasks.record import validate_record
from bench_tasks.record_fields import RecordError

# What to measure lives in scaling_plan (the fleet parses it without importing this module);
# the names are re-exported here for the launcher's callers.
from gpucompare.config import patterns
from gpucompare.config.scaling import (  # noqa: F401
    DIST_KVSTORES,
    GROUP_SLACK_S,
    MAX_NODES,
    SINGLE_NODE_KVSTORE,
    ScalingGroup,
    ScalingPoint,
    ScalingProfile,
    group_points,
    parse_scaling_profile,
    plan_scaling_group,
    points_as_sweep,
    scaling_points,
)
from gpucompare.targets.channel import (  # noqa: F401  (the launcher's callers use these names too)
    COMMAND_TIMEOUT_S,
    MARKER_VARIABLE,
    PORT_PROBE_COUNT,
    DistributedRunError,
    HostChannel,
    Role,
    RoleStatus,
    kill_marked_script,
    port_probe_command,
    shell_quote,
)
from gpucompare.targets.polling import poll_until

log = logging.getLogger(__name__)


#: Scheduler ports are probed from a run-derived start in [LOW, LOW + SPAN + PROBE) —
#: below the Linux ephemeral range (32768+), so client sockets do not take them.
SCHEDULER_PORT_LOW = 20000
SCHEDULER_PORT_SPAN = 12000
#: A launched role that has neither a live process nor an exit status after this long is lost.
LOST_AFTER_S = 20.0

def marker_for(run_id: str, point: ScalingPoint) -> str:
    """The tag every process of one point carries: stable for a run and point (a retry of
    the point attaches to an earlier attempt's roles, or first stops what it may have left)."""
    return "gcd-" + hashlib.sha256(f"{run_id}\0{point.point_id}".encode()).hexdigest()[:12]


def scheduler_port_start(run_id: str, point: ScalingPoint) -> int:
    """Where the scheduler-port probe starts: spread over the range by the run and point."""
    digest = hashlib.sha256(f"port\0{run_id}\0{point.point_id}".encode()).hexdigest()
    return SCHEDULER_PORT_LOW + int(digest[:8], 16) % SCHEDULER_PORT_SPAN


# -- roles -----------------------------------------------------------------------------------

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
        if interface is not None and not patterns.INTERFACE.fullmatch(interface):
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
        """Launch every role of ``point`` (or attach to an earlier try's, ``_attached``), wait,
        merge the workers' records; always stop all."""
        marker = marker_for(self.run_id, point)
        started = self._clock()
        port = None
        roles = self._attached(point, marker)
        if not roles:
            self.stop_everywhere(marker)  # what an earlier attempt of this point may have left
        try:
            if not roles:
                port, roles = self._launch_all(point, marker)
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

    def _attached(self, point: ScalingPoint, marker: str) -> list[Role]:
        """The point's roles when every host attaches to an earlier try's (a retried task whose
        first try was killed mid-run: ``HostChannel.attach``), else [] (the point starts over)."""
        roles = build_roles(point, self.hosts, run_id=self.run_id, marker=marker, scheduler_port=None,
                            interface=self.interface, ps_verbose=self.ps_verbose)
        by_host: dict[int, list[Role]] = {}
        for role in roles:
            by_host.setdefault(role.host_index, []).append(role)
        if not all(self.hosts[index].attach(marker, host_roles) for index, host_roles in by_host.items()):
            return []
        self.line_sink(f"[dist] {point.point_id}: attached to {len(roles)} role(s) of an earlier try "
                       f"(marker {marker}): nothing sent again")
        return roles

    def _launch_all(self, point: ScalingPoint, marker: str) -> tuple[int | None, list[Role]]:
        """Probe the scheduler's port (distributed points), launch every role, scheduler first."""
        port = None
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
        return port, roles

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

        def every_record() -> list[dict[str, Any]] | None:
            """One look at every role; the workers' records once all have one, else None."""
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
            return None

        done = poll_until(every_record, every_s=self.poll_interval_s, deadline=deadline, clock=self._clock)
        if done is None:
            running = [r.name for r in roles if r.is_worker and r.name not in records]
            raise DistributedRunError(
                f"point {point.point_id}: time limit of {point.timeout_s:.0f}s exceeded; "
                f"{', '.join(running)} still running; every process was stopped")
        return done

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
