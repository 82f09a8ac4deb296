"""The local target, the target registry and the worker bundle, with the real worker.

Every sweep here runs the real ``python -m bench_tasks sweep`` in ``.venv-bench`` (MXNet on
the CPU) on tiny configurations (AlexNet, batch 1, one timed batch).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gpucompare.targets import KINDS, make_target, target_class
from gpucompare.targets.base import TargetError, TargetSpec
from gpucompare.targets.bundle import build_bundle
from gpucompare.targets.local import LocalTarget
from gpucompare.targets.runs import run_dir_name, sweep_dir_name
from tests.conftest import BENCH_PYTHON, REPO_ROOT
from tests.support.proc_helpers import is_alive
from tests.support.target_helpers import (
    ENDLESS_SWEEP,
    TINY_SWEEP,
    Background,
    ProcessWatcher,
    Sink,
    processes_end,
    read_records,
    wait_for,
    worker_processes,
)


def local_spec(tmp_path: Path, **options) -> TargetSpec:
    return TargetSpec(name="here", kind="local", provider="local", instance_type="cpu",
                      options={"work_dir": str(tmp_path / "runs"), "python": str(BENCH_PYTHON),
                               "kill_grace_s": 2, **options})



def test_full_sweep_streams_progress_and_collects_valid_records(tmp_path: Path) -> None:
    sink = Sink()
    target = make_target(local_spec(tmp_path), line_sink=sink)
    assert isinstance(target, LocalTarget)
    run_id = "manual__2026-11-30T01:10:20+00:00"
    state = target.prepare(run_id)
    state = target.deploy(state)
    assert state.extra["mxnet_version"] == "1.9.1"
    two_configs = {**TINY_SWEEP, "matrix": [{**TINY_SWEEP["matrix"][0], "batch_sizes": [1, 2]}]}
    started = time.monotonic()
    state = target.run_sweep(state, two_configs, timeout_s=600)
    finished = time.monotonic()

    # Streamed as printed: the first configuration's line arrived well before the run ended
    # (the second configuration takes a new bind and a timed batch in between).
    assert started < sink.first("[1/2]") < sink.first("[2/2]") <= finished
    assert sink.first("[2/2]") - sink.first("[1/2]") > 0.05

    out = target.collect(state, str(tmp_path / "collected" / "results.jsonl"))
    records = read_records(out)
    assert [(r["network"], r["batch_size"], r["status"]) for r in records] == [
        ("alexnet", 1, "ok"), ("alexnet", 2, "ok")]
    assert {r["run_id"] for r in records} == {run_id}  # the target passes the run's id on
    assert all(r["images_per_sec"] > 0 for r in records)

    # A retried run_sweep with the same configuration reuses the finished sweep.
    sink.lines.clear()
    target.run_sweep(state, two_configs, timeout_s=600)
    assert any("already finished" in line for line in sink.texts())
    assert not any("[1/2]" in line for line in sink.texts())

    target.teardown(state)
    target.teardown(state)
    target.teardown(None)
    assert Path(state.workdir).is_dir()  # kept unless remove_run_dir


def test_two_sweeps_of_a_run_are_collected_together(tmp_path: Path) -> None:
    target = make_target(local_spec(tmp_path, remove_run_dir=True).to_dict())
    state = target.deploy(target.prepare("two-sweeps"))
    state = target.run_sweep(state, TINY_SWEEP, timeout_s=600)
    train = {**TINY_SWEEP, "matrix": [{"modes": ["train"], "networks": ["alexnet"], "batch_sizes": [2],
                                       "devices": ["cpu"]}]}
    state = target.run_sweep(state, train, timeout_s=600)
    records = read_records(target.collect(state, str(tmp_path / "all.jsonl")))
    assert [r["mode"] for r in records] == ["score", "train"]
    target.teardown(state)
    assert not Path(state.workdir).exists()
    target.teardown(state)


def test_time_limit_kills_the_worker_and_its_children(tmp_path: Path) -> None:
    sink = Sink()
    target = make_target(local_spec(tmp_path), line_sink=sink)
    state = target.deploy(target.prepare("time-limit"))
    sweep_dir = Path(state.workdir) / sweep_dir_name({**ENDLESS_SWEEP, "run_id": "time-limit"})
    watcher = ProcessWatcher(str(sweep_dir))
    watcher.start()
    with pytest.raises(TargetError, match="time limit of 15s exceeded"):
        target.run_sweep(state, ENDLESS_SWEEP, timeout_s=15)
    seen = watcher.stop()
    # The worker and the measuring process it started (its child) both went.
    assert len(seen) >= 2, f"expected the worker and its runner, saw {seen}"
    # the runner dies by PDEATHSIG right after its parent
    wait_for(lambda: not [pid for pid in seen if is_alive(pid)], 30, f"every process of {seen} to end")
    assert any("stopping the worker" in line for line in sink.texts())


def test_a_failing_worker_surfaces_its_stderr(tmp_path: Path) -> None:
    target = make_target(local_spec(tmp_path))
    state = target.deploy(target.prepare("fails"))
    broken = {**TINY_SWEEP, "matrix": [{**TINY_SWEEP["matrix"][0], "networks": ["lenet-9000"]}]}
    with pytest.raises(TargetError, match="exited with") as raised:
        target.run_sweep(state, broken, timeout_s=300)
    # The worker's own message, naming the bad value, is in the error.
    assert "lenet-9000" in str(raised.value)
    with pytest.raises(TargetError, match="no finished sweep"):
        target.collect(state, str(tmp_path / "none.jsonl"))


def test_teardown_stops_a_sweep_left_running_and_is_safe_twice(tmp_path: Path) -> None:
    """A run_sweep whose task died leaves its worker behind; teardown (another task) stops it."""
    running = make_target(local_spec(tmp_path))
    state = running.deploy(running.prepare("left-running"))
    errors: list[BaseException] = []

    def sweep() -> None:
        try:
            running.run_sweep(state, ENDLESS_SWEEP, timeout_s=600)
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            errors.append(exc)

    thread = threading.Thread(target=sweep, daemon=True)
    thread.start()
    sweep_dir = Path(state.workdir) / sweep_dir_name({**ENDLESS_SWEEP, "run_id": "left-running"})
    deadline = time.monotonic() + 60
    while not worker_processes(str(sweep_dir)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert worker_processes(str(sweep_dir)), "the worker never started"

    other_task = make_target(local_spec(tmp_path))
    other_task.teardown(state)
    thread.join(timeout=30)
    assert not thread.is_alive()
    processes_end(str(sweep_dir))
    assert errors and "exited with" in str(errors[0])
    other_task.teardown(state)


def test_deploy_names_a_missing_interpreter(tmp_path: Path) -> None:
    target = make_target(local_spec(tmp_path, python=str(tmp_path / "no" / "python")))
    with pytest.raises(TargetError, match="does not exist"):
        target.deploy(target.prepare("x"))


@pytest.mark.parametrize(("options", "named"), [
    ({"python": "relative/python"}, "'python'"),
    ({"work_dir": "runs"}, "'work_dir'"),
    ({"kill_grace_s": "soon"}, "'kill_grace_s'"),
    ({"remove_run_dir": "yes"}, "'remove_run_dir'"),
    ({"colour": "blue"}, "'colour'"),
])
def test_bad_options_are_named(tmp_path: Path, options: dict, named: str) -> None:
    option = named.strip("'")
    with pytest.raises(TargetError, match=rf"options\.{option}: (.* is not allowed|unknown key)"):
        make_target(local_spec(tmp_path, **options))


def test_registry_knows_the_kinds_and_refuses_others(tmp_path: Path) -> None:
    assert KINDS == ("local", "ssh", "ec2")
    assert target_class("local") is LocalTarget
    with pytest.raises(TargetError, match="'gcp' is not one of local, ssh, ec2"):
        make_target(TargetSpec(name="x", kind="gcp", provider="g", instance_type="t"))


def test_local_target_does_not_import_boto3_or_the_ssh_provider() -> None:
    """Neither AWS's SDK nor the ssh provider's hook and paramiko. (Reading a ``[gpucompare]``
    setting through Airflow's configuration loads every provider's ``get_provider_info``
    metadata, the ``airflow.providers.ssh`` package among them: that is not the provider's code.)"""
    code = (
        "import sys\n"
        "from gpucompare.targets import make_target\n"
        "t = make_target({'name': 'n', 'kind': 'local', 'provider': 'p', 'instance_type': 'i'})\n"
        "heavy = ('boto3', 'botocore', 'airflow.providers.ssh.hooks.ssh', 'paramiko')\n"
        "bad = [m for m in heavy if m in sys.modules]\n"
        "print(bad)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT,
                          timeout=120, check=True)
    assert done.stdout.strip() == "[]"


def test_run_dir_names_are_safe_and_distinct() -> None:
    assert run_dir_name("nightly-2026-11-30") == "nightly-2026-11-30"
    a = run_dir_name("manual__2026-11-30T01:10:20+00:00")
    b = run_dir_name("manual__2026-11-30T01:10:20+01:00")
    assert a != b
    assert all(c.isalnum() or c in "._-" for c in a)
    with pytest.raises(TargetError, match="run_id"):
        run_dir_name("line\nbreak")


def test_worker_bundle_is_reproducible_and_named_by_its_content(tmp_path: Path) -> None:
    import shutil
    import tarfile

    first = build_bundle(cache_dir=tmp_path / "cache-a")
    second = build_bundle(cache_dir=tmp_path / "cache-b")
    assert first.content_hash == second.content_hash
    assert first.tarball.read_bytes() == second.tarball.read_bytes()
    with tarfile.open(first.tarball) as tar:
        names = tar.getnames()
    assert "bench_tasks/__main__.py" in names and "bench_tasks/requirements-gpu.txt" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]

    copy = tmp_path / "src" / "bench_tasks"
    shutil.copytree(REPO_ROOT / "bench_tasks", copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert build_bundle(cache_dir=tmp_path / "c", root=copy).content_hash == first.content_hash
    (copy / "constants.py").write_text((copy / "constants.py").read_text() + "\n# changed\n")
    changed = build_bundle(cache_dir=tmp_path / "c", root=copy)
    assert changed.content_hash != first.content_hash
    # The environment is keyed by the requirements only: unchanged here.
    assert changed.requirements_hashes == first.requirements_hashes


class TaskStopped(Exception):
    """What Airflow's SIGTERM handler raises in a task it stops; SIGUSR1 stands in for SIGTERM."""


def test_a_stopped_task_takes_its_worker_along(tmp_path: Path) -> None:
    target = make_target(local_spec(tmp_path))
    state = target.prepare("stopped-task")
    sweep_dir = Path(state.workdir) / sweep_dir_name({**ENDLESS_SWEEP, "run_id": "stopped-task"})
    watcher = ProcessWatcher(str(sweep_dir))
    watcher.start()

    def stop_task(_signum, _frame) -> None:
        raise TaskStopped("the task is being stopped")

    def signal_once_running() -> None:
        wait_for(lambda: len(watcher.seen) >= 2, 120, "the worker and its runner")
        os.kill(os.getpid(), signal.SIGUSR1)

    previous = signal.signal(signal.SIGUSR1, stop_task)
    try:
        stopper = Background(signal_once_running)
        stopper.start()
        with pytest.raises(TaskStopped):
            target.run_sweep(state, ENDLESS_SWEEP, timeout_s=600)
        stopper.finish(10)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    seen = watcher.stop()
    # the runner dies by PDEATHSIG right after its parent
    wait_for(lambda: not [pid for pid in seen if is_alive(pid)], 30, f"every process of {seen} to end")


def test_a_tampered_state_never_reaches_rmtree(tmp_path: Path) -> None:
    victim = tmp_path / "precious"
    victim.mkdir()
    (victim / "keep.txt").write_text("keep")
    target = make_target(local_spec(tmp_path, remove_run_dir=True))
    state = target.prepare("real-run")
    state.workdir = str(victim)
    with pytest.raises(TargetError, match="not in the target's work_dir"):
        target.teardown(state)
    assert (victim / "keep.txt").read_text() == "keep"
    state.workdir = str(tmp_path / "runs" / "real-run")
    state.extra["result_files"] = [str(victim / "keep.txt")]
    with pytest.raises(TargetError, match="outside the run directory"):
        target.collect(state, str(tmp_path / "out.jsonl"))
