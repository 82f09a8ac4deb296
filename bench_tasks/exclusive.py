"""Is the GPU ours alone? The compute processes on a configuration's devices, before it is timed.

A process left on a device (a hung container of an earlier sweep, a notebook, the image's own
daemon) shares the GPU with the measurement and spoils every figure without a sign. So before a
configuration on GPUs starts a measuring process, the sweep lists the compute processes of its
devices, by NVML (``nvmlDeviceGetComputeRunningProcesses``, the worker's optional ``pynvml`` as
in :mod:`bench_tasks.energy`) or, where NVML is absent, ``nvidia-smi --query-compute-apps``:

* none but the worker's own (this process and its children) → ``gpu_exclusive: true``;
* another → the configuration ends ``gpu_busy`` without running, the error listing each
  process (device, pid, name), and ``gpu_exclusive: false``;
* CPU devices, or neither NVML nor nvidia-smi can answer → ``gpu_exclusive: null`` with the
  reason in ``gpu_exclusive_note``.

The sweep looks only while none of its own measuring processes is alive (``bench_tasks.sweep``):
inside a container NVML reports host process ids, which the worker cannot tell from a
stranger's, so its own process is never there to be mistaken. Standard library only.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Sequence, Tuple

from bench_tasks.gpumemory import NVIDIA_SMI_TIMEOUT_S, nvidia_smi_id

#: device → the foreign compute processes on it: (pid, name)
Processes = Dict[str, List[Tuple[int, str]]]


class Unavailable(Exception):
    """Neither NVML nor nvidia-smi could list the processes; the message says why."""


@dataclass(frozen=True)
class GpuCheck:
    """The verdict for one configuration: the record's ``gpu_exclusive`` and its note."""

    exclusive: bool | None
    note: str | None = None

    def record_fields(self) -> dict:
        return {"gpu_exclusive": self.exclusive, "gpu_exclusive_note": self.note}


def own_pids() -> set[int]:
    """This process and its descendants (from /proc): the worker's own processes."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as stat:
                    parents[int(entry)] = int(stat.read().rpartition(")")[2].split()[1])
            except (OSError, ValueError, IndexError):
                continue  # ended while we looked
    found, todo = set(), [os.getpid()]
    while todo:
        pid = todo.pop()
        found.add(pid)
        todo += [child for child, parent in parents.items() if parent == pid and child not in found]
    return found


def _process_name(nvml: Any, pid: int) -> str:
    try:
        name = nvml.nvmlSystemGetProcessName(pid)
        return name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name)
    except Exception:  # a process of another namespace, gone, or no permission
        try:
            with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as comm:
                return comm.read().strip()
        except OSError:
            return "?"


def _nvml_processes(devices: Sequence[str]) -> Processes:
    try:
        import pynvml  # optional: nvidia-ml-py
    except ImportError:
        raise Unavailable("pynvml not installed") from None
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        raise Unavailable(f"NVML not usable: {exc}") from None
    found: Processes = {}
    try:
        for device in devices:
            ident = nvidia_smi_id(int(device.split(":")[1]))
            handle = (pynvml.nvmlDeviceGetHandleByIndex(int(ident)) if ident.isdigit()
                      else pynvml.nvmlDeviceGetHandleByUUID(ident))
            running = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
            found[device] = [(int(p.pid), _process_name(pynvml, int(p.pid))) for p in running]
    except Exception as exc:
        raise Unavailable(f"NVML could not list the processes of {', '.join(devices)}: {exc}") from None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: S110 - nothing to do about a failed shutdown
            pass
    return found


def _smi_processes(devices: Sequence[str], executable: str = "nvidia-smi") -> Processes:
    path = shutil.which(executable)
    if path is None:
        raise Unavailable("nvidia-smi not found")
    found: Processes = {}
    for device in devices:
        try:
            result = subprocess.run(
                [path, "--query-compute-apps=pid,process_name", "--format=csv,noheader",
                 f"--id={nvidia_smi_id(int(device.split(':')[1]))}"],
                capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise Unavailable(f"nvidia-smi --query-compute-apps failed: {exc}") from None
        if result.returncode != 0:
            raise Unavailable(f"nvidia-smi --query-compute-apps exited {result.returncode}: "
                              f"{(result.stderr or result.stdout).strip()[:200]}")
        found[device] = parse_compute_apps(result.stdout)
    return found


def parse_compute_apps(text: str) -> list[tuple[int, str]]:
    """``"4242, python3"`` lines (``--format=csv,noheader``) → [(4242, "python3")]."""
    rows = []
    for line in text.splitlines():
        pid, _, name = line.partition(",")
        if pid.strip().isdigit():
            rows.append((int(pid.strip()), name.strip() or "?"))
    return rows


def list_compute_processes(devices: Sequence[str]) -> Processes:
    """The compute processes on ``gpu:N`` devices (NVML, else nvidia-smi); raises Unavailable."""
    try:
        return _nvml_processes(devices)
    except Unavailable as nvml:
        try:
            return _smi_processes(devices)
        except Unavailable as smi:
            raise Unavailable(f"{nvml}; {smi}") from None


Lister = Callable[[Sequence[str]], Processes]


class GpuExclusivity:
    """What the sweep knows about its devices: a fresh look whenever ``look`` is allowed, else
    the last one (see the module docstring for why)."""

    def __init__(self, lister: Lister = list_compute_processes) -> None:
        self.lister = lister
        self.seen: dict[str, list[tuple[int, str]] | str] = {}  # device → foreign processes | why unknown

    def check(self, devices: Sequence[str], *, look: bool) -> GpuCheck:
        gpus = [d for d in devices if d.startswith("gpu:")]
        if not gpus:
            return GpuCheck(None, "cpu device: no GPU to share")
        if look or any(d not in self.seen for d in gpus):
            self._look(gpus)
        unknown = sorted({str(self.seen[d]) for d in gpus if isinstance(self.seen[d], str)})
        busy = [f"{d} pid {pid} ({name})" for d in gpus if not isinstance(self.seen[d], str)
                for pid, name in self.seen[d]]
        if busy:
            # bounded: the record keeps at most MAX_BUILD_BYTES of it
            return GpuCheck(False, ("another process computes on the GPU: " + ", ".join(busy))[:2000])
        if unknown:
            return GpuCheck(None, "; ".join(unknown)[:2000])
        return GpuCheck(True)

    def _look(self, gpus: list[str]) -> None:
        try:
            found = self.lister(gpus)
        except Unavailable as exc:
            self.seen.update({d: str(exc) for d in gpus})
            return
        ours = own_pids()
        for device in gpus:
            self.seen[device] = [(pid, name) for pid, name in found.get(device, []) if pid not in ours]
