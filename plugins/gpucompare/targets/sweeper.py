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
``GPUCOMPARE_SWEEPER_REGIONS``. Instances tagged with a former name of the deployment
(``GPUCOMPARE_FORMER_DEPLOYMENTS``, e.g. the name an older release derived) are its own too.

Every page of every region's DescribeInstances is read and every expired instance terminated in
the same pass (TerminateInstances in batches of ``TERMINATE_BATCH``): a backlog of thousands goes
in one run, not a page per region per hour. No single location can stop the sweep: a region
whose DescribeInstances is refused (403 UnauthorizedOperation from an SCP, OptInRequired for a
region not opted in, no endpoint) and a marker bucket that is missing or unlistable are recorded
and skipped, and everything else is swept. When a batch TerminateInstances is refused, each
instance is tried on its own. What could not be read and what could not be terminated are named
in the ``SweepIncomplete`` raised at the end (the task fails: someone must look). The shipped
fleet's placeholder bucket is never read.

Run by the sweeper DAG, or by hand: ``sweep_expired_instances(["us-east-1"])``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from gpucompare.targets.base import TargetError
from gpucompare.targets.ec2.aws_errors import client_error_code
from gpucompare.targets.ec2.options import (
    DEPLOYMENT_TAG,
    EXPIRES_AT_TAG,
    LIVE_STATES,
    RUN_ID_TAG,
    SWEEP_NOW_TAG,
)

log = logging.getLogger(__name__)


class SweepIncomplete(TargetError):
    """The sweep did not reach everything: expired instances it could not terminate
    (``failures``) and regions or marker locations it could not read (``unreadable``), each
    named with why. Everything else was swept first (``swept``)."""

    def __init__(self, message: str, swept: list[SweptInstance], failures: list[str],
                 unreadable: list[str] | None = None) -> None:
        super().__init__(message)
        self.swept = swept
        self.failures = failures
        self.unreadable = list(unreadable or [])

    @classmethod
    def of(cls, swept: list[SweptInstance], failures: list[str],
           unreadable: list[str]) -> SweepIncomplete:
        """The error naming every failure and every unreadable location."""
        parts = []
        if unreadable:
            parts.append(f"could not read {len(unreadable)} location(s) (not swept): "
                         + "; ".join(unreadable))
        if failures:
            parts.append(f"could not terminate {len(failures)} expired instance(s): " + "; ".join(failures))
        done = f"{len(swept)} instance(s) terminated elsewhere"
        return cls(f"the sweep is incomplete ({done}): " + " | ".join(parts), swept, failures, unreadable)


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


@dataclass
class SweepLocations:
    """Where to sweep: ``aws_conn_id -> regions``, and the marker locations that could not be
    read (each named with why; the regions they may hold are not known)."""

    regions: dict[str, set[str]] = field(default_factory=dict)
    unreadable: list[str] = field(default_factory=list)


def _unreadable(where: str, exc: BaseException) -> str:
    """``where`` and why it could not be read (the AWS error code when there is one)."""
    code = client_error_code(exc) or type(exc).__name__
    return f"{where}: {code}: {exc}"


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
    """Why this instance must go (None when it may live on): handed over by a teardown that could
    not terminate it (``SWEEP_NOW_TAG``), an expires-at passed or unreadable."""
    tags = _tags(instance)
    if SWEEP_NOW_TAG in tags:
        return f"handed to the sweeper by its teardown ({tags[SWEEP_NOW_TAG]})"
    raw = tags.get(EXPIRES_AT_TAG)
    expires_at = parse_expires_at(raw)
    if expires_at is None:
        return f"unreadable {EXPIRES_AT_TAG} tag {raw!r}"
    if expires_at <= now:
        return f"expired at {expires_at.isoformat()}"
    return None


#: Instances per TerminateInstances call: the API takes up to 1,000 ids and asks for smaller
#: batches; a refused batch is retried one instance at a time, so a batch also bounds that work.
TERMINATE_BATCH = 200
#: Reservations per DescribeInstances page asked for (the API's maximum is 1,000; moto answers
#: in pages of its own size): every page is read, so a backlog goes in one pass.
DESCRIBE_PAGE_SIZE = 1000


def list_instances(hook: Any, filters: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every instance matching ``filters``, all pages of DescribeInstances read (the provider's
    ``EC2Hook.get_instances`` reads the first page only)."""
    pages = hook.conn.get_paginator("describe_instances").paginate(
        Filters=filters, PaginationConfig={"PageSize": DESCRIBE_PAGE_SIZE})
    return [instance for page in pages for reservation in page.get("Reservations", [])
            for instance in reservation.get("Instances", [])]


def _terminate(hook: Any, region: str, doomed: list[SweptInstance]) -> tuple[list[SweptInstance], list[str]]:
    """Terminate in batches of ``TERMINATE_BATCH``; a refused batch is tried one instance at a
    time (one instance we may not terminate must not keep the others alive). Returns
    (terminated, failures)."""
    done: list[SweptInstance] = []
    failures: list[str] = []
    for start in range(0, len(doomed), TERMINATE_BATCH):
        batch_done, batch_failures = _terminate_batch(hook, region, doomed[start:start + TERMINATE_BATCH])
        done += batch_done
        failures += batch_failures
    return done, failures


def _terminate_batch(hook: Any, region: str,
                     doomed: list[SweptInstance]) -> tuple[list[SweptInstance], list[str]]:
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


def _doomed(instances: list[dict[str, Any]], region: str, now: datetime) -> list[SweptInstance]:
    doomed = []
    for instance in instances:
        reason = expired_reason(instance, now)
        if reason is None:
            continue
        tags = _tags(instance)
        doomed.append(SweptInstance(instance_id=instance["InstanceId"], region=region,
                                    run_id=tags.get(RUN_ID_TAG), expires_at=tags.get(EXPIRES_AT_TAG),
                                    reason=reason))
    return doomed


def sweep_expired_instances(regions: Iterable[str], *, aws_conn_id: str = "aws_default",
                            deployment: str | None = None, former: Iterable[str] | None = None,
                            now: datetime | None = None, wait: bool = False,
                            poll_interval_s: float = 15.0) -> list[SweptInstance]:
    """Terminate this deployment's expired instances in ``regions``; return (and log) what went.

    The instances tagged with ``deployment`` (default: the setting) or one of the ``former``
    names (default: ``settings.former_deployments()``) are this deployment's. A region that
    cannot be read (403 UnauthorizedOperation, a region not opted in, no endpoint) is recorded
    and skipped; the others are swept. Raises ``SweepIncomplete`` at the end naming each
    unreadable region and each expired instance it could not terminate.
    """
    from airflow.providers.amazon.aws.hooks.ec2 import EC2Hook
    from botocore.exceptions import BotoCoreError, ClientError

    from gpucompare import settings

    regions = list(regions)
    if not regions or not all(isinstance(region, str) and region for region in regions):
        raise ValueError(f"regions must be a non-empty list of AWS region names, got {regions!r}")
    deployment = deployment or settings.deployment()
    names = sorted({deployment, *(settings.former_deployments() if former is None else former)})
    now = now or datetime.now(UTC)
    swept: list[SweptInstance] = []
    failures: list[str] = []
    unreadable: list[str] = []
    for region in regions:
        hook = EC2Hook(aws_conn_id=aws_conn_id, region_name=region, api_type="client_type")
        try:
            instances = list_instances(hook, [
                {"Name": f"tag:{DEPLOYMENT_TAG}", "Values": names},
                {"Name": "tag-key", "Values": [EXPIRES_AT_TAG]},
                {"Name": "instance-state-name", "Values": [s for s in LIVE_STATES if s != "shutting-down"]},
            ])
        except (ClientError, BotoCoreError) as exc:
            unreadable.append(_unreadable(f"region {region} (connection {aws_conn_id})", exc))
            log.error("Sweeper: cannot read region %s through %s, skipped: %s", region, aws_conn_id, exc)
            continue
        doomed = _doomed(instances, region, now)
        if not doomed:
            log.info("Sweeper: nothing expired in %s (%d instance(s) of %s alive)", region, len(instances),
                     ", ".join(names))
            continue
        done, failed = _terminate(hook, region, doomed)
        failures.extend(failed)
        if done:
            log.warning("Sweeper terminated %s", terminated_summary(region, done))
        for item in done:
            log.debug("Sweeper terminated %s in %s (run %s): %s", item.instance_id, region, item.run_id,
                      item.reason)
        swept.extend(done)
        if wait and done:
            hook.get_waiter("instance_terminated").wait(
                InstanceIds=[item.instance_id for item in done],
                WaiterConfig={"Delay": poll_interval_s, "MaxAttempts": max(1, int(900 / poll_interval_s))})
    if failures or unreadable:
        raise SweepIncomplete.of(swept, failures, unreadable)
    return swept


#: How many instance ids the one summary line of a region names (the rest are counted; every one
#: is logged at debug).
SUMMARY_IDS = 3


def terminated_summary(region: str, done: list[SweptInstance]) -> str:
    """One line for the instances terminated in ``region``: the count, the first ``SUMMARY_IDS``
    ids with their run and reason, and how many more."""
    named = ", ".join(f"{item.instance_id} (run {item.run_id}: {item.reason})" for item in done[:SUMMARY_IDS])
    more = f" and {len(done) - SUMMARY_IDS} more" if len(done) > SUMMARY_IDS else ""
    return f"{len(done)} instance(s) in {region}: {named}{more}"


def recorded_regions(aws_conn_id: str, bucket: str, prefix: str, deployment: str) -> set[str]:
    """The regions runs of this deployment recorded under ``<prefix>/<deployment>/regions/``."""

    from airflow.providers.amazon.aws.hooks.s3 import S3Hook

    from gpucompare.config import patterns

    marker_prefix = f"{prefix}/{deployment}/regions/"
    keys = S3Hook(aws_conn_id=aws_conn_id).list_keys(bucket_name=bucket, prefix=marker_prefix) or []
    regions = {key[len(marker_prefix):] for key in keys}
    return {region for region in regions if patterns.AWS_REGION.fullmatch(region)}


def _marker_stores(ec2_specs: Iterable[Mapping[str, Any]], defaults: Mapping[str, Any],
                   regions: dict[str, set[str]]) -> set[tuple[str, str, str]]:
    """(connection, bucket, prefix) of every results location the specs or ``defaults`` name
    (adding each spec's region to ``regions``); the shipped placeholder bucket is nobody's."""
    from gpucompare.config.models import PLACEHOLDER_BUCKET

    default_conn_id = defaults.get("aws_conn_id") or "aws_default"
    stores: set[tuple[str, str, str]] = set()
    if defaults.get("results_bucket"):
        stores.add((default_conn_id, defaults["results_bucket"],
                    defaults.get("results_prefix") or "gpucompare"))
    for spec in ec2_specs:
        options = spec.get("options") or {}
        conn_id = options.get("aws_conn_id") or default_conn_id
        regions.setdefault(conn_id, set()).add(spec["region"])
        if options.get("results_bucket"):
            stores.add((conn_id, options["results_bucket"], options.get("results_prefix") or "gpucompare"))
    placeholder = {store for store in stores if store[1] == PLACEHOLDER_BUCKET}
    if placeholder:
        log.warning("Sweeper: the shipped placeholder bucket %s is no results location: not read",
                    PLACEHOLDER_BUCKET)
    return stores - placeholder


def sweep_locations(ec2_specs: Iterable[Mapping[str, Any]], extra_regions: Iterable[str] = (), *,
                    deployment: str, former: Iterable[str] = (), defaults: Mapping[str, Any] | None = None,
                    read_markers: bool = True) -> SweepLocations:
    """Where to sweep: each ec2 spec's region under its connection, the regions recorded (by
    ``deployment`` or a ``former`` name) in each (connection, bucket, prefix) the specs or the
    kind's ``defaults`` (what manual runs use) write to, and the extra regions under the
    defaults' connection. A marker location that cannot be listed (a missing bucket, access
    denied) is recorded in ``unreadable`` and the others are still read."""
    from botocore.exceptions import BotoCoreError, ClientError

    defaults = defaults or {}
    found = SweepLocations()
    stores = _marker_stores(ec2_specs, defaults, found.regions)
    for region in extra_regions:
        found.regions.setdefault(defaults.get("aws_conn_id") or "aws_default", set()).add(region)
    if not read_markers:
        return found
    for conn_id, bucket, prefix in sorted(stores):
        for name in sorted({deployment, *former}):
            try:
                recorded = recorded_regions(conn_id, bucket, prefix, name)
            except (ClientError, BotoCoreError) as exc:
                where = f"markers s3://{bucket}/{prefix}/{name}/regions/ (connection {conn_id})"
                found.unreadable.append(_unreadable(where, exc))
                log.error("Sweeper: cannot list %s: %s", where, exc)
                continue
            if recorded:
                log.info("Sweeper: runs recorded regions %s in s3://%s/%s/%s", sorted(recorded), bucket,
                         prefix, name)
            found.regions.setdefault(conn_id, set()).update(recorded)
    return found
