"""Every status path of a sweep produces its record and the sweep goes on (real MXNet, CPU).

Stand-ins, since there is no GPU here: out-of-memory is a real MXNet allocation failure on
the CPU under an address-space limit (``prlimit --as``), which takes the same path as a GPU
OOM (an MXNetError classified from its text; the GPU wordings are checked against recorded
texts in test_worker_errors.py); a crashing MXNet is a runner process killed with SIGKILL.
"""

from __future__ import annotations

import os
import shutil
import signal
from datetime import datetime
from pathlib import Path

import pytest

from tests.support.proc_helpers import command_line
from tests.support.worker_support import children_of, is_alive, read_records, start_worker, wait_for

STATUS_SWEEP = """
run_id: status-paths
warmup: 0
batches: 1
repeats: 1
matrix:
  - modes: [train]
    networks: [alexnet]
    batch_sizes: [1]
    devices: ["cpu:0,cpu:1"]
  - modes: [score]
    networks: [alexnet]
    batch_sizes: [1]
    dtypes: [float16]
  - modes: [score]
    networks: [alexnet]
    batch_sizes: [1]
    devices: ["gpu:0"]
  - modes: [score]
    networks: [alexnet]
    batch_sizes: [1]
    batches: 100000
    timeout_s: 8
  - modes: [score]
    networks: [alexnet]
    batch_sizes: [2]
"""


def seconds_between(record: dict) -> float:
    return (datetime.fromisoformat(record["finished_at"])
            - datetime.fromisoformat(record["started_at"])).total_seconds()


def test_every_status_gets_its_record_and_the_sweep_goes_on(tmp_path: Path) -> None:
    sweep_file = tmp_path / "sweep.yaml"
    sweep_file.write_text(STATUS_SWEEP)
    output = tmp_path / "results.jsonl"
    worker = start_worker(["sweep", "--config", str(sweep_file), "--output", str(output)])
    _, stderr = worker.communicate(timeout=300)
    assert worker.returncode == 0, stderr
    records = read_records(output)
    assert [(r["status"], r["dtype"], r["devices"], r["batch_size"]) for r in records] == [
        ("batch_smaller_than_devices", "float32", ["cpu:0", "cpu:1"], 1),
        ("unsupported", "float16", ["cpu:0"], 1),
        ("unsupported", "float32", ["gpu:0"], 1),
        ("timeout", "float32", ["cpu:0"], 1),
        ("ok", "float32", ["cpu:0"], 2),
    ]
    smaller, fp16, gpu, timeout, ok = records
    assert "Too many slices" in smaller["error"]
    assert "float16" in fp16["error"] and "CUDA" in gpu["error"]
    assert "time limit of 8 s" in timeout["error"]
    assert 8 <= seconds_between(timeout) < 60
    assert ok["images_per_sec"] > 0 and ok["error"] is None
    assert {r["run_id"] for r in records} == {"status-paths"}
    assert all(r["images_per_sec"] is None and r["images_per_sec_samples"] == [] for r in records[:4])
    progress = [line for line in stderr.splitlines() if line.startswith("[")]
    assert len(progress) == 5 and "timeout" in progress[3] and "ETA" in progress[4]


@pytest.mark.skipif(shutil.which("prlimit") is None, reason="needs util-linux prlimit")
def test_out_of_memory_is_recorded_and_the_next_configuration_runs(tmp_path: Path) -> None:
    output = tmp_path / "results.jsonl"
    limit = 2560 * 1024 * 1024  # enough for AlexNet at batch 1, far too little for VGG-16 at 32
    worker = start_worker(
        ["sweep", "--modes", "score", "--networks", "vgg-16,alexnet", "--batch-sizes", "32",
         "--warmup", "0", "--batches", "1", "--repeats", "1", "--output", str(output)],
        prefix=["prlimit", f"--as={limit}"])
    worker.communicate(timeout=300)
    vgg, alexnet = read_records(output)
    assert (vgg["network"], vgg["status"]) == ("vgg-16", "oom")
    assert "Failed to allocate CPU Memory" in vgg["error"]
    assert (alexnet["network"], alexnet["status"]) == ("alexnet", "ok")


def find_runner(sweep_pid: int) -> int | None:
    runners = [pid for pid in children_of(sweep_pid)
               if "_runner" in command_line(pid)]
    return runners[0] if runners else None


def test_a_crashed_measuring_process_gives_an_error_record_and_a_fresh_one_runs_next(
        tmp_path: Path) -> None:
    output = tmp_path / "results.jsonl"
    sweep_file = tmp_path / "sweep.yaml"
    sweep_file.write_text(
        "warmup: 0\nrepeats: 1\nmatrix:\n"
        "  - {modes: [score], networks: [alexnet], batch_sizes: [1], batches: 100000}\n"
        "  - {modes: [score], networks: [alexnet], batch_sizes: [2], batches: 1}\n")
    worker = start_worker(["sweep", "--config", str(sweep_file), "--output", str(output)])
    try:
        first_runner = wait_for(lambda: find_runner(worker.pid), timeout=60)
        os.kill(first_runner, signal.SIGKILL)
        _, stderr = worker.communicate(timeout=300)
    finally:
        if worker.poll() is None:
            worker.kill()
    crashed, ok = read_records(output)
    assert crashed["status"] == "error"
    assert "killed by signal SIGKILL" in crashed["error"]
    assert ok["status"] == "ok" and ok["batch_size"] == 2


def test_a_killed_sweep_keeps_the_records_it_wrote_and_leaves_no_runner(tmp_path: Path) -> None:
    output = tmp_path / "results.jsonl"
    sweep_file = tmp_path / "sweep.yaml"
    sweep_file.write_text(
        "warmup: 0\nrepeats: 1\nmatrix:\n"
        "  - {modes: [score], networks: [alexnet], batch_sizes: [1], batches: 1}\n"
        "  - {modes: [score], networks: [alexnet], batch_sizes: [2], batches: 100000}\n")
    worker = start_worker(["sweep", "--config", str(sweep_file), "--output", str(output)])
    try:
        wait_for(lambda: output.exists() and output.read_text().count("\n") == 1, timeout=120)
        runner = wait_for(lambda: find_runner(worker.pid), timeout=30)
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
        wait_for(lambda: not is_alive(runner), timeout=15)  # the runner dies with its sweep
    finally:
        if worker.poll() is None:
            worker.kill()
    (record,) = read_records(output)
    assert record["status"] == "ok" and record["batch_size"] == 1
