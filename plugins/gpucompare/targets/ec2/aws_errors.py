"""What a botocore error says, and whether retrying can help: its AWS error code, its HTTP
status, and the one list of error codes no retry can fix (:data:`PERMANENT_ERROR_CODES`).

Every part of the ``ec2`` target (launch, SSM commands, S3 storage, teardown) and the DAGs'
retry decision (``gpucompare.airflow.policy.is_permanent``) decide on these, by error code
only (never by message text), so they live here once.
"""

from __future__ import annotations

from gpucompare.errors import CREDENTIALS_REFUSED_CODES

#: AWS error codes that mean the request itself, the account or the permissions are wrong:
#: the same call fails the same way on every retry, so the task fails at once (no Airflow
#: retries) instead of holding a pool slot, or a paid instance, through a retry schedule.
#: Throttling, 5xx, capacity (``InsufficientInstanceCapacity``…) and "not found yet" answers of
#: resources being created are not here: retrying those may help.
_REQUEST_REFUSED_CODES = frozenset({
    # not allowed: IAM, SCPs, a region or service not enabled (refused credentials: CREDENTIALS_REFUSED_CODES)
    "UnauthorizedOperation",
    "AccessDenied",
    "AccessDeniedException",
    "OptInRequired",
    "PendingVerification",
    "Blocked",
    # not possible: the request names something that does not exist or is not offered
    "Unsupported",
    "UnsupportedOperation",
    "InvalidAMIID.NotFound",
    "InvalidAMIID.Malformed",
    "InvalidAMIID.Unavailable",
    "InvalidSubnetID.NotFound",
    "InvalidGroup.NotFound",
    "InvalidSecurityGroupID.NotFound",
    "InvalidBlockDeviceMapping",
    "ParameterNotFound",
    "InvalidDocument",
    "NoSuchBucket",
    # malformed: a parameter the API refuses as such
    "InvalidParameterValue",
    "InvalidParameterCombination",
    "InvalidParameter",
    "MissingParameter",
    "ValidationError",
    "ValidationException",
})
PERMANENT_ERROR_CODES = CREDENTIALS_REFUSED_CODES | _REQUEST_REFUSED_CODES

#: S3's answers to a conditional write (``If-None-Match``/``If-Match``) that lost to another writer:
#: 412, and 409 when two conditional writes of one key overlap (the launch plan, the name lease)
CONDITIONAL_WRITE_LOST_CODES = frozenset({"PreconditionFailed", "ConditionalRequestConflict"})


#: AWS error codes that say "not now": throttling and the service's own 5xx answers. A call that
#: must happen (a teardown's TerminateInstances) is retried on these for minutes, not tries.
BUSY_ERROR_CODES = frozenset({
    "RequestLimitExceeded",
    "Throttling",
    "ThrottlingException",
    "RequestThrottled",
    "TooManyRequestsException",
    "SlowDown",
    "InternalError",
    "InternalFailure",
    "ServiceUnavailable",
    "Unavailable",
})


def client_error_code(exc: BaseException) -> str | None:
    """The AWS error code of a botocore ``ClientError`` (None for anything else)."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code") or "") or None
    return None


def http_status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return None


def permanent_aws_error_code(exc: BaseException) -> str | None:
    """The permanent AWS error code behind ``exc`` (itself, or an error it was raised from, as
    ``TargetError(...) from ClientError``), else None: then retrying may help."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        code = client_error_code(current)
        if code in PERMANENT_ERROR_CODES:
            return code
        current = current.__cause__ or current.__context__
    return None
