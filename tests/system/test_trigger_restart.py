"""A deferred ssh sweep's trigger survives its triggerer being killed: the rebuilt trigger sends
one event and logs no progress line twice.

Real parts: the ssh target against a real OpenSSH server on 127.0.0.1 (``fixtures_sshd``), the
trigger Airflow would run (``SshSweepTrigger``, built by ``triggers.trigger_for`` from
``SSHTarget.sweep_wait`` and serialized as the deferral stores it). The triggerer is stood in for
by a process of its own (``STAND_IN_TRIGGERER``) that rebuilds the trigger from its classpath and
JSON kwargs, as Airflow's triggerer does from the database, runs it in an asyncio loop with its
log on stdout, and prints the event. The first one is killed with SIGKILL while the sweep runs;
a second one starts from the same stored kwargs (not from anything the first one kept in memory).
The worker is a stand-in interpreter that prints a numbered progress line every 0.2 s until the
test releases it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from gpucompare.airflow.triggers import trigger_for
from tests.conftest import REPO_ROOT
from tests.support.fixtures_sshd import SshdServer
from tests.support.target_helpers import TINY_SWEEP, stand_in_ssh_target, wait_for

FAKE_PYTHON = textwrap.dedent("""\
    #!/bin/sh
    # stands in for the worker's interpreter: the deploy check, and a sweep printing a line every 0.2 s
    box="{box}"
    if [ "$1" = -c ]; then echo 1.9.1; exit 0; fi
    out="$7"
    n=0
    while [ ! -f "$box/release" ]; do n=$((n+1)); echo "progress-line-$n" >&2; sleep 0.2; done
    echo '{{"network": "alexnet"}}' > "$out"
    echo "progress-line-last" >&2
    """)

#: Stands in for Airflow's triggerer: one trigger rebuilt from (classpath, JSON kwargs), run in an
#: asyncio loop, its log lines and its event on stdout.
STAND_IN_TRIGGERER = textwrap.dedent("""\
    import asyncio, json, logging, sys
    from airflow.sdk.module_loading import import_string
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("LOG %(message)s"))
    logger = logging.getLogger("gpucompare.airflow.ssh_trigger")
    logger.addHandler(handler); logger.setLevel(logging.INFO); logger.propagate = False
    classpath, kwargs = json.loads(sys.argv[1])
    trigger = import_string(classpath)(**kwargs)
    async def main():
        async for event in trigger.run():
            print("EVENT " + json.dumps(event.payload), flush=True)
            return
    asyncio.run(main())
    """)


def _triggerer(stored: str, output: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "plugins"), str(REPO_ROOT)])}
    return subprocess.Popen([sys.executable, "-u", "-c", STAND_IN_TRIGGERER, stored], env=env,
                            stdout=output.open("w"), stderr=subprocess.STDOUT)


def _logged(path: Path) -> list[str]:
    return re.findall(r"progress-line-(?:\d+|last)\b", path.read_text() if path.exists() else "")


def test_a_rebuilt_trigger_resumes_the_log_and_sends_one_event(sshd: SshdServer, tmp_path: Path) -> None:
    target, box = stand_in_ssh_target(sshd, tmp_path, FAKE_PYTHON, poll_interval_s=0.3)
    state = target.deploy(target.prepare("restart-1"))
    started = target.start_sweep(state, TINY_SWEEP, timeout_s=600)
    stored = json.dumps(trigger_for(target.sweep_wait(state, started)).serialize())  # as the DB holds it
    first_out, second_out = tmp_path / "first.log", tmp_path / "second.log"

    first = _triggerer(stored, first_out)
    try:
        wait_for(lambda: len(_logged(first_out)) >= 5, 60, "the first triggerer's progress lines")
        time.sleep(1.5)  # past the first poll's backlog: each poll now brings a line or two
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    time.sleep(1.0)  # the sweep goes on meanwhile: lines the dead triggerer never saw
    second = _triggerer(stored, second_out)
    try:
        wait_for(lambda: len(_logged(second_out)) >= 3, 60, "the second triggerer's progress lines")
        (box / "release").touch()
        assert second.wait(timeout=60) == 0, second_out.read_text()[-2000:]
    finally:
        if second.poll() is None:
            second.kill()

    events = [json.loads(line[len("EVENT "):]) for text in (first_out.read_text(), second_out.read_text())
              for line in text.splitlines() if line.startswith("EVENT ")]
    assert events == [{"exit_code": 0}]
    before, after = _logged(first_out), _logged(second_out)
    written = re.findall(r"progress-line-(?:\d+|last)\b",
                         Path(started["sweep_dir"], "progress.log").read_text())
    assert len(before + after) == len(set(before + after)), "a progress line was logged twice"
    # the first logged from the start, the second from where the offset kept on the host says
    # to the end; between them at most the lines of the poll the kill interrupted (the offset is
    # kept before a poll's lines are logged, so a kill there loses them rather than repeat them)
    assert before == written[:len(before)] and after == written[-len(after):]
    assert len(written) - len(before) - len(after) <= 3, (before[-3:], after[:3])
    assert target.finish_sweep(state, started, events[0]).remote_results
