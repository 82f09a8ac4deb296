"""What every step of the target group shares: the target rebuilt from the plan, the phases each
step times written into the lake's ``run_phases``, and where ``collect`` stages results for
``ingest``.

* Every step that runs a target's step (prepare, deploy, the sweeps, terminate) writes the
  phases the target timed when it ends, failed or not (``targets.phases``): a run that failed in
  provisioning still shows what it cost, and the teardown's row arrives last.
* A deferred step (a sweep, ec2's prepare, a deploy) is timed from its start in the first part
  of the task to the end of the resumed part, the wait in the triggerer included.

The library modules that pull in heavy dependencies (the lake: pyarrow; ec2: boto3) are imported
inside the functions, so the DAG files that import the pipeline parse fast.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from typing import Any

from gpucompare import settings

log = logging.getLogger(__name__)


def target_of(plan: dict[str, Any]) -> Any:
    """The plan's target, its progress lines going to the task's log."""
    from gpucompare.targets import make_target

    return make_target(plan["spec"], line_sink=lambda line: log.info("%s", line))


def state_of(data: dict[str, Any]) -> Any:
    """A ``TargetState`` from the JSON a step returned (XCom)."""
    from gpucompare.targets.base import TargetState

    return TargetState.from_dict(data)


@contextlib.contextmanager
def phases_recorded(plan: dict[str, Any], target: Any, dag_run_id: str,
                    market: str | None = None) -> Iterator[None]:
    """After the block, returned or raised: the phases ``target`` timed in it go into the lake's
    ``run_phases`` (a failure to write them is only logged, see ``targets.phases``)."""
    try:
        yield
    finally:
        from gpucompare.targets.bundle import local_code_hash
        from gpucompare.targets.phases import PhaseContext, record_quietly

        context = PhaseContext.of(plan["spec"], plan["run_id"], market=market, dag_run_id=dag_run_id,
                                  code_hash=local_code_hash())
        record_quietly(settings.lake_uri(), target.phases, context)


@contextlib.contextmanager
def phase_if_failed(target: Any, phase: str) -> Iterator[None]:
    """Time the block as ``phase`` only if it raises: when it returns, the task defers and the
    resumed task records the phase from its start (``deferred_phase``)."""
    with target.phases.timed(phase) as record:
        yield
    target.phases.records.remove(record)


@contextlib.contextmanager
def deferred_phase(target: Any, phase: str, began: float) -> Iterator[Any]:
    """A phase of a deferred step: from ``began`` (epoch seconds, in the first part of the task)
    to the end of the resumed one, recorded whether it ended or raised (less the parts the
    machine timed apart, ``PhaseLog.split``)."""
    from datetime import UTC, datetime

    record = None
    try:
        with target.phases.timed(phase) as record:
            record.started_at = datetime.fromtimestamp(began, UTC).isoformat()
            yield record
    finally:
        if record is not None:
            record.seconds = max(0.0, time.time() - began - record.excluded_s)


def staged_results_location(plan: dict[str, Any]) -> str:
    """Where collect leaves a target's results for ingest: under ``GPUCOMPARE_STAGING``, a local
    folder or an ``s3://`` prefix (Airflow run ids hold ':' and '+', hence the substitution)."""
    from gpucompare.targets.runs import run_key

    return f"{settings.staging_uri().rstrip('/')}/{run_key(plan['run_id'])}/results.jsonl"


def delete_run_objects(plan: dict[str, Any]) -> None:
    """After a successful ingest, delete the run's objects the target staged remotely (ec2:
    results, progress and SSM output in the results bucket). A failure is only logged: the
    results are safe in the lake, and the bucket's lifecycle rule removes what is left."""
    try:
        target_of(plan).delete_run_objects(plan["run_id"])
    except Exception as exc:
        log.warning("Could not delete the staged objects of run %s: %s", plan["run_id"], exc)
