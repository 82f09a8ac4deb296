"""Energy of the timed window, measured by the worker's own interpreter (.venv-bench, a subprocess):
NVML through a stand-in ``pynvml`` (tests/support/fake_nvml: no GPU here; its counter advances
with time), RAPL through a stand-in powercap folder (``BENCH_POWERCAP_ROOT``), and the real
``/sys/class/powercap`` of this machine."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from bench_tasks.record import validate_record
from tests.conftest import REPO_ROOT
from tests.support.bench_helpers import run_bench_python
from tests.support.worker_support import read_records

FAKE_NVML = REPO_ROOT / "tests" / "support" / "fake_nvml"
WINDOW = """
import json, sys, time
from bench_tasks.energy import EnergyMeter
meter = EnergyMeter(tuple(sys.argv[1].split(",")))
meter.start()
time.sleep(float(sys.argv[2]))
reading = meter.stop()
print(json.dumps(dict(reading.record_fields(), seconds=float(sys.argv[2]))))
"""


def _window(devices: str, seconds: float, env: dict[str, str]) -> dict:
    result = run_bench_python(["-c", WINDOW, devices, str(seconds)], env=env, check=True, timeout=120)
    return json.loads(result.stdout.strip().splitlines()[-1])


def _with_fake_nvml(**extra: str) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(FAKE_NVML), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, **extra}


def test_nvml_energy_counter_of_every_device_used() -> None:
    """gpu:0 draws 100 W and gpu:1 150 W in the stand-in: 250 W over the window."""
    reading = _window("gpu:0,gpu:1", 0.5, _with_fake_nvml())
    assert reading["energy_method"] == "nvml_energy_counter"
    assert reading["avg_power_watts"] == pytest.approx(250.0, rel=0.02)
    assert reading["energy_joules"] == pytest.approx(250.0 * 0.5, rel=0.2)  # sleep may overrun
    only_second = _window("gpu:1", 0.3, _with_fake_nvml())
    assert only_second["avg_power_watts"] == pytest.approx(150.0, rel=0.02)


def test_nvml_without_a_counter_samples_power_in_a_thread() -> None:
    reading = _window("gpu:0,gpu:1", 0.5, _with_fake_nvml(FAKE_NVML_NO_COUNTER="1"))
    assert reading["energy_method"] == "nvml_power_sampling"
    assert reading["avg_power_watts"] == pytest.approx(250.0, rel=0.05)


@pytest.mark.parametrize(("env", "reason"), [
    ({}, "unavailable: pynvml not installed"),
    (_with_fake_nvml(FAKE_NVML_INIT_FAIL="1"), "unavailable: NVML not usable: Driver Not Loaded"),
    (_with_fake_nvml(FAKE_NVML_DEVICES="1"), "unavailable: NVML has no device [0, 1]"),
])
def test_nvml_absent_or_broken_gives_null_with_the_reason(env: dict[str, str], reason: str) -> None:
    reading = _window("gpu:0,gpu:1", 0.05, env)
    assert reading["energy_joules"] is None and reading["avg_power_watts"] is None
    assert reading["energy_method"].startswith(reason)


def _domain(root: Path, name: str, energy_uj: int, max_uj: int) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "energy_uj").write_text(f"{energy_uj}\n")
    (folder / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return folder


RAPL_STEP = """
import json, sys
from pathlib import Path
from bench_tasks.energy import EnergyMeter
root = Path(sys.argv[1])
meter = EnergyMeter(("cpu:0",))
meter.start()
for name, value in json.loads(sys.argv[2]).items():  # the counters move on during the window
    (root / name / "energy_uj").write_text(str(value))
print(json.dumps(meter.stop().record_fields()))
"""


def test_rapl_adds_the_packages_unwraps_a_wrapped_counter_and_skips_subdomains(tmp_path: Path) -> None:
    _domain(tmp_path, "intel-rapl:0", 999_000_000, 1_000_000_000)
    _domain(tmp_path, "intel-rapl:0:0", 10, 1_000_000_000)  # the cores inside package 0
    _domain(tmp_path, "intel-rapl:1", 5_000_000, 1_000_000_000)
    after = {"intel-rapl:0": 1_000_000, "intel-rapl:0:0": 100_000_010, "intel-rapl:1": 8_000_000}
    result = run_bench_python(["-c", RAPL_STEP, str(tmp_path), json.dumps(after)],
                              env={"BENCH_POWERCAP_ROOT": str(tmp_path)}, check=True, timeout=120)
    reading = json.loads(result.stdout.strip().splitlines()[-1])
    # package 0 wrapped: 1e6 + 1e9 - 999e6 = 2e6 µJ = 2 J; package 1: 3 J; the sub-domain not added
    assert reading["energy_method"] == "rapl" and reading["energy_joules"] == pytest.approx(5.0)


def test_rapl_not_readable_gives_the_reason(tmp_path: Path) -> None:
    folder = _domain(tmp_path, "intel-rapl:0", 1, 10)
    (folder / "energy_uj").write_text("not a number")
    reading = _window("cpu:0", 0.01, {"BENCH_POWERCAP_ROOT": str(tmp_path)})
    assert reading["energy_joules"] is None
    assert reading["energy_method"].startswith("unavailable: RAPL not readable")


def test_the_real_powercap_of_this_machine() -> None:
    """Where /sys/class/powercap has readable RAPL domains, a real figure; where it has none
    (this machine: no /sys/class/powercap at all), the reason, never 0."""
    reading = _window("cpu:0", 0.2, {"BENCH_POWERCAP_ROOT": ""})
    domains = list(Path("/sys/class/powercap").glob("intel-rapl:*"))
    readable = [d for d in domains if os.access(d / "energy_uj", os.R_OK)]
    if readable:
        assert reading["energy_method"] == "rapl" and reading["energy_joules"] > 0
    elif not domains:
        assert reading["energy_method"] == "unavailable: no RAPL package domains under /sys/class/powercap"
        assert reading["energy_joules"] is None
    else:
        assert reading["energy_method"].startswith("unavailable: RAPL not readable")


class _Counter(threading.Thread):
    """A fake RAPL package counter that advances at ``watts`` while the worker runs."""

    def __init__(self, path: Path, watts: float) -> None:
        super().__init__(daemon=True)
        self.path, self.watts, self.halt = path, watts, threading.Event()

    def run(self) -> None:
        started = time.perf_counter()
        while not self.halt.wait(0.002):
            temporary = self.path.with_suffix(".tmp")
            temporary.write_text(str(int(self.watts * 1e6 * (time.perf_counter() - started))))
            temporary.replace(self.path)  # the reader never sees a half-written number


def test_sweep_records_carry_the_energy_of_the_timed_window(tmp_path: Path) -> None:
    """A real sweep (MXNet on the CPU) with a powercap counter advancing at 40 W: each ok record has
    energy_joules ≈ 40 W × the timed window and the contract accepts it."""
    folder = _domain(tmp_path / "powercap", "intel-rapl:0", 0, 2**40)
    counter = _Counter(folder / "energy_uj", 40.0)
    counter.start()
    try:
        output = tmp_path / "night.jsonl"
        run_bench_python(["-m", "bench_tasks", "sweep", "--modes", "score", "--networks", "alexnet",
                          "--batch-sizes", "1", "--warmup", "1", "--batches", "5", "--repeats", "6",
                          "--output", str(output)],
                         env={"BENCH_POWERCAP_ROOT": str(tmp_path / "powercap")}, check=True, timeout=600)
    finally:
        counter.halt.set()
        counter.join()
    [record] = read_records(output)
    validate_record(record)
    assert record["status"] == "ok" and record["energy_method"] == "rapl"
    assert record["avg_power_watts"] == pytest.approx(40.0, rel=0.5)  # 2 ms steps over a short window
    assert record["energy_joules"] == pytest.approx(record["avg_power_watts"] * record["timed_seconds"],
                                                    rel=0.2)
