"""Fixtures the system tests share."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def moto_account(aws_endpoint: str, aws_client: Any, monkeypatch: pytest.MonkeyPatch,
                 s3_bucket: str) -> dict[str, Any]:
    """The ec2 defaults of a fleet file for an AWS account on moto's server (the stand-in for a
    real account: no cloud is reachable here): the Airflow connection, an instance profile, the
    AMI parameter, the results bucket, short waits."""
    from tests.support.ec2_support import (
        AMI_PARAMETER,
        create_instance_profile,
        point_airflow_connection,
        publish_ami_parameter,
    )

    conn_id = point_airflow_connection(monkeypatch, aws_endpoint)
    publish_ami_parameter(aws_client)
    return {"aws_conn_id": conn_id, "ami": f"resolve:ssm:{AMI_PARAMETER}",
            "instance_profile": create_instance_profile(aws_client), "results_bucket": s3_bucket,
            "poll_interval_s": 0.2, "agent_timeout_s": 5, "launch_timeout_s": 30}
