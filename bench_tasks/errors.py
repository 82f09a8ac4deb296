"""Classify why a configuration did not run, from MXNet's own error text.

MXNet reports every failure as an ``MXNetError`` (or, when the failure happens on an engine
thread, as a fatal log line on standard error before the process aborts). Its wording for
"out of memory" changed between 1.x releases, so the patterns below cover each wording we
have seen in MXNet's sources and users' reports; ``tests/support/data/mxnet_errors/`` holds the
recorded texts the tests check against:

* ``cudaMalloc failed: out of memory`` (pooled GPU storage manager, MXNet 0.9 – 1.5)
* ``cudaMalloc retry failed: out of memory`` (the same after its release-and-retry, 1.5 – 1.7)
* ``Memory allocation failed out of memory`` (pooled storage manager rewrite, 1.8 – 1.9)
* ``Check failed: e == cudaSuccess ...: CUDA: out of memory`` (mshadow stream/cuBLAS setup)
* ``CUDNN_STATUS_ALLOC_FAILED`` (cuDNN could not allocate its workspace)
* ``Failed to allocate CPU Memory`` (CPU storage; also what an address-space limit gives)

Standard library only: the orchestrator may classify text it collected from a dead worker.
"""

from __future__ import annotations

import re

OOM_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"cudaMalloc (retry )?failed: out of memory", re.IGNORECASE),
    re.compile(r"Memory allocation failed\s+out of memory", re.IGNORECASE),
    re.compile(r"CUDA: out of memory", re.IGNORECASE),
    re.compile(r"CUDNN_STATUS_ALLOC_FAILED"),
    re.compile(r"Failed to allocate CPU Memory", re.IGNORECASE),
    re.compile(r"Memory allocation failed\s+Cannot allocate memory", re.IGNORECASE),
    re.compile(r"std::bad_alloc"),
)

#: MXNet's executor group refuses a batch with fewer samples than devices.
TOO_MANY_SLICES = re.compile(r"Too many slices", re.IGNORECASE)

#: Operators or builds that cannot do what was asked (e.g. float16 GEMM on the CPU).
UNSUPPORTED_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"not implemented", re.IGNORECASE),
    re.compile(r"Compile with USE_CUDA=1", re.IGNORECASE),
    re.compile(r"compiled without (CUDA|NCCL|distributed)", re.IGNORECASE),
    re.compile(r"Unknown KVStore type", re.IGNORECASE),
)

#: How much of an error text a record keeps: enough to act on, small enough for the lake.
MAX_ERROR_CHARS = 1500

_STACK_LINE = re.compile(r"^\s*(\[bt\]|Stack trace|\d+: |File \"/usr|\s*at )")


def classify_failure(text: str) -> str:
    """The status for a failure described by ``text``: oom, batch_smaller_than_devices,
    unsupported, or error."""
    if any(p.search(text) for p in OOM_PATTERNS):
        return "oom"
    if TOO_MANY_SLICES.search(text):
        return "batch_smaller_than_devices"
    if any(p.search(text) for p in UNSUPPORTED_PATTERNS):
        return "unsupported"
    return "error"


def summarize_error(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """The readable part of an error text: MXNet's message lines without the C++ backtrace.

    The line naming the failure (``MXNetError: ...`` or the last ``Check failed``) comes
    first, so a truncated message still says what happened.
    """
    lines = [line.rstrip() for line in text.strip().splitlines()]
    kept = [line for line in lines if line.strip() and not _STACK_LINE.match(line)]
    key = next(
        (line.strip() for line in reversed(kept)
         if "Error" in line or "Check failed" in line or "failed" in line),
        None,
    )
    body = "\n".join(kept)
    summary = body if key is None or body.startswith(key) else f"{key}\n{body}"
    if not summary:
        summary = "unknown failure (no message)"
    if len(summary) > limit:
        summary = summary[: limit - 3] + "..."
    return summary
