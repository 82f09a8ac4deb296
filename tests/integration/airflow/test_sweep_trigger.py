"""The deferred ssh sweep's trigger against a real OpenSSH server on loopback.

``SweepTrigger`` (``gpucompare.airflow.triggers``) is rebuilt from its ``serialize()`` output,
as the triggerer does, and run in an asyncio loop in this process; the host is this machine
through sshd (``fixtures_sshd``). The worker is a stand-in interpreter (option ``python``)
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

import pytest
from airflow.sdk.module_loading import import_string

from gpucompare.airflow.triggers import SweepTrigger
from gpucompare.targets.base import TargetError, TargetSpec
from gpucompare.targets.ssh.target import SSHTarget, SweepPoller
from tests.support.fixtures_sshd import SshdServer
from tests.support.target_helpers import TINY_SWEEP

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
    box = tmp_path / "box"
    box.mkdir()
    python = tmp_path / "fake-python"
    python.write_text(FAKE_PYTHON.format(box=box))
    python.chmod(0o755)
    spec = TargetSpec(name="rented-box", kind="ssh", provider="leadergpu", instance_type="cpu-test",
                      options={"ssh_conn_id": sshd.conn_id, "remote_dir": str(tmp_path / "remote"),
                               "python": str(python), "poll_interval_s": 0.2, "kill_grace_s": 1})
    return SSHTarget(spec, line_sink=lambda _: None), box


async def _wait_for(predicate, timeout_s: float) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.05)


def _rebuilt(trigger: SweepTrigger) -> SweepTrigger:
    """The trigger as the triggerer makes it: from its classpath and JSON kwargs."""
    classpath, kwargs = trigger.serialize()
    return import_string(classpath)(**json.loads(json.dumps(kwargs)))


def test_the_trigger_fires_on_the_exit_file_and_not_before(sshd: SshdServer, tmp_path: Path,
                                                          capfd: pytest.CaptureFixture,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    polls: list[object] = []
    real_poll = SweepPoller.poll
    monkeypatch.setattr(SweepPoller, "poll", lambda self: polls.append(real_poll(self)) or polls[-1])
    target, box = _target(sshd, tmp_path)
    state = target.deploy(target.prepare("nightly-1"))
    started = target.start_sweep(state, TINY_SWEEP, timeout_s=600)
    assert started["decision"] == "start"
    trigger = _rebuilt(SweepTrigger(spec=target.spec.to_dict(), state=state.to_dict(), started=started,
                                    poll_interval_s=0.2))

    async def scenario() -> dict:
        events = trigger.run()
        waiting = asyncio.ensure_future(events.__anext__())
        await _wait_for(lambda: (box / "starts").exists(), 60)
        # the worker sleeps: the trigger keeps polling (three more times) and does not fire
        seen = len(polls)
        await _wait_for(lambda: len(polls) >= seen + 3, 30)
        assert not waiting.done() and polls[-1] is None
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
    trigger = _rebuilt(SweepTrigger(spec=target.spec.to_dict(), state=state.to_dict(), started=started,
                                    poll_interval_s=0.2))

    async def first_event() -> dict:
        events = trigger.run()
        event = await asyncio.wait_for(events.__anext__(), 60)
        await events.aclose()
        return event.payload

    payload = asyncio.run(first_event())
    assert payload == {"exit_code": 3}
    with pytest.raises(TargetError, match=r"(?s)exit status 3\..*worker failed"):
        target.finish_sweep(state, started, payload)
