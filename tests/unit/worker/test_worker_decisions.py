"""What the sweep decides without measuring, and how it builds records, for hosts we do not
have: a 4×V100 host with the CUDA build (from recorded nvidia-smi output), multi-node
workers. bench_tasks.sweep is standard-library only, so this runs in the orchestrator's
environment."""

from __future__ import annotations

import os
from unittest import mock

import pytest

from bench_tasks.configs import Config
from bench_tasks.sweep import Outcome, build_record, precheck_build, precheck_static
from bench_tasks.sysinfo import SystemInfo, parse_nvidia_smi
from tests.conftest import DATA_DIR

SMI = DATA_DIR / "nvidia_smi" / "v100_4x.csv"


def host(features: list[str], num_gpus: int) -> SystemInfo:
    info = SystemInfo(host="gpu-host", cpu_model="Xeon", cpu_count=32, gpus=parse_nvidia_smi(SMI.read_text()))
    info.add_mxnet_details({"mxnet_version": "1.9.1", "mxnet_features": features, "cuda_version": "11.2",
                            "cudnn_version": "8.1.1", "mxnet_num_gpus": num_gpus})
    return info


CUDA_BUILD = host(["CUDA", "CUDNN", "NCCL", "DIST_KVSTORE"], 4)
CPU_BUILD = host(["MKLDNN", "DIST_KVSTORE"], 0)


def config(**changes) -> Config:
    values = {"mode": "train", "network": "resnet-50", "dtype": "float32", "batch_size": 8,
              "devices": ("gpu:0", "gpu:1"), "kvstore": "device", "scaling": None}
    values.update(changes)
    return Config(**values)


@pytest.mark.parametrize(("cfg", "expected"), [
    (config(batch_size=1), "batch_smaller_than_devices"),
    (config(batch_size=1, scaling="weak"), None),  # weak: 1 per device, 2 in all
    (config(dtype="float16", devices=("cpu:0",)), "unsupported"),
    (config(dtype="float16"), None),
])
def test_static_decisions(cfg: Config, expected: str | None) -> None:
    decided = precheck_static(cfg)
    assert (decided[0] if decided else None) == expected


@pytest.mark.parametrize(("cfg", "info", "expected", "needle"), [
    (config(), CUDA_BUILD, None, ""),
    (config(kvstore="nccl"), CUDA_BUILD, None, ""),
    (config(devices=("gpu:3", "gpu:4")), CUDA_BUILD, "unsupported", "gpu:4 is not available"),
    (config(), CPU_BUILD, "unsupported", "no CUDA"),
    (config(kvstore="nccl", devices=("cpu:0",)), CUDA_BUILD, "unsupported", "nccl"),
    (config(kvstore="dist_sync"), host(["CUDA"], 4), "unsupported", "distributed kvstore"),
])
def test_build_decisions(cfg: Config, info: SystemInfo, expected: str | None, needle: str) -> None:
    decided = precheck_build(cfg, info)
    assert (decided[0] if decided else None) == expected
    assert needle in (decided[1] if decided else "")


def timings(timed_batches: int) -> dict:
    """What a runner reports besides its samples (bench_tasks.runner.run_one)."""
    return {"timed_batches": timed_batches, "stop_rule": "fixed_batches", "setup_s": 2.0,
            "warmup_s": 0.5, "timed_s": 1.0}


def test_gpu_record_carries_the_gpus_used_and_the_build() -> None:
    outcome = Outcome("ok", result={"samples": [400.0, 410.0, 390.0], "parameters": 25_549_486,
                                    **timings(timed_batches=30)},
                      started_at="2026-11-30T01:00:00+00:00", finished_at="2026-11-30T01:00:30+00:00")
    record = build_record(config(), outcome, CUDA_BUILD, "run-1", "3,224,224")
    assert (record["images_per_sec"], record["gpu_count"], record["per_device_batch"]) == (400.0, 2, 4)
    assert record["gpu_model"] == "Tesla V100-SXM2-16GB" and record["gpu_memory_mib"] == 16160
    assert (record["cuda_version"], record["cudnn_version"], record["driver_version"]) == (
        "11.2", "8.1.1", "418.87.00")
    assert record["cv"] == pytest.approx(0.025)
    assert (record["timed_batches"], record["repeats"], record["stop_rule"]) == (30, 3, "fixed_batches")
    assert (record["setup_seconds"], record["warmup_seconds"], record["timed_seconds"]) == (2.0, 0.5, 1.0)


def test_multi_node_worker_record_describes_the_whole_run() -> None:
    outcome = Outcome("ok", result={"samples": [100.0], "num_workers": 4, **timings(timed_batches=10)},
                      started_at="2026-11-30T01:00:00+00:00", finished_at="2026-11-30T01:00:30+00:00")
    weak = config(kvstore="dist_device_sync", batch_size=32, scaling="weak",
                  devices=("gpu:0", "gpu:1", "gpu:2", "gpu:3"))
    record = build_record(weak, outcome, CUDA_BUILD, "run-1", "3,224,224")
    assert (record["batch_size"], record["per_device_batch"], record["gpu_count"], record["num_nodes"]) == (
        32 * 4 * 4, 32, 16, 4)
    assert record["per_worker_images_per_sec"] == [100.0] and record["images_per_sec"] == 100.0


def test_a_failed_multi_node_worker_takes_the_worker_count_from_its_environment() -> None:
    outcome = Outcome("oom", "MXNetError: Memory allocation failed out of memory",
                      started_at="2026-11-30T01:00:00+00:00", finished_at="2026-11-30T01:00:30+00:00")
    with mock.patch.dict(os.environ, {"DMLC_NUM_WORKER": "2"}):
        record = build_record(config(kvstore="dist_sync"), outcome, CUDA_BUILD, "run-1", "3,224,224")
    summary = (record["status"], record["num_nodes"], record["batch_size"], record["gpu_count"])
    assert summary == ("oom", 2, 16, 4)
    assert record["images_per_sec"] is None and record["per_worker_images_per_sec"] == []
