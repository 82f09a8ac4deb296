"""After the run's instance was lost mid-sweep or during its deploy (a spot reclaim, an instance
that vanished): a replacement within the same night, and the rest of the sweep on it.

``Reclaims.recover`` (called by ``Ec2Target.recover_sweep`` when a sweep ends because its
instance is gone, ``lost``):

1. records the loss in ``state.extra["reclaims"]`` (``counted``): the instance, its market, its
   writer (whose uploaded records stay the run's: the finished sweeps' ``results.jsonl`` and the
   running sweep's records so far, ``RunStorage.lost_records``), the step it was lost in and the
   seconds that step ran before it was lost;
2. gives up (``ReclaimLimitReached``, a permanent error naming ``max_reclaims``) when the night
   has already lost ``max_reclaims`` instances;
3. launches the replacement with the target's own ``prepare`` (the cost guard, then
   ``Ec2Launcher.find_or_launch``: the dead instance gives the launch plan a new idempotency
   token; spot again, or on-demand when spot capacity is refused, as for the first launch) and
   waits for it and deploys on it here, in the task, within ``launch_timeout_s`` +
   ``agent_timeout_s`` and ``deploy_timeout_s`` (bounded; deferring these waits a second time
   would need a second trigger round-trip inside the sweep step for no saving: a replacement is
   rare and its waits are minutes);
4. counts what the loss cost in the night's phases (``targets.phases``): the lost instance's
   interrupted step (its failed ``sweep`` record, or, when nothing was timed, the time since
   ``began``) becomes a ``reclaim`` record with status ``lost``, and the replacement's
   ``provision``, ``deploy`` and ``pull`` records are ``reclaim`` records too; the records are
   still in ``target.phases``, written to the lake when the step's recording ends;
5. runs what is left of the sweep (``targets.resume.remaining_sweep``: the configurations
   without an ``ok`` record of a lost writer) on the replacement, in the task.

``RunStorage.collect`` then merges the lost writers' ``ok`` records with the replacement's, so
every configuration of the night appears exactly once.

``Reclaims.redeploy`` (called by ``Ec2Target.recover_deploy`` when a deploy ends because its
instance is gone: the DAG's deploy step, in-task or resumed, or a replacement's own deploy) does
steps 1 to 4 (its failed ``deploy`` record the ``lost`` one) and returns the deployed
replacement: nothing was measured, the sweeps run as planned.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from gpucompare.errors import PermanentError
from gpucompare.targets import resume
from gpucompare.targets.base import TargetError, TargetState
from gpucompare.targets.ec2 import states

log = logging.getLogger(__name__)


#: how the messages say when an instance was lost, by the step it was lost in
_DURING = {"sweep": "mid-sweep", "deploy": "during its deploy"}


class ReclaimLimitReached(TargetError, PermanentError):
    """The night lost more instances than its ``max_reclaims`` allows: no replacement."""


def is_lost(target: Any, state: TargetState, error: BaseException) -> bool:
    """Whether ``error`` ended the sweep because the run's instance is gone (not running any
    more): only then is a replacement the answer. A bad sweep config never is."""
    from gpucompare.targets.base import TargetConfigError
    from gpucompare.targets.ec2.readiness import InstanceLost

    if isinstance(error, InstanceLost):
        return True
    if not isinstance(error, TargetError) or isinstance(error, TargetConfigError) or not state.resource_id:
        return False
    return not states.is_alive(target.readiness.state_of(states.instance_id_of(state)))


class Reclaims:
    """The recovery of one ``Ec2Target`` (see the module docstring)."""

    def __init__(self, target: Any) -> None:
        self.target = target

    def record(self, state: TargetState, *, began: float, lost: BaseException) -> list[dict[str, Any]]:
        """The night's reclaims with this one added (not yet stored in any state)."""
        entry = {"instance_id": state.resource_id, "market": state.market,
                 "writer": state.extra.get("writer"), "lost_s": round(max(0.0, time.time() - began), 3),
                 "error": str(lost)[:300]}
        return [*state.extra.get("reclaims", []), entry]

    def recover(self, state: TargetState, sweep_config: dict[str, Any], *, timeout_s: float,
                began: float, lost: BaseException) -> TargetState:
        """A replacement instance and the rest of the sweep on it; the state of the replacement
        (its ``reclaims`` carried over) with the sweep's results location."""
        target = self.target
        target.phases.lost(began)  # the interrupted step: phase reclaim, status lost
        reclaims = self.counted(state, began=began, lost=lost, step="sweep")
        # the dead instance gives a new client token; a failure after the launch leaves the
        # replacement to the DAG's teardown, which reaches every instance tagged with the run
        with target.phases.reclaiming():  # the replacement's launch and deploy: phase reclaim
            replacement = target.prepare(state.run_id)
            replacement.extra["reclaims"] = reclaims
            replacement = target.deploy(replacement)
        done = resume.ok_config_ids(target.storage.lost_records(replacement))
        remaining = resume.remaining_sweep(sweep_config, done)
        if remaining is None:
            log.info("Run %s: every configuration of the sweep has an ok record already", state.run_id)
            return replacement
        log.info("Run %s: %d configuration(s) left for replacement %s", state.run_id,
                 len(remaining["matrix"]), replacement.resource_id)
        return target.run_sweep(replacement, remaining, timeout_s=timeout_s)

    def counted(self, state: TargetState, *, began: float, lost: BaseException,
                step: str) -> list[dict[str, Any]]:
        """The night's reclaims with this loss added (``record``; ``step``: sweep or deploy, the
        step the instance was lost in), logged; ``ReclaimLimitReached`` past ``max_reclaims``."""
        reclaims = self.record(state, began=began, lost=lost)
        reclaims[-1]["step"] = step
        limit, during = self.target.options.max_reclaims, _DURING[step]
        log.warning("Run %s lost instance %s (%s) %s after %.0f s: reclaim %d of at most %d", state.run_id,
                    state.resource_id, state.market, during, reclaims[-1]["lost_s"], len(reclaims), limit)
        if len(reclaims) > limit:
            raise ReclaimLimitReached(
                f"run {state.run_id}: instance {state.resource_id} ({state.market}) was lost {during}; the "
                f"night has lost {len(reclaims)} instance(s), more than ec2 option max_reclaims={limit} "
                "allows: no replacement is launched (raise max_reclaims, or use market on_demand). "
                f"The records of the lost instances stay in S3 ({lost})") from lost
        return reclaims

    def redeploy(self, state: TargetState, *, began: float, lost: BaseException) -> TargetState:
        """A replacement for an instance lost during its deploy (called by
        ``Ec2Target.recover_deploy``: the DAG's deploy step, or the deploy of a replacement): the
        loss recorded and ``max_reclaims`` enforced as for a loss mid-sweep (``counted``), then
        the replacement launched and deployed here, in the task; its state, ``reclaims`` carried
        over. A deploy measures nothing: no record was lost, the sweeps then run as planned."""
        target = self.target
        target.phases.lost(began, step="deploy")  # the interrupted deploy: phase reclaim, status lost
        reclaims = self.counted(state, began=began, lost=lost, step="deploy")
        with target.phases.reclaiming():  # the replacement's launch and deploy: phase reclaim
            replacement = target.prepare(state.run_id)
            replacement.extra["reclaims"] = reclaims
            return target.deploy(replacement)
