"""A worker process for the SIGKILL scenarios of ``test_ec2_faults``: runs ec2 target steps the
way an Airflow task does (a new target built from the plan's JSON, the state read from and
written to JSON after each step), so the test can kill it with SIGKILL at a chosen moment.

Usage: ``python tests/support/ec2_step_worker.py PLAN.json STATE.json STEP [STEP ...]`` with steps
``prepare``, ``deploy``, ``score_sweep``. The state file holds the newest state (what XCom
would hold); it is replaced atomically after each step.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for path in (ROOT / "plugins", ROOT):
    sys.path.insert(0, str(path))


def main(argv: list[str]) -> int:
    from gpucompare.targets import make_target
    from gpucompare.targets.base import TargetState

    plan = json.loads(Path(argv[0]).read_text())
    state_file = Path(argv[1])
    for step in argv[2:]:
        target = make_target(plan["spec"])
        state = TargetState.from_dict(json.loads(state_file.read_text())) if state_file.exists() else None
        if step == "prepare":
            state = target.prepare(plan["run_id"])
        elif step == "deploy":
            state = target.deploy(state)
        elif step == "score_sweep":
            sweep = plan["sweeps"]["score"]
            state = target.run_sweep(state, sweep["config"], timeout_s=sweep["timeout_s"])
        else:
            raise SystemExit(f"unknown step {step}")
        partial = state_file.with_suffix(".partial")
        partial.write_text(json.dumps(state.to_dict()))
        os.replace(partial, state_file)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
