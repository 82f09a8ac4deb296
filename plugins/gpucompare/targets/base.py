"""The one interface every execution target implements; the DAGs talk to nothing else.

A run on a target goes: ``prepare`` (provision if needed) → ``deploy`` (put the worker
there) → ``run_sweep`` (stream its progress into the log, bounded by a time limit) →
``collect`` (bring the JSON Lines back) → ``teardown`` (give back what was paid for).

Every step is safe to retry. ``teardown`` is safe to call twice, or after a ``prepare``
that failed half-way. The state a target needs between steps (which may run in different
Airflow tasks, on different workers) lives in a ``TargetState`` that is plain JSON, so it
can travel through XCom.
"""

from __future__ import annotations

import abc
import logging
import shlex
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

from gpucompare.config import patterns
from gpucompare.errors import PermanentError
from gpucompare.targets.phases import PhaseLog

log = logging.getLogger(__name__)

#: Receives each progress line of the worker as it is printed (default: the module logger).
LineSink = Callable[[str], None]



def shell_quote(value: str | int | float) -> str:
    """One value quoted for a POSIX shell: every command a target or channel builds uses it."""
    return shlex.quote(str(value))

class TargetError(RuntimeError):
    """A step of a target failed; the message says which step and why (with stderr tail)."""


class TargetConfigError(TargetError, PermanentError):
    """A target's options or a sweep configuration are refused: no retry can fix that."""


class BudgetExceeded(TargetError, PermanentError):
    """The cost guard refused a run before anything was started."""


@dataclass
class TargetSpec:
    """What a fleet entry or a manual trigger says about one target (validated before use).

    ``kind`` is local | ssh | ec2. ``options`` holds the kind's own settings (for ssh:
    ``ssh_conn_id``, ``remote_dir``, ``use_docker``; for ec2: ``ami``, ``subnet_id``,
    ``security_group_ids``, ``aws_conn_id``, ``results_bucket``, ``ttl_minutes``,
    ``budget_cap``...).
    """

    name: str
    kind: str
    provider: str
    instance_type: str
    region: str | None = None
    market: str = patterns.DEFAULT_MARKET
    gpu_count: int = 0
    options: dict[str, Any] = field(default_factory=dict)
    #: a runtime of data/runtimes.csv, or auto (resolved by ``config.runtime_choice``)
    worker_runtime: str = "auto"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TargetSpec:
        return cls(**data)


@dataclass
class TargetState:
    """JSON-serialisable state carried between steps (through XCom in the DAGs).

    ``market`` is what the run actually got (a spot request may fall back to on-demand);
    ``resource_id`` is the instance id for ec2, the host for ssh, None for local.
    """

    spec: dict[str, Any]
    run_id: str
    resource_id: str | None = None
    market: str | None = None
    workdir: str | None = None
    remote_results: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TargetState:
        return cls(**data)


# -- the host channel (targets.channel): how a scaling run reaches a prepared host ----------

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


@dataclass(frozen=True)
class RoleStatus:
    state: str  # running | exit | missing
    exit_code: int | None = None


class HostChannel(Protocol):
    """One host of the group as the launcher sees it (SSH or SSM underneath). ``attach``: whether
    an earlier try's processes of these roles are found (running or done) and followed from now
    on, instead of the point starting over (SSM: by the commands' comments; SSH: never)."""

    label: str
    address: str  # how the other hosts of the group reach this one
    python: str
    code_dir: str

    def point_dir(self, marker: str) -> str: ...
    def free_port(self, start: int) -> int: ...
    def attach(self, marker: str, roles: Sequence[Role]) -> bool: ...
    def launch(self, role: Role, marker: str, kill_grace_s: float) -> None: ...
    def statuses(self, marker: str, roles: Sequence[Role]) -> dict[str, RoleStatus]: ...
    def worker_output(self, marker: str, role: Role) -> str: ...
    def log_tail(self, marker: str, role: Role) -> str: ...
    def stop(self, marker: str, grace_s: float) -> int: ...


@runtime_checkable
class DeferrableTarget(Protocol):
    """A target whose sweep can wait outside the task (in Airflow's triggerer): the ssh and ec2
    targets declare it, the local one does not (its sweep is a child process of the task).

    ``start_sweep`` is short: it starts the sweep (or re-attaches to it, or reuses it) and returns
    what the wait and the end need, JSON or a dataclass of JSON (with its ``deadline``, epoch
    seconds); ``sweep_wait`` describes the wait for a trigger (JSON with a ``kind``: nothing
    secret, no target object; ``airflow.triggers.trigger_for``); ``finish_sweep`` turns the
    wait's event into the next state or the target's error. ``run_sweep`` waits in the task.
    """

    def start_sweep(self, state: TargetState, sweep_config: dict[str, Any], *, timeout_s: float) -> Any: ...
    def sweep_wait(self, state: TargetState, started: Any) -> dict[str, Any]: ...
    def finish_sweep(self, state: TargetState, started: Any, event: dict[str, Any]) -> TargetState: ...


@runtime_checkable
class RecoverableSweep(Protocol):
    """A target that can replace a machine lost mid-sweep (ec2: a spot reclaim) and run the rest
    of the sweep there: ``recover_sweep`` is given the error the sweep ended with (``began``: when
    the sweep step started, epoch seconds) and returns the replacement's state, or raises that
    error again when the machine was not lost."""

    def recover_sweep(self, state: TargetState, sweep_config: dict[str, Any], *, timeout_s: float,
                      began: float, error: BaseException) -> TargetState: ...


@runtime_checkable
class RecoverableDeploy(Protocol):
    """A target that can replace a machine lost during its deploy (ec2: a spot reclaim between
    launch and sweep): ``recover_deploy`` is given the error the deploy ended with (``began``: when
    the deploy step started, epoch seconds) and returns the replacement's state, deployed, or
    raises that error again when the machine was not lost."""

    def recover_deploy(self, state: TargetState, *, began: float, error: BaseException) -> TargetState: ...


@runtime_checkable
class DeferrableDeploy(Protocol):
    """A target whose deploy may wait minutes (building the worker's environment: a pip install)
    outside the task: ``start_deploy`` uploads the code and starts the long part detached,
    returning the state and what the wait needs (None: nothing to wait for, the deploy is done);
    ``deploy_wait`` describes the wait for a trigger; ``finish_deploy`` ends it."""

    def start_deploy(self, state: TargetState) -> tuple[TargetState, dict[str, Any] | None]: ...
    def deploy_wait(self, state: TargetState, started: dict[str, Any]) -> dict[str, Any]: ...
    def finish_deploy(self, state: TargetState, started: dict[str, Any],
                      event: dict[str, Any]) -> TargetState: ...


@runtime_checkable
class DeferrablePrepare(Protocol):
    """A target whose machine takes minutes to become usable (ec2): ``start_prepare`` launches
    or finds it and returns its state and what the wait needs (``{"instance_id", "deadline"}``);
    ``prepare_wait`` describes the wait for a trigger (as ``DeferrableTarget.sweep_wait``);
    ``finish_prepare`` turns the wait's event into the state, or tears the machine down and raises."""

    def start_prepare(self, run_id: str) -> tuple[TargetState, dict[str, Any]]: ...
    def prepare_wait(self, state: TargetState, started: dict[str, Any]) -> dict[str, Any]: ...
    def finish_prepare(self, state: TargetState, event: dict[str, Any]) -> TargetState: ...


class Target(abc.ABC):
    """A place where ``python -m bench_tasks sweep`` can run."""

    kind: str = ""

    def __init__(self, spec: TargetSpec, *, line_sink: LineSink | None = None) -> None:
        self.spec = spec
        self.line_sink: LineSink = line_sink or log.info
        #: how long each step took (targets.phases): the pipeline writes it to run_phases
        self.phases = PhaseLog(self.kind)

    @abc.abstractmethod
    def prepare(self, run_id: str) -> TargetState:
        """Provision or reach the machine; return the state for the next steps."""

    @abc.abstractmethod
    def deploy(self, state: TargetState) -> TargetState:
        """Put the worker code and its environment on the machine (idempotent)."""

    @abc.abstractmethod
    def run_sweep(self, state: TargetState, sweep_config: dict[str, Any], *,
                  timeout_s: float) -> TargetState:
        """Run ``python -m bench_tasks sweep`` with this config, streaming progress lines."""

    @abc.abstractmethod
    def collect(self, state: TargetState, local_path: str) -> str:
        """Copy the run's JSON Lines results to ``local_path``; return that path."""

    def channel(self, state: TargetState, *, address: str | None = None) -> HostChannel:
        """How a scaling run reaches this prepared and deployed host (``targets.channel``):
        over the target's own connection. ``address``: how the group's other hosts reach it."""
        raise TargetError(f"kind: a scaling group runs on ssh or ec2 targets, not {self.kind!r}")

    @abc.abstractmethod
    def teardown(self, state: TargetState | None) -> None:
        """Release what ``prepare`` took. Safe twice, and with a partial or absent state."""

    def delete_run_objects(self, run_id: str) -> int:
        """Delete what the run left in remote storage once its results are in the lake (only
        targets that stage results remotely have any); returns how many objects went."""
        return 0
