"""Exactly one sweep per machine: the ec2 sweep command, sent more than once, runs one worker.

Moto runs no SSM command, so this runs the very script ``Ec2Target.sweep_commands`` builds
(``ec2.commands.sweep_commands``) the way the SSM agent runs AWS-RunShellScript (bash on
``_script.sh``), here on this machine, several copies of it at once and killed with SIGKILL:

* a stand-in worker (``fake-python``: answers ``-m bench_tasks sweep --config C --output O``)
  appends one line to ``starts`` per process, then waits until the test releases it;
* a stand-in ``aws`` CLI copies ``aws s3 cp FILE s3://B/K`` into a folder (``s3/B/K``).

The run folder on "the instance" is then the evidence: ``starts`` holds one line per worker
process that ever ran.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
from pathlib import Path

import pytest

from gpucompare.targets import runs
from gpucompare.targets.ec2.commands import sweep_commands
from tests.support.proc_helpers import children_of
from tests.support.target_helpers import wait_for

CONFIG = {"run_id": "nightly-1", "timeout_s": 60, "warmup": 1, "batches": 1, "repeats": 1,
          "matrix": [{"modes": ["score"], "networks": ["alexnet"], "batch_sizes": [1], "devices": ["cpu"]}]}

PARTIAL_DESTINATION = "s3://bucket/run/partial/sweep.jsonl"

FAKE_WORKER = textwrap.dedent("""\
    #!/bin/sh
    # stands in for `python -m bench_tasks sweep --config C --output O`
    out="$7"; box="{box}"
    echo "$$" >> "$box/starts"
    echo "sweep started" >&2
    # asked to: one whole record, then half of the next (the worker is writing it)
    [ -f "$box/records" ] && printf '%s\n%s' '{{"config_id": "c1", "status": "ok"}}' '{{"config_' >> "$out"
    while [ ! -f "$box/release" ]; do sleep 0.05; done
    [ -f "$box/fail" ] && {{ echo "worker failed" >&2; exit 3; }}
    echo '{{"network": "alexnet"}}' > "$out"
    echo "sweep done" >&2
    """)

FAKE_AWS = textwrap.dedent("""\
    #!/bin/sh
    # stands in for `aws s3 cp [--only-show-errors] FILE s3://B/K`: a copy into {box}/s3/B/K
    [ "$3" = --only-show-errors ] && shift
    dest="{box}/s3/${{4#s3://}}"
    echo "$4" >> "{box}/puts"
    mkdir -p "$(dirname "$dest")" && cp "$3" "$dest"
    """)


@pytest.fixture
def instance(tmp_path: Path) -> dict:
    box = tmp_path / "box"
    bindir = tmp_path / "bin"
    for folder in (box, bindir):
        folder.mkdir()
    worker = bindir / "fake-python"
    worker.write_text(FAKE_WORKER.format(box=box))
    (bindir / "aws").write_text(FAKE_AWS.format(box=box))
    for tool in bindir.iterdir():
        tool.chmod(0o755)
    run_dir = tmp_path / "opt" / "runs" / runs.run_dir_name(CONFIG["run_id"])
    script = tmp_path / "_script.sh"
    _write_script(script, worker, run_dir)
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}
    sweep_dir = run_dir / runs.sweep_dir_name(CONFIG)
    return {"box": box, "script": script, "env": env, "sweep_dir": sweep_dir, "tmp": tmp_path,
            "worker": worker, "run_dir": run_dir}


def _write_script(script: Path, worker: Path, run_dir: Path) -> None:
    """The sweep's SSM script, as the agent writes it (``_script.sh``)."""
    commands = sweep_commands(config=CONFIG, workdir=str(script.parent), run_dir=str(run_dir),
                              python=str(worker), destination="s3://bucket/run/results.jsonl",
                              progress_destination="s3://bucket/run/progress.log",
                              partial_destination=PARTIAL_DESTINATION, timeout_s=60, kill_grace_s=1)
    script.write_text("\n".join(commands) + "\n")
    script.chmod(0o755)


def _send(instance: dict) -> subprocess.Popen:
    """One SSM command: the agent runs the script in its own process group (cancel kills it)."""
    return subprocess.Popen(["sh", "-c", str(instance["script"])], cwd=instance["tmp"], env=instance["env"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _starts(instance: dict) -> list[str]:
    path = instance["box"] / "starts"
    return path.read_text().split() if path.exists() else []


def _lock_free(instance: dict) -> bool:
    """Whether nothing holds the sweep's lock (``flock``, as the script takes it)."""
    import fcntl

    with open(instance["sweep_dir"] / runs.LOCK_FILE, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(handle, fcntl.LOCK_UN)
        return True


def _uploaded(instance: dict) -> list[dict]:
    path = instance["box"] / "s3" / "bucket" / "run" / "results.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_second_command_while_the_sweep_runs_re_attaches_and_a_third_reuses_it(instance):
    """A retry after a lost answer sends the sweep again while the first command still runs:
    the second waits on the sweep's lock and reports its end; one worker ran. A third command
    after the end reuses the results without running anything."""
    first = _send(instance)
    wait_for(lambda: len(_starts(instance)) == 1, 30, "the first worker to start")
    second = _send(instance)
    assert "re-attaching" in second.stderr.readline()  # waits on the lock: no second worker
    (instance["box"] / "release").touch()
    _, err1 = first.communicate(timeout=60)
    _, err2 = second.communicate(timeout=60)
    assert first.returncode == 0, err1
    assert second.returncode == 0, err2
    assert len(_starts(instance)) == 1
    assert (instance["sweep_dir"] / runs.EXIT_CODE_FILE).read_text().strip() == "0"
    assert _uploaded(instance) == [{"network": "alexnet"}]

    third = _send(instance)
    _, err3 = third.communicate(timeout=60)
    assert third.returncode == 0 and "already finished: reusing it" in err3
    assert len(_starts(instance)) == 1
    assert _uploaded(instance) == [{"network": "alexnet"}]


def test_a_command_killed_while_its_worker_lives_on_is_re_attached_to(instance):
    """The SSM agent loses the command's shell (SIGKILL of the shell only) while the worker
    goes on holding the lock: the retry's command re-attaches to that worker, one worker ran."""
    first = _send(instance)
    wait_for(lambda: len(_starts(instance)) == 1, 30, "the first worker to start")
    for pid in (first.pid, *children_of(first.pid)):  # the agent's sh and the script's bash only:
        os.kill(pid, signal.SIGKILL)  # the worker (under `timeout`) is orphaned, alive
    first.communicate(timeout=30)
    second = _send(instance)
    assert "re-attaching" in second.stderr.readline()
    (instance["box"] / "release").touch()
    second.communicate(timeout=60)
    assert len(_starts(instance)) == 1
    # the orphaned worker ended without its shell: no exit status was written, so the
    # re-attached command reports the sweep as lost (99) instead of inventing a result
    assert second.returncode == 99
    assert not (instance["sweep_dir"] / runs.EXIT_CODE_FILE).exists()


def test_a_dead_sweep_is_started_again_and_a_failed_one_too(instance):
    """A command cancelled by SSM (its process group killed: shell and worker) leaves the lock
    free and no exit status: the next command starts the sweep again. A failed sweep (exit 3)
    is started again by the next command as well; only its success is reused."""
    first = _send(instance)
    wait_for(lambda: len(_starts(instance)) == 1, 30, "the first worker to start")
    os.killpg(first.pid, signal.SIGKILL)  # the command's shell ...
    os.kill(int(_starts(instance)[0]), signal.SIGKILL)  # ... and its worker (under `timeout`)
    first.communicate(timeout=30)
    # `timeout` (its own process group) holds the lock until it has reaped the killed worker
    wait_for(lambda: _lock_free(instance), 30, "the dead sweep's lock to be released")

    (instance["box"] / "fail").touch()
    (instance["box"] / "release").touch()
    second = _send(instance)
    _, err2 = second.communicate(timeout=60)
    assert second.returncode == 3 and "worker failed" in err2
    assert len(_starts(instance)) == 2
    assert (instance["sweep_dir"] / runs.EXIT_CODE_FILE).read_text().strip() == "3"
    assert _uploaded(instance) == []

    (instance["box"] / "fail").unlink()
    third = _send(instance)
    _, err3 = third.communicate(timeout=60)
    assert third.returncode == 0, err3
    assert len(_starts(instance)) == 3
    assert _uploaded(instance) == [{"network": "alexnet"}]


def test_many_commands_at_once_run_one_worker(instance):
    """Five copies of the command sent at once (a retry storm): one worker, five successes."""
    commands = [_send(instance) for _ in range(5)]
    wait_for(lambda: len(_starts(instance)) >= 1, 30, "a worker to start")
    (instance["box"] / "release").touch()
    results = [command.communicate(timeout=60) for command in commands]
    assert [command.returncode for command in commands] == [0] * 5, [err for _, err in results]
    assert len(_starts(instance)) == 1
    # each other command either waited on the running sweep or came after it and reused it
    assert sum(("re-attaching" in err) + ("reusing it" in err) for _, err in results) == 4


def test_the_records_so_far_reach_s3_while_the_sweep_runs_and_once_more_at_its_end(instance, monkeypatch):
    """The worker has written one record and half of the next, then runs on: the uploader copies
    the partial file once (it does not grow, so it is not copied again however many intervals
    pass), and once more when the worker has ended, with its final records."""
    from gpucompare.targets.ec2 import commands

    monkeypatch.setattr(commands, "PROGRESS_UPLOAD_S", 0.2)  # 20 s in production
    _write_script(instance["script"], instance["worker"], instance["run_dir"])
    (instance["box"] / "records").touch()
    partial = instance["box"] / "s3" / PARTIAL_DESTINATION.removeprefix("s3://")
    puts = instance["box"] / "puts"

    def partial_puts() -> int:
        return puts.read_text().split().count(PARTIAL_DESTINATION) if puts.exists() else 0

    first = _send(instance)
    wait_for(partial.exists, 30, "the records so far in S3")
    assert partial.read_text() == '{"config_id": "c1", "status": "ok"}\n{"config_'
    progress_puts = puts.read_text().split().count("s3://bucket/run/progress.log")
    wait_for(lambda: puts.read_text().split().count("s3://bucket/run/progress.log") >= progress_puts + 5, 30,
             "five more intervals of the uploader")
    assert partial_puts() == 1  # unchanged: not copied again
    (instance["box"] / "release").touch()
    _, err = first.communicate(timeout=60)
    assert first.returncode == 0, err
    assert partial.read_text() == '{"network": "alexnet"}\n' and partial_puts() == 2
    assert _uploaded(instance) == [{"network": "alexnet"}]
