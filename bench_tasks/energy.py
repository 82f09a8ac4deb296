"""Energy of the timed window: what the devices a configuration used drew while it was timed.

Standard library only (runs on Python 3.8+); NVIDIA's NVML bindings (``pynvml``, from the
``nvidia-ml-py`` package) are an optional import. One :class:`EnergyMeter` per configuration:
``start()`` before the first timed repeat, ``stop()`` after the last, giving an
:class:`EnergyReading` (the record's ``energy_joules``, ``energy_method``, ``avg_power_watts``).

* GPUs (``gpu:N``): NVML's total energy counter of each device used
  (``nvmlDeviceGetTotalEnergyConsumption``, millijoules since the driver loaded; Volta and
  newer), read at start and stop: method ``nvml_energy_counter``. Where a device has no counter,
  a thread samples ``nvmlDeviceGetPowerUsage`` (milliwatts) every :data:`SAMPLE_SECONDS` and
  integrates it over time (trapezoids): ``nvml_power_sampling``.
* CPUs (``cpu:N``): Intel RAPL through the powercap files, ``<root>/intel-rapl:<n>/energy_uj``
  of every package domain (sub-domains such as ``intel-rapl:0:0`` are parts of their package and
  not added again), read at start and stop; a counter that wrapped past ``max_energy_range_uj``
  is unwrapped: ``rapl``. The root is ``/sys/class/powercap`` unless ``BENCH_POWERCAP_ROOT`` names
  another folder (tests, or a host that mounts sysfs elsewhere).
* Anything else: no figure (``energy_joules`` null, never 0) and ``energy_method``
  ``"unavailable: <reason>"`` (pynvml not installed, NVML not usable, RAPL not readable, ...).

Energy covers the span from the first timed repeat's start to the last one's end (the few
microseconds between repeats included); ``avg_power_watts`` = energy / that span.
"""

from __future__ import annotations

import glob
import os
import re
import threading
import time
from collections.abc import Sequence
from typing import Any

from bench_tasks.constants import ENERGY_UNAVAILABLE_PREFIX

#: seconds between two power samples when NVML has no energy counter
SAMPLE_SECONDS = 0.05
POWERCAP_ROOT_ENV = "BENCH_POWERCAP_ROOT"
DEFAULT_POWERCAP_ROOT = "/sys/class/powercap"
_PACKAGE_DOMAIN = re.compile(r"intel-rapl:\d+$")


class EnergyReading:
    """What one timed window drew: joules (None when not measured), how, and average watts."""

    def __init__(self, joules: float | None, method: str, seconds: float) -> None:
        self.joules = joules
        self.method = method
        self.avg_watts = joules / seconds if joules is not None and seconds > 0 else None

    def record_fields(self) -> dict:
        return {"energy_joules": self.joules, "energy_method": self.method,
                "avg_power_watts": self.avg_watts}


class _Unavailable(Exception):
    """No energy figure for this window; the message is the reason."""


# ---- GPUs: NVML ------------------------------------------------------------------------------
def _nvml() -> Any:
    try:
        import pynvml  # optional: nvidia-ml-py
    except ImportError:
        raise _Unavailable("pynvml not installed") from None
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        raise _Unavailable(f"NVML not usable: {exc}") from None
    return pynvml


class _PowerSampler(threading.Thread):
    """Integrates the power draw of some devices over time, in a thread."""

    def __init__(self, nvml: Any, handles: Sequence[Any]) -> None:
        super().__init__(daemon=True)
        self._nvml, self._handles = nvml, list(handles)
        self._halt = threading.Event()
        self.joules = 0.0
        self.error: str | None = None

    def _watts(self) -> float:
        return sum(self._nvml.nvmlDeviceGetPowerUsage(h) for h in self._handles) / 1000.0

    def run(self) -> None:
        try:
            last_t, last_w = time.perf_counter(), self._watts()
            while not self._halt.wait(SAMPLE_SECONDS):
                now, watts = time.perf_counter(), self._watts()
                self.joules += (now - last_t) * (watts + last_w) / 2
                last_t, last_w = now, watts
            now, watts = time.perf_counter(), self._watts()
            self.joules += (now - last_t) * (watts + last_w) / 2
        except Exception as exc:  # a device stopped answering: no figure rather than a wrong one
            self.error = f"NVML power reading failed: {exc}"

    def finish(self) -> None:
        self._halt.set()
        self.join()


class _NvmlMeter:
    def __init__(self, indices: Sequence[int]) -> None:
        self._nvml = _nvml()
        try:
            self._handles = [self._nvml.nvmlDeviceGetHandleByIndex(i) for i in indices]
        except Exception as exc:
            raise _Unavailable(f"NVML has no device {list(indices)}: {exc}") from None
        self._start: list[float] | None = None
        self._sampler: _PowerSampler | None = None

    def start(self) -> None:
        try:
            self._start = [float(self._nvml.nvmlDeviceGetTotalEnergyConsumption(h)) for h in self._handles]
            return
        except Exception:  # NVMLError_NotSupported before Volta: sample the power instead
            self._start = None
        try:
            self._nvml.nvmlDeviceGetPowerUsage(self._handles[0])
        except Exception as exc:
            raise _Unavailable(f"NVML has neither an energy counter nor power readings: {exc}") from None
        self._sampler = _PowerSampler(self._nvml, self._handles)
        self._sampler.start()

    def stop(self) -> tuple[float, str]:
        if self._start is not None:
            end = [float(self._nvml.nvmlDeviceGetTotalEnergyConsumption(h)) for h in self._handles]
            used = sum(e - s for e, s in zip(end, self._start))  # noqa: B905 (Python 3.8: no strict=)
            return used / 1000.0, "nvml_energy_counter"
        assert self._sampler is not None
        self._sampler.finish()
        if self._sampler.error:
            raise _Unavailable(self._sampler.error)
        return self._sampler.joules, "nvml_power_sampling"

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except Exception:  # noqa: S110 - nothing to do if NVML will not shut down cleanly
            pass


# ---- CPUs: RAPL through powercap ---------------------------------------------------------------
def powercap_root() -> str:
    return os.environ.get(POWERCAP_ROOT_ENV) or DEFAULT_POWERCAP_ROOT


def _read_int(path: str) -> int:
    with open(path) as handle:
        return int(handle.read().strip())


class _RaplMeter:
    def __init__(self) -> None:
        root = powercap_root()
        domains = sorted(d for d in glob.glob(os.path.join(root, "intel-rapl:*"))
                         if _PACKAGE_DOMAIN.search(os.path.basename(d)))
        if not domains:
            raise _Unavailable(f"no RAPL package domains under {root}")
        self._domains = domains
        try:
            self._ranges = [_read_int(os.path.join(d, "max_energy_range_uj")) for d in domains]
            self._read()
        except (OSError, ValueError) as exc:  # since 2020 energy_uj is root-only on most kernels
            raise _Unavailable(f"RAPL not readable: {exc}") from None
        self._start: list[int] | None = None

    def _read(self) -> list[int]:
        return [_read_int(os.path.join(d, "energy_uj")) for d in self._domains]

    def start(self) -> None:
        self._start = self._read()

    def stop(self) -> tuple[float, str]:
        end = self._read()
        assert self._start is not None
        total = 0
        for before, after, limit in zip(self._start, end, self._ranges):  # noqa: B905 (Python 3.8)
            total += after - before if after >= before else after + limit - before  # wrapped once
        return total / 1e6, "rapl"

    def close(self) -> None:
        pass


class EnergyMeter:
    """Energy of the devices of one configuration over a window; never raises for a missing or
    broken source (the reading then says why there is no figure)."""

    def __init__(self, devices: Sequence[str]) -> None:
        self._reason: str | None = None
        self._meter: Any = None
        self._started = 0.0
        gpus = [int(d.split(":")[1]) for d in devices if d.startswith("gpu:")]
        try:
            self._meter = _NvmlMeter(gpus) if gpus else _RaplMeter()
        except _Unavailable as exc:
            self._reason = str(exc)

    def start(self) -> None:
        self._started = time.perf_counter()
        if self._meter is None:
            return
        try:
            self._meter.start()
        except _Unavailable as exc:
            self._meter.close()
            self._reason, self._meter = str(exc), None

    def stop(self) -> EnergyReading:
        seconds = time.perf_counter() - self._started
        if self._meter is None:
            return EnergyReading(None, ENERGY_UNAVAILABLE_PREFIX + str(self._reason), seconds)
        try:
            joules, method = self._meter.stop()
        except Exception as exc:  # a source that failed mid-window gives no figure, not a crash
            return EnergyReading(None, ENERGY_UNAVAILABLE_PREFIX + str(exc), seconds)
        finally:
            self._meter.close()
        if joules < 0:
            reason = "the energy counter went backwards"
            return EnergyReading(None, ENERGY_UNAVAILABLE_PREFIX + reason, seconds)
        return EnergyReading(joules, method, seconds)
