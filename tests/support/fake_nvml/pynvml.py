"""A stand-in for NVIDIA's ``pynvml`` (nvidia-ml-py) for the worker's energy tests: no GPU here.

Put this folder on the worker's ``PYTHONPATH``. Device ``i`` draws ``100 + 50 * i`` watts, so its
total energy counter (millijoules, as nvmlDeviceGetTotalEnergyConsumption) advances with time from
nvmlInit on. Environment switches: ``FAKE_NVML_NO_COUNTER=1`` makes the counter raise
NVMLError_NotSupported (a pre-Volta GPU: the worker must sample power instead);
``FAKE_NVML_INIT_FAIL=1`` makes nvmlInit fail as on a host without the driver;
``FAKE_NVML_DEVICES`` is the device count (default 2); ``FAKE_NVML_PROCESSES`` lists the compute
processes on the devices, ``index:pid:name`` separated by ``;`` (``0:4242:stray_train.py``: a
process another user left on gpu:0), as ``nvmlDeviceGetComputeRunningProcesses`` reports them.
"""

from __future__ import annotations

import os
import time
from types import SimpleNamespace

_started: float | None = None


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):  # noqa: N801 - pynvml's own name
    pass


class NVMLError_DriverNotLoaded(NVMLError):  # noqa: N801 - pynvml's own name
    pass


def _watts(index: int) -> float:
    return 100.0 + 50.0 * index


def nvmlInit() -> None:  # noqa: N802 - pynvml's own names follow
    global _started
    if os.environ.get("FAKE_NVML_INIT_FAIL") == "1":
        raise NVMLError_DriverNotLoaded("Driver Not Loaded")
    _started = time.perf_counter()


def nvmlShutdown() -> None:  # noqa: N802
    pass


def nvmlDeviceGetHandleByIndex(index: int) -> int:  # noqa: N802
    if _started is None:
        raise NVMLError("Uninitialized")
    if not 0 <= index < int(os.environ.get("FAKE_NVML_DEVICES", "2")):
        raise NVMLError("Invalid Argument")
    return index


def nvmlDeviceGetTotalEnergyConsumption(handle: int) -> int:  # noqa: N802
    if os.environ.get("FAKE_NVML_NO_COUNTER") == "1":
        raise NVMLError_NotSupported("Not Supported")
    return int(_watts(handle) * 1000 * (time.perf_counter() - _started))


def nvmlDeviceGetPowerUsage(handle: int) -> int:  # noqa: N802
    return int(_watts(handle) * 1000)


def _processes() -> list[tuple[int, int, str]]:
    entries = [e for e in os.environ.get("FAKE_NVML_PROCESSES", "").split(";") if e]
    return [(int(index), int(pid), name) for index, pid, name in (e.split(":", 2) for e in entries)]


def nvmlDeviceGetComputeRunningProcesses(handle: int) -> list[SimpleNamespace]:  # noqa: N802
    if _started is None:
        raise NVMLError("Uninitialized")
    return [SimpleNamespace(pid=pid, usedGpuMemory=512 * 2**20) for index, pid, _ in _processes()
            if index == handle]


def nvmlSystemGetProcessName(pid: int) -> bytes:  # noqa: N802
    for _, known, name in _processes():
        if known == pid:
            return name.encode()
    raise NVMLError("Not Found")
