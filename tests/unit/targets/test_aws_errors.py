"""Which AWS errors no retry can fix (``targets.ec2.aws_errors``) and the DAGs' retry decision
on them (``airflow.policy.is_permanent``): by error code, never by message text."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from gpucompare.airflow import policy
from gpucompare.targets.base import TargetError
from gpucompare.targets.ec2.aws_errors import PERMANENT_ERROR_CODES, permanent_aws_error_code
from gpucompare.targets.ec2.launch import InstanceLookupFailed


def _client_error(code: str, message: str = "refused", status: int = 400) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message},
                        "ResponseMetadata": {"HTTPStatusCode": status}}, "RunInstances")


@pytest.mark.parametrize("code", ["UnauthorizedOperation", "InvalidAMIID.NotFound", "Unsupported",
                                  "OptInRequired", "InvalidParameterValue"])
def test_the_codes_of_the_issue_are_permanent_raw_and_wrapped(code: str) -> None:
    assert code in PERMANENT_ERROR_CODES
    raw = _client_error(code)
    assert policy.is_permanent(raw)
    try:
        try:
            raise raw
        except ClientError as exc:
            raise TargetError("RunInstances (on-demand g5.xlarge) failed") from exc
    except TargetError as wrapped:
        assert permanent_aws_error_code(wrapped) == code
        assert policy.is_permanent(wrapped)


@pytest.mark.parametrize("code", ["RequestLimitExceeded", "Throttling", "InternalError",
                                  "InsufficientInstanceCapacity", "InvalidInstanceID.NotFound"])
def test_errors_a_retry_may_fix_are_not_permanent(code: str) -> None:
    assert not policy.is_permanent(_client_error(code, status=500))


def test_the_message_text_decides_nothing() -> None:
    """A retryable code whose message mentions a permanent one stays retryable, and the reverse."""
    assert not policy.is_permanent(_client_error("InternalError", "UnauthorizedOperation upstream"))
    assert not policy.is_permanent(RuntimeError("UnauthorizedOperation"))
    assert policy.is_permanent(_client_error("UnauthorizedOperation", "please retry"))


def test_a_failed_instance_lookup_is_transient() -> None:
    """prepare refuses to launch when its tag lookup failed; the task's retry looks again."""
    try:
        try:
            raise EndpointConnectionError(endpoint_url="https://ec2.us-east-1.amazonaws.com")
        except EndpointConnectionError as exc:
            raise InstanceLookupFailed("cannot tell whether run r already has an instance") from exc
    except InstanceLookupFailed as failed:
        assert not policy.is_permanent(failed)
