"""The one AWS identity of every S3 access to the lake, staging, reports and prices.

Inside Airflow it is a connection (setting ``lake_conn_id``, ``aws_default`` by default: the
connection the ec2 targets' ``aws_conn_id`` defaults to, so machines and data run under one
identity, as on MWAA or Astronomer where the execution role or a connection is the only one).
The amazon provider's ``AwsBaseHook`` turns it into a boto3 session, so whatever the connection
holds works: an access key, a session token, a ``role_arn`` to assume (its credentials are
refreshable), a profile, or nothing (the execution role), and ``endpoint_url`` / ``region_name``
in its extra. delta-rs and pyarrow cannot call boto3, so each storage call takes the session's
credentials as they are at that moment (``S3Access``); botocore refreshes assumed-role
credentials when less than 15 minutes remain, so every call starts with at least that long.

Where no such connection exists (the command line outside Airflow) or the setting is empty, the
process environment is the identity: the clients find ``AWS_*`` variables, a profile or an
instance role themselves, and ``AWS_ENDPOINT_URL`` / ``AWS_REGION`` say where to go.

``describe()`` names the identity in use (and the key's last four characters, never a secret);
it is logged once per process and identity, so every command says which one it used.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

#: Sessions built from a connection, by (connection id, the connection's URI): built once per
#: process, so an assumed role is assumed once and then refreshed by botocore, not per call.
_SESSIONS: dict[tuple[str, str], Any] = {}
_LOCK = threading.Lock()
_ANNOUNCED: set[str] = set()


def env_endpoint() -> str | None:
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None


def env_region() -> str:
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"


@dataclass(frozen=True)
class S3Access:
    """What one storage call needs: where to send it, and the credentials (None: the client's own
    chain, i.e. the process environment)."""

    source: str
    region: str
    endpoint: str | None = None
    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)

    @property
    def from_connection(self) -> bool:
        return self.access_key is not None

    def describe(self) -> str:
        """Which identity, for a log line: never the secret, only the key's last characters."""
        where = f"region {self.region}" + (f", endpoint {self.endpoint}" if self.endpoint else "")
        if not self.from_connection:
            return f"{self.source} ({where})"
        kind = "temporary (session token)" if self.session_token else "long-term"
        return f"{self.source}: {kind} key …{(self.access_key or '')[-4:]}, {where}"


def _connection(conn_id: str) -> Any | None:
    """The Airflow connection ``conn_id``, or None when it does not exist or cannot be read in
    this process (no Airflow metadata here: the command line on a laptop)."""
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        return BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return None
    except Exception as exc:  # no metadata database or API in this process: not an Airflow run
        log.debug("Connection %s cannot be read here (%s); using the environment", conn_id, exc)
        return None


def _session(conn_id: str, connection: Any) -> tuple[Any, Any]:
    """The boto3 session and connection wrapper the amazon provider builds for ``connection``."""
    from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

    key = (conn_id, connection.get_uri())
    with _LOCK:
        if key not in _SESSIONS:
            hook = AwsBaseHook(aws_conn_id=conn_id, client_type="s3")
            _SESSIONS[key] = (hook.get_session(), hook.conn_config)
        return _SESSIONS[key]


def s3_access(conn_id: str | None = None) -> S3Access:
    """The identity and credentials for one S3 call now (``conn_id``: default the setting)."""
    if conn_id is None:
        from gpucompare import settings

        conn_id = settings.lake_conn_id()
    connection = _connection(conn_id) if conn_id else None
    if connection is None:
        why = f"connection {conn_id!r} not found" if conn_id else "lake_conn_id is empty"
        access = S3Access(source=f"the process environment ({why})", region=env_region(),
                          endpoint=env_endpoint())
    else:
        session, config = _session(conn_id, connection)
        credentials = session.get_credentials()
        if credentials is None:
            raise PermissionError(f"Airflow connection {conn_id!r} gives no AWS credentials (no key, "
                                  "role or profile, and no execution role here)")
        frozen = credentials.get_frozen_credentials()  # refreshed first if an assumed role nears expiry
        endpoint = config.endpoint_url or None
        access = S3Access(source=f"Airflow connection {conn_id!r}", region=config.region_name or env_region(),
                          endpoint=endpoint, access_key=frozen.access_key, secret_key=frozen.secret_key,
                          session_token=frozen.token or None)
    _announce(access)
    return access


def _announce(access: S3Access) -> None:
    """Log the identity the first time this process uses it."""
    if access.source not in _ANNOUNCED:
        _ANNOUNCED.add(access.source)
        log.info("S3 identity of the lake, staging and reports: %s", access.describe())


def forget_sessions() -> None:
    """Drop the cached sessions and announcements (a long-lived process whose connection changed)."""
    with _LOCK:
        _SESSIONS.clear()
        _ANNOUNCED.clear()
