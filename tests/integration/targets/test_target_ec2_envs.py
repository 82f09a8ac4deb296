"""The ec2 worker environment: built on a plain image, skipped on an image that has it baked.

The deploy script is run exactly as sent to SSM (``deploy_commands``), in bash, on this
machine standing in for the instance: the instance's disk is a temporary folder
(``remote_root``), the worker code is already unpacked there (its ``.complete`` marker: the
S3 fetch is tested in test_target_ec2.py), and its ``requirements-gpu.txt`` is the local-wheel
stand-in of ``tests/support/env_cache_support.py`` (no MXNet download; the venv and pip are real). A
baked image is the same folder after a first deploy, as ``aws ec2 create-image`` would keep it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from gpucompare.targets.ec2.commands import deploy_commands
from tests.conftest import BENCH_PYTHON
from tests.support.env_cache_support import base_python, linked_worker


def run_deploy(commands: list[str], workdir: Path, path: str) -> subprocess.CompletedProcess:
    script = workdir.parent / "_script.sh"
    script.write_text("\n".join(commands) + "\n")
    return subprocess.run(["bash", str(script)], cwd=workdir, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PATH": path, "PYTHONPATH": ""})


def test_a_baked_environment_skips_the_build_and_a_half_built_one_is_rebuilt(tmp_path: Path) -> None:
    root = tmp_path / "opt-gpucompare"
    workdir = root / "bench-0123456789abcdef"
    linked_worker(workdir, BENCH_PYTHON, "ec2")
    code = workdir / "bench_tasks"
    shutil.copy(code / "requirements-cpu.txt", code / "requirements-gpu.txt")
    (workdir / ".complete").touch()
    venv = root / "venv-fedcba9876543210"
    python = venv / "bin" / "python"
    commands = deploy_commands("s3://bucket/never-fetched.tar.gz", "0" * 64, str(workdir), str(python),
                               create_venv=True)
    # python3 on the instance: the interpreter .venv-bench was made from, logging "-m venv" calls
    shims = tmp_path / "bin"
    shims.mkdir()
    calls = tmp_path / "venv-calls"
    (shims / "python3").write_text(
        f'#!/bin/sh\ncase "$*" in *"-m venv"*) echo "$*" >> {calls};; esac\n'
        f'[ -f {tmp_path}/no-venv ] && case "$*" in *"-m venv"*) exit 1;; esac\n'
        f'exec {base_python(BENCH_PYTHON)} "$@"\n')
    (shims / "python3").chmod(0o755)
    path = f"{shims}{os.pathsep}{os.environ['PATH']}"

    first = run_deploy(commands, workdir, path)  # a plain image: the environment is built
    assert first.returncode == 0, first.stderr
    assert (venv / ".complete").is_file() and len(calls.read_text().splitlines()) == 1

    (tmp_path / "no-venv").touch()  # from now on, any build attempt fails the deploy
    baked = run_deploy(commands, workdir, path)  # an image made from that instance
    assert baked.returncode == 0, baked.stderr
    assert len(calls.read_text().splitlines()) == 1  # no venv made again

    (venv / ".complete").unlink()  # the image was taken while the build ran
    half = run_deploy(commands, workdir, path)
    assert half.returncode != 0 and len(calls.read_text().splitlines()) == 2  # rebuilt, not used
    assert not venv.exists()  # the half-built one was removed before the attempt
