"""The mixed fleet of the deferred-sweep system tests, and how they read a pool's use back.

Both ``tests/system/test_dags_deferrable.py`` (``dag.test()``) and the Celery deployment of
``tests/system/test_distributed_airflow.py`` run the nightly DAG on the same kind of fleet:
ssh hosts (folders on the loopback sshd) beside ec2 instances on moto (folders the stand-in SSM
agent runs their commands in), every target with a folder of its own. ``slow_worker`` makes
each sweep last long enough that several of them are certainly in flight at once: a stand-in
for a slower machine, which waits before running the real worker.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tests.support.target_helpers import held_worker

#: the fleet profile of these tests: one tiny scoring point on the CPU
SCORE_ONLY: dict[str, Any] = {
    "networks": ["alexnet"], "batch_sizes": [1], "modes": ["score"], "devices": ["cpu"],
    "warmup": 1, "batches": 1, "repeats": 1, "timeout_s": 120}


def slow_worker(path: Path, python: Path, seconds: float) -> Path:
    """Write ``path``: an interpreter that runs ``python`` and sleeps ``seconds`` before a sweep
    (a slower machine: its sweeps take that much longer; the deploy checks and the sweep
    itself are the real worker interpreter)."""
    return held_worker(path, python, wait=f"sleep {seconds:g}", why=f"{seconds:g} s (a slower machine)")


SLOW_ENVIRONMENT = """#!/bin/sh
# Stands in for an ssh host's python3 whose pip install of the worker's environment takes
# {seconds} s (a real MXNet install: minutes). `-m venv DIR` makes DIR/bin/python, whose
# `-m pip install` sleeps, and which runs the real worker interpreter otherwise.
if [ "$1" = -m ] && [ "$2" = venv ]; then
  mkdir -p "$3/bin"
  printf '%s\n' '#!/bin/sh' \
    'if [ "$1" = -m ] && [ "$2" = pip ]; then' \
    '  echo "installing (stand-in, {seconds} s)"; sleep {seconds}; exit 0' \
    'fi' \
    'exec {python} "$@"' > "$3/bin/python"
  chmod +x "$3/bin/python"
  exit 0
fi
exec {python} "$@"
"""


def slow_environment(path: Path, python: Path, seconds: float) -> Path:
    """Write ``path``: a stand-in base interpreter whose environment build takes ``seconds``
    (``SLOW_ENVIRONMENT``), for an ssh target's ``base_python``."""
    path.write_text(SLOW_ENVIRONMENT.format(seconds=f"{seconds:g}", python=python))
    path.chmod(0o755)
    return path


def fleet_targets(*, count: int, ec2_count: int, ssh_conn_id: str, root: Path, python: Path,
                  poll_interval_s: float = 0.3, deploy_s: float | None = None) -> list[dict[str, Any]]:
    """``count`` targets of profile ``tiny``, ``ec2_count`` of them ec2 instances spread among
    the ssh hosts; each has a folder of its own under ``root`` (its host's or its instance's
    files) and runs the worker ``python``. ``deploy_s``: the ssh hosts build the worker's
    environment at deploy, which takes that long (``slow_environment``), instead of using
    ``python`` as it is."""
    ec2_at = {round(i * count / ec2_count) for i in range(ec2_count)} if ec2_count else set()
    targets = []
    for index in range(count):
        if index in ec2_at:
            targets.append({"name": f"aws-{index}", "kind": "ec2", "provider": "aws",
                            "instance_type": "g4dn.xlarge", "region": "us-east-1",
                            "gpu_count": 1, "profile": "tiny",
                            "options": {"remote_root": str(root / f"instance{index}"),
                                        "bench_python": str(python)}})
        else:
            slow = None if deploy_s is None else slow_environment(root / f"python3-{index}", python, deploy_s)
            interpreter = {"python": str(python)} if slow is None else {"base_python": str(slow)}
            targets.append({"name": f"rented-{index}", "kind": "ssh", "provider": "leadergpu",
                            "instance_type": "ltbv14", "profile": "tiny",
                            "options": {"ssh_conn_id": ssh_conn_id, **interpreter,
                                        "remote_dir": str(root / f"host{index}"),
                                        "poll_interval_s": poll_interval_s}})
    return targets


def most_at_once(intervals: Iterable[tuple[Any, Any, int]]) -> int:
    """The largest sum of slots of (start, end, slots) intervals open at one instant (an
    interval ending when another starts does not overlap it)."""
    edges = []
    for start, end, slots in intervals:
        edges += [(start, slots), (end, -slots)]
    most = current = 0
    for _, change in sorted(edges, key=lambda edge: (edge[0], edge[1])):
        current += change
        most = max(most, current)
    return most
