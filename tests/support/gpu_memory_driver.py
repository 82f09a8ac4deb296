"""Run a real sweep (real measuring processes, MXNet on the CPU) with a scripted memory probe.

Run with the worker's interpreter (``.venv-bench``) by tests/integration/worker/test_worker_gpumemory.py:

    python -m tests.support.gpu_memory_driver SCRIPT.json OUTPUT.jsonl   # from the repository root

SCRIPT.json: ``{"total_mib": T, "free_mib": [f1, f2, ...], "sweep": {sweep document}}``. The
probe stands in for ``nvidia-smi --query-gpu=memory.free,memory.total`` on a GPU: it answers
the values of ``free_mib`` one per call, in order, for every device (here ``cpu:0``), and
writes each call (device, answer, pid of the measuring process alive then) to standard output
as JSON, so the test can see which process each answer was given for.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench_tasks import sweep, sysinfo
from bench_tasks.configs import group_by_process, parse_sweep
from bench_tasks.gpumemory import DeviceMemory


def main() -> int:
    script = json.loads(Path(sys.argv[1]).read_text())
    answers = list(script["free_mib"])
    total = float(script["total_mib"])
    runner: dict[str, sweep.Sweep] = {}

    def probe(device: str) -> DeviceMemory | None:
        current = runner["sweep"]._runner
        pid = current.process.pid if current is not None else None
        free = answers.pop(0) if answers else None
        print(json.dumps({"device": device, "free_mib": free, "pid": pid}), flush=True)
        return None if free is None else DeviceMemory(float(free), total)

    configs = parse_sweep(script["sweep"]).configs
    writer = sweep.RecordWriter(sys.argv[2])
    try:
        runner["sweep"] = sweep.Sweep(group_by_process(configs), info=sysinfo.collect(with_mxnet=False),
                                      run_id="gpu-memory-check", writer=writer,
                                      image_shape_of=sweep.image_shape_text, memory_probe=probe)
        runner["sweep"].run()
    finally:
        writer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
