"""The sweeper: terminate every gpucompare instance that outlived its time-to-live.

The last line of defence after teardown tasks and the instance's own shutdown timer: an
instance tagged ``gpucompare:expires-at`` whose time has passed is terminated, in every
region asked for. Instances without gpucompare tags are never touched. An instance whose
``expires-at`` cannot be read is terminated too (and reported as such): it is ours, and an
unreadable clock must not keep a paid machine alive.

Run by the sweeper DAG, or by hand: ``sweep_expired_instances(["us-east-1"])``.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from gpucompare.targets.ec2 import EXPIRES_AT_TAG, LIVE_STATES, RUN_ID_TAG

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SweptInstance:
    """One instance the sweeper terminated, and why."""

    instance_id: str
    region: str
    run_id: str | None
    expires_at: str | None
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_expires_at(value: str | None) -> datetime | None:
    """The tag's time as an aware UTC datetime; None when missing or unreadable."""
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    # a time without a zone was written by someone else's tool: read it as UTC
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _tags(instance: dict[str, Any]) -> dict[str, str]:
    return {tag["Key"]: tag.get("Value", "") for tag in instance.get("Tags") or []}


def expired_reason(instance: dict[str, Any], now: datetime) -> str | None:
    """Why this instance must go (None when it may live on)."""
    raw = _tags(instance).get(EXPIRES_AT_TAG)
    expires_at = parse_expires_at(raw)
    if expires_at is None:
        return f"unreadable {EXPIRES_AT_TAG} tag {raw!r}"
    if expires_at <= now:
        return f"expired at {expires_at.isoformat()}"
    return None


def sweep_expired_instances(regions: list[str], *, aws_conn_id: str = "aws_default",
                            now: datetime | None = None, wait: bool = False,
                            poll_interval_s: float = 15.0) -> list[SweptInstance]:
    """Terminate expired gpucompare instances in ``regions``; return (and log) what went."""
    from airflow.providers.amazon.aws.hooks.ec2 import EC2Hook

    if not regions or not all(isinstance(region, str) and region for region in regions):
        raise ValueError(f"regions must be a non-empty list of AWS region names, got {regions!r}")
    now = now or datetime.now(UTC)
    swept: list[SweptInstance] = []
    for region in regions:
        hook = EC2Hook(aws_conn_id=aws_conn_id, region_name=region, api_type="client_type")
        instances = hook.get_instances(filters=[
            {"Name": "tag-key", "Values": [EXPIRES_AT_TAG]},
            {"Name": "instance-state-name", "Values": [s for s in LIVE_STATES if s != "shutting-down"]},
        ])
        doomed = []
        for instance in instances:
            reason = expired_reason(instance, now)
            if reason is None:
                continue
            tags = _tags(instance)
            doomed.append(SweptInstance(instance_id=instance["InstanceId"], region=region,
                                        run_id=tags.get(RUN_ID_TAG), expires_at=tags.get(EXPIRES_AT_TAG),
                                        reason=reason))
        if not doomed:
            log.info("Sweeper: nothing expired in %s (%d gpucompare instances alive)", region, len(instances))
            continue
        ids = [item.instance_id for item in doomed]
        hook.terminate_instances(instance_ids=ids)
        for item in doomed:
            log.warning("Sweeper terminated %s in %s (run %s): %s", item.instance_id, region, item.run_id,
                        item.reason)
        if wait:
            hook.get_waiter("instance_terminated").wait(
                InstanceIds=ids,
                WaiterConfig={"Delay": poll_interval_s, "MaxAttempts": max(1, int(900 / poll_interval_s))})
        swept.extend(doomed)
    return swept
