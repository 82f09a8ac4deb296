"""What the benchmark ran on: host, CPU, GPUs, driver, CUDA, cuDNN, MXNet and its build.

Every record carries this environment, and ``python -m bench_tasks sysinfo`` prints it as
JSON. GPUs come from ``nvidia-smi --query-gpu=... --format=csv,noheader,nounits`` (absent or
failing ``nvidia-smi`` means no GPU); CUDA and cuDNN versions come from the libraries MXNet
loaded (``cudaRuntimeGetVersion``, ``cudnnGetVersion`` asked of libmxnet itself, then of the
``libcudart``/``libcudnn`` mapped into the process), falling back to the ``CUDA_VERSION``
and ``CUDNN_VERSION`` variables that NVIDIA's container images set.

mxnet is imported lazily (only :func:`collect` needs it), so the parser is testable and the
module importable anywhere.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import shutil
import socket
import subprocess
from dataclasses import asdict, dataclass, field
from typing import Any

from bench_tasks.constants import WORKER_IMAGE_ENV, WORKER_RUNTIME_ENV

NVIDIA_SMI_QUERY = "index,name,memory.total,driver_version"
NVIDIA_SMI_TIMEOUT_S = 20


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    memory_mib: int | None
    driver_version: str | None


@dataclass
class SystemInfo:
    host: str
    cpu_model: str | None
    cpu_count: int | None
    gpus: list[Gpu] = field(default_factory=list)
    nvidia_smi: str = "absent"  # absent | ok | failed: <message>
    cuda_version: str | None = None
    cudnn_version: str | None = None
    mxnet_version: str | None = None
    mxnet_features: list[str] = field(default_factory=list)
    mxnet_num_gpus: int | None = None
    mxnet_details_known: bool = False
    #: the runtime label against this build (bench_tasks.runtime_check): ok, not checked, mismatch ignored
    runtime_check: str | None = None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["gpu_count"] = len(self.gpus)
        data["gpu_model"] = gpu_model(self.gpus)
        data["driver_version"] = self.driver_version
        return data

    @property
    def driver_version(self) -> str | None:
        return next((g.driver_version for g in self.gpus if g.driver_version), None)

    def add_mxnet_details(self, details: dict[str, Any]) -> None:
        """Fill in what :func:`mxnet_details` found (in this or a measuring process)."""
        self.mxnet_version = details["mxnet_version"]
        self.mxnet_features = list(details["mxnet_features"])
        self.cuda_version = details["cuda_version"]
        self.cudnn_version = details["cudnn_version"]
        self.mxnet_details_known = True
        num_gpus = details["mxnet_num_gpus"]
        self.mxnet_num_gpus = visible_gpu_count(len(self.gpus)) if num_gpus is None else num_gpus

    def record_fields(self, devices: tuple[str, ...]) -> dict[str, Any]:
        """The environment columns of a result record for a run on ``devices``.

        The GPU model and memory are those of the GPUs used (none for CPU runs); driver,
        CUDA and cuDNN describe the host and are recorded for every run.
        """
        used = {int(d.split(":")[1]) for d in devices if d.startswith("gpu:")}
        gpus = [g for g in self.gpus if g.index in used]
        return {
            "host": self.host,
            "cpu_model": self.cpu_model,
            "gpu_model": gpu_model(gpus),
            "gpu_memory_mib": min((g.memory_mib for g in gpus if g.memory_mib), default=None),
            "driver_version": self.driver_version,
            "cuda_version": self.cuda_version,
            "cudnn_version": self.cudnn_version,
            "mxnet_version": self.mxnet_version,
            "worker_runtime": self.worker_runtime(),
            "framework_build": json.dumps(self.framework_build(), sort_keys=True),
        }

    def worker_runtime(self) -> str | None:
        """The runtime the target named (``GPUCOMPARE_WORKER_RUNTIME``); unnamed, ``cpu`` for an
        MXNet built without CUDA, else None (unknown)."""
        named = os.environ.get(WORKER_RUNTIME_ENV, "").strip()
        if named:
            return named[:64]
        if self.mxnet_details_known and "CUDA" not in self.mxnet_features:
            return "cpu"
        return None

    def framework_build(self) -> dict[str, Any]:
        """What built the figure: MXNet and its enabled features, CUDA and cuDNN as MXNet loaded
        them, this Python, and the container image (``GPUCOMPARE_WORKER_IMAGE``: name@digest)."""
        image = os.environ.get(WORKER_IMAGE_ENV, "").strip()[:300] or None
        digest = image.split("@", 1)[1] if image and "@" in image else None
        return {
            "mxnet": self.mxnet_version,
            "features": list(self.mxnet_features) if self.mxnet_details_known else None,
            "cuda": self.cuda_version,
            "cudnn": self.cudnn_version,
            "python": platform.python_version(),
            "image": image,
            "image_digest": digest,
            "runtime_check": self.runtime_check,
        }


def gpu_model(gpus: list[Gpu]) -> str | None:
    """One model name; mixed models are joined with ' + ' so they cannot pass as one."""
    names = sorted({g.name for g in gpus})
    return " + ".join(names) if names else None


def parse_nvidia_smi(text: str) -> list[Gpu]:
    """Parse ``nvidia-smi --query-gpu=index,name,memory.total,driver_version
    --format=csv,noheader,nounits`` output, one GPU a line."""
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 4:
            raise ValueError(f"unexpected nvidia-smi line (want 4 fields: {NVIDIA_SMI_QUERY}): {line!r}")
        index, name, memory, driver = cells
        gpus.append(Gpu(
            index=int(index),
            name=name,
            memory_mib=_int_or_none(memory),
            driver_version=None if driver in ("", "[N/A]", "N/A") else driver,
        ))
    return gpus


def _int_or_none(text: str) -> int | None:
    try:
        return int(float(text))
    except ValueError:  # "[N/A]" on some virtualised GPUs
        return None


def query_gpus(executable: str = "nvidia-smi") -> tuple[list[Gpu], str]:
    """The GPUs nvidia-smi lists, and how the query went (absent, ok, failed: ...)."""
    path = shutil.which(executable)
    if path is None:
        return [], "absent"
    try:
        result = subprocess.run(
            [path, f"--query-gpu={NVIDIA_SMI_QUERY}", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S, check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [], f"failed: {exc}"
    if result.returncode != 0:
        message = (result.stdout + result.stderr).strip().splitlines()
        return [], f"failed: exit {result.returncode}: {message[0] if message else ''}"
    try:
        return parse_nvidia_smi(result.stdout), "ok"
    except ValueError as exc:
        return [], f"failed: {exc}"


def cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def format_cuda_version(number: int) -> str:
    """cudaRuntimeGetVersion's 11020 → '11.2'."""
    return f"{number // 1000}.{(number % 1000) // 10}"


def format_cudnn_version(number: int) -> str:
    """cudnnGetVersion's 8101 → '8.1.1' (cuDNN ≥ 9 encodes 90100 → '9.1.0')."""
    if number >= 90000:
        return f"{number // 10000}.{(number % 10000) // 100}.{number % 100}"
    return f"{number // 1000}.{(number % 1000) // 100}.{number % 100}"


def _library_call(libraries: list[Any], symbol: str, by_pointer: bool) -> int | None:
    for library in libraries:
        function = getattr(library, symbol, None)
        if function is None:
            continue
        if by_pointer:
            value = ctypes.c_int(0)
            if function(ctypes.byref(value)) == 0 and value.value > 0:
                return value.value
        else:
            function.restype = ctypes.c_size_t
            value = function()
            if value:
                return int(value)
    return None


def _loaded_libraries(stem: str) -> list[str]:
    """Paths of shared libraries named ``lib<stem>.so*`` already mapped into this process."""
    paths: list[str] = []
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1] if "/" in line else ""
                if os.path.basename(path).startswith(f"lib{stem}.so") and path not in paths:
                    paths.append(path)
    except OSError:
        pass
    return paths


def _cuda_libraries(mx_lib: Any, names: tuple[str, ...]) -> list[Any]:
    """Where to ask for a version: MXNet's own library (pip wheels link CUDA libraries into
    it), then the copies MXNet loaded. Never a library found on the system path: a host may
    carry a CUDA toolkit that MXNet does not use (this project's CI host has CUDA 13)."""
    libraries = [mx_lib] if mx_lib is not None else []
    for name in names:
        for path in _loaded_libraries(name):
            try:
                libraries.append(ctypes.CDLL(path))
            except OSError:
                continue
    return libraries


def cuda_versions(mx_lib: Any, cuda_enabled: bool) -> tuple[str | None, str | None]:
    """(CUDA runtime version, cuDNN version) as MXNet sees them; (None, None) without CUDA."""
    if not cuda_enabled:
        return None, None
    cuda = _library_call(_cuda_libraries(mx_lib, ("cudart",)), "cudaRuntimeGetVersion", True)
    cudnn = _library_call(_cuda_libraries(mx_lib, ("cudnn",)), "cudnnGetVersion", False)
    cuda_text = format_cuda_version(cuda) if cuda else os.environ.get("CUDA_VERSION") or None
    cudnn_text = (format_cudnn_version(cudnn) if cudnn
                  else os.environ.get("CUDNN_VERSION") or os.environ.get("NV_CUDNN_VERSION") or None)
    return cuda_text, cudnn_text


def mxnet_build() -> tuple[str | None, list[str], Any]:
    """MXNet's version, enabled build features and library handle (mxnet imported here)."""
    import mxnet as mx

    features = mx.runtime.Features()
    enabled = sorted(name for name in features.keys() if features.is_enabled(name))
    return mx.__version__, enabled, getattr(mx.base, "_LIB", None)


def mxnet_details(count_gpus: bool = False) -> dict[str, Any]:
    """MXNet's side of the environment (imports mxnet): version, build features, CUDA, cuDNN.

    ``count_gpus`` asks MXNet itself (``mx.context.num_gpus()``, which initialises CUDA); without
    it the count is nvidia-smi's list restricted by CUDA_VISIBLE_DEVICES.
    """
    version, features, mx_lib = mxnet_build()
    cuda_enabled = "CUDA" in features
    cuda, cudnn = cuda_versions(mx_lib, cuda_enabled)
    if not cuda_enabled:
        num_gpus = 0
    elif count_gpus:
        import mxnet as mx

        num_gpus = mx.context.num_gpus()
    else:
        num_gpus = None
    return {"mxnet_version": version, "mxnet_features": features, "cuda_version": cuda,
            "cudnn_version": cudnn, "mxnet_num_gpus": num_gpus}


def collect(with_mxnet: bool = True) -> SystemInfo:
    """Gather the environment of this host. ``with_mxnet=False`` skips importing mxnet
    (the sweep gets MXNet's details from its first measuring process instead)."""
    gpus, smi_status = query_gpus()
    info = SystemInfo(
        host=socket.gethostname(),
        cpu_model=cpu_model(),
        cpu_count=os.cpu_count(),
        gpus=gpus,
        nvidia_smi=smi_status,
    )
    if with_mxnet:
        info.add_mxnet_details(mxnet_details())
    else:
        info.mxnet_version = installed_mxnet_version()
    return info


def installed_mxnet_version() -> str | None:
    """MXNet's version from the installed distribution (mxnet, mxnet-cu112, ...), no import."""
    from importlib import metadata

    for distribution in metadata.distributions():
        name = (distribution.metadata["Name"] or "").lower()
        if name == "mxnet" or name.startswith("mxnet-"):
            return distribution.version
    return None


def visible_gpu_count(physical: int) -> int:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return physical
    return len([v for v in visible.split(",") if v.strip() and v.strip() != "-1"])
