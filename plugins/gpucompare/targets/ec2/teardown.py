"""Terminating an ``ec2`` target's instance when AWS says "not now": TerminateInstances retried
with backoff for ``TEARDOWN_PATIENCE_S`` (minutes, not a handful of tries), then the instance
handed to the sweeper with ``SWEEP_NOW_TAG`` (its next run terminates it at once, whatever its
``expires-at``) and the teardown task failed saying so.

Before, five throttled tries ended the teardown and the instance ran until its time-to-live
(77 minutes more in the issue's trial). A throttled account answers again within seconds to
minutes; 10 minutes of patience outlasts that at the price of one worker slot, and what still
cannot be terminated is the sweeper's at its next run (hourly), not at the TTL.

``Reaper`` is the target's teardown part: every instance of the run (by its tags, and the
state's id when it is this deployment's) terminated on its own call, then botocore's
``instance_terminated`` waiter.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from gpucompare.config import patterns
from gpucompare.targets.base import TargetError, TargetState
from gpucompare.targets.ec2.aws_errors import BUSY_ERROR_CODES, client_error_code
from gpucompare.targets.ec2.launch import Ec2Launcher, tag_of
from gpucompare.targets.ec2.options import DEPLOYMENT_TAG, LIVE_STATES, SWEEP_NOW_TAG
from gpucompare.targets.ec2.readiness import waiter_config

log = logging.getLogger(__name__)

#: How long a teardown keeps retrying a throttled (or 5xx) TerminateInstances: 10 minutes.
TEARDOWN_PATIENCE_S = 600.0
#: Backoff between those tries: exponential from this many seconds, with full jitter …
TEARDOWN_BACKOFF_S = 2.0
#: … and never longer than this between two tries.
TEARDOWN_BACKOFF_MAX_S = 60.0


class PatienceClock:
    """The clock the patience is counted on (``now``) and the sleep between tries: the system's.
    A test replaces ``CLOCK`` with a simulated one, to see minutes of throttling as the teardown
    sees them without waiting them."""

    now = staticmethod(time.monotonic)
    sleep = staticmethod(time.sleep)


CLOCK = PatienceClock()


class TerminationThrottled(Exception):  # noqa: N818 - a condition the teardown reports
    """TerminateInstances still answered "not now" when the patience ran out."""


def is_busy(exc: BaseException) -> bool:
    """Whether ``exc`` is AWS saying "not now" (``BUSY_ERROR_CODES``): worth trying again."""
    return client_error_code(exc) in BUSY_ERROR_CODES


def terminate_patiently(terminate: Callable[[], Any], instance_id: str, *,
                        patience_s: float | None = None) -> None:
    """Call ``terminate()`` (one TerminateInstances) until it succeeds; "not now" answers are
    retried with jittered exponential backoff for ``patience_s`` (default ``TEARDOWN_PATIENCE_S``),
    then ``TerminationThrottled``; any other error is raised at once."""
    import tenacity

    patience = TEARDOWN_PATIENCE_S if patience_s is None else patience_s
    started = CLOCK.now()
    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception(is_busy),
        stop=lambda state: CLOCK.now() - started >= patience,
        wait=tenacity.wait_random_exponential(multiplier=TEARDOWN_BACKOFF_S, max=TEARDOWN_BACKOFF_MAX_S),
        sleep=CLOCK.sleep,
        before_sleep=lambda state: log.warning(
            "TerminateInstances %s: %s (try %d, %.0f s of %.0f s patience); trying again", instance_id,
            client_error_code(state.outcome.exception()), state.attempt_number,
            CLOCK.now() - started, patience),
        reraise=True,
    )
    try:
        for attempt in retrying:
            with attempt:
                terminate()
    except Exception as exc:
        if is_busy(exc):
            raise TerminationThrottled(
                f"{instance_id}: TerminateInstances still answered {client_error_code(exc)} after "
                f"{CLOCK.now() - started:.0f} s of retries") from exc
        raise


def hand_to_sweeper(create_tags: Callable[[list[str], list[dict[str, str]]], Any], instance_ids: list[str],
                    why: str) -> bool:
    """Tag ``instance_ids`` with ``SWEEP_NOW_TAG`` (value: when and why), so the next sweeper run
    terminates them at once; True when the tag was set. CreateTags is tried patiently too (a
    throttled account throttles it as well); if it cannot be set, the expires-at tag still ends
    them at their time-to-live and the error says so."""
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    tags = [{"Key": SWEEP_NOW_TAG, "Value": f"{stamp} {why}"[:255]}]
    try:
        terminate_patiently(lambda: create_tags(instance_ids, tags), ",".join(instance_ids),
                            patience_s=min(TEARDOWN_PATIENCE_S, 120.0))
    except Exception as exc:  # noqa: BLE001 - reported by the caller's error
        log.error("Could not tag %s with %s: %s", ", ".join(instance_ids), SWEEP_NOW_TAG, exc)
        return False
    return True


class Reaper:
    """Terminates a run's instances (see the module docstring) through the launcher's clients."""

    def __init__(self, launcher: Ec2Launcher) -> None:
        self.launcher = launcher
        self.options = launcher.options

    @property
    def ec2_hook(self) -> Any:
        return self.launcher.ec2_hook

    def instances_of(self, run_id: str, states: tuple[str, ...] = LIVE_STATES) -> list[dict[str, Any]]:
        """This deployment's instances of the run (an instance of another deployment is never ours);
        a failed lookup raises ``InstanceLookupFailed``."""
        return self.launcher.find(run_id, states)

    def terminate(self, state: TargetState) -> None:
        """Terminate the run's instance(s) and wait until they are gone. Safe twice.

        Each id is terminated on its own call, so one bad id (malformed: skipped with a
        warning; already gone: fine) never keeps another instance running; the instances
        tagged with the run and this deployment are always reached, also when the state's
        id is wrong or missing. Only this deployment's instances are looked up.
        """
        # by tag too: a prepare that failed after RunInstances may not have recorded the id
        ids = [instance["InstanceId"] for instance in self.instances_of(state.run_id)]
        if state.resource_id and state.resource_id not in ids:
            if not (isinstance(state.resource_id, str) and patterns.INSTANCE_ID.fullmatch(state.resource_id)):
                log.warning("Teardown of run %s: ignoring malformed instance id %r in the state",
                            state.run_id, state.resource_id)
            elif self.is_ours(state.resource_id):
                ids.append(state.resource_id)
        if not ids:
            log.info("Run %s has no instance left", state.run_id)
            return
        terminated, throttled, failed = self._terminate_each(ids, state.run_id)
        if terminated:
            self.ec2_hook.get_waiter("instance_terminated").wait(
                InstanceIds=terminated,
                WaiterConfig=waiter_config(self.options.launch_timeout_s, self.options.poll_interval_s))
            log.info("Terminated %s (run %s)", ", ".join(terminated), state.run_id)
        if throttled:
            failed.append(self.hand_over(throttled, state.run_id))
        if failed:
            raise TargetError(f"TerminateInstances failed for run {state.run_id}: " + "; ".join(failed))

    def _terminate_each(self, ids: list[str], run_id: str) -> tuple[list[str], list[str], list[str]]:
        """TerminateInstances per id: (terminated, throttled past the patience, what failed)."""
        from botocore.exceptions import ClientError

        failed: list[str] = []
        terminated: list[str] = []
        throttled: list[str] = []
        for instance_id in ids:
            try:
                terminate_patiently(lambda i=instance_id: self.ec2_hook.terminate_instances(instance_ids=[i]),
                                    instance_id, patience_s=TEARDOWN_PATIENCE_S)
                terminated.append(instance_id)
            except TerminationThrottled as exc:
                throttled.append(instance_id)
                failed.append(str(exc))
            except ClientError as exc:
                code = client_error_code(exc)
                if code == "InvalidInstanceID.NotFound":
                    log.info("Instance %s of run %s no longer exists", instance_id, run_id)
                elif code == "InvalidInstanceID.Malformed":
                    log.warning("Teardown of run %s: AWS calls %r malformed; skipped", run_id, instance_id)
                else:
                    failed.append(f"{instance_id}: {exc}")
        return terminated, throttled, failed

    def hand_over(self, instance_ids: list[str], run_id: str) -> str:
        """Tag what a throttled teardown could not terminate for the sweeper's next run; what to tell."""
        patience = f"{TEARDOWN_PATIENCE_S / 60:g} min"
        tagged = hand_to_sweeper(lambda ids, tags: self.ec2_hook.conn.create_tags(Resources=ids, Tags=tags),
                                 instance_ids, f"teardown of run {run_id} throttled for {patience}")
        if tagged:
            return (f"handed {', '.join(instance_ids)} to the sweeper (tag {SWEEP_NOW_TAG}): its next run "
                    "terminates them at once; run the gpucompare_sweeper DAG now to end them sooner")
        return (f"could not tag {', '.join(instance_ids)} for the sweeper either: they end at their "
                f"expires-at (the sweeper) or their own power-off timer; terminate them by hand now")

    def is_ours(self, instance_id: str) -> bool:
        """Whether an id the state holds (but the tag lookup did not return) is this
        deployment's: its tags say so. Another deployment's instance is never terminated."""
        from botocore.exceptions import ClientError

        try:
            reservations = self.ec2_hook.conn.describe_instances(InstanceIds=[instance_id])["Reservations"]
        except ClientError as exc:
            if client_error_code(exc) in ("InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"):
                log.info("Instance %s of the state does not exist (any more)", instance_id)
                return False
            raise TargetError(f"DescribeInstances {instance_id} failed: {exc}") from exc
        instances = [i for r in reservations for i in r.get("Instances", [])]
        if instances and tag_of(instances[0], DEPLOYMENT_TAG) == self.options.deployment:
            return True
        log.warning("Teardown: instance %s of the state is not of deployment %s (tags %s); not touched",
                    instance_id, self.options.deployment, instances[0].get("Tags") if instances else None)
        return False
