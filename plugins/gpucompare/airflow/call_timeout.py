"""The one bound on a trigger's awaited call: ``asyncio.timeout`` from Python 3.11, the
``async_timeout`` package (aiohttp's dependency below 3.11) on 3.10, which the orchestrator supports."""

from __future__ import annotations

import sys

if sys.version_info >= (3, 11):
    from asyncio import timeout as call_timeout  # novermin
else:  # pragma: no cover - exercised on Python 3.10 only
    from async_timeout import timeout as call_timeout

__all__ = ["call_timeout"]
