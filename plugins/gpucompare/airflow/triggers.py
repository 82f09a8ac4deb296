"""The trigger of a deferred wait, from the target's description of it (``trigger_for``).

A step task starts the long part (``Target.start_sweep``, ``start_prepare``, ``start_deploy``:
seconds) and defers; the triggerer then runs the trigger the target described: a small async
poller that imports no target module and serializes only what it needs (``airflow.ssh_trigger``:
a sweep's or a deploy's files on an ssh host over asyncssh; ``airflow.ssm_trigger``: an ec2
sweep's SSM command, and the ec2 instance running with its SSM agent online, over signed
aiohttp calls). Every call has a timeout, so a stalled host or endpoint costs the loop a pending
coroutine, never a thread.

The amazon provider's ``SsmRunCommandTrigger`` waits with ``ListCommandInvocations`` and a
waiter: it cannot see a spot interruption (the instance's state), follow progress, or cancel
what it abandons, and moto's server (the tests' AWS) does not implement that call; so the ec2
waits are this project's own.

Progress lines go to the trigger's log, which Airflow shows in the task's log. The event is
what the target's ``finish_*`` takes when the task resumes. Everything in ``serialize()`` is JSON.
"""

from __future__ import annotations

from typing import Any

from airflow.triggers.base import BaseTrigger


def trigger_for(wait: dict[str, Any]) -> BaseTrigger:
    """The trigger of one deferred wait, from the target's description of it
    (``DeferrableTarget.sweep_wait``, ``DeferrablePrepare.prepare_wait``, ``deploy_wait``):
    ``kind`` ``ssh`` is the asyncssh poller of a sweep's files (``airflow.ssh_trigger``), ``ssm``
    the signed-call poller of an ec2 sweep's command and ``ssm_ready`` of an ec2 instance's
    readiness (``airflow.ssm_trigger``)."""
    from gpucompare.airflow.ssh_trigger import SshSweepTrigger
    from gpucompare.airflow.ssm_trigger import SsmReadyTrigger, SsmSweepTrigger

    kinds: dict[str, type[BaseTrigger]] = {"ssh": SshSweepTrigger, "ssm": SsmSweepTrigger,
                                           "ssm_ready": SsmReadyTrigger}
    arguments = dict(wait)
    kind = arguments.pop("kind", None)
    if kind not in kinds:
        raise ValueError(f"wait kind {kind!r} is not one of {', '.join(kinds)}")
    return kinds[kind](**arguments)
