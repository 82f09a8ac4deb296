"""GPU discovery from recorded nvidia-smi output, and ``sysinfo`` end to end in .venv-bench.

The end-to-end tests put a stand-in ``nvidia-smi`` on PATH: a shell script that checks it was
asked the query bench_tasks.sysinfo uses and prints a recorded output (there is no GPU here).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from bench_tasks.sysinfo import (
    NVIDIA_SMI_QUERY,
    SystemInfo,
    format_cuda_version,
    format_cudnn_version,
    gpu_model,
    parse_nvidia_smi,
)
from tests.conftest import DATA_DIR
from tests.support.bench_helpers import run_bench_python

SMI_DIR = DATA_DIR / "nvidia_smi"


@pytest.mark.parametrize(("name", "count", "model", "memory", "driver"), [
    ("p100_1x.csv", 1, "Tesla P100-PCIE-16GB", 16280, "384.81"),
    ("v100_4x.csv", 4, "Tesla V100-SXM2-16GB", 16160, "418.87.00"),
    ("a100_8x.csv", 8, "NVIDIA A100-SXM4-40GB", 40536, "470.57.02"),
])
def test_recorded_nvidia_smi_outputs(name: str, count: int, model: str, memory: int, driver: str) -> None:
    gpus = parse_nvidia_smi((SMI_DIR / name).read_text())
    assert [g.index for g in gpus] == list(range(count))
    assert gpu_model(gpus) == model
    assert {g.memory_mib for g in gpus} == {memory}
    assert {g.driver_version for g in gpus} == {driver}


def test_unexpected_nvidia_smi_output_is_refused() -> None:
    with pytest.raises(ValueError, match="want 4 fields"):
        parse_nvidia_smi((SMI_DIR / "driver_not_loaded.txt").read_text())


def test_record_fields_describe_the_gpus_used() -> None:
    info = SystemInfo(host="h", cpu_model="c", cpu_count=8,
                      gpus=parse_nvidia_smi((SMI_DIR / "v100_4x.csv").read_text()),
                      cuda_version="11.2", cudnn_version="8.1.1", mxnet_version="1.9.1")
    gpu_run = info.record_fields(("gpu:2", "gpu:3"))
    assert (gpu_run["gpu_model"], gpu_run["gpu_memory_mib"]) == ("Tesla V100-SXM2-16GB", 16160)
    assert gpu_run["driver_version"] == "418.87.00" and gpu_run["cuda_version"] == "11.2"
    cpu_run = info.record_fields(("cpu:0",))
    assert cpu_run["gpu_model"] is None and cpu_run["gpu_memory_mib"] is None


def test_version_numbers_as_the_libraries_return_them() -> None:
    assert format_cuda_version(11020) == "11.2"
    assert format_cuda_version(10010) == "10.1"
    assert format_cudnn_version(8101) == "8.1.1"
    assert format_cudnn_version(7605) == "7.6.5"
    assert format_cudnn_version(90100) == "9.1.0"


def fake_nvidia_smi(directory: Path, recorded: Path, exit_code: int = 0) -> None:
    script = directory / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        f'[ "$1" = "--query-gpu={NVIDIA_SMI_QUERY}" ] && [ "$2" = "--format=csv,noheader,nounits" ]'
        " || { echo bad arguments >&2; exit 2; }\n"
        f"cat '{recorded}'\nexit {exit_code}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


def run_sysinfo(path: str) -> dict:
    result = run_bench_python(["-m", "bench_tasks", "sysinfo"], env={"PATH": path}, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_sysinfo_reports_gpus_from_nvidia_smi(tmp_path: Path) -> None:
    fake_nvidia_smi(tmp_path, SMI_DIR / "a100_8x.csv")
    info = run_sysinfo(f"{tmp_path}{os.pathsep}/usr/bin:/bin")
    assert info["nvidia_smi"] == "ok"
    assert info["gpu_count"] == 8 and info["gpu_model"] == "NVIDIA A100-SXM4-40GB"
    assert info["driver_version"] == "470.57.02"
    # the installed MXNet is the CPU build: no CUDA, so no usable GPU and no CUDA/cuDNN version
    assert info["mxnet_version"] == "1.9.1"
    assert "CUDA" not in info["mxnet_features"] and info["mxnet_num_gpus"] == 0
    assert info["cuda_version"] is None and info["cudnn_version"] is None
    assert info["host"] and info["cpu_count"] >= 1


def test_sysinfo_without_nvidia_smi(tmp_path: Path) -> None:
    info = run_sysinfo(f"{tmp_path}{os.pathsep}/usr/bin:/bin")
    assert info["nvidia_smi"] == "absent"
    assert info["gpu_count"] == 0 and info["gpu_model"] is None
    assert "MKLDNN" in info["mxnet_features"]


def test_sysinfo_when_the_driver_is_not_loaded(tmp_path: Path) -> None:
    fake_nvidia_smi(tmp_path, SMI_DIR / "driver_not_loaded.txt", exit_code=9)
    info = run_sysinfo(f"{tmp_path}{os.pathsep}/usr/bin:/bin")
    assert info["nvidia_smi"].startswith("failed: exit 9: NVIDIA-SMI has failed")
    assert info["gpu_count"] == 0


def test_cuda_versions_come_from_mxnets_libraries_not_the_system_path() -> None:
    """This host's CPU MXNet uses no CUDA runtime, even where a CUDA toolkit is installed
    (the CI host has one): asked as if MXNet had CUDA, there is nothing to report."""
    code = ("import json, mxnet\nfrom bench_tasks.sysinfo import cuda_versions\n"
            "print(json.dumps(cuda_versions(mxnet.base._LIB, True)))")
    result = run_bench_python(code, env={"CUDA_VERSION": "", "CUDNN_VERSION": "", "NV_CUDNN_VERSION": ""},
                              timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == [None, None]
    with_env = run_bench_python(code, env={"CUDA_VERSION": "11.2.2", "CUDNN_VERSION": "8.1.1"}, timeout=120)
    assert json.loads(with_env.stdout.strip().splitlines()[-1]) == ["11.2.2", "8.1.1"]
