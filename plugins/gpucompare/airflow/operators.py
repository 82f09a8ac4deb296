"""The steps of the target group that hand their wait to the triggerer: operators on Airflow's
public ``BaseOperator``, deferring with ``self.defer(trigger=…, method_name=…, timeout=…)``.

A deferring step runs in two short parts on a worker and waits in between in the triggerer:

* ``execute`` starts the work (``DeferrablePrepare.start_prepare``: the instance launched or
  found; ``DeferrableDeploy.start_deploy``: the environment build started on the host;
  ``DeferrableTarget.start_sweep``: the sweep started, re-attached or reused), keeps what
  the resumed part needs in its own XCom (``WAIT_XCOM_KEY``: the state and the wait's handle) and
  defers to the trigger of that wait, which the target describes (``sweep_wait``, …) and
  ``airflow.triggers.trigger_for`` builds;
* ``resume`` takes the trigger's event and ends the step (``finish_prepare``, ``finish_deploy``,
  ``finish_sweep``):
  the next state, or the target's error (an error event included), after which the group's
  ``terminate`` tears the machine down.

The plan and the step's input state are the operator's template fields (the group's mapped
argument and the previous step's XCom, rendered again when the task resumes), so they travel
once; the trigger's event carries only what the wait found. The deferral's ``timeout`` is the
wait's own deadline plus the setting ``deferral_margin_s`` (300 s): the trigger ends a wait at its
deadline with an error event (and cancels or kills what it abandons), and Airflow's timeout is the
backstop for a trigger that cannot (a triggerer that lost it, a deadline it did not see).

A target that cannot defer (``local``: the sweep is the task's own child process) runs the
whole step in ``execute``; which targets can is declared (``targets.base.DeferrableTarget``,
``DeferrablePrepare``), never probed.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, NoReturn

from airflow.sdk import BaseOperator

from gpucompare.airflow.policy import bad_input_fails
from gpucompare.airflow.staging import deferred_phase, phase_if_failed, phases_recorded, state_of, target_of

log = logging.getLogger(__name__)

#: The XCom key under which a deferring step keeps the state and the wait's handle for its
#: resumed part (XCom of a task that defers is kept until the task ends).
WAIT_XCOM_KEY = "gpucompare_wait"


def deferral_timeout(deadline: float, *, now: float | None = None) -> timedelta:
    """The deferral's timeout for a wait whose own deadline is ``deadline`` (epoch seconds): past it
    by the setting ``deferral_margin_s``, time for the trigger's deadline event (a cancelled SSM
    command, a killed sweep and their last log lines) to arrive before Airflow fails the task."""
    from gpucompare import settings

    remaining = max(0.0, float(deadline) - (time.time() if now is None else now))
    return timedelta(seconds=remaining + settings.deferral_margin_s())


def handle_json(started: Any) -> dict[str, Any]:
    """What a ``start_*`` returned, as JSON (a dataclass, as ec2's ``SweepStart``, or a dict)."""
    if dataclasses.is_dataclass(started) and not isinstance(started, type):
        return dataclasses.asdict(started)
    return dict(started)


class TargetStepOperator(BaseOperator):
    """A step of one target's run (the group's mapped ``plan``, the previous step's ``state``).

    :param plan: the target's plan (``config.fleet.plan_target``): spec, run id, sweeps
    :param state: the state the previous step returned (``TargetState.to_dict()``), if any
    """

    template_fields: Sequence[str] = ("plan", "state")
    ui_color = "#e8f0fe"

    def __init__(self, *, plan: Any, state: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.plan = plan
        self.state = state

    @property
    def target_name(self) -> str:
        return self.plan["spec"]["name"]

    def name_map_index(self, context: Any) -> None:
        """The UI shows the mapped step under its target's name (``map_index_template``)."""
        context["target_name"] = self.target_name

    def recorded(self, context: Any, target: Any, market: str | None = None) -> Any:
        """The step's phases into ``run_phases`` when the block ends (``staging.phases_recorded``)."""
        return phases_recorded(self.plan, target, context["dag_run"].run_id, market)

    def defer_wait(self, context: Any, *, state: dict[str, Any], started: dict[str, Any],
                   wait: dict[str, Any]) -> NoReturn:
        """Keep ``state`` and ``started`` for ``resume`` and defer to the trigger of ``wait`` (the
        target's description of it), with a timeout of the wait's deadline plus ``deferral_margin_s``."""
        from gpucompare.airflow.triggers import trigger_for

        context["ti"].xcom_push(key=WAIT_XCOM_KEY, value={"state": state, "started": started})
        self.defer(trigger=trigger_for(wait), method_name="resume",
                   timeout=deferral_timeout(started["deadline"]))

    def resumed(self, context: Any, phase: str, finish: Callable[[Any, Any, dict[str, Any]], Any],
                *, billed: bool = False,
                recover: Callable[[Any, Any, dict[str, Any], Exception], Any] | None = None,
                ) -> tuple[Any, dict[str, Any]]:
        """The resumed part of a deferred step: the kept state and handle, ``finish(target, state,
        started)`` (the target's ``finish_*`` with the event) inside the step's recording, its
        ``phase`` timed from the first part's start (``billed``: the machine existed since then).
        When ``finish`` raises and ``recover`` is given, ``recover(target, state, started, error)``
        ends the step instead, with the same target and inside the same recording (so it can
        relabel the failed phase before anything is written). Returns the next state and the handle."""
        self.name_map_index(context)
        state, started = self.waited(context)
        target = target_of(self.plan)
        with self.recorded(context, target, state.get("market")), bad_input_fails():
            try:
                with deferred_phase(target, phase, float(started["began"])):
                    if billed:
                        target.phases.mark_billed()
                    return finish(target, state_of(state), started), started
            except Exception as exc:
                if recover is None:
                    raise
                return recover(target, state_of(state), started, exc), started

    def waited(self, context: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """The state and handle ``defer_wait`` kept, for the resumed part."""
        ti = context["ti"]
        kept = ti.xcom_pull(task_ids=self.task_id, key=WAIT_XCOM_KEY, map_indexes=ti.map_index)
        if not kept:
            raise RuntimeError(f"{self.task_id}: resumed without the state its first part kept "
                               f"(XCom {WAIT_XCOM_KEY!r})")
        return kept["state"], kept["started"]


class PrepareOperator(TargetStepOperator):
    """Provision or reach the machine (the cost guard first for paid ones). A target whose machine
    takes minutes to come up (``DeferrablePrepare``: ec2) launches it here and defers the wait
    (instance running, SSM agent online); the others prepare in ``execute``."""

    def execute(self, context: Any) -> dict[str, Any]:
        from gpucompare.targets.base import DeferrablePrepare

        self.name_map_index(context)
        target = target_of(self.plan)
        with self.recorded(context, target), bad_input_fails():
            if not isinstance(target, DeferrablePrepare):
                state = target.prepare(self.plan["run_id"])
                log.info("Prepared %s: resource %s, market %s", self.target_name, state.resource_id,
                         state.market)
                return state.to_dict()
            began = time.time()
            with phase_if_failed(target, "provision"):
                state, started = target.start_prepare(self.plan["run_id"])
        log.info("Launched or found %s for %s; waiting in the triggerer until it is usable",
                 state.resource_id, self.target_name)
        self.defer_wait(context, state=state.to_dict(), started={**started, "began": began},
                        wait=target.prepare_wait(state, started))

    def resume(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        # billed: the instance existed since the first part
        done, _ = self.resumed(context, "provision",
                               lambda target, state, _: target.finish_prepare(state, event), billed=True)
        log.info("Prepared %s: resource %s, market %s", self.target_name, done.resource_id, done.market)
        return done.to_dict()


class DeployOperator(TargetStepOperator):
    """Put the worker and its environment on the machine (idempotent). A ``DeferrableDeploy``
    (ssh, ec2) uploads the code here and, when the environment may have to be built (a pip install of
    minutes; on ec2 always, a container runtime's image pull too), starts the build on the host and
    defers its wait; the others deploy in ``execute``. A machine lost during the deploy (a spot
    reclaim) is replaced and deployed in the task by a ``RecoverableDeploy`` (``recovered_deploy``)."""

    def execute(self, context: Any) -> dict[str, Any]:
        from gpucompare.targets.base import DeferrableDeploy

        self.name_map_index(context)
        target = target_of(self.plan)
        with self.recorded(context, target, self.state.get("market")), bad_input_fails():
            current = state_of(self.state)
            if not isinstance(target, DeferrableDeploy):
                return target.deploy(current).to_dict()
            began = time.time()
            try:
                with phase_if_failed(target, "deploy"):
                    current, started = target.start_deploy(current)
            except Exception as exc:  # the machine is gone (a spot reclaim): a replacement, in the task
                return recovered_deploy(target, current, began, exc).to_dict()
            if started is None:
                return current.to_dict()
            wait = target.deploy_wait(current, started)
        log.info("Deploying on %s: the environment build waits in the triggerer", self.target_name)
        self.defer_wait(context, state=current.to_dict(), started={**started, "began": began}, wait=wait)

    def resume(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        # the machine gone (a spot reclaim): a replacement, deployed in the task, the failed
        # deploy's record relabelled as the reclaim (``targets.ec2.reclaim``)
        done, _ = self.resumed(
            context, "deploy", lambda target, state, started: target.finish_deploy(state, started, event),
            recover=lambda target, state, started, error: recovered_deploy(
                target, state, float(started["began"]), error))
        return done.to_dict()


class SweepOperator(TargetStepOperator):
    """One sweep (``mode``: score or train) of the plan's profile. A ``DeferrableTarget`` (ssh,
    ec2) starts it here and defers the wait; ``resume`` ends it for seconds again. A sweep found
    finished is reused by its wait at once. The local target runs it in ``execute``.

    :param mode: ``score`` or ``train``: which of the plan's sweeps
    """

    def __init__(self, *, mode: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.mode = mode

    def execute(self, context: Any) -> dict[str, Any]:
        from gpucompare.targets.base import DeferrableTarget

        self.name_map_index(context)
        sweep = self.plan["sweeps"].get(self.mode)
        if sweep is None:
            log.info("Profile %s has no %s mode; nothing to run", self.plan["profile"], self.mode)
            return self.state
        log.info("Running the %s sweep of %s (time limit %.0f s)", self.mode, self.target_name,
                 sweep["timeout_s"])
        target = target_of(self.plan)
        with self.recorded(context, target, self.state.get("market")), bad_input_fails():
            current = state_of(self.state)
            if not isinstance(target, DeferrableTarget):
                return target.run_sweep(current, sweep["config"], timeout_s=sweep["timeout_s"]).to_dict()
            began = time.time()
            try:
                started = handle_json(target.start_sweep(current, sweep["config"],
                                                         timeout_s=sweep["timeout_s"]))
            except Exception as exc:  # the machine is gone (a spot reclaim): a replacement, in the task
                return recovered_sweep(target, current, sweep, began, exc).to_dict()
            wait = target.sweep_wait(current, started)
        log.info("%s sweep of %s: %s; waiting in the triggerer", self.mode, self.target_name,
                 started["decision"])
        self.defer_wait(context, state=current.to_dict(), started={**started, "began": began}, wait=wait)

    def resume(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        # the machine gone (a spot reclaim): a replacement, in the task, the failed sweep's record
        # still in the target's phases (recovered as the reclaim, ``targets.ec2.reclaim``)
        sweep = self.plan["sweeps"][self.mode]
        done, started = self.resumed(
            context, "sweep", lambda target, state, started: target.finish_sweep(state, started, event),
            recover=lambda target, state, started, error: recovered_sweep(
                target, state, sweep, float(started["began"]), error))
        log.info("%s sweep of %s finished (%s)", self.mode, self.target_name, started["decision"])
        return done.to_dict()


def recovered_sweep(target: Any, state: Any, sweep: dict[str, Any], began: float, error: Exception) -> Any:
    """After a sweep step failed with ``error``: a ``RecoverableSweep`` target (ec2) replaces a
    machine lost mid-sweep and runs the rest of the sweep in this task (``targets.ec2.reclaim``);
    any other error, or another target, fails the step with ``error``. The next state."""
    from gpucompare.targets.base import RecoverableSweep

    if not isinstance(target, RecoverableSweep):
        raise error
    return target.recover_sweep(state, sweep["config"], timeout_s=sweep["timeout_s"], began=began,
                                error=error)


def recovered_deploy(target: Any, state: Any, began: float, error: Exception) -> Any:
    """After a deploy step failed with ``error``: a ``RecoverableDeploy`` target (ec2) replaces a
    machine lost during the deploy and deploys on the replacement in this task
    (``targets.ec2.reclaim``); any other error, or another target, fails the step with ``error``.
    The next state."""
    from gpucompare.targets.base import RecoverableDeploy

    if not isinstance(target, RecoverableDeploy):
        raise error
    return target.recover_deploy(state, began=began, error=error)
