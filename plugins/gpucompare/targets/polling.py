"""The one way a step waits for something that has no wait of its own: ``poll_until`` asks a
check at a fixed interval through tenacity, with the stop stated by the caller (a deadline on the
caller's clock, or the check's own deadline). Used by the ssh and local targets and the scaling
launcher; a process that can be waited for is waited for with its own ``wait(timeout=…)``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import tenacity

T = TypeVar("T")


def poll_until(
    check: Callable[[], T | None],
    *,
    every_s: float,
    deadline: float | None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T | None:
    """``check()`` every ``every_s`` seconds until it returns something other than None, which is
    returned. With a ``deadline`` (on ``clock``), None once a check made after it found nothing;
    without one the check must end the wait itself (return an event or raise at its own
    deadline). An exception of ``check`` is raised at once, not retried."""
    stop = tenacity.stop_never if deadline is None else (lambda _state: clock() >= deadline)
    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_result(lambda result: result is None),
        stop=stop,
        wait=tenacity.wait_fixed(every_s),
        sleep=sleep,
        retry_error_callback=lambda _state: None,
    )
    return retrying(check)
