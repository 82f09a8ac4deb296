"""The deferred ssh sweep's trigger against a real OpenSSH server on loopback.

``SshSweepTrigger`` (``gpucompare.airflow.ssh_trigger``, built by ``triggers.trigger_for`` from
``SSHTarget.sweep_wait``) is rebuilt from its ``serialize()`` output, as the triggerer does, and
run in an asyncio loop in this process; the host is this machine through sshd (``fixtures_sshd``).
The worker is a stand-in interpreter (option ``python``)
that answers the deploy check and, for ``-m bench_tasks sweep``, writes one progress line,
then sleeps until the test releases it and writes one record: a long sweep that the test
ends when it wants. The trigger must not fire while the worker sleeps and must fire with
the exit status once the exit file appears.
"""

from __future__ import annotations

import asyncio
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.module_loading import import_string

from gpucompare.airflow.triggers import trigger_for
from gpucompare.targets.base import TargetError
from gpucompare.targets.ssh.target import SSHTarget
from tests.support.fixtures_sshd import SshdServer
from tests.support.target_helpers import TINY_SWEEP, stand_in_ssh_target

FAKE_PYTHON = textwrap.dedent("""\
    #!/bin/sh
    # stands in for the worker's interpreter: the deploy check, and a sweep that sleeps
    box="{box}"
    if [ "$1" = -c ]; then echo 1.9.1; exit 0; fi
    out="$7"
    echo "$$" >> "$box/starts"
    echo "[1/1] score alexnet b1: started" >&2
    while [ ! -f "$box/release" ]; do sleep 0.1; done
    [ -f "$box/fail" ] && {{ echo "worker failed" >&2; exit 3; }}
    echo '{{"network": "alexnet"}}' > "$out"
    echo "[1/1] score alexnet b1: ok" >&2
    """)


def _target(sshd: SshdServer, tmp_path: Path) -> tuple[SSHTarget, Path]:
    return stand_in_ssh_target(sshd, tmp_path, FAKE_PYTHON, poll_interval_s=0.2)


async def _wait_for(predicate, timeout_s: float) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.05)


def _rebuilt(target: SSHTarget, state, started) -> Any:
    """The trigger as the triggerer makes it: from its classpath and JSON kwargs."""
    classpath, kwargs = trigger_for(target.sweep_wait(state, started)).serialize()
    assert "spec" not in kwargs and "state" not in kwargs  # only what the wait needs
    return import_string(classpath)(**json.loads(json.dumps(kwargs)))


def test_the_trigger_fires_on_the_exit_file_and_not_before(sshd: SshdServer, tmp_path: Path,
                                                          capfd: pytest.CaptureFixture) -> None:
    target, box = _target(sshd, tmp_path)
    state = target.deploy(target.prepare("nightly-1"))
    started = target.start_sweep(state, TINY_SWEEP, timeout_s=600)
    assert started["decision"] == "start"
    trigger = _rebuilt(target, state, started)

    async def scenario() -> dict:
        events = trigger.run()
        waiting = asyncio.ensure_future(events.__anext__())
        await _wait_for(lambda: (box / "starts").exists(), 60)
        # the worker sleeps: the trigger keeps polling (its offset moves past the first line) and
        # does not fire
        await _wait_for(lambda: trigger.log_offset > 0, 30)
        await asyncio.sleep(1.0)  # five more polls
        assert not waiting.done()
        # a retry of the task meanwhile re-attaches: no second worker
        assert target.start_sweep(state, TINY_SWEEP, timeout_s=600)["decision"] == "attach"
        (box / "release").touch()
        event = await asyncio.wait_for(waiting, 60)
        await events.aclose()
        return event.payload

    payload = asyncio.run(scenario())
    assert payload == {"exit_code": 0}
    assert (box / "starts").read_text().count("\n") == 1
    logged = capfd.readouterr().out  # the trigger's log (Airflow's structured logging: stdout here)
    assert "[1/1] score alexnet b1: started" in logged and "[1/1] score alexnet b1: ok" in logged
    done = target.finish_sweep(state, started, payload)
    collected = target.collect(done, str(tmp_path / "local" / "results.jsonl"))
    assert [json.loads(line) for line in Path(collected).read_text().splitlines()] == [{"network": "alexnet"}]
    # the task's next try finds the sweep finished: reuse, nothing to wait for
    assert target.start_sweep(state, TINY_SWEEP, timeout_s=600)["decision"] == "reuse"


def test_a_failed_sweep_fires_with_its_status_and_the_task_raises_it(sshd: SshdServer,
                                                                    tmp_path: Path) -> None:
    target, box = _target(sshd, tmp_path)
    state = target.deploy(target.prepare("nightly-2"))
    (box / "fail").touch()
    (box / "release").touch()
    started = target.start_sweep(state, TINY_SWEEP, timeout_s=600)
    trigger = _rebuilt(target, state, started)

    async def first_event() -> dict:
        events = trigger.run()
        event = await asyncio.wait_for(events.__anext__(), 60)
        await events.aclose()
        return event.payload

    payload = asyncio.run(first_event())
    assert payload == {"exit_code": 3}
    with pytest.raises(TargetError, match=r"(?s)exit status 3\..*worker failed"):
        target.finish_sweep(state, started, payload)
