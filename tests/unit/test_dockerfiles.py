"""The worker and Airflow images, checked without a docker engine (none is reachable here).

What can be checked for real is: the instructions themselves (base images, entrypoint, the
packages they install), that every file they copy exists and gets past the image's
``.dockerignore``, that the pins they install are the project's, and that the image's
entrypoint plus the ssh target's ``docker run`` arguments is the worker's command line.
The ``sed`` that drops the test tools from the Airflow image is run on the real file in
tests/integration/test_dockerfiles_sed.py.
"""

from __future__ import annotations

import fnmatch
import json
import re
from pathlib import Path

import pytest

from gpucompare.targets.ssh.commands import docker_command
from tests.conftest import REPO_ROOT
from tests.support.dockerfiles import AIRFLOW, DOCKER_DIR, WORKER, final_stage


def copy_sources(dockerfile: Path) -> list[str]:
    sources = []
    for keyword, args in final_stage(dockerfile):
        if keyword == "COPY" and "--from=" not in args:
            parts = [p for p in args.split() if not p.startswith("--")]
            sources.extend(parts[:-1])
    return sources


def ignored(path: str, dockerignore: Path) -> bool:
    """Docker's rule: the last matching pattern wins; '!' re-includes."""
    verdict = False
    for line in dockerignore.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line.lstrip("!").rstrip("/")
        candidates = [path] + [str(Path(*Path(path).parts[:i])) for i in range(1, len(Path(path).parts))]
        regex = fnmatch.translate(pattern.replace("**/", "*"))
        if any(re.match(regex, c) for c in candidates):
            verdict = not negate
    return verdict


def requirement_pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            pins[name.strip().lower()] = version.strip()
    return pins


def test_worker_image_base_packages_and_entrypoint() -> None:
    steps = final_stage(WORKER)
    assert steps[0] == ("FROM", "nvidia/cuda:11.2.2-cudnn8-runtime-ubuntu20.04")
    runs = " ".join(args for keyword, args in steps if keyword == "RUN")
    assert "libquadmath0" in runs and "libgomp1" in runs
    assert "-r /opt/gpucompare/requirements-gpu.txt" in runs
    pins = requirement_pins(REPO_ROOT / "bench_tasks" / "requirements-gpu.txt")
    assert pins["mxnet-cu112"] == "1.9.1" and pins["numpy"] == "1.23.5"
    entrypoint = [json.loads(args) for keyword, args in steps if keyword == "ENTRYPOINT"]
    assert entrypoint == [["python", "-m", "bench_tasks"]]
    env = " ".join(args for keyword, args in steps if keyword == "ENV")
    # -m bench_tasks must resolve from any working directory (the ssh target uses /sweep).
    assert "PYTHONPATH=/opt/gpucompare" in env
    assert ("COPY", "bench_tasks /opt/gpucompare/bench_tasks") in steps


def test_worker_image_runs_the_worker_command_line() -> None:
    """ENTRYPOINT + what the ssh target passes after the image = docs/worker.md's sweep command."""
    entrypoint = next(json.loads(a) for k, a in final_stage(WORKER) if k == "ENTRYPOINT")
    argv = docker_command(image="gpucompare-worker:latest", gpus="all", sweep_dir="/srv/run/sweep-1",
                          container_name="c", uid=1000, gid=1000)
    after_image = argv[argv.index("gpucompare-worker:latest") + 1:]
    assert entrypoint + after_image == ["python", "-m", "bench_tasks", "sweep", "--config",
                                        "/sweep/sweep.json", "--output", "/sweep/results.partial.jsonl"]


@pytest.mark.parametrize("dockerfile", [WORKER, AIRFLOW], ids=["worker", "airflow"])
def test_every_copied_file_exists_and_is_in_the_build_context(dockerfile: Path) -> None:
    dockerignore = dockerfile.with_name(dockerfile.name + ".dockerignore")
    sources = copy_sources(dockerfile)
    assert sources
    for source in sources:
        assert (REPO_ROOT / source).exists(), source
        assert not ignored(source, dockerignore), f"{source} is excluded by {dockerignore.name}"
    # And what must never be sent to the daemon is not.
    for private in (".venv", ".venv-bench", ".git", "lake", "docker/airflow.env", "tests"):
        assert ignored(private, dockerignore), private


def test_airflow_image_matches_the_orchestrator_pins() -> None:
    steps = final_stage(AIRFLOW)
    base = steps[0]
    assert base[0] == "FROM"
    image_version = re.fullmatch(r"apache/airflow:(\S+)-python3\.11", base[1]).group(1)
    assert image_version == requirement_pins(REPO_ROOT / "requirements.txt")["apache-airflow"]
    copied = copy_sources(AIRFLOW)
    for needed in ("dags", "plugins", "sql", "bench_tasks", "requirements.txt", "constraints.txt"):
        assert needed in copied, needed
    env = " ".join(args for keyword, args in steps if keyword == "ENV")
    assert "GPUCOMPARE_BENCH_PYTHON=/opt/airflow/.venv-bench/bin/python" in env
    assert "python -m venv /opt/airflow/.venv-bench" in " ".join(a for k, a in steps if k == "RUN")


def test_airflow_image_prepares_the_compose_mount_points() -> None:
    """Named volumes take the owner of their mount point in the image: it must be airflow's."""
    import yaml

    compose = yaml.safe_load((DOCKER_DIR / "compose.yaml").read_text())
    targets = {re.search(r":(/[^:]+)(?::r[ow])?$", volume).group(1)
               for volume in compose["x-airflow-common"]["volumes"]}
    runs = " ".join(a for k, a in final_stage(AIRFLOW) if k == "RUN")
    made = set(re.search(r"mkdir -p ([^&]+)&&", runs).group(1).split())
    for target in targets - {"/opt/airflow/logs"}:  # logs: already airflow's in the base image
        assert target in made, target
    assert "chown -R airflow:0" in runs
