"""What a botocore ``ClientError`` says: its AWS error code and HTTP status.

Every part of the ``ec2`` target (launch, SSM commands, S3 storage, teardown) decides on
these, so they live here once.
"""

from __future__ import annotations


def client_error_code(exc: BaseException) -> str | None:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code") or "") or None
    return None


def http_status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return None
