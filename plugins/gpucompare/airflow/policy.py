"""The failure and retry policy of every gpucompare DAG's tasks.

* Retries follow the error's class (``is_permanent``): a ``PermanentError`` (validation, a
  refused sweep configuration or budget, bad records; ``gpucompare.errors``) or an AWS error code
  no retry can fix fails at once (``bad_input_fails`` raises ``AirflowFailException``); anything
  else retries with exponential backoff from ``GPUCOMPARE_RETRY_DELAY_S`` (``network_retries``).
* Steps that hold a machine outside a sweep retry quickly and boundedly (``HOLDING_*``).
* ``default_args`` are every task's: an owner, retries with backoff, a time limit.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from airflow.sdk.exceptions import AirflowFailException

from gpucompare import settings
from gpucompare.errors import PermanentError, TransientError

OWNER = "gpucompare"


def retry_delay() -> timedelta:
    return timedelta(seconds=settings.retry_delay_s())


def network_retries(retries: int = 3, *, max_delay: timedelta = timedelta(minutes=30),
                    first_delay: timedelta | None = None) -> dict[str, Any]:
    """Retry settings of a step that talks to a network: exponential backoff from
    ``GPUCOMPARE_RETRY_DELAY_S`` (at most ``first_delay``), capped at ``max_delay``."""
    first = retry_delay() if first_delay is None else min(retry_delay(), first_delay)
    return {
        "retries": retries,
        "retry_delay": min(first, max_delay),
        "retry_exponential_backoff": 2.0,
        "max_retry_delay": max_delay,
    }


#: Steps that hold a machine outside a sweep (deploy, collect) and terminate: at most two
#: retries, 30 s then 60 s apart (less with a smaller GPUCOMPARE_RETRY_DELAY_S), so an instance
#: whose sweep ended is not held idle for more than a few minutes by a flaky call.
HOLDING_RETRIES = 2
HOLDING_FIRST_DELAY = timedelta(seconds=30)
HOLDING_MAX_DELAY = timedelta(seconds=60)


def default_args() -> dict[str, Any]:
    """Every task of every gpucompare DAG: an owner, retries with backoff, a time limit."""
    return {"owner": OWNER, "execution_timeout": timedelta(hours=1), **network_retries(2)}


def is_permanent(exc: BaseException) -> bool:
    """Whether retrying cannot help: a ``PermanentError`` (validation, a refused configuration
    or budget, a lake, price, report or record the library refuses), or the worker's own
    bad-input errors (``bench_tasks`` does not import the library, so its ``ConfigError`` and
    ``RecordError`` are named here), or an AWS error whose code no retry can fix
    (``targets.ec2.aws_errors.PERMANENT_ERROR_CODES``: UnauthorizedOperation,
    InvalidAMIID.NotFound, OptInRequired…, also when wrapped). A ``TransientError`` and anything
    else (network, throttling, a bug) may be retried."""
    if isinstance(exc, PermanentError):
        return True
    if isinstance(exc, TransientError):
        return False
    from bench_tasks.configs import ConfigError
    from bench_tasks.record_fields import RecordError
    from gpucompare.targets.ec2.aws_errors import permanent_aws_error_code

    return isinstance(exc, ConfigError | RecordError) or permanent_aws_error_code(exc) is not None


@contextlib.contextmanager
def bad_input_fails() -> Iterator[None]:
    """Turn errors no retry can fix (``is_permanent``) into an immediate failure."""
    try:
        yield
    except Exception as exc:
        if is_permanent(exc):
            raise AirflowFailException(str(exc)) from exc
        raise
