"""The GPU free-memory check of the shared measuring process (``bench_tasks.gpumemory``).

No GPU here. The decision runs for real inside real sweeps (real measuring processes, MXNet
on the CPU, tests/support/gpu_memory_driver.py) with a probe that reports scripted free-memory values:
it stands in for ``nvidia-smi --query-gpu=memory.free,memory.total`` on a GPU host, answering
for ``cpu:0`` as if it were a GPU. The parser is checked on nvidia-smi's answer format, and the
default probe on this GPU-less host answers nothing, so CPU sweeps are unchanged.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from bench_tasks.configs import expand_matrix
from bench_tasks.gpumemory import DeviceMemory, GpuMemoryGuard, nvidia_smi_probe, parse_memory_line
from tests.conftest import BENCH_PYTHON, REPO_ROOT
from tests.support.worker_support import read_records, start_worker

TINY = {"warmup": 0, "batches": 1, "repeats": 1, "timeout_s": 300}


def run_scripted(tmp_path: Path, batch_sizes: list[int], free_mib: list[float],
                 total_mib: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str]:
    """Records, probe calls and stderr of a real alexnet scoring sweep with a scripted probe."""
    tmp_path.mkdir(exist_ok=True)
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"total_mib": total_mib, "free_mib": free_mib, "sweep": {
        **TINY, "matrix": [{"modes": ["score"], "networks": ["alexnet"], "batch_sizes": batch_sizes}]}}))
    output = tmp_path / "results.jsonl"
    driver = "tests.support.gpu_memory_driver"
    done = subprocess.run([str(BENCH_PYTHON), "-m", driver, str(script), str(output)], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    calls = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return read_records(output), calls, done.stderr


def reasons(records: list[dict[str, Any]]) -> list[tuple[int, str | None]]:
    return [(r["batch_size"], r["fresh_process_reason"]) for r in records]


def test_low_free_memory_restarts_the_process_before_the_bind(tmp_path: Path) -> None:
    # batch 1 took 100 MiB, batch 2 took 400 (200 per image): batch 4 needs about 4 × 200 × 1.2
    # = 960 MiB, only 500 are free, a fresh process had 1000 → restart before binding batch 4
    records, calls, stderr = run_scripted(tmp_path, [1, 2, 4], [1000, 900, 500, 1000], total_mib=2000)
    assert [r["status"] for r in records] == ["ok", "ok", "ok"]
    assert reasons(records) == [(1, "series_start"), (2, None), (4, "low_gpu_memory")]
    assert [c["free_mib"] for c in calls] == [1000, 900, 500, 1000]  # nothing asked twice
    first, _, decided, fresh = (c["pid"] for c in calls)
    assert first == decided and fresh != first  # batch 4 ran in another process
    assert "cpu:0: 500 MiB free, batch 4 needs about 960 MiB" in stderr
    assert "new process" in [line for line in stderr.splitlines() if "b=4" in line][-1]


def test_a_large_drop_restarts_and_a_hopeless_need_does_not(tmp_path: Path) -> None:
    # batch 2: free fell 600 of 1000 MiB since the start (> half the device) → fresh process;
    # batch 3: 5 MiB per image measured in that process, plenty free → same process
    records, calls, _ = run_scripted(tmp_path, [1, 2, 3], [1000, 400, 1000, 990], total_mib=1000)
    assert reasons(records) == [(1, "series_start"), (2, "gpu_memory_dropped"), (3, None)]
    assert calls[1]["pid"] == calls[0]["pid"] != calls[2]["pid"] == calls[3]["pid"]

    # need 600 × 2 × 1.2 = 1440 MiB > 400 free, but a fresh process had only 1000: restarting
    # cannot help, so batch 2 runs where it is (its oom, if any, is then the truth)
    records, calls, _ = run_scripted(tmp_path / "hopeless", [1, 2], [1000, 400], total_mib=2000)
    assert reasons(records) == [(1, "series_start"), (2, None)]
    assert calls[0]["pid"] == calls[1]["pid"]


def test_cpu_sweep_with_the_default_probe_is_unchanged(tmp_path: Path) -> None:
    """The default probe asks nvidia-smi about GPUs only: one process, no restarts, on the CPU."""
    output = tmp_path / "results.jsonl"
    worker = start_worker(["sweep", "--modes", "score", "--networks", "alexnet", "--batch-sizes", "1,2,3",
                           "--warmup", "0", "--batches", "1", "--repeats", "1", "--output", str(output)])
    _, stderr = worker.communicate(timeout=300)
    assert worker.returncode == 0, stderr
    assert reasons(read_records(output)) == [(1, "series_start"), (2, None), (3, None)]
    assert sum("new process" in line for line in stderr.splitlines()) == 1


# -- the decision and the probe, without processes --------------------------------------------

def configs(*batches: int, network: str = "alexnet", devices: str = "gpu:0") -> list[Any]:
    return expand_matrix({"modes": ["score"], "networks": [network], "batch_sizes": list(batches),
                          "devices": [devices]})


def replay(guard: GpuMemoryGuard, free: list[float], total: float, batches: list[int]) -> list[Any]:
    """Feed the guard one sweep: answers per probe call; the decision before each batch."""
    answers = iter(free)
    guard.probe = lambda device: DeviceMemory(next(answers), total)
    first, *rest = configs(*batches)
    state = guard.process_ready(first)
    return [guard.before_run(state, config) for config in rest]


def test_the_need_is_estimated_per_image_from_the_same_series() -> None:
    guard = GpuMemoryGuard()
    decisions = replay(guard, [8000, 7000, 5000], 11000, [8, 16, 32])
    # 1000 MiB for batch 8 → 125/image; 2000 for 16 → 125/image; batch 32 needs 4800 ≤ 5000
    assert decisions == [None, None]
    decisions = replay(guard, [8000, 7000, 4000], 11000, [8, 16, 32])
    assert decisions[0] is None and decisions[1][0] == "low_gpu_memory"  # 187.5/image → 7200 MiB
    assert "4000 MiB free, batch 32 needs about 7200 MiB" in decisions[1][1]


def test_another_network_or_unknown_memory_decides_nothing() -> None:
    guard = GpuMemoryGuard(lambda device: None)
    alexnet, = configs(32)
    vgg, = configs(32, network="vgg-16")
    state = guard.process_ready(alexnet)
    assert guard.before_run(state, vgg) is None  # no answer (CPU, no nvidia-smi): no decision
    answers = iter([9000, 4000])
    guard.probe = lambda device: DeviceMemory(next(answers), 11000)
    state = guard.process_ready(alexnet)
    # alexnet's footprint says nothing about vgg-16 (the runner empties the pool on a switch)
    assert guard.before_run(state, vgg) is None


def test_multi_gpu_configurations_check_every_device() -> None:
    answers = {"gpu:0": iter([10000, 9000]), "gpu:1": iter([10000, 3000])}
    guard = GpuMemoryGuard(lambda device: DeviceMemory(next(answers[device]), 11000))
    first, second = configs(8, 16, devices="gpu:0,gpu:1")
    state = guard.process_ready(first)
    reason, detail = guard.before_run(state, second)
    assert reason == "gpu_memory_dropped" and detail.startswith("gpu:1: free memory fell from 10000 to 3000")


@pytest.mark.parametrize(("text", "expected"), [
    ("10923, 11178\n", DeviceMemory(10923, 11178)),
    ("0, 16160", DeviceMemory(0, 16160)),
    ("[N/A], [N/A]", None),  # virtualised GPUs
    ("", None),
    ("1, 2\n3, 4\n", None),  # two GPUs answered: not the one asked
    ("12000, 11178", None),  # more free than there is
    ("No devices were found", None),
])
def test_nvidia_smi_memory_answer_is_parsed_or_ignored(text: str, expected: DeviceMemory | None) -> None:
    assert parse_memory_line(text) == expected


def test_the_default_probe_asks_nvidia_smi_with_the_visible_device(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in ``nvidia-smi`` on PATH records its arguments and answers like the real one."""
    calls = tmp_path / "calls"
    fake = tmp_path / "nvidia-smi"
    fake.write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\necho '10923, 11178'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path), prepend=":")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert nvidia_smi_probe("cpu:0") is None
    assert nvidia_smi_probe("gpu:1") == DeviceMemory(10923, 11178)
    assert calls.read_text().split() == ["--query-gpu=memory.free,memory.total",
                                         "--format=csv,noheader,nounits", "--id=3"]
