"""The worker runtime proves what it is: its label (``GPUCOMPARE_WORKER_RUNTIME``) against the
build it imports.

A target names the runtime it deployed (``pip-cu112``, ``ngc-24.06``, ``cpu``: the orchestrator's
``data/runtimes.csv``); every record carries that label. A label that contradicts the build
(``ngc-24.06`` on a CPU wheel, a CUDA 11.2 wheel labelled as NVIDIA's CUDA 12.4 container)
would file figures under the wrong software stack without a sign, so the worker compares, before
it measures anything:

* the MXNet version, and Python's, with what the runtime ships;
* ``mxnet.runtime.Features``: CUDA and cuDNN enabled for a GPU runtime, CUDA disabled for ``cpu``;
* the CUDA and cuDNN versions MXNet loaded, where they could be read (a leading part of the
  version the table names: CUDA ``12.4`` matches ``12.4.1``; unknown is not a contradiction).

A mismatch exits 2 with one line naming it (``bench_tasks.cli``). ``GPUCOMPARE_WORKER_RUNTIME_CHECK=warn``
(the tests' stand-ins: a CPU build standing in for NVIDIA's container) reports it instead, and
every record's ``framework_build`` says ``runtime_check: mismatch ignored …``. :data:`RUNTIMES` mirrors the
orchestrator's table (the worker reads no file of the orchestrator's; a unit test holds the two
equal). Standard library only.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from bench_tasks.constants import RUNTIME_CHECK_ENV, WORKER_RUNTIME_ENV

#: name → (mxnet, cuda, cudnn, python min, python max): "" = none (cpu) ; as data/runtimes.csv
RUNTIMES: dict[str, tuple[str, str, str, str, str]] = {
    "pip-cu112": ("1.9.1", "11.2", "8", "3.8", "3.11"),
    "ngc-24.06": ("1.9.1", "12.4.1", "9.1.0.70", "3.10", "3.10"),
    "cpu": ("1.9.1", "", "", "3.8", "3.11"),
}


class RuntimeMismatch(Exception):
    """The label and the build disagree; the message names each contradiction."""


def _parts(version: str) -> tuple[int, ...]:
    numbers = []
    for piece in version.strip().split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        numbers.append(int(digits))
    return tuple(numbers)


def _agrees(found: str, expected: str) -> bool:
    """The shorter of the two versions is a leading part of the longer (``12.4`` ~ ``12.4.1``)."""
    a, b = _parts(found), _parts(expected)
    n = min(len(a), len(b))
    return n > 0 and a[:n] == b[:n]


def contradictions(label: str, build: dict[str, Any]) -> list[str]:
    """What in ``build`` (``mxnet``, ``features``, ``cuda``, ``cudnn``, ``python``) contradicts the
    runtime ``label``; empty when nothing does. ``features`` None (not known yet: the sweep
    process does not import mxnet) leaves the build features, CUDA and cuDNN unchecked."""
    if label not in RUNTIMES:
        return [f"{WORKER_RUNTIME_ENV}={label!r} is not one of {', '.join(sorted(RUNTIMES))}"]
    mxnet, cuda, cudnn, py_min, py_max = RUNTIMES[label]
    found: list[str] = []
    if build.get("mxnet") != mxnet:
        found.append(f"MXNet {build.get('mxnet')} (the runtime ships {mxnet})")
    python = _parts(str(build.get("python", "")))[:2]
    if not _parts(py_min) <= python <= _parts(py_max):
        found.append(f"Python {build.get('python')} (the runtime has {py_min}-{py_max})")
    if build.get("features") is None:
        return found
    features = set(build["features"])
    if cuda and not {"CUDA", "CUDNN"} <= features:
        found.append(f"an MXNet build without {' and '.join(sorted({'CUDA', 'CUDNN'} - features))} "
                     f"(mxnet.runtime.Features; the runtime is CUDA {cuda})")
    if not cuda and "CUDA" in features:
        found.append("an MXNet build with CUDA (the runtime is CPU only)")
    for name, expected in (("CUDA", cuda), ("cuDNN", cudnn)):
        value: str | None = build.get(name.lower())
        if expected and value and not _agrees(value, expected):
            found.append(f"{name} {value} (the runtime has {expected})")
    return found


def check(label: str, build: dict[str, Any], *, announce: bool = True) -> str:
    """The verdict the records carry (``framework_build.runtime_check``): ``ok``, ``not checked: …``
    without a label, or, with ``GPUCOMPARE_WORKER_RUNTIME_CHECK=warn``, ``mismatch ignored: …``
    (said on stderr when ``announce``). Otherwise a contradiction raises :class:`RuntimeMismatch`."""
    if not label:
        return f"not checked: no {WORKER_RUNTIME_ENV}"
    found = contradictions(label, build)
    if not found:
        return "ok"
    message = f"runtime {label!r} does not match the build it imports: " + "; ".join(found)
    if os.environ.get(RUNTIME_CHECK_ENV, "").strip() != "warn":
        raise RuntimeMismatch(message)
    if announce:
        print(f"bench-tasks: warning: {message} (recorded, not refused: {RUNTIME_CHECK_ENV}=warn)",
              file=sys.stderr, flush=True)
    return f"mismatch ignored ({RUNTIME_CHECK_ENV}=warn): " + "; ".join(found)
