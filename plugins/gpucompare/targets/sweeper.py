"""The sweeper: terminate every gpucompare instance of this deployment that outlived its TTL.

The last line of defence after teardown tasks and the instance's own shutdown timer: an
instance tagged ``gpucompare:deployment`` = this deployment and ``gpucompare:expires-at``
whose time has passed is terminated, in every region asked for. Instances without
gpucompare tags, and those of another deployment (a staging Airflow in the same account),
are never touched. An instance of ours whose ``expires-at`` cannot be read is terminated
too (and reported as such): an unreadable clock must not keep a paid machine alive.

The regions (``sweep_locations``): every ec2 target of the fleet, enabled or not (scaling
groups use them too), each with its own ``aws_conn_id``; every region a run of this
deployment recorded before launching (``<prefix>/<deployment>/regions/<region>`` in the
results bucket: manual runs use regions the fleet does not name); and
``GPUCOMPARE_SWEEPER_REGIONS``. When a batch TerminateInstances is refused, each instance
is tried on its own; those that still cannot be terminated are named in the
``SweepIncomplete`` raised at the end (the task fails: someone must look).

Run by the sweeper DAG, or by hand: ``sweep_expired_instances(["us-east-1"])``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from gpucompare.targets.base import TargetError
from gpucompare.targets.ec2.options import DEPLOYMENT_TAG, EXPIRES_AT_TAG, LIVE_STATES, RUN_ID_TAG

log = logging.getLogger(__name__)


class SweepIncomplete(TargetError):
    """Some expired instances could not be terminated; the message names each one and why."""

    def __init__(self, message: str, swept: list[SweptInstance], failures: list[str]) -> None:
        super().__init__(message)
        self.swept = swept
        self.failures = failures


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


def _terminate(hook: Any, region: str, doomed: list[SweptInstance]) -> tuple[list[SweptInstance], list[str]]:
    """Terminate in one call; when that is refused, one call per instance (one instance we
    may not terminate must not keep the others alive). Returns (terminated, failures)."""
    from botocore.exceptions import ClientError

    try:
        hook.terminate_instances(instance_ids=[item.instance_id for item in doomed])
        return doomed, []
    except ClientError as exc:
        log.warning("Sweeper: TerminateInstances of %d instance(s) in %s refused (%s); trying each one",
                    len(doomed), region, exc)
    done, failures = [], []
    for item in doomed:
        try:
            hook.terminate_instances(instance_ids=[item.instance_id])
            done.append(item)
        except ClientError as exc:
            failures.append(f"{item.instance_id} in {region} (run {item.run_id}): {exc}")
    return done, failures


def sweep_expired_instances(regions: Iterable[str], *, aws_conn_id: str = "aws_default",
                            deployment: str | None = None, now: datetime | None = None, wait: bool = False,
                            poll_interval_s: float = 15.0) -> list[SweptInstance]:
    """Terminate this deployment's expired instances in ``regions``; return (and log) what went.

    Raises ``SweepIncomplete`` (after trying every region) naming each expired instance it
    could not terminate.
    """
    from airflow.providers.amazon.aws.hooks.ec2 import EC2Hook

    from gpucompare import settings

    regions = list(regions)
    if not regions or not all(isinstance(region, str) and region for region in regions):
        raise ValueError(f"regions must be a non-empty list of AWS region names, got {regions!r}")
    deployment = deployment or settings.deployment()
    now = now or datetime.now(UTC)
    swept: list[SweptInstance] = []
    failures: list[str] = []
    for region in regions:
        hook = EC2Hook(aws_conn_id=aws_conn_id, region_name=region, api_type="client_type")
        instances = hook.get_instances(filters=[
            {"Name": f"tag:{DEPLOYMENT_TAG}", "Values": [deployment]},
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
            log.info("Sweeper: nothing expired in %s (%d instance(s) of %s alive)", region, len(instances),
                     deployment)
            continue
        done, failed = _terminate(hook, region, doomed)
        failures.extend(failed)
        for item in done:
            log.warning("Sweeper terminated %s in %s (run %s): %s", item.instance_id, region, item.run_id,
                        item.reason)
        if wait and done:
            hook.get_waiter("instance_terminated").wait(
                InstanceIds=[item.instance_id for item in done],
                WaiterConfig={"Delay": poll_interval_s, "MaxAttempts": max(1, int(900 / poll_interval_s))})
        swept.extend(done)
    if failures:
        raise SweepIncomplete(f"the sweeper could not terminate {len(failures)} expired instance(s): "
                              + "; ".join(failures), swept, failures)
    return swept


def recorded_regions(aws_conn_id: str, bucket: str, prefix: str, deployment: str) -> set[str]:
    """The regions runs of this deployment recorded under ``<prefix>/<deployment>/regions/``."""

    from airflow.providers.amazon.aws.hooks.s3 import S3Hook

    from gpucompare.config import patterns

    marker_prefix = f"{prefix}/{deployment}/regions/"
    keys = S3Hook(aws_conn_id=aws_conn_id).list_keys(bucket_name=bucket, prefix=marker_prefix) or []
    regions = {key[len(marker_prefix):] for key in keys}
    return {region for region in regions if patterns.AWS_REGION.fullmatch(region)}


def sweep_locations(ec2_specs: Iterable[Mapping[str, Any]], extra_regions: Iterable[str] = (), *,
                    deployment: str, defaults: Mapping[str, Any] | None = None,
                    read_markers: bool = True) -> dict[str, set[str]]:
    """``aws_conn_id -> regions`` to sweep: each ec2 spec's region under its connection, the
    regions recorded in each (connection, bucket, prefix) the specs or the kind's ``defaults``
    (what manual runs use) write to, and the extra regions under the defaults' connection."""
    defaults = defaults or {}
    default_conn_id = defaults.get("aws_conn_id") or "aws_default"
    locations: dict[str, set[str]] = {}
    stores: set[tuple[str, str, str]] = set()
    if defaults.get("results_bucket"):
        stores.add((default_conn_id, defaults["results_bucket"],
                    defaults.get("results_prefix") or "gpucompare"))
    for spec in ec2_specs:
        options = spec.get("options") or {}
        conn_id = options.get("aws_conn_id") or default_conn_id
        locations.setdefault(conn_id, set()).add(spec["region"])
        if options.get("results_bucket"):
            stores.add((conn_id, options["results_bucket"], options.get("results_prefix") or "gpucompare"))
    for region in extra_regions:
        locations.setdefault(default_conn_id, set()).add(region)
    if read_markers:
        for conn_id, bucket, prefix in sorted(stores):
            found = recorded_regions(conn_id, bucket, prefix, deployment)
            if found:
                log.info("Sweeper: runs recorded regions %s in s3://%s/%s", sorted(found), bucket, prefix)
            locations.setdefault(conn_id, set()).update(found)
    return locations
