"""The roots of gpucompare's errors: whether retrying can help decides which one to raise.

* ``PermanentError``: bad input, a refused configuration or budget, a record that breaks the
  contract. Retrying cannot fix it, so an Airflow task fails at once (no retries) and a paid
  instance is not held idle waiting for a retry that will fail the same way.
* ``TransientError``: a network hiccup, throttling, a host not reachable yet. Retrying may
  help, so the task's retry schedule applies.
* ``UsageError``: bad input on the command line (``python -m gpucompare``): exit code 2 with
  the message, nothing written.

Errors that are neither (a bug, an unexpected library exception) keep Airflow's default
retry behaviour. This module imports nothing of the library, so every layer may use it; it also tells a user
what to do about an environment's failures (``explain_environment_error``).
"""

from __future__ import annotations


class GpucompareError(Exception):
    """Base of every error gpucompare raises on purpose."""


class PermanentError(GpucompareError, ValueError):
    """Retrying cannot help: the task fails at once, naming the field or setting at fault.

    A ``ValueError`` too, so callers that catch bad input as ``ValueError`` keep working."""


class TransientError(GpucompareError):
    """Retrying may help (network, throttling, a machine not ready yet)."""


class UsageError(PermanentError):
    """Bad command-line input: ``python -m gpucompare`` exits with code 2 and the message."""


#: The optional extra (pyproject ``[project.optional-dependencies]``) that brings each module
#: gpucompare imports only for some commands: a missing one names the extra to install.
EXTRA_OF_MODULE = {
    "boto3": "aws", "botocore": "aws", "s3transfer": "aws", "airflow.providers.amazon": "aws",
    "paramiko": "ssh", "sshtunnel": "ssh", "airflow.providers.ssh": "ssh",
    "celery": "celery", "redis": "celery", "airflow.providers.celery": "celery",
    "psycopg2": "postgres", "airflow.providers.postgres": "postgres",
}
#: botocore's exceptions for credentials that are absent or refused (by class name: botocore is an
#: optional extra, so it is not imported to tell them)
_NO_CREDENTIALS = {"NoCredentialsError", "PartialCredentialsError", "NoRegionError", "ProfileNotFound",
                   "CredentialRetrievalError", "UnauthorizedSSOTokenError", "TokenRetrievalError"}
#: AWS error codes of credentials refused outright (no retry helps; the ec2 target's permanent errors
#: include them: targets/ec2/aws_errors.py)
CREDENTIALS_REFUSED_CODES = frozenset({"AuthFailure", "UnrecognizedClientException", "InvalidClientTokenId",
                                       "SignatureDoesNotMatch"})
_BAD_CREDENTIAL_CODES = CREDENTIALS_REFUSED_CODES | {"ExpiredToken", "ExpiredTokenException",
                                                     "InvalidAccessKeyId"}
#: botocore's exceptions for an AWS endpoint that cannot be reached (refused, unresolvable, timed out)
_UNREACHABLE = {"EndpointConnectionError", "ConnectTimeoutError", "ConnectionClosedError",
                "ProxyConnectionError", "ReadTimeoutError"}
#: the errors of a local file or folder (an S3 store's failures are explained by lake.storage)
_LOCAL_ERRORS = (PermissionError, FileNotFoundError, IsADirectoryError, NotADirectoryError, FileExistsError)
_AWS_CREDENTIALS = ("set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN) or AWS_PROFILE "
                    "in the environment, or give --aws-conn-id NAME, an Airflow connection of type aws")


def missing_extra(exc: BaseException) -> str | None:
    """What to install when ``exc`` is a module gpucompare needs that is not installed."""
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return None
    extra = next((extra for module, extra in EXTRA_OF_MODULE.items()
                  if exc.name == module or exc.name.startswith(module + ".")), None)
    if extra is None:
        return (f"the Python package providing {exc.name!r} is not installed in this environment: "
                "install gpucompare with its dependencies (pip install gpucompare -c constraints.txt)")
    return (f"this needs the {extra!r} extra ({exc.name} is not installed): "
            f"pip install 'gpucompare[{extra}]' -c constraints.txt")


def explain_environment_error(exc: BaseException) -> str | None:
    """A one-line cause and remedy for a failure of the environment rather than of gpucompare: a
    missing extra, absent or refused AWS credentials, an undefined Airflow connection, a local file
    or folder that cannot be read or written. None when ``exc`` is none of these."""
    kind = type(exc).__name__
    module = type(exc).__module__
    if isinstance(exc, ModuleNotFoundError):
        return missing_extra(exc)
    if module.startswith("botocore") and kind in _UNREACHABLE:
        endpoint = (getattr(exc, "kwargs", None) or {}).get("endpoint_url") or "(the AWS default)"
        return (f"the AWS endpoint {endpoint} cannot be reached ({kind}: {exc}): check AWS_ENDPOINT_URL "
                "(if set: it points there), the network or proxy, and the region")
    if module.startswith("botocore") and kind in _NO_CREDENTIALS:
        return f"no usable AWS credentials ({kind}: {exc}): {_AWS_CREDENTIALS}"
    response = getattr(exc, "response", None)
    code = (response or {}).get("Error", {}).get("Code") if isinstance(response, dict) else None
    if module.startswith("botocore") and code in _BAD_CREDENTIAL_CODES:
        return f"AWS refused the credentials ({code}: {exc}): {_AWS_CREDENTIALS}"
    if kind == "AirflowNotFoundException":
        return f"{exc}: define the connection (airflow connections add …) or give another one"
    if isinstance(exc, _LOCAL_ERRORS) and not any(w in str(exc).lower() for w in ("s3://", "aws")):
        where = f"{exc.filename}: " if exc.filename else ""
        return (f"{where}{exc.strerror or exc} (a local file or folder: check the path and that this user "
                "may write there)")
    return None
