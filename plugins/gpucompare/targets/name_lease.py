"""The name lease: a deployment holds its name (``GPUCOMPARE_DEPLOYMENT``) in each results bucket it
launches from, so two Airflow deployments that set the same name cannot share paid machines.

The name tags every instance, run id and S3 key of a deployment: a second deployment under the same
name would reuse, terminate and sweep the first one's instances. So before anything paid is launched
(the night's first task: ``pipeline.hold_deployment_names`` for every ec2 plan, nightly, manual and
scaling) and before the sweeper terminates anything, the deployment takes or renews a record at
``<results_prefix>/<deployment>/name-lease.json`` in the results bucket, carrying its identity.

* **Identity**: a UUID created once, by the first task that needs it, and kept in the Airflow
  Variable ``gpucompare_deployment_identity`` (:func:`deployment_identity`). A Variable because every
  process of one deployment (scheduler, workers on other hosts, triggerer) reads the same metadata
  database, it survives restarts, upgrades and re-created workers, it is not a secret, and an
  operator sees it in Admin → Variables. Nothing the hosts have is both stable and unique (host
  names change with workers; hashing a secret key would change the identity when the key is rotated).
  Two first tasks creating it at once (the first night's ``load_fleet`` and ``load_scaling``)
  both read it back ``IDENTITY_SETTLE_S`` after writing, so both use the last write. A database
  restored into a second Airflow carries the first one's identity: delete the Variable in the copy.
* **Taking** is atomic: S3 ``PutObject`` with ``If-None-Match: *`` succeeds for exactly one of two
  first-time takers; the other reads the record. **Renewing** (same identity: every night, every
  sweeper run) rewrites it with ``If-Match`` on the read ETag, keeping ``since`` and setting
  ``renewed_at``. A record of another identity refuses (:class:`NameHeld`): the message names the
  holder, since when, its last renewal and the release command. The lease does not expire: a
  deployment paused for a month keeps its name; only ``gpucompare release-name`` gives it up.
"""

from __future__ import annotations

import json
import logging
import socket
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from gpucompare.config import patterns
from gpucompare.errors import PermanentError, TransientError
from gpucompare.targets.ec2.aws_errors import CONDITIONAL_WRITE_LOST_CODES, client_error_code

log = logging.getLogger(__name__)

#: the Airflow Variable holding this deployment's identity
IDENTITY_VARIABLE = "gpucompare_deployment_identity"
#: the lease's key below ``<results_prefix>/<deployment>/``
LEASE_NAME = "name-lease.json"
#: seconds between creating the identity and reading it back (once in a deployment's life): longer
#: than two concurrent first tasks' read-then-write of the Variable takes
IDENTITY_SETTLE_S = 5.0
#: tries of read-then-write when the record changes in between (taken, renewed or released)
_TRIES = 4


class NameHeld(PermanentError):
    """Another deployment (another identity) holds this deployment name: nothing is launched."""

    def __init__(self, message: str, holder: NameLease) -> None:
        super().__init__(message)
        self.holder = holder


class NameLeaseError(TransientError):
    """The lease could not be read or written (S3 refused or failed): nothing is launched."""


@dataclass(frozen=True)
class NameLease:
    """One lease record, and where it lives."""

    deployment: str
    identity: str
    since: str
    renewed_at: str
    taken_on: str  # the host of the process that took it (for a human; not compared)
    bucket: str = ""
    key: str = ""

    def record(self) -> bytes:
        fields = asdict(self)
        del fields["bucket"], fields["key"]
        return json.dumps(fields, indent=1, sort_keys=True).encode()

    def where(self) -> str:
        return f"s3://{self.bucket}/{self.key}"


def lease_key(prefix: str, deployment: str) -> str:
    """``<prefix>/<deployment>/name-lease.json`` (checked: a name as the deployment setting allows)."""
    if not isinstance(deployment, str) or not patterns.DEPLOYMENT.fullmatch(deployment):
        raise PermanentError(f"deployment: {deployment!r} is not a deployment name "
                             f"({patterns.anchored(patterns.DEPLOYMENT)})")
    if not isinstance(prefix, str) or not patterns.PREFIX.fullmatch(prefix):
        raise PermanentError(f"results_prefix: {prefix!r} is not an S3 key prefix")
    return f"{prefix}/{deployment}/{LEASE_NAME}"


def release_command(bucket: str, prefix: str, deployment: str) -> str:
    """The command that releases the name (what a refusal tells the user to run)."""
    return f"gpucompare release-name --deployment {deployment} --bucket {bucket} --prefix {prefix}"


def deployment_identity() -> str:
    """This deployment's identity (see the module docstring): the Variable's value, created (a
    UUID) by the first task that asks. Created only inside a task (the Task SDK writes Variables
    through the API server); read anywhere the Variable can be read."""
    from airflow.sdk import Variable

    identity = Variable.get(IDENTITY_VARIABLE, default=None)
    if identity is None:
        Variable.set(IDENTITY_VARIABLE, str(uuid.uuid4()),
                     description="gpucompare: this deployment's identity in its name leases (created once; "
                                 "see docs/targets-ec2.md, 'The name lease')")
        # two first tasks at once (load_fleet and load_scaling of the first night) each write one:
        # both read again after the other's write, so both use the last one
        time.sleep(IDENTITY_SETTLE_S)
        identity = Variable.get(IDENTITY_VARIABLE)
        log.warning("Created this deployment's identity %s (Airflow Variable %s)", identity,
                    IDENTITY_VARIABLE)
    return check_identity(identity)


def check_identity(identity: Any, where: str = "") -> str:
    """``identity`` if it is one; else an error naming ``where`` it came from (default: the Variable)."""
    if not isinstance(identity, str) or not patterns.DEPLOYMENT_IDENTITY.fullmatch(identity):
        advice = "" if where else "; delete it and a new one is created"
        allowed = patterns.anchored(patterns.DEPLOYMENT_IDENTITY)
        raise PermanentError(f"{where or 'Airflow Variable ' + IDENTITY_VARIABLE}: {identity!r} is not a "
                             f"deployment identity ({allowed}){advice}")
    return identity


def _code(exc: BaseException) -> str:
    return client_error_code(exc) or ""


def read_lease(s3: Any, bucket: str, prefix: str, deployment: str) -> tuple[NameLease | None, str]:
    """The lease record and its ETag; (None, "") when the name is free."""
    from botocore.exceptions import BotoCoreError, ClientError

    key = lease_key(prefix, deployment)
    try:
        answer = s3.get_object(Bucket=bucket, Key=key)
        fields = json.loads(answer["Body"].read())
        return NameLease(**fields, bucket=bucket, key=key), answer["ETag"]
    except ClientError as exc:
        if _code(exc) in ("NoSuchKey", "404"):
            return None, ""
        raise NameLeaseError(f"could not read the name lease s3://{bucket}/{key}: {exc}") from exc
    except BotoCoreError as exc:
        raise NameLeaseError(f"could not read the name lease s3://{bucket}/{key}: {exc}") from exc
    except (ValueError, TypeError) as exc:
        raise PermanentError(f"the name lease s3://{bucket}/{key} is not a lease record ({exc}): "
                             f"release it with `{release_command(bucket, prefix, deployment)}`") from exc


def _put(s3: Any, lease: NameLease, condition: dict[str, str]) -> bool:
    """Write the record under ``condition``; False when the condition failed (another writer)."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        s3.put_object(Bucket=lease.bucket, Key=lease.key, Body=lease.record(),
                      ContentType="application/json", **condition)
        return True
    except ClientError as exc:
        if _code(exc) in CONDITIONAL_WRITE_LOST_CODES:
            return False
        raise NameLeaseError(f"could not write the name lease {lease.where()}: {exc}") from exc
    except BotoCoreError as exc:
        raise NameLeaseError(f"could not write the name lease {lease.where()}: {exc}") from exc


def hold_name(s3: Any, bucket: str, prefix: str, deployment: str, identity: str,
              now: datetime | None = None) -> NameLease:
    """Take the name if free, renew it if ``identity`` holds it, else raise :class:`NameHeld`.

    ``s3`` is a boto3 S3 client. Returns the lease as written."""
    check_identity(identity)
    key = lease_key(prefix, deployment)
    stamp = (now or datetime.now(UTC)).isoformat(timespec="seconds")
    mine = NameLease(deployment=deployment, identity=identity, since=stamp, renewed_at=stamp,
                     taken_on=socket.gethostname(), bucket=bucket, key=key)
    for _ in range(_TRIES):
        if _put(s3, mine, {"IfNoneMatch": "*"}):
            log.warning("Took the deployment name %r for identity %s (%s)", deployment, identity,
                        mine.where())
            return mine
        held, etag = read_lease(s3, bucket, prefix, deployment)
        if held is None:
            continue  # released in between: try to take it again
        if held.identity != identity:
            raise NameHeld(refusal(held, identity), held)
        renewed = NameLease(**{**asdict(held), "renewed_at": stamp})
        if _put(s3, renewed, {"IfMatch": etag}):
            log.info("Renewed the deployment name %r (held since %s, %s)", deployment, held.since,
                     held.where())
            return renewed
    raise NameLeaseError(f"the name lease s3://{bucket}/{key} changed under every one of {_TRIES} tries: "
                         "another process is taking or releasing it; retry")


def refusal(held: NameLease, identity: str) -> str:
    """Why this deployment may not start under the name, and what to do."""
    prefix = held.key[:-len(f"/{held.deployment}/{LEASE_NAME}")]
    return (f"the deployment name {held.deployment!r} is held by another deployment (identity "
            f"{held.identity}, since {held.since}, last renewed {held.renewed_at}, taken on host "
            f"{held.taken_on}; {held.where()}); this deployment's identity is {identity} (Airflow "
            f"Variable {IDENTITY_VARIABLE}). "
            "Nothing was launched or terminated. Give this deployment another name (GPUCOMPARE_DEPLOYMENT), "
            "or, if the holder is gone or this deployment takes its place, release the name: "
            f"`{release_command(held.bucket, prefix, held.deployment)}`")


def release_name(s3: Any, bucket: str, prefix: str, deployment: str,
                 holder: str | None = None) -> NameLease | None:
    """Delete the lease (the name is then free for the next taker); return what was released,
    None when nothing was held. ``holder``: release only if that identity holds it."""
    from botocore.exceptions import BotoCoreError, ClientError

    held, _ = read_lease(s3, bucket, prefix, deployment)
    if held is None:
        return None
    if holder is not None and held.identity != holder:
        raise PermanentError(f"--holder: the name {deployment!r} is held by {held.identity}, not {holder}: "
                             "nothing released")
    try:
        s3.delete_object(Bucket=bucket, Key=held.key)
    except (ClientError, BotoCoreError) as exc:
        raise NameLeaseError(f"could not delete the name lease {held.where()}: {exc}") from exc
    log.warning("Released the deployment name %r held by %s since %s", deployment, held.identity, held.since)
    return held


def lease_stores(ec2_specs: Any) -> set[tuple[str, str, str]]:
    """(aws_conn_id, results bucket, prefix) of every ec2 spec: where their runs write, so where
    the deployment must hold its name before launching them."""
    stores = set()
    for spec in ec2_specs:
        options = spec.get("options") or {}
        if options.get("results_bucket"):
            stores.add((options.get("aws_conn_id") or "aws_default", options["results_bucket"],
                        options.get("results_prefix") or "gpucompare"))
    return stores


def hold_names(stores: Any, deployment: str, identity: str | None = None) -> list[NameLease]:
    """Hold ``deployment`` in every (connection, bucket, prefix) of ``stores`` (``identity``:
    default this deployment's, created if new); :class:`NameHeld` at the first refusal."""
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook

    stores = sorted(set(stores))
    if not stores:
        return []
    identity = identity or deployment_identity()
    return [hold_name(S3Hook(aws_conn_id=conn_id).conn, bucket, prefix, deployment, identity)
            for conn_id, bucket, prefix in stores]
