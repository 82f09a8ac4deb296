"""The AWS clients an ``ec2`` target's parts share: the amazon provider's hooks, built once each.

One object per target (``Ec2Target.clients``) handed to its launcher (``launch.Ec2Launcher``),
its storage (``storage.RunStorage``) and its SSM runner (``ssm.SsmRunner``), so every part
talks through the same boto3 client of a service (tests hook into its events) and the AWS
connection (``aws_conn_id``: region, credentials, role, ``endpoint_url``) is Airflow's.
Each hook is created on first use.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any


class AwsClients:
    """The hooks of one AWS connection in one region (see the module docstring)."""

    def __init__(self, aws_conn_id: str, region: str) -> None:
        self.aws_conn_id, self.region = aws_conn_id, region

    @cached_property
    def ec2_hook(self) -> Any:
        from airflow.providers.amazon.aws.hooks.ec2 import EC2Hook

        return EC2Hook(aws_conn_id=self.aws_conn_id, region_name=self.region, api_type="client_type")

    @cached_property
    def ssm_hook(self) -> Any:
        from airflow.providers.amazon.aws.hooks.ssm import SsmHook

        return SsmHook(aws_conn_id=self.aws_conn_id, region_name=self.region)

    @cached_property
    def s3_hook(self) -> Any:
        from airflow.providers.amazon.aws.hooks.s3 import S3Hook

        return S3Hook(aws_conn_id=self.aws_conn_id)

    @cached_property
    def iam_client(self) -> Any:
        from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

        return AwsBaseHook(aws_conn_id=self.aws_conn_id, client_type="iam").conn
