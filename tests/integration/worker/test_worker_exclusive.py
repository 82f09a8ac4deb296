"""A GPU ours alone: the real worker (``.venv-bench``, a subprocess) lists the compute processes on
a configuration's GPUs before measuring it, through a stand-in ``pynvml`` (tests/support/fake_nvml:
no GPU here) that reports the processes ``FAKE_NVML_PROCESSES`` names, and ``nvidia-smi
--query-compute-apps`` (a stand-in executable on PATH) where NVML is absent.

A foreign process on gpu:0 ends the gpu:0 configuration ``gpu_busy`` (pid and name in the error,
``gpu_exclusive: false``); without one the record says ``gpu_exclusive: true`` (and the CPU build
then decides ``unsupported``, as for any GPU configuration here); CPU configurations say null with
the reason. The reports count the status (``gpucompare`` ingest + the throughput report).
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT
from tests.support.worker_support import read_records, start_worker

FAKE_NVML = REPO_ROOT / "tests" / "support" / "fake_nvml"
SWEEP = """
run_id: exclusive
warmup: 0
batches: 1
repeats: 1
matrix:
  - modes: [score]
    networks: [alexnet]
    batch_sizes: [1]
    devices: ["gpu:0", "gpu:1", "cpu:0"]
"""


def _sweep(tmp_path: Path, env: dict[str, str]) -> tuple[list[dict], str]:
    sweep_file = tmp_path / "sweep.yaml"
    sweep_file.write_text(SWEEP)
    output = tmp_path / "results.jsonl"
    worker = start_worker(["sweep", "--config", str(sweep_file), "--output", str(output)], env=env)
    _, stderr = worker.communicate(timeout=300)
    assert worker.returncode == 0, stderr
    return read_records(output), stderr


def _with_fake_nvml(**extra: str) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(FAKE_NVML), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, **extra}


def test_a_foreign_process_on_a_gpu_ends_its_configuration_gpu_busy(tmp_path: Path) -> None:
    records, stderr = _sweep(tmp_path, _with_fake_nvml(FAKE_NVML_PROCESSES="0:4242:stray_train.py"))
    by_device = {tuple(r["devices"]): r for r in records}
    busy, free, cpu = by_device[("gpu:0",)], by_device[("gpu:1",)], by_device[("cpu:0",)]
    assert busy["status"] == "gpu_busy" and busy["gpu_exclusive"] is False
    assert "gpu:0 pid 4242 (stray_train.py)" in busy["error"] and "4242" in busy["gpu_exclusive_note"]
    assert free["gpu_exclusive"] is True and free["gpu_exclusive_note"] is None
    assert free["status"] == "unsupported"  # the CPU build of MXNet: measured nothing, honestly
    assert cpu["status"] == "ok" and cpu["gpu_exclusive"] is None
    assert cpu["gpu_exclusive_note"].startswith("cpu device")
    assert any("gpu_busy" in line for line in stderr.splitlines() if line.startswith("["))
    assert "3 records (1 ok, 1 unsupported, 1 gpu_busy) written to" in stderr  # the status counts


def test_no_foreign_process_records_gpu_exclusive_true(tmp_path: Path) -> None:
    records, _ = _sweep(tmp_path, _with_fake_nvml())
    assert [r["gpu_exclusive"] for r in records if r["devices"][0].startswith("gpu")] == [True, True]


def test_without_nvml_nvidia_smi_answers_and_without_both_the_reason_is_recorded(tmp_path: Path) -> None:
    """The stand-in ``nvidia-smi`` prints what ``--query-compute-apps=pid,process_name
    --format=csv,noheader --id=N`` prints on a host where device 1 runs a foreign process."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!{sys.executable}\nimport sys\nargs = sys.argv[1:]\n"
                   "if '--query-compute-apps=pid,process_name' in args and '--id=1' in args:\n"
                   "    print('977, /usr/bin/python3')\n"
                   "elif not any(a.startswith('--query-compute-apps') for a in args):\n"
                   "    sys.exit(6)\n")
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "smi").mkdir()
    records, _ = _sweep(tmp_path / "smi", {"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    by_device = {tuple(r["devices"]): r for r in records}
    assert by_device[("gpu:0",)]["gpu_exclusive"] is True
    assert by_device[("gpu:1",)]["status"] == "gpu_busy"
    assert "gpu:1 pid 977 (/usr/bin/python3)" in by_device[("gpu:1",)]["error"]

    (tmp_path / "none").mkdir()
    records, _ = _sweep(tmp_path / "none", {"PATH": "/usr/bin:/bin"})
    gpu = [r for r in records if r["devices"][0].startswith("gpu")]
    assert [r["gpu_exclusive"] for r in gpu] == [None, None]
    assert "pynvml not installed" in gpu[0]["gpu_exclusive_note"]
    assert "nvidia-smi not found" in gpu[0]["gpu_exclusive_note"]
