"""A spot reclaim during the deploy (issue 32): the instance lost while its deploy runs, in the
task (``Ec2Target.deploy``) or in the DAG's deferred deploy step (``DeployOperator``), gets a
replacement, launched and deployed; the lost deploy is the night's ``reclaim``/``lost`` phase and
the replacement's launch and deploy ``reclaim`` phases; past ``max_reclaims`` the night gives up.

Moto's server stands in for EC2, SSM and S3, behind the fault proxy with the stand-in SSM agent
(``working_instances``: the instances' commands run on this machine). A reclaim is stood in for by
TerminateInstances at moto while the deploy command runs: the command goes on running on this
machine (the instances share its disk) until the deploy's wait, seeing the instance gone, cancels
it, as it would a command on AWS that never reports back.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gpucompare.targets.base import TargetState
from gpucompare.targets.ec2 import target as ec2
from gpucompare.targets.ec2.reclaim import ReclaimLimitReached
from tests.conftest import BENCH_PYTHON
from tests.integration.targets.test_ec2_reclaim import _lake_rows, _Ti
from tests.support.ec2_support import ec2_spec, live_instances, new_run_id
from tests.support.target_helpers import held_worker, wait_for


def _deploy_target(working: dict[str, Any], root: Path, **options: Any) -> ec2.Ec2Target:
    """A target whose deploy's worker check waits 4 s, so a deploy is certainly still running
    when the test reclaims its instance (and when the wait first looks at it)."""
    account = working["account"]
    python = held_worker(root.parent / f"{root.name}-python", BENCH_PYTHON, wait="sleep 4",
                         why="4 s (the reclaim lands mid-deploy)", command="sysinfo")
    return ec2.Ec2Target(ec2_spec(account["profile"], account["bucket"], market="spot", remote_root=str(root),
                                  bench_python=str(python), **options))


def _reclaim_when_deploying(working: dict[str, Any], aws_client: Any, instance_id: str) -> threading.Thread:
    """Terminate the instance once its deploy command runs (at moto: the command goes on running
    until the wait, seeing the instance gone, cancels it). The instances share this machine's
    disk, so the replacement finds the bundle the lost one fetched; its deploy still runs."""
    def reclaim() -> None:
        wait_for(lambda: any(i.comment.startswith("gpucompare deploy") and i.instance_id == instance_id
                             for i in working["agent"].running()), 120, "the deploy's command")
        aws_client("ec2").terminate_instances(InstanceIds=[instance_id])

    thread = threading.Thread(target=reclaim, daemon=True)
    thread.start()
    return thread


def _deployed_on(working: dict[str, Any], instance_id: str) -> list[str]:
    """The statuses of the deploy commands the instance ran."""
    return [i.status() for i in list(working["agent"].invocations.values())
            if i.instance_id == instance_id and i.comment.startswith("gpucompare deploy")]


def test_a_reclaim_during_the_deploy_is_replaced_and_deployed(working_instances: dict[str, Any],
                                                              aws_client: Any, tmp_path: Path) -> None:
    """Before: the deploy's wait did not look at the instance: it waited for a command of a
    terminated instance (up to ``deploy_timeout_s`` on AWS), then failed, and the night was lost
    for that target."""
    proxy, root, run_id = working_instances["proxy"], tmp_path / "instance-root", new_run_id()
    target = _deploy_target(working_instances, root)
    state = target.prepare(run_id)
    first = state.resource_id
    try:
        thread = _reclaim_when_deploying(working_instances, aws_client, first)
        state = target.deploy(state)
        thread.join(5)
    finally:
        target.teardown(state)
    (reclaim,) = state.extra["reclaims"]
    phases = [(r.phase, r.status) for r in target.phases.records]
    print(f"\nreclaim during the deploy (in the task): launches {proxy.launches}, SendCommand "
          f"{proxy.count('SendCommand')}, lost {reclaim['lost_s']} s, phases {phases}, left running "
          f"{len(live_instances(aws_client, run_id))}")
    # the lost deploy relabelled, the replacement's launch and deploy its cost, then the teardown
    assert phases == [("provision", "ok"), ("reclaim", "lost"), ("reclaim", "ok"), ("reclaim", "ok"),
                      ("teardown", "ok")]
    assert reclaim["instance_id"] == first and reclaim["step"] == "deploy" and reclaim["lost_s"] > 0
    assert state.resource_id != first and proxy.launches == 2
    assert _deployed_on(working_instances, first) == ["Cancelled"]  # by the wait that saw it gone
    assert _deployed_on(working_instances, state.resource_id) == ["Success"] and state.workdir
    assert live_instances(aws_client, run_id) == [] and working_instances["agent"].running() == []


async def _first_event(trigger: Any) -> dict[str, Any]:
    async for event in trigger.run():
        return event.payload
    raise AssertionError("no event")


def test_the_deferred_deploy_step_replaces_an_instance_reclaimed_during_its_wait(
        working_instances: dict[str, Any], aws_client: Any, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The DAG's deploy step (``DeployOperator``): its first part sends the deploy and defers; the
    instance is reclaimed during the wait, which the step's own trigger (``SsmSweepTrigger``)
    runs here as the triggerer would, until its event; ``resume`` launches the replacement and
    deploys on it. Before: the step failed and the night was lost."""
    from airflow.sdk.exceptions import TaskDeferred

    from gpucompare.airflow.operators import DeployOperator

    monkeypatch.setenv("GPUCOMPARE_LAKE", str(tmp_path / "lake"))
    proxy, root, run_id = working_instances["proxy"], tmp_path / "instance-root", new_run_id()
    target = _deploy_target(working_instances, root)
    state = target.prepare(run_id)
    plan = {"spec": target.spec.to_dict(), "run_id": run_id, "profile": "tiny", "sweeps": {}}
    step = DeployOperator(task_id="deploy", plan=plan, state=state.to_dict())
    context = {"ti": _Ti(), "dag_run": SimpleNamespace(run_id=run_id)}
    done: dict[str, Any] = {}
    try:
        thread = _reclaim_when_deploying(working_instances, aws_client, state.resource_id)
        with pytest.raises(TaskDeferred) as deferred:
            step.execute(context)
        thread.join(120)
        event = asyncio.run(_first_event(deferred.value.trigger))
        done["state"] = step.resume(context, event)
    finally:
        target.teardown(TargetState.from_dict(done.get("state", state.to_dict())))
    replacement = done["state"]["resource_id"]
    _, rows = _lake_rows(tmp_path / "lake")  # the step's rows, written when the resumed step ended
    print(f"\nreclaim in the deferred deploy step: launches {proxy.launches}, SendCommand "
          f"{proxy.count('SendCommand')}, rows {[(r['phase'], r['status']) for r in rows]}, left running "
          f"{len(live_instances(aws_client, run_id))}")
    assert [(r["phase"], r["status"]) for r in rows] == [
        ("reclaim", "lost"), ("reclaim", "ok"), ("reclaim", "ok")]
    assert replacement != state.resource_id and proxy.launches == 2
    assert [r["instance_id"] for r in done["state"]["extra"]["reclaims"]] == [state.resource_id]
    assert _deployed_on(working_instances, state.resource_id) == ["Cancelled"]  # by the resumed step
    assert _deployed_on(working_instances, replacement) == ["Success"]
    assert live_instances(aws_client, run_id) == [] and working_instances["agent"].running() == []


def test_a_reclaim_before_the_deploy_past_max_reclaims_gives_up_sending_nothing(
        working_instances: dict[str, Any], aws_client: Any, tmp_path: Path) -> None:
    proxy, run_id = working_instances["proxy"], new_run_id()
    target = _deploy_target(working_instances, tmp_path / "instance-root", max_reclaims=0)
    state = target.prepare(run_id)
    try:
        aws_client("ec2").terminate_instances(InstanceIds=[state.resource_id])  # between the steps
        with pytest.raises(ReclaimLimitReached, match=r"during its deploy.*max_reclaims=0 allows"):
            target.deploy(state)
    finally:
        target.teardown(state)
    print(f"\nreclaim before the deploy past max_reclaims=0: launches {proxy.launches}, "
          f"SendCommand {proxy.count('SendCommand')}, left running {len(live_instances(aws_client, run_id))}")
    assert proxy.launches == 1 and proxy.count("SendCommand") == 0
    assert live_instances(aws_client, run_id) == []
