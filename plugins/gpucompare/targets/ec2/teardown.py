"""Terminating an ``ec2`` target's instance when AWS says "not now": TerminateInstances retried
with backoff for ``TEARDOWN_PATIENCE_S`` (minutes, not a handful of tries), then the instance
handed to the sweeper with ``SWEEP_NOW_TAG`` (its next run terminates it at once, whatever its
``expires-at``) and the teardown task failed saying so.

Before, five throttled tries ended the teardown and the instance ran until its time-to-live
(77 minutes more in the issue's trial). A throttled account answers again within seconds to
minutes; 10 minutes of patience outlasts that at the price of one worker slot, and what still
cannot be terminated is the sweeper's at its next run (hourly), not at the TTL.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from gpucompare.targets.ec2.aws_errors import BUSY_ERROR_CODES, client_error_code
from gpucompare.targets.ec2.options import SWEEP_NOW_TAG

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
