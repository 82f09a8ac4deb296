"""A retried ec2 sweep decides from SSM what to do: re-attach, reuse or start again.

Against moto's server (``fixtures_aws``) through the amazon provider's hooks. Moto finishes
every command at once, so the invocation's status is rewritten on the client
(``after-call`` event) to stand in for a command still running, failed or succeeded on a
real instance; every ``SendCommand`` that leaves the client is counted. Each "retry" is a new
target object given the state ``deploy`` returned (the retried task's input: the lost try's
state, with its CommandId, never reached XCom), as Airflow's next try would be.
"""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from gpucompare.targets.base import TargetError, TargetState
from gpucompare.targets.ec2 import target as ec2
from tests.support.ec2_support import (
    TINY_SWEEP,
    ec2_spec,
    new_run_id,
)


class Endpoint:
    """What the client sends and what its GetCommandInvocation answers (``answers``, one per
    call, the last repeating; empty: moto's own answer)."""

    def __init__(self) -> None:
        self.sent: list[list[str]] = []
        self.cancelled: list[str] = []
        self.answers: list[dict[str, Any]] = []
        self.polls = 0

    def attach(self, target: ec2.Ec2Target) -> ec2.Ec2Target:
        events = target.ssm_hook.conn.meta.events
        events.register("provide-client-params.ssm.SendCommand",
                        lambda params, **_: self.sent.append(params["Parameters"]["commands"]))
        events.register("provide-client-params.ssm.CancelCommand",
                        lambda params, **_: self.cancelled.append(params["CommandId"]))
        events.register("after-call.ssm.GetCommandInvocation", self._rewrite)
        return target

    def _rewrite(self, parsed: dict[str, Any], **_: Any) -> None:
        if self.answers:
            parsed.update(self.answers[min(self.polls, len(self.answers) - 1)])
        self.polls += 1

    def answer(self, *answers: dict[str, Any]) -> None:
        self.answers, self.polls = list(answers), 0


@pytest.fixture
def deployed(aws_account: dict[str, Any]):
    spec = ec2_spec(aws_account["profile"], aws_account["bucket"])
    target = ec2.Ec2Target(spec, line_sink=lambda _: None)
    state = target.prepare(new_run_id())
    try:
        state = target.deploy(state)
        yield spec, state
    finally:
        target.teardown(state)


def _retry(spec: Any, state: TargetState, endpoint: Endpoint) -> tuple[ec2.Ec2Target, TargetState]:
    """The next try: a new target, the state deploy returned (a copy through JSON, as XCom)."""
    target = endpoint.attach(ec2.Ec2Target(spec, line_sink=lambda _: None))
    return target, TargetState.from_dict(state.to_dict())


def test_a_retry_re_attaches_to_a_running_sweep_reuses_a_finished_one_and_restarts_a_failed_one(deployed):
    spec, deployed_state = deployed
    endpoint = Endpoint()
    first, state = _retry(spec, deployed_state, endpoint)
    started = first.start_sweep(state, TINY_SWEEP, timeout_s=60)
    assert (started.decision, len(endpoint.sent)) == ("start", 1)
    assert state.extra["sweep_commands"] == {started.sweep: started.command_id}

    # the answer of the first try was lost while its command runs: the retry re-attaches and
    # waits for that very command; nothing is sent again
    endpoint.answer({"Status": "InProgress"}, {"Status": "InProgress"},
                    {"Status": "Success", "ResponseCode": 0})
    retry, retry_state = _retry(spec, deployed_state, endpoint)
    done = retry.run_sweep(retry_state, TINY_SWEEP, timeout_s=60)
    assert len(endpoint.sent) == 1 and endpoint.polls >= 3
    assert done.extra["sweep_commands"] == {started.sweep: started.command_id}
    assert done.remote_results and done.remote_results.endswith("/results.jsonl")

    # the command succeeded: a later retry reuses it (no command, no wait)
    endpoint.answer({"Status": "Success", "ResponseCode": 0})
    retry, retry_state = _retry(spec, deployed_state, endpoint)
    again = retry.start_sweep(retry_state, TINY_SWEEP, timeout_s=60)
    assert (again.decision, again.command_id, len(endpoint.sent)) == ("reuse", started.command_id, 1)

    # it failed (or SSM timed it out, or cancelled it): only then is the sweep sent again,
    # and the new CommandId replaces the old one
    for final in ("Failed", "TimedOut", "Cancelled"):
        endpoint.answer({"Status": final, "ResponseCode": 1})
        retry, retry_state = _retry(spec, deployed_state, endpoint)
        restarted = retry.start_sweep(retry_state, TINY_SWEEP, timeout_s=60)
        assert restarted.decision == "start" and restarted.command_id != started.command_id
        assert retry_state.extra["sweep_commands"] == {started.sweep: restarted.command_id}
    assert len(endpoint.sent) == 4
    # a different sweep (another configuration) of the same run is its own command
    other = {**TINY_SWEEP, "matrix": [{**TINY_SWEEP["matrix"][0], "batch_sizes": [2]}]}
    endpoint.answer({"Status": "InProgress"})
    retry, retry_state = _retry(spec, deployed_state, endpoint)
    assert retry.start_sweep(retry_state, other, timeout_s=60).decision == "start"
    assert len(endpoint.sent) == 5


def test_a_retry_that_kept_the_command_id_uses_it_and_an_abandoned_wait_cancels_it(deployed):
    """The CommandId in the state is used as is; a wait that gives up (time limit) cancels
    the command it abandons, and the next try, finding it Cancelled, sends the sweep again."""
    spec, deployed_state = deployed
    endpoint = Endpoint()
    target, state = _retry(spec, deployed_state, endpoint)
    started = target.start_sweep(state, TINY_SWEEP, timeout_s=1)
    endpoint.answer({"Status": "InProgress"})
    with pytest.raises(TargetError, match="still InProgress after .* cancelled"):
        target.runner(state).wait(started.command_id, 1)
    assert endpoint.cancelled == [started.command_id]
    endpoint.answer({"Status": "Cancelled", "ResponseCode": -1})
    again = target.start_sweep(state, TINY_SWEEP, timeout_s=1)
    assert again.decision == "start" and len(endpoint.sent) == 2


def test_an_invocation_not_registered_yet_counts_as_pending_by_its_error_code(deployed):
    """Right after SendCommand, GetCommandInvocation may answer InvocationDoesNotExist: the
    retry re-attaches (decided by the error code). Another error code is an error, even when
    its message names InvocationDoesNotExist."""
    spec, deployed_state = deployed
    endpoint = Endpoint()
    target, state = _retry(spec, deployed_state, endpoint)
    started = target.start_sweep(state, TINY_SWEEP, timeout_s=60)
    code = {"value": "InvocationDoesNotExist"}

    def refuse(**_: Any) -> None:
        raise ClientError({"Error": {"Code": code["value"], "Message": "InvocationDoesNotExist (injected)"},
                           "ResponseMetadata": {"HTTPStatusCode": 400}}, "GetCommandInvocation")

    retry, retry_state = _retry(spec, deployed_state, endpoint)
    retry.ssm_hook.conn.meta.events.register("before-call.ssm.GetCommandInvocation", refuse)
    assert retry.start_sweep(retry_state, TINY_SWEEP, timeout_s=60).decision == "attach"
    code["value"] = "AccessDeniedException"
    with pytest.raises(TargetError, match="GetCommandInvocation"):
        retry.start_sweep(TargetState.from_dict(deployed_state.to_dict()), TINY_SWEEP, timeout_s=60)
    assert len(endpoint.sent) == 1 and started.command_id
