"""The roots of gpucompare's errors: whether retrying can help decides which one to raise.

* ``PermanentError``: bad input, a refused configuration or budget, a record that breaks the
  contract. Retrying cannot fix it, so an Airflow task fails at once (no retries) and a paid
  instance is not held idle waiting for a retry that will fail the same way.
* ``TransientError``: a network hiccup, throttling, a host not reachable yet. Retrying may
  help, so the task's retry schedule applies.
* ``UsageError``: bad input on the command line (``python -m gpucompare``): exit code 2 with
  the message, nothing written.

Errors that are neither (a bug, an unexpected library exception) keep Airflow's default
retry behaviour. This module imports nothing of the library, so every layer may use it.
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
