"""A night of one fleet target before and after the overhead reductions, through the estimate
``gpucompare plan`` and the cost guard use (``targets.night.estimate_phases``).

No GPU here, so the "after" night is a model: a recorded history is made up from the stated
assumptions (an environment baked in the image or cached on the host: deploy seconds; one
measuring process per network and dtype binding each batch size in turn: setup seconds per
configuration) and put through the same function that prices a real recorded history::

    .venv/bin/python scripts/plan_model.py [--fleet dags/config/fleet.yaml] [--target aws-p3-2xlarge]
        [--provision 300] [--deploy 60] [--setup 10 20] [--teardown 60] [--idle 60]

Throughput is the cost guard's per-network guess (``cost.DEFAULT_IMAGES_PER_SEC``, the slowest
published GPU) in both nights, so only the overheads differ.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "plugins")]

from gpucompare.config.fleet import load_fleet, plan_target  # noqa: E402
from gpucompare.prices.tables import shipped_fx_rate  # noqa: E402
from gpucompare.targets import cost, night  # noqa: E402


def _show(label: str, kind: str, sweeps: list, history: night.PhaseHistory, price_per_hour: float) -> None:
    estimate = night.estimate_phases(kind, sweeps, history)
    billed = sum(p.seconds for p in estimate.phases if p.billed)
    timed = sum(p.seconds for p in estimate.phases if p.phase == "timed")
    phases = ", ".join(f"{p.phase} {p.seconds:,.0f} s" for p in estimate.phases)
    print(f"{label}: {phases}")
    print(f"  billed {billed:,.0f} s = {billed / 3600:.2f} h, timed {timed:,.0f} s, billed / timed "
          f"{billed / timed:.2f}, {billed / 3600 * price_per_hour:.2f} at {price_per_hour:.2f} an hour")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fleet", default=str(ROOT / "dags" / "config" / "fleet.yaml"))
    parser.add_argument("--target", default="aws-p3-2xlarge")
    parser.add_argument("--price", type=float, default=3.06, help="price an hour (p3.2xlarge on demand)")
    parser.add_argument("--provision", type=float, default=300.0, help="seconds: request to SSM ready")
    parser.add_argument("--deploy", type=float, default=60.0, help="seconds with the environment cached")
    parser.add_argument("--setup", type=float, nargs="+", default=[10.0, 20.0],
                        help="seconds of process start + bind per configuration (one model per value)")
    parser.add_argument("--teardown", type=float, default=60.0)
    parser.add_argument("--idle", type=float, default=60.0, help="seconds between tasks on the instance")
    args = parser.parse_args()

    fleet = load_fleet(args.fleet, fx_rate=shipped_fx_rate)
    entry = next((t for t in fleet.targets if t.name == args.target), None)
    if entry is None:
        parser.error(f"--target {args.target!r} is not in {args.fleet}")
    plan = plan_target(entry.spec, fleet.profile(entry.profile), "plan")
    sweeps = [sweep["config"] for sweep in plan["sweeps"].values()]
    kind = entry.spec["kind"]
    _show("before (today's constants)", kind, sweeps, night.PhaseHistory(), args.price)
    configs = cost.parse_sweeps(sweeps)
    for setup in args.setup:
        history = night.PhaseHistory(run_level={
            "provision": (args.provision, 1), "deploy": (args.deploy, 1), "teardown": (args.teardown, 1),
            "idle": (args.idle, 1), "sweep_other": (1.0, 1)})
        for config in configs:
            per_batch = config.worker_batch / cost.DEFAULT_IMAGES_PER_SEC[(config.network, config.mode)]
            recorded = night.ConfigHistory(setup, per_batch, per_batch, 1)
            history.per_config[cost.measured_key(config)] = recorded
        _show(f"after (deploy {args.deploy:.0f} s, setup {setup:.0f} s a configuration)", kind, sweeps,
              history, args.price)
    return 0


if __name__ == "__main__":
    sys.exit(main())
