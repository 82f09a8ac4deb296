"""Multi-node training with MXNet's parameter server, on 127.0.0.1: a scheduler, a server and
two workers (``python -m bench_tasks train --kvstore dist_sync``) as separate processes with
the DMLC_* environment, as the orchestrator launches them on separate hosts; then the
workers' records merged into the run's record (the merge's rules:
tests/unit/worker/test_worker_aggregate.py)."""

from __future__ import annotations

import os
import socket
import subprocess

import pytest

from bench_tasks.aggregate import merge_worker_records
from tests.conftest import BENCH_PYTHON, REPO_ROOT
from tests.support.worker_support import read_records, start_worker


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def dmlc_environment(role: str, port: int) -> dict[str, str]:
    return {"DMLC_ROLE": role, "DMLC_PS_ROOT_URI": "127.0.0.1", "DMLC_PS_ROOT_PORT": str(port),
            "DMLC_NUM_SERVER": "1", "DMLC_NUM_WORKER": "2", "DMLC_NODE_HOST": "127.0.0.1",
            "DMLC_INTERFACE": "lo"}


@pytest.mark.slow
def test_dist_sync_training_over_two_workers(tmp_path) -> None:
    port = free_port()
    processes: list[subprocess.Popen] = []
    try:
        for role in ("scheduler", "server"):  # importing mxnet in these roles runs them
            processes.append(subprocess.Popen(
                [str(BENCH_PYTHON), "-c", "import mxnet"], cwd=REPO_ROOT,
                env={**os.environ, **dmlc_environment(role, port)},
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        outputs = [tmp_path / f"worker{i}.jsonl" for i in range(2)]
        workers = [start_worker(["train", "--networks", "googlenet", "--batch-sizes", "1",
                                 "--devices", "cpu", "--kvstore", "dist_sync", "--warmup", "1",
                                 "--batches", "1", "--repeats", "1", "--timeout", "240",
                                 "--run-id", "dist-test", "--output", str(path)],
                                env=dmlc_environment("worker", port)) for path in outputs]
        processes.extend(workers)
        for worker in workers:
            _, stderr = worker.communicate(timeout=300)
            assert worker.returncode == 0, stderr
        for process in processes[:2]:
            assert process.wait(timeout=60) == 0  # scheduler and server end with the workers
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    records = [read_records(path)[0] for path in outputs]
    for record in records:
        assert record["status"] == "ok", record["error"]
        assert (record["kvstore"], record["num_nodes"], record["gpu_count"]) == ("dist_sync", 2, 2)
        assert record["batch_size"] == 2 and record["per_device_batch"] == 1
        assert record["per_worker_images_per_sec"] == [record["images_per_sec"]]
    assert records[0]["config_id"] == records[1]["config_id"]
    run = merge_worker_records(records)
    assert run["images_per_sec"] == pytest.approx(sum(r["images_per_sec"] for r in records))
    assert sorted(run["per_worker_images_per_sec"]) == sorted(r["images_per_sec"] for r in records)
