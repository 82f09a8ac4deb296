"""The ssh target with a container runtime (``worker_runtime: ngc-24.06``), end to end through
the real OpenSSH server on 127.0.0.1 and a stand-in ``docker`` (``tests/support/fake_docker.py``)
first on the sessions' PATH: it checks ``--gpus all``, the pinned image, the mounts and
``--user``, then runs the worker from ``.venv-bench`` as NVIDIA's image would run its python.
Stands in for an H100 host with Docker and the NVIDIA Container Toolkit (no GPU, no Docker engine
here). The whole path: deploy (bundle upload), the pull phase (once per host), the sweep,
collect, ingest into a lake with the run's phases.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench_tasks.record_fields import SCHEMA_VERSION
from gpucompare.lake.ingest import RunContext, ingest_results
from gpucompare.lake.phases import read_phases
from gpucompare.lake.tables import open_lake
from gpucompare.targets import make_target
from gpucompare.targets.base import TargetError, TargetSpec
from gpucompare.targets.phases import PhaseContext, write_recorded
from tests.conftest import BENCH_PYTHON
from tests.support.fake_docker import (
    DIGEST,
    calls,
    hang_workers,
    install_fake_docker,
    killed,
    running_containers,
)
from tests.support.target_helpers import ENDLESS_SWEEP, TINY_SWEEP, Sink, read_records, wait_for

IMAGE = "nvcr.io/nvidia/mxnet:24.06-py3"
PINNED = f"nvcr.io/nvidia/mxnet@{DIGEST}"
RUN_ID = "manual__2026-12-01T02:00:00+00:00"


@pytest.fixture
def docker_host(sshd_factory, tmp_path: Path):
    """An sshd whose sessions find the stand-in docker first on their PATH."""
    bin_dir = tmp_path / "fake-bin"
    install_fake_docker(bin_dir, expected_image=IMAGE, bench_python=BENCH_PYTHON, runtime_check="warn")
    server = sshd_factory(conn_id="gpucompare_test_docker",
                          extra_config=(f"SetEnv PATH={bin_dir}:/usr/local/bin:/usr/bin:/bin",))
    return server, bin_dir


def h100_spec(server, tmp_path: Path, **options) -> TargetSpec:
    return TargetSpec(name="rented-h100", kind="ssh", provider="lambda", instance_type="gpu_1x_h100_sxm5",
                      gpu_count=1, worker_runtime="ngc-24.06",
                      options={"ssh_conn_id": server.conn_id, "remote_dir": str(tmp_path / "remote"),
                               "poll_interval_s": 0.3, "kill_grace_s": 2, **options})


def test_ngc_runtime_over_ssh_pulls_once_runs_in_the_container_and_records_provenance(
        docker_host, tmp_path: Path) -> None:
    server, bin_dir = docker_host
    sink = Sink()
    spec = h100_spec(server, tmp_path)
    target = make_target(spec, line_sink=sink)
    state = target.deploy(target.prepare(RUN_ID))
    assert state.extra["image"] == PINNED  # the digest the host got, not the moving tag
    assert [c[0] for c in calls(bin_dir)] == ["image", "pull", "image"]
    assert any("pulled" in line for line in sink.texts())

    state = target.run_sweep(state, TINY_SWEEP, timeout_s=600)
    out = target.collect(state, str(tmp_path / "collected" / "results.jsonl"))
    (record,) = read_records(out)
    assert record["status"] == "ok" and record["worker_runtime"] == "ngc-24.06"
    build = json.loads(record["framework_build"])
    assert build["image"] == PINNED and build["image_digest"] == DIGEST
    assert build["mxnet"] == "1.9.1" and isinstance(build["features"], list) and build["python"]
    run = [c for c in calls(bin_dir) if c[0] == "run"]
    assert len(run) == 1 and "--gpus" in run[0] and PINNED in run[0]

    # the second night on this host reuses the image: no pull, and the pull phase is seconds
    second = make_target(spec, line_sink=sink)
    second.deploy(second.prepare(RUN_ID + "-2"))
    assert [c[0] for c in calls(bin_dir)].count("pull") == 1
    assert any("already on the host" in line for line in sink.texts())

    phases = [(r.phase, r.status) for r in target.phases.records]
    assert phases == [("provision", "ok"), ("deploy", "ok"), ("pull", "ok"), ("sweep", "ok")]
    target.teardown(state)
    lake = open_lake(str(tmp_path / "lake"))
    write_recorded(lake.uri, target.phases, PhaseContext.of(spec.to_dict(), RUN_ID, market=state.market))
    ingest_results(lake, out, RunContext(provider="lambda", instance_type="gpu_1x_h100_sxm5", target="ssh"),
                   run_id=RUN_ID)
    stored = read_phases(lake).column("phase").to_pylist()
    assert sorted(stored) == ["deploy", "provision", "pull", "sweep", "teardown"]
    rows = lake.results_table(columns=["worker_runtime", "framework_build", "schema_version"]).to_pylist()
    assert [(r["worker_runtime"], r["schema_version"]) for r in rows] == [("ngc-24.06", SCHEMA_VERSION)]
    assert json.loads(rows[0]["framework_build"])["image_digest"] == DIGEST


def test_a_run_the_stand_in_refuses_fails_the_sweep_with_its_reason(docker_host, tmp_path: Path) -> None:
    """The stand-in really checks: a run with a device list instead of --gpus all is refused."""
    server, _ = docker_host
    target = make_target(h100_spec(server, tmp_path, docker_gpus="device=0,1"))
    state = target.deploy(target.prepare(RUN_ID))
    with pytest.raises(TargetError, match="run without --gpus all"):
        target.run_sweep(state, TINY_SWEEP, timeout_s=600)


def _container_of(bin_dir: Path) -> str:
    (run,) = [c for c in calls(bin_dir) if c[0] == "run"]
    return run[run.index("--name") + 1]


def test_a_worker_hung_past_its_limit_leaves_no_container_on_the_host(docker_host, tmp_path: Path) -> None:
    """The worker ignores SIGTERM (hung in a driver call): ``timeout`` kills the docker client,
    the container lives on, and only the sweep's own ``docker kill`` ends it."""
    server, bin_dir = docker_host
    hang_workers(bin_dir)
    target = make_target(h100_spec(server, tmp_path))
    state = target.deploy(target.prepare(RUN_ID))
    with pytest.raises(TargetError, match=r"stopped on the host \(exit (124|137)"):
        target.run_sweep(state, ENDLESS_SWEEP, timeout_s=8)
    name = _container_of(bin_dir)
    (run,) = [c for c in calls(bin_dir) if c[0] == "run"]
    print(f"\nhung worker over ssh: container {name}; killed {killed(bin_dir)}; "
          f"running after the sweep {running_containers(bin_dir)}")
    assert name.startswith("gpucompare-manual__2026-12-01T02_00_00_00_00-") and name.endswith(
        run[run.index("--output") + 1].split("/")[-2])  # the run and the sweep
    assert {"memlock=-1", "stack=67108864"} <= {run[i + 1] for i, a in enumerate(run) if a == "--ulimit"}
    assert run[run.index("--network") + 1] == "none" and run[run.index("--ipc") + 1] == "host"
    assert killed(bin_dir) == [name]
    assert running_containers(bin_dir) == []
    target.teardown(state)


def test_teardown_of_a_running_sweep_leaves_no_container(docker_host, tmp_path: Path) -> None:
    server, bin_dir = docker_host
    hang_workers(bin_dir)
    target = make_target(h100_spec(server, tmp_path))
    state = target.deploy(target.prepare(RUN_ID))
    started = target.start_sweep(state, ENDLESS_SWEEP, timeout_s=600)
    assert started
    wait_for(lambda: running_containers(bin_dir) != [], 60, "the sweep's container")
    make_target(h100_spec(server, tmp_path)).teardown(state)
    wait_for(lambda: running_containers(bin_dir) == [], 15, "the container to be killed")
    assert killed(bin_dir) == [_container_of(bin_dir)]
