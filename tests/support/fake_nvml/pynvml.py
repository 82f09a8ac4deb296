"""A stand-in for NVIDIA's ``pynvml`` (nvidia-ml-py) for the worker's energy tests: no GPU here.

Put this folder on the worker's ``PYTHONPATH``. Device ``i`` draws ``100 + 50 * i`` watts, so its
total energy counter (millijoules, as nvmlDeviceGetTotalEnergyConsumption) advances with time from
nvmlInit on. Environment switches: ``FAKE_NVML_NO_COUNTER=1`` makes the counter raise
NVMLError_NotSupported (a pre-Volta GPU: the worker must sample power instead);
``FAKE_NVML_INIT_FAIL=1`` makes nvmlInit fail as on a host without the driver;
``FAKE_NVML_DEVICES`` is the device count (default 2).
"""

from __future__ import annotations

import os
import time

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
