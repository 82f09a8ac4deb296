"""GPU free-memory checks that make one measuring process per series safe.

The default isolation (``bench_tasks.sweep``) binds one configuration after another in the
same measuring process. On a GPU that process keeps memory between configurations: MXNet's
pooled storage manager keeps every freed block for reuse by an allocation of the same size
(apache/mxnet#17126), so after batch 16 the pool still holds batch 16's blocks, which batch
32 cannot use. A configuration that would fit a fresh process can then fail with an
out-of-memory error in the shared one. The sweep already re-runs such an ``oom`` once in a
fresh process, but that costs the failed attempt (bind, cuDNN autotune) and, on a host where
the pool cannot be given back, may leave the device in a bad state. So before binding the
next configuration in a process that has already measured, the sweep asks the device for
its free memory and restarts the process first when

* ``low_gpu_memory``: the free memory is below the estimated need of the next configuration,
  while the process started with enough (a fresh one can fit it; if even a fresh one cannot,
  restarting would not help and the configuration runs, its ``oom`` then being the truth).
  The need is estimated from what the earlier configurations of the same network, dtype and
  devices took in this process (free memory before minus after, per image of the batch),
  times the next batch, times ``NEED_MARGIN``. Parameters count as per-image memory here,
  which over-estimates: a restart too many costs a process start, a missed one a cell.
* ``gpu_memory_dropped``: the device's free memory dropped by more than ``DROP_FRACTION`` of
  its total since the process started (a leak, fragmentation, the pool holding most of the
  device): the next bind would work in what is left.

The probe is a function ``device -> DeviceMemory | None`` given to the sweep, so the decision
is testable without a GPU. The default (:func:`nvidia_smi_probe`) asks ``nvidia-smi
--query-gpu=memory.free,memory.total`` (the sweep process never imports mxnet) and answers
None for CPU devices, where nothing is checked: CPU sweeps behave as without this module.

Standard library only.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Callable, Optional

from bench_tasks.configs import Config

#: The need estimate is multiplied by this (cuDNN workspaces, allocator rounding).
NEED_MARGIN = 1.2
#: Restart when the free memory fell by more than this share of the device since the start.
DROP_FRACTION = 0.5
NVIDIA_SMI_TIMEOUT_S = 20


@dataclass(frozen=True)
class DeviceMemory:
    """Free and total memory of one device, in MiB."""

    free_mib: float
    total_mib: float


MemoryProbe = Callable[[str], Optional[DeviceMemory]]  # evaluated at run time: 3.8 spelling


def nvidia_smi_id(index: int) -> str:
    """The id nvidia-smi knows for MXNet's ``gpu:index``: CUDA_VISIBLE_DEVICES renumbers the
    devices MXNet sees (its entries are indexes or UUIDs, both of which ``--id`` accepts)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        entries = [v.strip() for v in visible.split(",") if v.strip()]
        if index < len(entries):
            return entries[index]
    return str(index)


def nvidia_smi_probe(device: str, executable: str = "nvidia-smi") -> DeviceMemory | None:
    """Free and total memory of ``gpu:N`` from nvidia-smi; None for CPU devices, without
    nvidia-smi, or when its answer cannot be read (then nothing is decided from it)."""
    kind, _, index = device.partition(":")
    if kind != "gpu" or not index.isdigit():
        return None
    path = shutil.which(executable)
    if path is None:
        return None
    try:
        result = subprocess.run(
            [path, "--query-gpu=memory.free,memory.total", "--format=csv,noheader,nounits",
             f"--id={nvidia_smi_id(int(index))}"],
            capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if result.returncode != 0:
        return None
    return parse_memory_line(result.stdout)


def parse_memory_line(text: str) -> DeviceMemory | None:
    """``"10923, 11178"`` (free, total MiB) → DeviceMemory; None for anything else ("[N/A]")."""
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) != 1:
        return None
    cells = [c.strip() for c in lines[0].split(",")]
    try:
        free, total = (float(c) for c in cells)
    except ValueError:
        return None
    if total <= 0 or not 0 <= free <= total:
        return None
    return DeviceMemory(free, total)


@dataclass
class ProcessMemory:
    """What one measuring process did to its devices' memory, as seen from outside it."""

    start: dict[str, DeviceMemory] = field(default_factory=dict)  # device → when it was ready
    #: per configuration run in the process: (config, free MiB per device before it)
    runs: list[tuple[Config, dict[str, float]]] = field(default_factory=list)
    #: free MiB per device after each run (known when the next one is about to start)
    after: list[dict[str, float]] = field(default_factory=list)


class GpuMemoryGuard:
    """Asks the probe before each configuration and says when a fresh process is needed."""

    def __init__(self, probe: MemoryProbe = nvidia_smi_probe, *, need_margin: float = NEED_MARGIN,
                 drop_fraction: float = DROP_FRACTION) -> None:
        self.probe = probe
        self.need_margin = need_margin
        self.drop_fraction = drop_fraction

    def _measure(self, devices: tuple[str, ...]) -> dict[str, DeviceMemory]:
        seen = {}
        for device in devices:
            memory = self.probe(device)
            if memory is not None:
                seen[device] = memory
        return seen

    def process_ready(self, first: Config) -> ProcessMemory:
        """A new process is ready to run ``first``: its devices' free memory now is what a
        fresh process has (one probe serves as the start and as the first run's "before")."""
        start = self._measure(first.devices)
        return ProcessMemory(start=start, runs=[(first, {d: m.free_mib for d, m in start.items()})])

    def before_run(self, state: ProcessMemory, config: Config) -> tuple[str, str] | None:
        """Just before ``config`` runs in the process ``state`` describes: (reason, detail) if
        the process should be replaced first, else None (and the run is noted)."""
        now = self._measure(config.devices)
        if len(state.after) < len(state.runs):
            state.after.append({d: m.free_mib for d, m in now.items()})
        for device, memory in now.items():
            # a device this process has not used yet: what it has free now is a fresh start
            state.start.setdefault(device, memory)
        why = self.restart_reason(state, config, now) if state.runs else None
        if why is None:
            state.runs.append((config, {d: m.free_mib for d, m in now.items()}))
        return why

    def estimated_need_mib(self, state: ProcessMemory, config: Config, device: str) -> float | None:
        """MiB ``config`` needs on ``device``, from the earlier runs of the same series here."""
        per_image = []
        for (earlier, before), after in zip(state.runs, state.after):  # noqa: B905 (3.8 has no strict=; the shorter wins)
            same = (earlier.network, earlier.dtype, earlier.devices) == (
                config.network, config.dtype, config.devices)
            if same and device in before and device in after and earlier.worker_batch > 0:
                per_image.append(max(0.0, before[device] - after[device]) / earlier.worker_batch)
        if not per_image or max(per_image) <= 0:
            return None
        return max(per_image) * config.worker_batch * self.need_margin

    def restart_reason(self, state: ProcessMemory, config: Config,
                       now: dict[str, DeviceMemory]) -> tuple[str, str] | None:
        for device, memory in sorted(now.items()):
            start = state.start.get(device)
            if start is None:
                continue
            dropped = start.free_mib - memory.free_mib
            if dropped > self.drop_fraction * memory.total_mib:
                return ("gpu_memory_dropped",
                        f"{device}: free memory fell from {start.free_mib:.0f} to {memory.free_mib:.0f} MiB "
                        f"since the process started (more than {self.drop_fraction:.0%} of "
                        f"{memory.total_mib:.0f} MiB)")
            need = self.estimated_need_mib(state, config, device)
            if need is not None and need > memory.free_mib and need <= start.free_mib:
                return ("low_gpu_memory",
                        f"{device}: {memory.free_mib:.0f} MiB free, batch {config.worker_batch} needs "
                        f"about {need:.0f} MiB (a fresh process had {start.free_mib:.0f} MiB)")
        return None
