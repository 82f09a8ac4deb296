"""The trigger a deferred wait runs in: a small async poller over the target's own poller.

(The ec2 ``prepare`` defers the same way: the instance running and its SSM agent online,
``poller="prepare_poller"``; the event then goes to ``finish_prepare``.)

A sweep task starts the sweep (``Target.start_sweep``: seconds) and defers; the triggerer
then runs ``SweepTrigger``, which rebuilds the target from its spec and calls its
``sweep_poller(state, started).poll()`` in a thread every ``poll_interval_s`` seconds:

* ssh: reads the sweep's ``exit_code`` file and new progress lines over SFTP (the same
  ``SweepPoller`` the task uses when it waits itself), kills a sweep past its backstop;
* ec2: reads the sweep's SSM invocation, follows its progress object in S3, stops at once if
  the instance is gone, cancels a command past its deadline (``CommandPoller``).

The amazon provider's ``SsmRunCommandTrigger`` waits with ``ListCommandInvocations`` and a
waiter: it cannot see a spot interruption (the instance's state), follow progress, or cancel
what it abandons, and moto's server (the tests' AWS) does not implement that call; so the ec2
sweep waits here too, through the same ``SsmRunner`` as every other SSM call.

Progress lines go to the trigger's log, which Airflow shows in the task's log. The event is
what ``finish_sweep`` takes when the task resumes. Everything in ``serialize()`` is JSON.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

#: The waits a target offers a trigger (each returns an object with ``poll()`` and ``close()``).
POLLERS = ("sweep_poller", "prepare_poller")


class SweepTrigger(BaseTrigger):
    """Waits for one sweep of one target (see the module docstring).

    :param spec: the target's spec (``TargetSpec.to_dict()``)
    :param state: the target's state when the sweep started (``TargetState.to_dict()``)
    :param started: what ``start_sweep`` returned (its folder or command, its deadline)
    :param poll_interval_s: seconds between two polls
    :param poller: which of the target's waits: ``sweep_poller`` (a sweep) or ``prepare_poller``
        (ec2: the instance running and its SSM agent online, ``readiness.ReadyPoller``)
    """

    def __init__(self, *, spec: dict[str, Any], state: dict[str, Any], started: dict[str, Any],
                 poll_interval_s: float = 15.0, poller: str = "sweep_poller") -> None:
        super().__init__()
        if poller not in POLLERS:
            raise ValueError(f"poller {poller!r} is not allowed: {', '.join(POLLERS)}")
        self.spec, self.state, self.started = spec, state, started
        self.poll_interval_s = float(poll_interval_s)
        self.poller = poller

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"spec": self.spec, "state": self.state, "started": self.started,
                 "poll_interval_s": self.poll_interval_s, "poller": self.poller})

    def _poller(self) -> Any:
        from gpucompare.targets import make_target
        from gpucompare.targets.base import TargetState

        target = make_target(self.spec, line_sink=lambda line: self.log.info("%s", line))
        return getattr(target, self.poller)(TargetState.from_dict(self.state), self.started)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        poller = await asyncio.to_thread(self._poller)
        try:
            while True:
                try:
                    event = await asyncio.to_thread(poller.poll)
                except Exception as exc:  # the task decides: it raises the target's error
                    event = {"error": f"{type(exc).__name__}: {exc}"}
                if event is not None:
                    yield TriggerEvent(event)
                    return
                await asyncio.sleep(self.poll_interval_s)
        finally:
            await asyncio.to_thread(poller.close)


def trigger_for(wait: dict[str, Any]) -> BaseTrigger:
    """The trigger of one deferred wait, from the target's description of it
    (``DeferrableTarget.sweep_wait``, ``DeferrablePrepare.prepare_wait``): ``kind`` ``ssh`` is the
    asyncssh poller of a sweep's files (``airflow.ssh_trigger``), ``ssm`` the signed-call poller of
    an ec2 sweep's command (``airflow.ssm_trigger``); ``poller`` the target's own poller in a thread
    (``SweepTrigger``: ec2's prepare)."""
    from gpucompare.airflow.ssh_trigger import SshSweepTrigger
    from gpucompare.airflow.ssm_trigger import SsmSweepTrigger

    kinds: dict[str, type[BaseTrigger]] = {"ssh": SshSweepTrigger, "ssm": SsmSweepTrigger,
                                           "poller": SweepTrigger}
    arguments = dict(wait)
    kind = arguments.pop("kind", None)
    if kind not in kinds:
        raise ValueError(f"wait kind {kind!r} is not one of {', '.join(kinds)}")
    return kinds[kind](**arguments)
