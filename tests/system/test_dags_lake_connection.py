"""The nightly and reports DAGs on an S3 lake whose only identity is an Airflow connection.

Real Airflow (``dag.test()``, SQLite), the real worker on the local target, moto's server on
127.0.0.1 standing in for S3. The lake, the staging area and the reports are all on S3; the
credentials, region and endpoint are only in an Airflow connection stored in the metadata
database (setting ``lake_conn_id``): the process environment has no AWS variable, no profile
file and no instance metadata service, so any S3 call that did not go through the connection
fails (the first test's control shows that it does).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.system.test_dags_e2e import SCORE_ONLY, local_target

pytestmark = pytest.mark.dag

CONN_ID = "gpucompare_lake_only"
#: Every AWS variable the SDKs would read; none is left in the environment.
AWS_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
                 "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
                 "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE")


def _s3(aws_endpoint: str) -> Any:
    """The test's own view of moto's S3 (explicit keys: the environment has none)."""
    import boto3

    return boto3.client("s3", region_name="us-east-1", endpoint_url=aws_endpoint,
                        aws_access_key_id="inspector", aws_secret_access_key="inspector")


def _only_through(extra: dict[str, Any], root: str, monkeypatch: pytest.MonkeyPatch,
                  tmp_path: Path) -> Iterator[str]:
    """The lake, staging and reports under ``root`` on S3, reachable only through connection
    ``CONN_ID`` (key ``lake-key-0042``, and ``extra``): the environment holds no identity."""
    from airflow.models.connection import Connection
    from airflow.utils.session import create_session

    from gpucompare.lake.identity import forget_sessions

    with create_session() as session:
        session.query(Connection).filter(Connection.conn_id == CONN_ID).delete()
        session.add(Connection(conn_id=CONN_ID, conn_type="aws", login="lake-key-0042",
                               password="lake-secret", extra=json.dumps(extra)))
    for name in AWS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("GPUCOMPARE_LAKE", f"{root}/lake")
    monkeypatch.setenv("GPUCOMPARE_STAGING", f"{root}/staging")
    monkeypatch.setenv("GPUCOMPARE_REPORTS", f"{root}/reports")
    monkeypatch.setenv("GPUCOMPARE_LAKE_CONN_ID", CONN_ID)
    forget_sessions()
    yield root
    forget_sessions()
    with create_session() as session:
        session.query(Connection).filter(Connection.conn_id == CONN_ID).delete()


@pytest.fixture
def connection_only(airflow_db, aws_endpoint: str, s3_bucket: str, gpucompare_dirs,
                    monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    """The lake, staging and reports on S3, reachable only through connection ``CONN_ID``."""
    yield from _only_through({"endpoint_url": aws_endpoint, "region_name": "us-east-1"},
                             f"s3://{s3_bucket}", monkeypatch, tmp_path)


def test_nightly_and_reports_run_on_an_s3_lake_reached_only_through_the_connection(
        run_dag, write_fleet, connection_only: str, aws_endpoint: str, s3_bucket: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from gpucompare.lake.identity import forget_sessions, s3_access
    from gpucompare.lake.tables import open_lake

    write_fleet({"profiles": {"tiny": SCORE_ONLY}, "targets": [local_target("local")]})

    night = run_dag("gpucompare_nightly")
    assert night.state == "success", night.states
    assert night.xcom("target.collect", 0)["path"].startswith(f"{connection_only}/staging/")
    reports = run_dag("gpucompare_reports")
    assert reports.state == "success", reports.states

    # what the tasks wrote, seen through the test's own client (this process is not a task: it
    # reads no connection from the metadata database)
    s3 = _s3(aws_endpoint)
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=s3_bucket)["Contents"]}
    dated = reports.dag_run.run_after.date().isoformat()
    assert f"reports/{dated}/cost_per_million.csv" in keys and "reports/latest/index.html" in keys
    assert any(key.startswith("lake/results/") for key in keys)
    staged = [key for key in keys if key.startswith("staging/") and key.endswith(".jsonl")]
    assert not staged, staged  # ingested, then removed
    cost = s3.get_object(Bucket=s3_bucket, Key="reports/latest/cost_per_million.csv")["Body"].read()
    assert b"local-cpu" in cost  # tonight's measured row, costed

    # control: the same lake through the environment (which holds nothing) cannot be read
    monkeypatch.setenv("GPUCOMPARE_LAKE_CONN_ID", "")
    forget_sessions()
    assert s3_access().from_connection is False
    with pytest.raises(Exception, match=r"(?i)credential|access|token|denied|connect|forbidden"):
        open_lake(f"{connection_only}/lake").results_table()


#: The role sessions of the test below: 20 s long, refreshed when 15 s remain and necessarily when
#: 10 s remain (AWS: an hour, 15 and 10 minutes), so a night of about a minute spans several.
SESSION_S, ADVISORY_S, MANDATORY_S = 20.0, 15.0, 10.0
ROLE_ARN = "arn:aws:iam::123456789012:role/gpucompare-lake"


@pytest.fixture
def role_only(airflow_db, aws_endpoint: str, s3_bucket: str, gpucompare_dirs,
              monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Any]:
    """The S3 lake reachable only through a connection that assumes a role whose sessions end
    after ``SESSION_S``; every call (STS and S3) goes through an ``ExpiringSessionProxy``."""
    from tests.support.expiring_sessions import ProxyProcess, scaled_refresh_windows

    proxy = ProxyProcess(aws_endpoint, lifetime_s=SESSION_S)
    extra = {"endpoint_url": proxy.url, "region_name": "us-east-1", "role_arn": ROLE_ARN,
             "service_config": {"sts": {"endpoint_url": proxy.url}}}
    try:
        with scaled_refresh_windows(ADVISORY_S, MANDATORY_S):
            for _root in _only_through(extra, f"s3://{s3_bucket}", monkeypatch, tmp_path):
                yield proxy
    finally:
        proxy.close()


def test_an_assumed_role_whose_sessions_expire_during_the_night_is_refreshed(
        run_dag, write_fleet, role_only: Any, aws_endpoint: str, s3_bucket: str) -> None:
    """A night and its reports under a role whose sessions end every 20 s: every S3 call of the
    lake, staging and reports (delta-rs, pyarrow, boto3) is signed with a live session, because
    each takes the connection's credentials as botocore has refreshed them. The control, a
    session kept past its end, is refused, so a code path that held on to one would fail too."""
    import boto3

    proxy = role_only
    write_fleet({"profiles": {"tiny": SCORE_ONLY}, "targets": [local_target("local")]})
    sts = boto3.client("sts", region_name="us-east-1", endpoint_url=proxy.url,
                       aws_access_key_id="inspector", aws_secret_access_key="inspector")
    kept = sts.assume_role(RoleArn=ROLE_ARN, RoleSessionName="control")["Credentials"]
    control = boto3.client("s3", region_name="us-east-1", endpoint_url=proxy.url,
                           aws_access_key_id=kept["AccessKeyId"],
                           aws_secret_access_key=kept["SecretAccessKey"],
                           aws_session_token=kept["SessionToken"])
    control.list_objects_v2(Bucket=s3_bucket)  # a live session is served
    started = time.monotonic()

    night = run_dag("gpucompare_nightly")
    assert night.state == "success", night.states
    if time.monotonic() - started < SESSION_S:  # the reports then run on a session issued after
        time.sleep(SESSION_S - (time.monotonic() - started) + 1)
    reports = run_dag("gpucompare_reports")
    assert reports.state == "success", reports.states

    seen = proxy.state()
    assert seen["expired_requests"] == [], seen  # no call of the DAGs used an ended session
    assert seen["issued"] >= 3, seen  # the control's + the night's first + refreshed ones
    assert seen["requests_seen"].get("S3:PUT", 0) > 0, seen
    with pytest.raises(Exception, match="ExpiredToken"):
        control.list_objects_v2(Bucket=s3_bucket)
    assert proxy.state()["expired_requests"] == ["S3:GET"]
    keys = {o["Key"] for o in _s3(aws_endpoint).list_objects_v2(Bucket=s3_bucket)["Contents"]}
    assert "reports/latest/index.html" in keys
    assert any(key.startswith("lake/results/") for key in keys)
