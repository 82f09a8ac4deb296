"""Every target's provisioning starts at once, within the pool (real Airflow scheduler logic).

``dag.test()`` runs one task at a time in this process, so its start times cannot show
whether two targets could have provisioned together. What decides that in production is
the scheduler: its dependency check (``DagRun.update_state``: which tasks may run) and its
critical section (``SchedulerJobRunner._executable_task_instances_to_queued``: which of those
it hands to the executor now, given the pool's free slots, the DAG's and the tasks'
concurrency limits and the executor's slots, by priority). This test runs the nightly DAG
with ``dag.test()`` to get a real run with its mapped target groups (the target steps marked
successful without running: they are not under test), puts the target steps back to their
state before any ran, and asks the scheduler's own code what it would start: everything it
queues in one pass starts together on an executor with free slots.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.fixtures_airflow import POOL_NAME, parse_again

pytestmark = pytest.mark.dag

TINY = {"networks": ["alexnet"], "batch_sizes": [1], "modes": ["score"], "warmup": 1,
        "batches": 1, "repeats": 1, "timeout_s": 120}


@pytest.fixture
def pool_slots(airflow_db) -> Iterator[Any]:
    """Set the pool's slots; afterwards, end what the test left queued (it holds pool slots)."""
    from airflow.models.pool import Pool
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState

    def set_slots(slots: int) -> None:
        Pool.create_or_update_pool(POOL_NAME, slots=slots, description="gpucompare test pool",
                                   include_deferred=True)

    yield set_slots
    with create_session() as session:
        for ti in session.query(TaskInstance).filter(TaskInstance.dag_id == "gpucompare_nightly",
                                                     TaskInstance.state.in_(("queued", "scheduled"))):
            ti.state = TaskInstanceState.SKIPPED
        session.commit()
    set_slots(2)  # the session's value (tests/support/fixtures_airflow.py)


def night_before_any_target_step(dagbag: Any, write_fleet: Any, targets: int,
                                 fleet: dict[str, Any] | None = None,
                                 monkeypatch: pytest.MonkeyPatch | None = None) -> tuple[Any, Any]:
    """A nightly run whose plans exist and whose target steps (and scaling groups) have not
    run yet. ``fleet``: more of the fleet file (its extra targets disabled); with
    ``monkeypatch``, the DAG is parsed again after the fleet file is written."""
    from airflow.models.dagbag import DBDagBag
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState

    boxes = [{"name": f"box-{i}", "kind": "local", "provider": "local", "instance_type": "local-cpu",
              "profile": "tiny"} for i in range(targets)]
    fleet = fleet or {}
    write_fleet({"max_instances": max(targets, 2), "profiles": {"tiny": TINY}, **fleet,
                 "targets": boxes + fleet.get("targets", [])})
    if monkeypatch is not None:
        parse_again(dagbag, "gpucompare_nightly", monkeypatch)
    dag = dagbag.dags["gpucompare_nightly"]
    run = dag.test(mark_success_pattern=r"target\..*|scaling_group")
    with create_session() as session:
        steps = session.query(TaskInstance).filter(
            TaskInstance.dag_id == dag.dag_id, TaskInstance.run_id == run.run_id,
            TaskInstance.task_id.like("target.%") | (TaskInstance.task_id == "scaling_group")).all()
        assert len({ti.map_index for ti in steps if ti.task_id != "scaling_group"}) == targets
        for ti in steps:
            ti.state = None
        dag_run = session.query(DagRun).filter(DagRun.dag_id == dag.dag_id,
                                               DagRun.run_id == run.run_id).one()
        dag_run.state = DagRunState.RUNNING
        session.commit()
    return dag_run, DBDagBag()


def schedule_and_queue(dag_run: Any, db_dagbag: Any) -> set[tuple[str, int]]:
    """One scheduler loop: the tasks whose dependencies are met become scheduled, then the
    critical section picks the ones to start now; returns those (task id, map index)."""
    from airflow.jobs.job import Job
    from airflow.jobs.scheduler_job_runner import SchedulerJobRunner
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState

    with create_session() as session:
        dag_run = session.merge(dag_run)
        dag_run.dag = db_dagbag.get_dag_for_run(dag_run, session=session)
        schedulable, _ = dag_run.update_state(session=session)
        for ti in schedulable:
            ti.try_number += 1
            ti.state = TaskInstanceState.SCHEDULED
        session.commit()
        runner = SchedulerJobRunner(job=Job())
        queued = runner._executable_task_instances_to_queued(max_tis=64, session=session)
        session.commit()
        return {(ti.task_id, ti.map_index) for ti in queued}


def finish(dag_run: Any, started: set[tuple[str, int]]) -> None:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState

    with create_session() as session:
        for task_id, map_index in started:
            ti = session.query(TaskInstance).filter(
                TaskInstance.dag_id == dag_run.dag_id, TaskInstance.run_id == dag_run.run_id,
                TaskInstance.task_id == task_id, TaskInstance.map_index == map_index).one()
            ti.state = TaskInstanceState.SUCCESS
        session.commit()


def test_every_target_provisions_at_once_when_the_pool_has_a_slot_each(
        dagbag, write_fleet, gpucompare_dirs, pool_slots) -> None:
    pool_slots(3)
    dag_run, db_dagbag = night_before_any_target_step(dagbag, write_fleet, targets=3)
    assert schedule_and_queue(dag_run, db_dagbag) == {("target.prepare", i) for i in range(3)}


def test_the_pool_caps_the_machines_and_a_started_target_goes_first(
        dagbag, write_fleet, gpucompare_dirs, pool_slots) -> None:
    """Two slots, three targets: two provision at once, the third waits; when the first two
    are up, their next steps take the slots before the third provisions (a machine that is
    up is paid for: it must not idle while another one is being started)."""
    pool_slots(2)
    dag_run, db_dagbag = night_before_any_target_step(dagbag, write_fleet, targets=3)
    started = schedule_and_queue(dag_run, db_dagbag)
    assert {task for task, _ in started} == {"target.prepare"} and len(started) == 2
    waiting = ({0, 1, 2} - {index for _, index in started}).pop()
    finish(dag_run, started)
    following = schedule_and_queue(dag_run, db_dagbag)
    assert following == {("target.deploy", index) for _, index in started}
    finish(dag_run, following)
    # still both slots for the two running machines (their sweeps), the third waits
    assert {task for task, _ in schedule_and_queue(dag_run, db_dagbag)} == {"target.score_sweep"}
    assert waiting not in {index for _, index in following}


def test_the_plan_says_when_the_pool_is_too_small_for_the_night() -> None:
    import logging

    from gpucompare.airflow import pipeline

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    pipeline.log.addHandler(handler)
    level = pipeline.log.level
    pipeline.log.setLevel(logging.INFO)
    try:
        pipeline.log_pool_fit(3, 3)
        pipeline.log_pool_fit(3, 2)
    finally:
        pipeline.log.removeHandler(handler)
        pipeline.log.setLevel(level)
    fits, short = records
    assert fits.levelname == "INFO" and "every target provisions at once" in fits.getMessage()
    assert short.levelname == "WARNING"
    assert "3 targets tonight but the pool gpucompare_instances has max_instances = 2 slots: 1 of them" \
        in short.getMessage()


def _two_host_group() -> dict[str, Any]:
    """A scaling group of two (disabled) ssh hosts; planning it connects to nothing."""
    hosts = [{"name": f"node{i}", "kind": "ssh", "provider": "loopback", "instance_type": "cpu-shared",
              "profile": "tiny", "enabled": False,
              "options": {"ssh_conn_id": f"node{i}", "remote_dir": f"/tmp/node{i}"}} for i in range(2)]
    return {"targets": hosts, "scaling_profiles": {"pair": {
        "networks": ["googlenet"], "scaling": ["weak"], "per_device_batch": 1, "servers": 1,
        "points": [{"nodes": 2, "devices_per_node": 1}], "warmup": 1, "batches": 1, "repeats": 1,
        "timeout_s": 150}},
        "scaling_groups": [{"name": "pair", "targets": ["node0", "node1"], "profile": "pair"}]}


@pytest.mark.parametrize("slots", [2, 3])
def test_a_scaling_group_takes_a_pool_slot_per_host(
        dagbag, write_fleet, gpucompare_dirs, pool_slots, monkeypatch, slots) -> None:
    """A 2-host scaling group beside one target: with 2 slots only one of them starts (the
    group holds both slots, or the target holds one and the group needs two); with 3 both do.
    Asked of the scheduler's own critical section, as above."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    pool_slots(slots)
    dag_run, db_dagbag = night_before_any_target_step(dagbag, write_fleet, 1, _two_host_group(),
                                                      monkeypatch)
    with create_session() as session:
        group = session.query(TaskInstance).filter(TaskInstance.run_id == dag_run.run_id,
                                                   TaskInstance.task_id == "scaling_group").one()
        assert group.pool_slots == 2
    started = schedule_and_queue(dag_run, db_dagbag)
    if slots == 2:
        assert started in ({("scaling_group", 0)}, {("target.prepare", 0)}), started
    else:
        assert started == {("scaling_group", 0), ("target.prepare", 0)}
