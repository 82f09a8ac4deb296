"""The worker proves its runtime: the real worker (``.venv-bench``: MXNet 1.9.1 built for the CPU)
labelled as NVIDIA's CUDA container exits 2 naming the mismatch, in ``sysinfo`` and in a sweep;
labelled ``cpu`` it runs. Under an interpreter without numpy and MXNet (the orchestrator's
``.venv``) every command, ``sysinfo`` included, exits 2 with one line and no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.support.bench_helpers import run_bench_python

MISMATCH = "does not match the build it imports:"
NO_CUDA = "an MXNet build without CUDA and CUDNN (mxnet.runtime.Features; the runtime is CUDA"


def test_a_label_contradicting_the_build_exits_2_naming_it(tmp_path: Path) -> None:
    env = {"GPUCOMPARE_WORKER_RUNTIME": "ngc-24.06", "GPUCOMPARE_WORKER_RUNTIME_CHECK": ""}
    sysinfo = run_bench_python(["-m", "bench_tasks", "sysinfo"], env=env, timeout=120)
    assert sysinfo.returncode == 2 and "Traceback" not in sysinfo.stderr
    assert f"runtime 'ngc-24.06' {MISMATCH}" in sysinfo.stderr and NO_CUDA in sysinfo.stderr
    assert len(sysinfo.stderr.strip().splitlines()) == 1
    # pip-cu112 agrees with this MXNet's version and Python: only the first measuring process's
    # build features (the sweep process never imports mxnet) can contradict it
    env = {"GPUCOMPARE_WORKER_RUNTIME": "pip-cu112", "GPUCOMPARE_WORKER_RUNTIME_CHECK": ""}
    output = tmp_path / "out.jsonl"
    sweep = run_bench_python(["-m", "bench_tasks", "score", "--networks", "alexnet", "--batch-sizes", "1",
                              "--warmup", "0", "--batches", "1", "--repeats", "1", "--output", str(output)],
                             env=env, timeout=300)
    assert sweep.returncode == 2 and "Traceback" not in sweep.stderr
    assert f"bench-tasks score: runtime 'pip-cu112' {MISMATCH} {NO_CUDA} 11.2)" in sweep.stderr
    assert not output.exists() or output.read_text() == ""  # nothing measured under a false label
    ok = run_bench_python(["-m", "bench_tasks", "sysinfo"], env={"GPUCOMPARE_WORKER_RUNTIME": "cpu",
                                                                 "GPUCOMPARE_WORKER_RUNTIME_CHECK": ""},
                          timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert '"runtime_check": "ok"' in ok.stdout


@pytest.mark.parametrize("command", [["sysinfo"], ["describe", "--network", "alexnet"],
                                     ["score", "--networks", "alexnet", "--batch-sizes", "1"]])
def test_every_command_fails_cleanly_without_numpy_and_mxnet(command: list[str]) -> None:
    result = subprocess.run([sys.executable, "-m", "bench_tasks", *command], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "has no mxnet" in lines[0] and "Traceback" not in result.stderr


def test_warn_records_the_mismatch_instead_of_refusing(tmp_path: Path) -> None:
    """The tests' stand-ins (a CPU build for NVIDIA's container) run with
    GPUCOMPARE_WORKER_RUNTIME_CHECK=warn: the sweep runs, says so, and every record says it."""
    import json

    output = tmp_path / "out.jsonl"
    sweep = run_bench_python(["-m", "bench_tasks", "score", "--networks", "alexnet", "--batch-sizes", "1",
                              "--warmup", "0", "--batches", "1", "--repeats", "1", "--output", str(output)],
                             env={"GPUCOMPARE_WORKER_RUNTIME": "pip-cu112",
                                  "GPUCOMPARE_WORKER_RUNTIME_CHECK": "warn"}, timeout=300)
    assert sweep.returncode == 0, sweep.stderr
    assert "bench-tasks: warning: runtime 'pip-cu112' does not match" in sweep.stderr
    (record,) = [json.loads(line) for line in output.read_text().splitlines()]
    assert record["status"] == "ok"
    assert json.loads(record["framework_build"])["runtime_check"].startswith(
        "mismatch ignored (GPUCOMPARE_WORKER_RUNTIME_CHECK=warn): an MXNet build without CUDA")
