"""scripts/gpu_check.sh against the tests' stand-in docker (tests/support/fake_docker.py: no GPU,
no Docker engine here): its help, its dry run (the commands, with the targets' container flags), and
a real run whose containers the stand-in checks and runs; the worker inside is the CPU build of
.venv-bench, so the runtime check says what it is not, and no benchmark_score.py is in the "image"."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

from gpucompare.targets import container
from tests.conftest import BENCH_PYTHON, REPO_ROOT
from tests.support.fake_docker import calls, install_fake_docker, running_containers

SCRIPT = REPO_ROOT / "scripts" / "gpu_check.sh"
IMAGE = "nvcr.io/nvidia/mxnet:24.06-py3"


def gpu_check(*args: str, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": path or os.environ["PATH"]}
    env.pop("GPUCOMPARE_WORKER_RUNTIME_CHECK", None)  # the check refuses, as on a real host
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=300)


def test_help_and_bad_usage() -> None:
    shown = gpu_check("--help")
    assert shown.returncode == 0 and "--dry-run" in shown.stdout and "benchmark_score.py" in shown.stdout
    for args, said in ((["--gpu", "0;reboot"], "--gpu"), (["--network", "lenet"], "--network"),
                       (["--runtime", "pip-cu112"], "is not a container runtime"), (["--bogus"], "unknown")):
        refused = gpu_check(*args, "--dry-run")
        assert refused.returncode == 2 and said in refused.stderr, refused.stderr


def test_the_dry_run_prints_the_commands_with_the_targets_container_flags() -> None:
    shown = gpu_check("--dry-run", "--gpu", "3")
    assert shown.returncode == 0, shown.stderr
    lines = [shlex.split(line) for line in shown.stdout.splitlines() if line.startswith("docker ")]
    assert lines[0] == ["docker", "pull", IMAGE]
    runs = [line for line in lines if line[:2] == ["docker", "run"]]
    steps = [run[-1] if "sysinfo" in run else run[run.index("-m") + 2] if "-m" in run else "sh"
             for run in runs]
    assert steps == ["sysinfo", "score", "sh"]
    for run in runs:
        text = " ".join(run)
        assert " ".join(container.LIMITS) in text  # the targets' own flags, in their order
        name = run[run.index("--name") + 1]
        assert f"--label {container.LABEL}={name}" in text
        assert "CUDA_VISIBLE_DEVICES=3" in run and "GPUCOMPARE_WORKER_RUNTIME=ngc-24.06" in run
    assert runs[2][-4:] == ["benchmark_score", "/opt/mxnet/example/image-classification/benchmark_score.py",
                            "resnet-50", "32"]


def test_a_run_against_the_stand_in_reports_each_check_and_leaves_no_container(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    install_fake_docker(bin_dir, expected_image=IMAGE, bench_python=BENCH_PYTHON)
    result = gpu_check(path=f"{bin_dir}:{os.environ['PATH']}")
    print(result.stdout)
    assert result.returncode == 1  # nothing here is a GPU host: the checks fail, and say why
    summary = result.stdout[result.stdout.index("gpu_check summary"):]
    assert "pull             " in summary and ", downloaded" in summary
    assert ("runtime check    FAILED: bench-tasks sysinfo: runtime 'ngc-24.06' does not match the build it "
            "imports") in summary and "an MXNet build without CUDA and CUDNN" in summary
    assert "can't cd to /opt/mxnet/example/image-classification" in summary
    assert "ratio            n/a" in summary
    assert [c[0] for c in calls(bin_dir)].count("run") == 3
    assert running_containers(bin_dir) == []

