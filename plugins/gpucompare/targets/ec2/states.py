"""The one state machine of the ``ec2`` target's waits: an SSM command's status and an
instance's state, each read as ``RUNNING`` (more will happen), ``FINAL`` (the wait is over and
got what it waited for) or ``FAILED`` (the wait is over and did not).

Used by every wait of the target: the in-task waits (``ssm.CommandWait``, ``sweeps.CommandPoller``,
``readiness``), the triggerer's (``airflow.ssm_trigger``) and the scaling channel
(``channel.SSMChannel``); the SSM statuses are listed here and nowhere else. In a process, a
wait asks its ``poll()`` through ``targets.polling.poll_until`` (tenacity, the poll ending the wait
at its own deadline).
"""

from __future__ import annotations

from typing import Any

#: The three readings of a status or state.
RUNNING, FINAL, FAILED = "running", "final", "failed"

#: Invocation statuses after which more will happen (``Cancelling`` ends as ``Cancelled``).
SSM_RUNNING = frozenset({"Pending", "InProgress", "Delayed", "Cancelling"})
#: Invocation statuses after which nothing more will happen.
SSM_FINAL = frozenset({"Success", "Failed", "Cancelled", "TimedOut", "DeliveryTimedOut",
                       "ExecutionTimedOut", "Undeliverable", "Terminated", "InvalidPlatform",
                       "AccessDenied"})
SSM_SUCCESS = "Success"

#: Instance states of a machine that still works for the run (a command may run on it).
ALIVE_STATES = ("pending", "running")
#: Instance states from which it never becomes ready (a spot instance reclaimed at once, a
#: launch refused after RunInstances answered, the time-to-live reached).
DEAD_STATES = ("shutting-down", "terminated", "stopping", "stopped")


def command_phase(status: str | None) -> str:
    """An SSM invocation status read: ``FINAL`` (Success), ``FAILED`` (any other final status),
    else ``RUNNING`` (an unknown status too: the wait's deadline bounds it)."""
    if status == SSM_SUCCESS:
        return FINAL
    return FAILED if status in SSM_FINAL else RUNNING


def is_final(status: str | None) -> bool:
    """Whether nothing more will happen to the command (succeeded or not)."""
    return command_phase(status) != RUNNING


def instance_phase(state: str | None) -> str:
    """An instance state read toward ``running``: ``FINAL`` once it runs, ``FAILED`` when it is
    dead (it never will), else ``RUNNING`` (pending, or not visible yet: None)."""
    if state == "running":
        return FINAL
    return FAILED if state in DEAD_STATES else RUNNING


def is_alive(state: str | None) -> bool:
    """Whether a command may still run on the instance (pending or running; gone is not)."""
    return state in ALIVE_STATES


def lost_message(instance_id: str, state: str | None, command_id: str, status: str | None) -> str:
    """What a wait says when the instance died under a running command."""
    return (f"instance {instance_id} is {state} while SSM command {command_id} was {status} "
            "(spot interruption or time-to-live?)")


def instance_id_of(state: Any) -> str:
    """The run's instance id from its ``TargetState``; a ``TargetError`` when prepare recorded none."""
    from gpucompare.targets.base import TargetError

    if not state.resource_id:
        raise TargetError(f"no instance in the state of run {state.run_id}: prepare did not succeed")
    return state.resource_id
