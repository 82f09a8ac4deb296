"""Phase timing of a target's run: how long each step took, and whether the machine was paid for.

Every target times its own steps with :func:`timed_phase` (a decorator on ``prepare``,
``deploy``, ``run_sweep`` and ``teardown``): ``prepare`` is the ``provision`` phase (request →
the machine answers over SSH or SSM), ``deploy`` the bundle and environment build (a container
runtime's image pull is a ``pull`` phase of its own; on ec2, where one command does both, the
instance times the pull and :meth:`PhaseLog.split` carves it out of ``deploy``), each
``run_sweep`` a ``sweep`` (the worker's wall time; its configurations' setup, warm-up and timed
seconds are in their records), ``teardown`` the giving back. A machine lost mid-sweep (an ec2
spot reclaim, ``targets.ec2.reclaim``) makes a ``reclaim`` phase of the interrupted sweep
(status ``lost``: :meth:`PhaseLog.lost`) and of the replacement's provision, deploy and pull
(:meth:`PhaseLog.reclaiming`). A step that raises is recorded
too, as ``failed``, with its error: a provisioning failure is still a phase that took time
and, once an instance exists, money.

The records collect in the target's :class:`PhaseLog` (``Target.phases``), which is plain
memory: :func:`write_recorded` turns them into ``run_phases`` rows (``lake.phases``). The
pipeline calls it at the end of every task, teardown included, so the teardown's row reaches
the lake after the results' ingest, in a small append of its own.

Which phases are billed (``BILLED_PHASES``): an ec2 instance is paid for from its launch to
its termination, so every ec2 phase once an instance exists (``provision`` only from the
moment ``prepare`` launched or found one: :meth:`PhaseLog.mark_billed`); a rented ssh host or
this machine is charged to a run for its sweeps' wall time only (the host is paid for anyway;
the campaign report prices what the run used of it).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from gpucompare.lake.schema import LOST_STATUS, RECLAIM_PHASE, RUN_LEVEL_PHASES

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])

#: Phases during which the machine is paid for, per kind of target (see the module docstring).
BILLED_PHASES: Mapping[str, frozenset[str]] = {
    "ec2": frozenset(RUN_LEVEL_PHASES),
    "ssh": frozenset({"sweep"}),
    "local": frozenset({"sweep"}),
}
#: The phases of a replacement machine (launch and readiness, deploy, image pull) that count as
#: the reclaim that made it necessary (``PhaseLog.reclaiming``).
REPLACEMENT_PHASES = frozenset({"provision", "deploy", "pull"})
#: (kind, phase) whose billing starts only when the target says so (mark_billed): an ec2
#: provisioning that failed before RunInstances cost nothing.
BILLED_WHEN_MARKED = frozenset({("ec2", "provision")})
_ERROR_MAX = 500


@dataclass
class PhaseRecord:
    """One timed step: wall-clock start and end (UTC), monotonic seconds, billed, outcome."""

    phase: str
    started_at: str
    finished_at: str | None = None
    seconds: float | None = None
    billed: bool = False
    status: str = "running"
    error: str | None = None
    #: seconds of parts timed apart while this phase ran (``PhaseLog.split``), not counted twice
    excluded_s: float = field(default=0.0, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class PhaseLog:
    """The phases one target object timed, in the order they started."""

    kind: str
    records: list[PhaseRecord] = field(default_factory=list)
    _open: list[PhaseRecord] = field(default_factory=list, repr=False)

    @contextlib.contextmanager
    def timed(self, phase: str) -> Iterator[PhaseRecord]:
        """Time the block as ``phase``; the record is kept whether the block returns or raises."""
        billed = (phase in BILLED_PHASES.get(self.kind, frozenset())
                  and (self.kind, phase) not in BILLED_WHEN_MARKED)
        record = PhaseRecord(phase=phase, started_at=_now(), billed=billed)
        self.records.append(record)
        self._open.append(record)
        started = time.monotonic()
        try:
            yield record
        except BaseException as exc:
            record.status = "failed"
            record.error = f"{type(exc).__name__}: {exc}"[:_ERROR_MAX]
            raise
        else:
            record.status = "ok"
        finally:
            record.seconds = max(0.0, time.monotonic() - started - record.excluded_s)
            record.finished_at = _now()
            self._open.remove(record)

    def mark_billed(self) -> None:
        """From now on the machine is paid for: the phase being timed counts as billed."""
        for record in self._open:
            if record.phase in BILLED_PHASES.get(self.kind, frozenset()):
                record.billed = True

    def split(self, phase: str, began: float, ended: float) -> PhaseRecord:
        """A part of the phase being timed that the machine timed itself (epoch seconds: an ec2
        deploy's image pull, inside its one SSM command) recorded as ``phase`` of its own; the
        open phases' seconds exclude it (their start and end still span it)."""
        billed = phase in BILLED_PHASES.get(self.kind, frozenset())
        seconds = max(0.0, ended - began)
        record = PhaseRecord(phase=phase, started_at=_iso(began), finished_at=_iso(ended), seconds=seconds,
                             billed=billed, status="ok")
        for outer in self._open:
            outer.excluded_s += seconds
        self.records.append(record)
        return record

    def lost(self, began: float, step: str = "sweep") -> PhaseRecord:
        """The step during which the machine was lost, as phase ``reclaim`` with status ``lost``:
        the last record when it is the failed ``step`` (a ``sweep``, a ``deploy``) the loss ended
        (relabelled; it began at ``began``, epoch seconds, or later), else a new record from
        ``began`` to now (a step that found its machine dead before anything was timed)."""
        last = self.records[-1] if self.records else None
        if (last is not None and last.phase == step and last.status == "failed"
                and last.finished_at is not None and _epoch(last.started_at) >= began - 1.0):
            last.phase, last.status = RECLAIM_PHASE, LOST_STATUS
            return last
        now = time.time()
        record = PhaseRecord(phase=RECLAIM_PHASE, started_at=_iso(began), finished_at=_iso(now),
                             seconds=max(0.0, now - began),
                             billed=RECLAIM_PHASE in BILLED_PHASES.get(self.kind, frozenset()),
                             status=LOST_STATUS)
        self.records.append(record)
        return record

    @contextlib.contextmanager
    def reclaiming(self) -> Iterator[None]:
        """The records of a replacement machine's launch, deploy and pull begun in the block
        become phase ``reclaim`` when it ends, returned or raised (their status, times and
        billing kept): the night's cost of the machine it lost."""
        before = {id(record) for record in self.records}
        try:
            yield
        finally:
            for record in self.records:
                if id(record) not in before and record.phase in REPLACEMENT_PHASES:
                    record.phase = RECLAIM_PHASE

    def finished(self) -> list[PhaseRecord]:
        """The records of the steps that ended (a step still running has no end yet)."""
        return [r for r in self.records if r.finished_at is not None]

    def take(self) -> list[PhaseRecord]:
        """The finished records, removed from the log (so a second write does not repeat them)."""
        done = self.finished()
        self.records = [r for r in self.records if r.finished_at is None]
        return done


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat()


def _iso(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).isoformat()


def _epoch(iso: str) -> float:
    return dt.datetime.fromisoformat(iso).timestamp()


def timed_phase(phase: str) -> Callable[[F], F]:
    """Decorate a step of a ``Target``: its calls are timed as ``phase`` in ``self.phases``."""

    def decorate(method: F) -> F:
        @functools.wraps(method)
        def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
            with self.phases.timed(phase):
                return method(self, *args, **kwargs)

        return timed  # type: ignore[return-value]

    return decorate


@dataclass(frozen=True)
class PhaseContext:
    """The columns of a run's phase rows that the target's records do not hold."""

    run_id: str
    target: str
    kind: str
    provider: str
    instance_type: str
    region: str | None = None
    market: str | None = None
    dag_run_id: str | None = None
    code_hash: str | None = None

    @classmethod
    def of(cls, spec: Mapping[str, Any], run_id: str, *, market: str | None = None,
           dag_run_id: str | None = None, code_hash: str | None = None) -> PhaseContext:
        """From a target spec (``TargetSpec.to_dict()``); ``market``: what the run got."""
        return cls(run_id=run_id, target=spec["name"], kind=spec["kind"], provider=spec["provider"],
                   instance_type=spec["instance_type"], region=spec.get("region"),
                   market=market or spec.get("market"), dag_run_id=dag_run_id, code_hash=code_hash)


def phase_rows(records: list[PhaseRecord], context: PhaseContext) -> list[dict[str, Any]]:
    """``run_phases`` rows (``schema.RUN_PHASES_SCHEMA`` but the key) of finished records."""
    base = {"run_id": context.run_id, "dag_run_id": context.dag_run_id, "target": context.target,
            "kind": context.kind, "provider": context.provider, "instance_type": context.instance_type,
            "region": context.region, "market": context.market, "code_hash": context.code_hash,
            "config_id": None}
    return [base | {"phase": r.phase, "started_at": r.started_at, "finished_at": r.finished_at,
                    "seconds": r.seconds, "billed": r.billed, "status": r.status, "error": r.error}
            for r in records if r.finished_at is not None]


def write_recorded(lake_uri: str, phases: PhaseLog, context: PhaseContext) -> Any:
    """Write the log's finished records into the lake's ``run_phases`` (one commit; see
    ``lake.phases.write_phases``) and take them out of the log; returns the write summary."""
    from gpucompare.lake.phases import write_phases
    from gpucompare.lake.tables import open_lake

    records = phases.finished()
    summary = write_phases(open_lake(lake_uri), phase_rows(records, context))
    phases.take()
    return summary


def record_quietly(lake_uri: str, phases: PhaseLog, context: PhaseContext) -> None:
    """``write_recorded``, but a failure is only logged: the timing of a step must never fail
    the step (a teardown must still count as done, a sweep's results must still be ingested)."""
    try:
        summary = write_recorded(lake_uri, phases, context)
    except Exception as exc:  # noqa: BLE001 - see the docstring
        log.warning("Could not record the phases of run %s in the lake: %s: %s", context.run_id,
                    type(exc).__name__, exc)
        return
    log.info("Phases of run %s: %s", context.run_id, summary.describe())
