"""The worker environment cached on an ssh host between nights, against a real sshd on loopback.

The environment is named by the hash of its requirements file (``env-<kind>-<hash>``), made
once under a host lock, marked ``.ready`` last, reused by the next deploys, and at most
``worker_envs_kept`` older ones stay. The worker copy of ``tests/support/env_cache_support.py``
stands in for the download of MXNet (its requirements name a local wheel that links
``.venv-bench``'s packages); everything else is real: the venv, pip, the SSH sessions, the
deploy's check that imports MXNet with the environment's interpreter, a sweep run in it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from gpucompare.targets import make_target
from gpucompare.targets.base import TargetError, TargetSpec
from gpucompare.targets.bundle import build_bundle
from tests.conftest import BENCH_PYTHON
from tests.support.env_cache_support import base_python, linked_worker
from tests.support.fixtures_sshd import SshdServer
from tests.support.proc_helpers import command_line, process_ids
from tests.support.target_helpers import TINY_SWEEP, Background, Sink, read_records


class Host:
    """One ssh host (the loopback sshd) and the worker code the orchestrator would upload."""

    def __init__(self, server: SshdServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.server, self.tmp_path = server, tmp_path
        self.remote = tmp_path / "remote"
        self.source = tmp_path / "source"
        self.base_python = base_python(BENCH_PYTHON)
        self.requirements("v1")
        # the worker the targets upload: this copy (a real bundle of it), not the checkout's
        root = self.source / "bench_tasks"
        monkeypatch.setattr("gpucompare.targets.ssh.target.build_bundle",
                            lambda: build_bundle(cache_dir=tmp_path / "cache", root=root))

    def requirements(self, note: str) -> str:
        """Change the worker's requirements file; the name of its environment directory."""
        linked_worker(self.source, BENCH_PYTHON, note)
        bundle = build_bundle(cache_dir=self.tmp_path / "cache", root=self.source / "bench_tasks")
        return f"env-cpu-{bundle.requirements_hashes['cpu']}"

    def target(self, sink: Sink | None = None) -> Any:
        spec = TargetSpec(name="rented-box", kind="ssh", provider="leadergpu", instance_type="cpu-test",
                          options={"ssh_conn_id": self.server.conn_id, "remote_dir": str(self.remote),
                                   "base_python": self.base_python, "requirements": "cpu",
                                   "poll_interval_s": 0.3, "retry_backoff_s": 0.3, "kill_grace_s": 2})
        return make_target(spec, line_sink=sink or Sink())

    def deploy(self, night: str) -> tuple[Any, Sink, float]:
        """prepare + deploy of one night; the state, its log and the deploy's seconds."""
        sink = Sink()
        target = self.target(sink)
        state = target.prepare(f"nightly__{night}")
        start = time.perf_counter()
        state = target.deploy(state)
        seconds = time.perf_counter() - start
        target.close()
        return state, sink, seconds

    def envs(self) -> list[str]:
        return sorted(p.name for p in self.remote.glob("env-*"))


@pytest.fixture
def host(sshd: SshdServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Host:
    return Host(sshd, tmp_path, monkeypatch)


def said(sink: Sink, text: str) -> int:
    return sum(text in line for line in sink.texts())


def test_the_second_night_reuses_the_environment_and_new_requirements_rebuild(
        host: Host, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    env_v1 = host.requirements("v1")
    state, first, built_s = host.deploy("2026-11-30")
    assert said(first, "environment created") == 1
    assert state.extra["env_dir"] == str(host.remote / env_v1)
    assert state.extra["python"] == str(host.remote / env_v1 / "bin" / "python")
    assert state.extra["mxnet_version"] == "1.9.1"  # imported by the environment's interpreter

    state, second, reused_s = host.deploy("2026-12-01")
    assert said(second, "environment ready") == 1 and said(second, "environment created") == 0
    assert reused_s < built_s
    # the cached environment runs a sweep (under its shared lock, venv_worker_command)
    target = host.target()
    state = target.run_sweep(state, TINY_SWEEP, timeout_s=300)
    records = read_records(target.collect(state, str(tmp_path / "night2.jsonl")))
    assert [r["status"] for r in records] == ["ok"]

    env_v2 = host.requirements("v2")
    state, third, _ = host.deploy("2026-12-02")
    assert said(third, "environment created") == 1 and state.extra["env_dir"].endswith(env_v2)
    assert host.envs() == sorted([env_v1, env_v2])  # the old one is kept (worker_envs_kept = 2)

    # keep none: v1 is removed, but v2 is held by a "running sweep" (its shared lock) and stays
    monkeypatch.setenv("GPUCOMPARE_WORKER_ENVS_KEPT", "0")
    holder = subprocess.Popen(["flock", "--shared", str(host.remote / env_v2), "sleep", "60"],
                              start_new_session=True)
    try:
        time.sleep(0.5)
        env_v3 = host.requirements("v3")
        _, fourth, _ = host.deploy("2026-12-03")
        assert said(fourth, f"removed old environment {host.remote / env_v1}") == 1
        assert said(fourth, f"kept {host.remote / env_v2}: a sweep is running in it") == 1
        assert host.envs() == sorted([env_v2, env_v3])
    finally:
        os.killpg(holder.pid, signal.SIGKILL)  # flock and its sleep, which inherited the lock
        holder.wait()
    _, fifth, _ = host.deploy("2026-12-04")
    assert said(fifth, "environment ready") == 1 and host.envs() == [env_v3]


def build_processes(env_dir: Path, marker: str) -> list[int]:
    """Processes on this host (the ssh "remote") building ``env_dir`` whose command line holds
    ``marker``."""
    lines = {pid: command_line(pid) for pid in process_ids()}
    return [pid for pid, line in lines.items()
            if str(env_dir) in line and marker in line and "sh -c" not in line]


@pytest.mark.parametrize("moment", ["-m venv", "pip install"])
def test_an_environment_killed_half_built_is_built_again_not_used(host: Host, moment: str) -> None:
    """SIGKILL of the deploy's whole process group on the host (the build's shell, flock and
    venv or pip): what a crash or a reboot mid-build leaves behind."""
    env_dir = host.remote / host.requirements("v1")
    deploy = Background(lambda: host.deploy("2026-11-30"))
    deploy.start()
    deadline = time.monotonic() + 120
    while not ((pids := build_processes(env_dir, moment)) and env_dir.is_dir()):
        assert time.monotonic() < deadline and deploy.is_alive(), f"no {moment!r} seen"
        time.sleep(0.02)
    os.killpg(os.getpgid(pids[0]), signal.SIGKILL)
    deploy.finish(120)
    assert isinstance(deploy.error, TargetError), deploy.error
    assert env_dir.is_dir() and not (env_dir / ".ready").exists()  # half built

    state, sink, _ = host.deploy("2026-11-30")
    assert said(sink, "environment created") == 1 and said(sink, "environment ready") == 0
    assert (env_dir / ".ready").exists() and state.extra["mxnet_version"] == "1.9.1"


def test_two_concurrent_deploys_to_one_host_build_once(host: Host) -> None:
    """Two deploys at once (two SSH sessions, two builds racing on the host): one builds, the
    other waits for the host lock and reuses; both get a working environment."""
    env_dir = host.remote / host.requirements("v1")
    deploys = [Background(lambda night=night: host.deploy(night)) for night in ("2026-11-30", "2026-12-01")]
    for deploy in deploys:
        deploy.start()
    results = [deploy.finish(300) for deploy in deploys]
    assert [r.error for r in results] == [None, None]
    sinks = [r.result[1] for r in results]
    assert sorted(said(s, "environment created") for s in sinks) == [0, 1]
    assert sorted(said(s, "environment ready") for s in sinks) == [0, 1]
    assert {r.result[0].extra["mxnet_version"] for r in results} == {"1.9.1"}
    assert host.envs() == [env_dir.name] and (env_dir / ".ready").exists()
    assert not list(host.remote.glob(".unpack-*"))  # both unpacked the code; no leftovers


@pytest.mark.parametrize("value", ["-1", "1; rm -rf /"])
def test_a_bad_number_of_kept_environments_is_refused_before_any_build(
        host: Host, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    from gpucompare.settings import SettingError

    monkeypatch.setenv("GPUCOMPARE_WORKER_ENVS_KEPT", value)
    with pytest.raises(SettingError, match="GPUCOMPARE_WORKER_ENVS_KEPT") as refused:
        host.deploy("2026-11-30")
    assert refused.value.field == "GPUCOMPARE_WORKER_ENVS_KEPT"
    assert host.envs() == []
