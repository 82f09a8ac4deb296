"""The name lease (``targets.name_lease``) on moto's server: one deployment name, two identities.

Moto's S3 stands in for the results bucket (it honours ``If-None-Match: *`` and ``If-Match`` on
PutObject, answering 412 as S3 does). Two "deployments" are two identities: the Airflow Variable
``gpucompare_deployment_identity`` as each one's tasks read it (``AIRFLOW_VAR_…`` in the
environment stands in for the metadata database's row).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gpucompare.airflow import pipeline
from gpucompare.targets import name_lease
from tests.conftest import REPO_ROOT
from tests.support import lease_race

IDENTITY_A = "0d4a1c6e-1111-4aaa-8aaa-aaaaaaaaaaaa"
IDENTITY_B = "7f3e9b20-2222-4bbb-8bbb-bbbbbbbbbbbb"
IDENTITY_ENV = f"AIRFLOW_VAR_{name_lease.IDENTITY_VARIABLE.upper()}"


def ec2_spec(account: dict[str, Any], name: str = "aws-g5") -> dict[str, Any]:
    return {"name": name, "kind": "ec2", "options": {"aws_conn_id": account["conn_id"],
                                                   "results_bucket": account["bucket"]}}


def lease_record(aws_client: Any, bucket: str, deployment: str) -> dict[str, Any]:
    key = name_lease.lease_key("gpucompare", deployment)
    return json.loads(aws_client("s3").get_object(Bucket=bucket, Key=key)["Body"].read())


def held_by_a_then_b(aws_account: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> str:
    """Deployment A's night took this deployment's name; this process is now deployment B."""
    from gpucompare import settings

    monkeypatch.setenv(IDENTITY_ENV, IDENTITY_A)
    pipeline.hold_deployment_names([ec2_spec(aws_account)])
    monkeypatch.setenv(IDENTITY_ENV, IDENTITY_B)
    return settings.deployment()


def test_the_same_identity_takes_then_renews_freely(aws_account, aws_client, monkeypatch):
    monkeypatch.setenv(IDENTITY_ENV, IDENTITY_A)
    s3 = aws_client("s3")
    first = name_lease.hold_name(s3, aws_account["bucket"], "gpucompare", "prod", IDENTITY_A)
    time.sleep(1.1)  # the record's times have whole seconds
    again = name_lease.hold_name(s3, aws_account["bucket"], "gpucompare", "prod", IDENTITY_A)
    pipeline.hold_deployment_names([ec2_spec(aws_account)])  # the night's first task: this deployment

    stored = lease_record(aws_client, aws_account["bucket"], "prod")
    assert stored["identity"] == IDENTITY_A and again.since == first.since == stored["since"]
    assert again.renewed_at > first.renewed_at


def test_a_second_deployment_under_the_name_refuses_naming_the_holder_and_the_release(
        aws_account, aws_client, monkeypatch):
    deployment = held_by_a_then_b(aws_account, monkeypatch)

    with pytest.raises(name_lease.NameHeld) as refused:
        pipeline.hold_deployment_names([ec2_spec(aws_account), ec2_spec(aws_account, "aws-p5")])

    message = str(refused.value)
    held = lease_record(aws_client, aws_account["bucket"], deployment)
    assert held["identity"] == IDENTITY_A  # untouched by the refused one
    assert IDENTITY_A in message and IDENTITY_B in message and f"since {held['since']}" in message
    assert (f"gpucompare release-name --deployment {deployment} --bucket {aws_account['bucket']} "
            "--prefix gpucompare") in message
    assert isinstance(refused.value, name_lease.PermanentError)  # the task fails at once, no retry


def release_cli(aws_account: dict[str, Any], *extra: str) -> subprocess.CompletedProcess[str]:
    """``gpucompare release-name`` in its own process, reaching moto through the connection."""
    return subprocess.run(
        [sys.executable, "-m", "gpucompare", "release-name", "--bucket", aws_account["bucket"],
         "--prefix", "gpucompare", "--aws-conn-id", aws_account["conn_id"], *extra],
        capture_output=True, text=True, timeout=120, cwd=REPO_ROOT, env=os.environ.copy())


def test_release_prints_what_it_released_and_the_second_deployment_then_starts(
        aws_account, aws_client, monkeypatch):
    deployment = held_by_a_then_b(aws_account, monkeypatch)
    with pytest.raises(name_lease.NameHeld):
        pipeline.hold_deployment_names([ec2_spec(aws_account)])

    wrong = release_cli(aws_account, "--holder", IDENTITY_B)
    released = release_cli(aws_account)
    nothing = release_cli(aws_account)
    pipeline.hold_deployment_names([ec2_spec(aws_account)])

    assert wrong.returncode == 2 and f"held by {IDENTITY_A}, not {IDENTITY_B}" in wrong.stderr
    assert released.returncode == 0, released.stderr
    assert f"released the deployment name {deployment!r}" in released.stdout
    assert f"held by identity {IDENTITY_A} since" in released.stdout
    assert nothing.returncode == 0 and "was not held" in nothing.stdout
    assert lease_record(aws_client, aws_account["bucket"], deployment)["identity"] == IDENTITY_B


def test_release_refuses_a_bad_name_naming_the_flag(aws_account):
    result = release_cli(aws_account, "--deployment", "Prod_1")
    holder = release_cli(aws_account, "--holder", "x y")
    assert result.returncode == 2 and "--deployment: 'Prod_1' is not a deployment name" in result.stderr
    assert holder.returncode == 2 and "--holder: 'x y' is not a deployment identity" in holder.stderr


@pytest.mark.parametrize("round_", range(4))
def test_a_race_of_first_time_takers_has_exactly_one_winner(aws_account, tmp_path: Path, round_: int):
    """Six processes, each another deployment's identity, released at once on a file's creation."""
    identities = [f"race{round_}-{n}-0000-4000-8000-000000000000" for n in range(6)]
    answers = lease_race.race(aws_account["bucket"], f"race-{round_}", identities, tmp_path)

    winners = [a["identity"] for a in answers if a["won"]]
    assert len(winners) == 1, answers
    assert all(a["holder"] == winners[0] for a in answers if not a["won"]), answers
