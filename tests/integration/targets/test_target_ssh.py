"""The ssh target against a real OpenSSH server on loopback, with the real worker.

The "remote host" is this machine reached through sshd (``tests.support.fixtures_sshd``), so the
target uses an existing worker interpreter (option ``python``: the repository's
``.venv-bench``) instead of installing MXNet on the host; the environment creation command
is run for real below with an empty requirements file. There is no docker engine here: the
``docker run`` command is checked by running the generated script through ``sh`` with a
stand-in ``docker`` executable on PATH that records the arguments it receives.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import paramiko
import pytest

from gpucompare.targets import make_target
from gpucompare.targets.base import TargetError, TargetSpec
from gpucompare.targets.bundle import build_bundle
from gpucompare.targets.container import container_name
from gpucompare.targets.runs import sweep_dir_name
from gpucompare.targets.ssh.commands import (
    SweepPaths,
    check_python_command,
    docker_command,
    docker_image_command,
    launch_command,
    run_script,
    stop_script,
    unpack_command,
    venv_command,
)
from gpucompare.targets.ssh.connection import HostKeyError, known_host_key
from gpucompare.targets.ssh.target import SSHTarget
from tests.conftest import BENCH_PYTHON
from tests.support.fixtures_sshd import SshdServer
from tests.support.proc_helpers import is_alive
from tests.support.target_helpers import (
    ENDLESS_SWEEP,
    TINY_SWEEP,
    Background,
    ProcessWatcher,
    Sink,
    gated_worker,
    processes_end,
    read_records,
    wait_for,
    worker_processes,
)


def ssh_spec(server: SshdServer, tmp_path: Path, **options) -> TargetSpec:
    return TargetSpec(
        name="rented-box", kind="ssh", provider="leadergpu", instance_type="cpu-test",
        options={"ssh_conn_id": server.conn_id, "remote_dir": str(tmp_path / "remote"),
                 "python": str(BENCH_PYTHON), "poll_interval_s": 0.3, "retry_backoff_s": 0.3,
                 "connect_retries": 6, "kill_grace_s": 2, **options},
    )


def other_host_key(tmp_path: Path) -> str:
    """The public half of a freshly made key: what an impostor host would present."""
    path = tmp_path / "impostor_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    key_type, data, *_ = (tmp_path / "impostor_key.pub").read_text().split()
    return f"{key_type} {data}"


# -- the whole path, with the real worker ---------------------------------------------------

def test_full_sweep_over_ssh_collects_valid_records(sshd: SshdServer, tmp_path: Path) -> None:
    sink = Sink()
    target = make_target(ssh_spec(sshd, tmp_path), line_sink=sink)
    assert isinstance(target, SSHTarget)
    run_id = "manual__2026-11-30T02:00:00+00:00"
    state = target.prepare(run_id)
    assert state.resource_id == f"{sshd.user}@127.0.0.1:{sshd.port}"
    state = target.deploy(state)
    bundle = build_bundle()
    code_dir = tmp_path / "remote" / f"bench-{bundle.content_hash}"
    assert (code_dir / "bench_tasks" / "__main__.py").is_file()  # uploaded over SFTP
    # The uploaded copy is what runs: the worker imports bench_tasks from the code directory.
    assert state.extra["code_dir"] == str(code_dir)

    state = target.run_sweep(state, TINY_SWEEP, timeout_s=600)
    assert any("[1/1] score alexnet" in line for line in sink.texts())  # progress streamed
    out = target.collect(state, str(tmp_path / "local" / "results.jsonl"))
    records = read_records(out)
    assert len(records) == 1
    assert records[0]["status"] == "ok" and records[0]["images_per_sec"] > 0
    assert records[0]["run_id"] == run_id

    # Retried steps do not redo work: the code is there, the sweep finished.
    sink.lines.clear()
    target.deploy(state)
    target.run_sweep(state, TINY_SWEEP, timeout_s=600)
    assert any("already on the host" in line for line in sink.texts())
    assert any("already finished" in line for line in sink.texts())
    assert not any("starting sweep" in line for line in sink.texts())

    assert target.connection.run("check", f"cat {state.remote_results}").stdout == Path(out).read_text()
    with pytest.raises(TargetError, match="exit status 3"):
        target.connection.run("check", "echo oops >&2; exit 3")

    target.teardown(state)
    target.teardown(state)  # safe twice
    target.teardown(None)
    assert Path(state.workdir).is_dir()  # results kept unless remove_run_dir


# -- host keys ------------------------------------------------------------------------------

def test_unknown_host_key_is_refused_at_once(sshd: SshdServer, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sshd.conn_env_var, sshd.connection_json(drop=("host_key",)))
    sink = Sink()
    target = make_target(ssh_spec(sshd, tmp_path), line_sink=sink)
    with pytest.raises(HostKeyError, match="host key is UNKNOWN") as raised:
        target.prepare("unknown-key")
    assert isinstance(raised.value, ValueError)  # bad configuration: the DAG fails without retrying
    assert not any("reconnecting" in line for line in sink.texts())  # not treated as transient
    assert not (tmp_path / "remote").exists()  # nothing ran on the host


def test_known_hosts_file_from_option_or_connection_is_trusted(sshd: SshdServer, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sshd.conn_env_var, sshd.connection_json(drop=("host_key",)))
    by_option = make_target(ssh_spec(sshd, tmp_path, known_hosts_file=str(sshd.known_hosts_path)))
    assert by_option.prepare("by-option").workdir.endswith("/runs/by-option")
    by_option.close()

    monkeypatch.setenv(sshd.conn_env_var, sshd.connection_json(
        {"known_hosts_file": str(sshd.known_hosts_path)}, drop=("host_key",)))
    by_connection = make_target(ssh_spec(sshd, tmp_path))
    assert by_connection.prepare("by-connection").workdir.endswith("/runs/by-connection")
    by_connection.close()


def test_changed_host_key_is_refused(sshd: SshdServer, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    impostor = other_host_key(tmp_path)
    monkeypatch.setenv(sshd.conn_env_var, sshd.connection_json({"host_key": impostor}))
    sink = Sink()
    with pytest.raises(HostKeyError, match="host key CHANGED"):
        make_target(ssh_spec(sshd, tmp_path), line_sink=sink).prepare("changed-key")
    assert not any("reconnecting" in line for line in sink.texts())

    stale = tmp_path / "stale_known_hosts"
    stale.write_text(f"{sshd.known_hosts_name} {impostor}\n")
    monkeypatch.setenv(sshd.conn_env_var, sshd.connection_json(drop=("host_key",)))
    with pytest.raises(TargetError, match="host key CHANGED"):
        make_target(ssh_spec(sshd, tmp_path, known_hosts_file=str(stale))).prepare("stale-file")
    assert not (tmp_path / "remote").exists()


def test_connection_can_explicitly_allow_an_unverified_key(sshd: SshdServer, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sshd.conn_env_var, sshd.connection_json(
        {"no_host_key_check": "true"}, drop=("host_key",)))
    sink = Sink()
    target = make_target(ssh_spec(sshd, tmp_path), line_sink=sink)
    assert target.prepare("opted-out").workdir
    target.close()
    assert any("host key verification off" in line for line in sink.texts())

    # allow_host_key_change: known_hosts files are not consulted, so their stale key is no bar.
    stale = tmp_path / "stale_known_hosts"
    stale.write_text(f"{sshd.known_hosts_name} {other_host_key(tmp_path)}\n")
    monkeypatch.setenv(sshd.conn_env_var, sshd.connection_json(
        {"allow_host_key_change": "true"}, drop=("host_key",)))
    allowed = make_target(ssh_spec(sshd, tmp_path, known_hosts_file=str(stale)))
    assert allowed.prepare("key-change-allowed").workdir


# -- failures -----------------------------------------------------------------------------

def test_connection_dropped_mid_run_is_retried_and_the_run_completes(sshd: SshdServer,
                                                                     tmp_path: Path) -> None:
    """The sweep is held (``gated_worker``) until the outage is over, so it is certainly
    running when the connections drop; the host stays refusing until the target has said it
    is reconnecting, so the retry path is certainly taken (not a silent reconnect)."""
    sink = Sink()
    gate = tmp_path / "outage-over"
    python = gated_worker(tmp_path / "gated-python", BENCH_PYTHON, gate)
    target = make_target(ssh_spec(sshd, tmp_path, python=str(python), connect_retries=10),
                         line_sink=sink)
    state = target.deploy(target.prepare("dropped"))
    two_configs = {**TINY_SWEEP, "matrix": [{**TINY_SWEEP["matrix"][0], "batch_sizes": [1, 2]}]}
    sweep_dir = Path(state.workdir) / sweep_dir_name({**two_configs, "run_id": "dropped"})
    run = Background(lambda: target.run_sweep(state, two_configs, timeout_s=600))
    run.start()
    wait_for(lambda: (sweep_dir / "pid").exists(), 120, "the remote sweep to start")
    worker_pid = int((sweep_dir / "pid").read_text())

    # The network goes: every connection is cut and the host refuses new ones for a while.
    assert sshd.drop_connections() >= 1
    sshd.stop()
    wait_for(lambda: any("reconnecting" in line for line in sink.texts()), 60,
             "the target to notice the dropped connection")
    time.sleep(1.0)
    sshd.start()
    gate.touch()

    run.finish(600)
    assert run.error is None, run.error
    # The sweep ran once, undisturbed, and every progress line was shown exactly once.
    assert [line for line in sink.texts() if "starting sweep" in line] != []
    assert len([line for line in sink.texts() if "starting sweep" in line]) == 1
    assert len([line for line in sink.texts() if line.startswith("[1/2]")]) == 1
    assert len([line for line in sink.texts() if line.startswith("[2/2]")]) == 1
    assert not is_alive(worker_pid)
    records = read_records(target.collect(state, str(tmp_path / "dropped.jsonl")))
    assert [(r["batch_size"], r["status"]) for r in records] == [(1, "ok"), (2, "ok")]
    target.teardown(state)


def test_host_unreachable_for_good_fails_after_the_retries(sshd: SshdServer, tmp_path: Path) -> None:
    sink = Sink()
    target = make_target(ssh_spec(sshd, tmp_path, connect_retries=3, retry_backoff_s=0.1), line_sink=sink)
    state = target.prepare("gone")
    target.close()
    sshd.stop()
    with pytest.raises(TargetError, match="unreachable after 3 attempts"):
        target.deploy(state)
    assert len([line for line in sink.texts() if "reconnecting" in line]) == 2


def test_remote_failure_is_reported_with_its_stderr(sshd: SshdServer, tmp_path: Path) -> None:
    target = make_target(ssh_spec(sshd, tmp_path))
    state = target.deploy(target.prepare("fails"))
    broken = {**TINY_SWEEP, "matrix": [{**TINY_SWEEP["matrix"][0], "networks": ["lenet-9000"]}]}
    with pytest.raises(TargetError, match="failed on .* with exit status") as raised:
        target.run_sweep(state, broken, timeout_s=300)
    assert "lenet-9000" in str(raised.value)  # the worker's own message, from the remote stderr
    # A retry after a failure starts the sweep again rather than reusing the failure.
    sink = Sink()
    target.line_sink = sink
    with pytest.raises(TargetError):
        target.run_sweep(state, broken, timeout_s=300)
    assert any("starting it again" in line for line in sink.texts())
    target.teardown(state)


def test_time_limit_is_enforced_on_the_host(sshd: SshdServer, tmp_path: Path) -> None:
    target = make_target(ssh_spec(sshd, tmp_path))
    state = target.deploy(target.prepare("slow"))
    sweep_dir = Path(state.workdir) / sweep_dir_name({**ENDLESS_SWEEP, "run_id": "slow"})
    watcher = ProcessWatcher(str(sweep_dir))
    watcher.start()
    with pytest.raises(TargetError, match="stopped on the host \\(exit 124"):
        target.run_sweep(state, ENDLESS_SWEEP, timeout_s=15)
    seen = watcher.stop()
    # At least `timeout` and the worker (its runner too, unless the load kept it from starting).
    assert len(seen) >= 2, f"expected timeout and the worker; saw {seen}"
    wait_for(lambda: not [pid for pid in seen if is_alive(pid)], 30, f"every process of {seen} to end")
    assert (sweep_dir / "exit_code").read_text().strip() == "124"


def test_teardown_stops_a_running_sweep_and_is_safe_twice(sshd: SshdServer, tmp_path: Path) -> None:
    runner = make_target(ssh_spec(sshd, tmp_path))
    state = runner.deploy(runner.prepare("torn-down"))
    sweep_dir = Path(state.workdir) / sweep_dir_name({**ENDLESS_SWEEP, "run_id": "torn-down"})
    run = Background(lambda: runner.run_sweep(state, ENDLESS_SWEEP, timeout_s=600))
    run.start()
    # The worker's command line names its config (the shell commands around it do not).
    wait_for(lambda: worker_processes(str(sweep_dir / "sweep.json")) != [], 120, "the remote worker")

    sink = Sink()
    teardown_task = make_target(ssh_spec(sshd, tmp_path, remove_run_dir=True), line_sink=sink)
    teardown_task.teardown(state)
    assert any("stopped the sweep" in line for line in sink.texts()), sink.texts()
    processes_end(str(sweep_dir))
    assert not Path(state.workdir).exists()
    teardown_task.teardown(state)  # nothing left: a no-op
    teardown_task.teardown(None)

    run.finish(120)
    assert isinstance(run.error, TargetError)  # the interrupted sweep does not pass for a success


# -- the generated shell, run by a real sh ------------------------------------------------------

def _launch_locally(paths: SweepPaths, script: str) -> None:
    Path(paths.sweep_dir).mkdir(parents=True, exist_ok=True)
    Path(paths.script).write_text(script)
    subprocess.run(["sh", "-c", launch_command(paths)], check=True, timeout=30)


def test_run_script_runs_once_and_publishes_results_atomically(tmp_path: Path) -> None:
    paths = SweepPaths(str(tmp_path / "odd dir+=name" / "sweep-1"))
    fake_worker = ["sh", "-c", 'echo "first line" >&2; echo run >> "$1.count"; '
                   'echo \'{"a": 1}\' > "$1"; echo "last line" >&2', "worker", paths.partial]
    script = run_script(paths=paths, cwd=str(tmp_path), worker_argv=fake_worker, env={"X": "a b'c"},
                        timeout_s=60, kill_grace_s=1)
    _launch_locally(paths, script)
    wait_for(lambda: Path(paths.exit_code).exists(), 30, "the exit status")
    assert Path(paths.exit_code).read_text().strip() == "0"
    assert json.loads(Path(paths.results).read_text()) == {"a": 1}
    assert not Path(paths.partial).exists()
    assert Path(paths.progress).read_text().splitlines() == ["first line", "last line"]
    # Launched again (a retried launch): the claim makes it a no-op.
    subprocess.run(["sh", paths.script], check=True, timeout=30)
    assert Path(paths.partial + ".count").read_text() == "run\n"


def test_run_script_time_limit_kills_the_process_group(tmp_path: Path) -> None:
    paths = SweepPaths(str(tmp_path / "sweep-t"))
    marker = str(tmp_path / "sleeper-marker")
    # A worker with a child of its own, both marked in their command lines.
    fake_worker = ["sh", "-c", f"sh -c 'sleep 300; : {marker}-child' & sleep 301; : {marker}"]
    watcher = ProcessWatcher(marker)
    watcher.start()
    _launch_locally(paths, run_script(paths=paths, cwd=str(tmp_path), worker_argv=fake_worker, env={},
                                      timeout_s=3, kill_grace_s=1))
    wait_for(lambda: Path(paths.exit_code).exists(), 30, "the exit status")
    assert Path(paths.exit_code).read_text().strip() == "124"
    seen = watcher.stop()
    assert len(seen) >= 3, f"expected timeout, the worker and its child; saw {seen}"
    wait_for(lambda: not [pid for pid in seen if is_alive(pid)], 10, "the whole process group to go")


def test_stop_script_stops_running_sweeps_only(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    paths = SweepPaths(str(run_dir / "sweep-a"))
    marker = str(run_dir / "sweep-a")
    _launch_locally(paths, run_script(paths=paths, cwd=str(tmp_path),
                                      worker_argv=["sh", "-c", f"sleep 300; : {marker}"], env={},
                                      timeout_s=600, kill_grace_s=1))
    wait_for(lambda: Path(paths.pid).exists() and worker_processes(marker), 30, "the worker")
    done = subprocess.run(["sh", "-c", stop_script(str(run_dir), grace_s=2)], capture_output=True,
                          text=True, check=True, timeout=30)
    assert done.stdout.split() == [paths.sweep_dir]
    wait_for(lambda: Path(paths.exit_code).exists(), 30, "the exit status")
    assert Path(paths.exit_code).read_text().strip() in {"143", "124"}
    processes_end(marker)
    again = subprocess.run(["sh", "-c", stop_script(str(run_dir), grace_s=2)], capture_output=True,
                           text=True, check=True, timeout=30)
    assert again.stdout == ""


def test_docker_command_reaches_docker_exactly(tmp_path: Path) -> None:
    """A stand-in ``docker`` on PATH records its arguments (no docker engine here)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "docker-calls.jsonl"
    fake = bin_dir / "docker"
    fake.write_text(f"#!{sys.executable}\nimport json, sys\n"
                    f"open({str(calls)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n")
    fake.chmod(0o755)
    paths = SweepPaths(str(tmp_path / "runs" / "nightly" / "sweep-0123456789abcdef"))
    name = container_name("nightly", "sweep-0123456789abcdef")
    argv = docker_command(image="registry.example.com:5000/gpucompare-worker:1.9.1-cu112", gpus="all",
                          sweep_dir=paths.sweep_dir, container_name=name, uid=1000, gid=1000)
    two = docker_command(image="w", gpus="device=0,1", sweep_dir="/s", container_name="c", uid=1, gid=1)
    assert two[two.index("--gpus") + 1] == '"device=0,1"'  # docker parses the value as CSV
    assert argv == [
        "docker", "run", "--rm", "--init", "--gpus", "all", "--user", "1000:1000",
        "--name", name, "--label", f"gpucompare.container={name}",
        "--ulimit", "memlock=-1", "--ulimit", "stack=67108864", "--network", "none", "--ipc", "host",
        "--volume", f"{paths.sweep_dir}:/sweep", "--workdir", "/sweep",
        "registry.example.com:5000/gpucompare-worker:1.9.1-cu112",
        "sweep", "--config", "/sweep/sweep.json", "--output", "/sweep/results.partial.jsonl",
    ]
    script = run_script(paths=paths, cwd=paths.sweep_dir, worker_argv=argv, env={}, timeout_s=60,
                        kill_grace_s=1, container_name=name)
    Path(paths.sweep_dir).mkdir(parents=True)
    Path(paths.script).write_text(script)
    subprocess.run(["sh", paths.script], check=True, timeout=30,
                   env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    recorded = [json.loads(line) for line in calls.read_text().splitlines()]
    assert name == "gpucompare-nightly-sweep-0123456789abcdef"
    # run, then the kill of its container and the check that none of its label is left
    assert recorded[:2] == [argv[1:], ["kill", name]]
    assert recorded[2:] and all(call == ["ps", "-q", "--filter", f"label=gpucompare.container={name}"]
                                for call in recorded[2:])
    assert Path(paths.container).read_text().strip() == name
    # The stand-in wrote no results: reported as such (98), not as a success.
    assert Path(paths.exit_code).read_text().strip() == "98"


def test_docker_deploy_check_pulls_only_when_missing(tmp_path: Path) -> None:
    """The stand-in ``docker`` knows no image at first: inspect fails, pull, then sysinfo."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls.jsonl"
    pulled = tmp_path / "pulled"
    fake = bin_dir / "docker"
    fake.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        f"open({str(calls)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
        f"if sys.argv[1:3] == ['image', 'inspect'] and not os.path.exists({str(pulled)!r}): sys.exit(1)\n"
        f"if sys.argv[1] == 'pull': open({str(pulled)!r}, 'w').close()\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    command = docker_image_command("gpucompare-worker:1.9.1", "device=0,1")
    for _ in range(2):
        subprocess.run(["sh", "-c", command], check=True, env=env, timeout=30)
    recorded = [json.loads(line) for line in calls.read_text().splitlines()]
    sysinfo = ["run", "--rm", "--gpus", '"device=0,1"', "gpucompare-worker:1.9.1", "sysinfo"]
    assert recorded == [["image", "inspect", "gpucompare-worker:1.9.1"], ["pull", "gpucompare-worker:1.9.1"],
                        sysinfo, ["image", "inspect", "gpucompare-worker:1.9.1"], sysinfo]


def test_environment_is_created_once(tmp_path: Path) -> None:
    requirements = tmp_path / "requirements-cpu.txt"
    requirements.write_text("# nothing to install: the command, not PyPI, is under test\n")
    env_dir = tmp_path / "base" / "env-cpu-abc"
    (tmp_path / "base").mkdir()
    command = venv_command(base_python=sys.executable, env_dir=str(env_dir),
                           requirements_file=str(requirements),
                           lock_file=str(tmp_path / "base" / ".env.lock"), timeout_s=300, keep=2)
    first = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    assert (env_dir / ".ready").exists() and (env_dir / "bin" / "python").exists()
    second = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60, check=True)
    assert "environment ready" in second.stdout


def test_bundle_unpacks_once_and_atomically(tmp_path: Path) -> None:
    bundle = build_bundle(cache_dir=tmp_path / "cache")
    base = tmp_path / "remote"
    base.mkdir()
    code_dir = base / bundle.name
    for attempt in range(2):  # the second deploy finds the code there and keeps it
        upload = base / f".upload-{attempt}.tar.gz"
        shutil.copy(bundle.tarball, upload)
        unpack = unpack_command(upload=str(upload), code_dir=str(code_dir), base=str(base))
        subprocess.run(["sh", "-c", unpack], check=True, timeout=60)
        assert not upload.exists()
    assert (code_dir / "bench_tasks" / "__main__.py").is_file()
    assert sorted(p.name for p in base.iterdir()) == [bundle.name]  # no temporary dirs left
    command = check_python_command(python=str(BENCH_PYTHON), code_dir=str(code_dir))
    check = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stderr
    assert check.stdout.strip() == "1.9.1"


# -- validation --------------------------------------------------------------------------------

def test_known_hosts_lookup_uses_the_port_form(tmp_path: Path) -> None:
    key_line = other_host_key(tmp_path)
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(f"[10.0.0.5]:2222 {key_line}\n10.0.0.6 {key_line}\n")
    key = known_host_key(str(known_hosts), "10.0.0.5", 2222)
    assert isinstance(key, paramiko.PKey) and key.get_base64() == key_line.split()[1]
    assert known_host_key(str(known_hosts), "10.0.0.5", 22) is None
    assert known_host_key(str(known_hosts), "10.0.0.6", 22) is not None
    with pytest.raises(TargetError, match="known_hosts_file"):
        known_host_key(str(tmp_path / "missing"), "h", 22)
