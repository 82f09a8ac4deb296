"""The worker's copy of the runtimes table (``bench_tasks.runtime_check.RUNTIMES``: the worker
reads no file of the orchestrator's) says what ``data/runtimes.csv`` says, runtime by runtime."""

from __future__ import annotations

from bench_tasks.runtime_check import RUNTIMES, contradictions
from gpucompare.config import runtimes


def test_the_worker_copy_equals_the_runtimes_table() -> None:
    table = {r.name: r for r in runtimes.table()}
    assert sorted(RUNTIMES) == sorted(table)
    for name, (mxnet, cuda, cudnn, py_min, py_max) in RUNTIMES.items():
        row = table[name]
        assert (mxnet, cuda or None, cudnn or None) == (row.mxnet, row.cuda, row.cudnn), name
        assert row.python in (f"{py_min}-{py_max}", py_min if py_min == py_max else None), name


def test_each_contradiction_is_named() -> None:
    cpu_build = {"mxnet": "1.9.1", "features": ["BLAS_OPEN", "OPENMP"], "cuda": None, "cudnn": None,
                 "python": "3.10.13"}
    said = contradictions("ngc-24.06", cpu_build)
    assert said == ["an MXNet build without CUDA and CUDNN (mxnet.runtime.Features; "
                    "the runtime is CUDA 12.4.1)"]
    assert contradictions("cpu", cpu_build) == []
    assert contradictions("cpu", {**cpu_build, "python": "3.12.1"}) == [
        "Python 3.12.1 (the runtime has 3.8-3.11)"]
    wheel = {"mxnet": "1.9.1", "features": ["CUDA", "CUDNN", "NCCL"], "cuda": "11.2", "cudnn": "8.1.1",
             "python": "3.10.13"}
    assert contradictions("pip-cu112", wheel) == []
    assert contradictions("ngc-24.06", wheel) == ["CUDA 11.2 (the runtime has 12.4.1)",
                                                  "cuDNN 8.1.1 (the runtime has 9.1.0.70)"]
    assert contradictions("ngc-24.06", {**wheel, "cuda": "12.4", "cudnn": "9.1.0"}) == []
    assert contradictions("cpu", wheel) == ["an MXNet build with CUDA (the runtime is CPU only)"]
    assert contradictions("pip-cu112", {**wheel, "mxnet": "1.8.0", "features": None}) == [
        "MXNet 1.8.0 (the runtime ships 1.9.1)"]  # features unknown yet: only what is known
    assert "is not one of cpu, ngc-24.06, pip-cu112" in contradictions("cu118", wheel)[0]
