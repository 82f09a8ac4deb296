"""What a night costs, measured on this machine through the local target and read back from the
lake's run_phases and the campaign report (issue 14's closing figures).

Runs, each through ``LocalTarget`` (prepare → deploy → sweeps → collect → teardown, every step
timed by ``targets.phases``), records the phases and ingests the results into a scratch lake,
then prints the campaign row of each run:

* ``demo``: the local target's profile in the fleet file (dags/config/fleet.yaml: demo);
* ``3x3``: the CPU scoring sweep of ``scripts/bench_sweep_efficiency.py`` (alexnet, googlenet,
  resnet-50 at batch 1, 2, 4; 5 warm-up, 10 timed batches, 3 repeats, official methodology,
  isolation per network) as the target runs it. With ``--worker-figure`` that script is run too
  (in the worker environment), for its worker-level figure of the same sweep beside ours.

timed share = timed seconds / sweep wall time (the sweep phase, as the target measured it);
overhead = billed / timed. From the repository root:

    .venv/bin/python scripts/bench_campaign.py
    .venv/bin/python scripts/bench_campaign.py --only 3x3 --worker-figure
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "plugins"))
sys.path.insert(0, str(REPO))

SWEEP_3X3 = {"warmup": 5, "batches": 10, "repeats": 3, "timeout_s": 900, "methodology": "official",
             "matrix": [{"modes": ["score"], "networks": ["alexnet", "googlenet", "resnet-50"],
                         "batch_sizes": [1, 2, 4], "devices": ["cpu"]}]}


def run_through_target(name: str, sweeps: list[dict[str, Any]], lake_uri: str, work: Path) -> str:
    """One run of the local target, its phases and results written to the lake; its run id."""
    from gpucompare.lake.ingest import RunContext, ingest_results
    from gpucompare.lake.tables import open_lake
    from gpucompare.targets import make_target
    from gpucompare.targets.base import TargetSpec
    from gpucompare.targets.bundle import local_code_hash
    from gpucompare.targets.phases import PhaseContext, write_recorded

    spec = TargetSpec(name=f"local-{name}", kind="local", provider="local", instance_type="local-cpu",
                      options={"work_dir": str(work / "runs")})
    target = make_target(spec, line_sink=lambda line: print(line, file=sys.stderr))
    run_id = f"bench.{name}"
    state = target.prepare(run_id)
    try:
        state = target.deploy(state)
        for sweep in sweeps:
            state = target.run_sweep(state, sweep, timeout_s=3600)
        results = target.collect(state, str(work / f"{name}.jsonl"))
    finally:
        target.teardown(state)
        write_recorded(lake_uri, target.phases, PhaseContext.of(spec.to_dict(), run_id, market=state.market,
                                                                code_hash=local_code_hash()))
    ingest_results(open_lake(lake_uri), results, RunContext(provider="local", instance_type="local-cpu",
                                                            target="local"), run_id=run_id,
                   code_hash=local_code_hash())
    return run_id


def demo_sweeps() -> list[dict[str, Any]]:
    from gpucompare.config.fleet import load_fleet, plan_target

    fleet = load_fleet(REPO / "dags" / "config" / "fleet.yaml")
    local = next(t for t in fleet.targets if t.spec["kind"] == "local")
    plan = plan_target(local.spec, fleet.profile(local.profile), "bench")
    return [s["config"] for s in plan["sweeps"].values()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", choices=("demo", "3x3"), help="run one of the two (default both)")
    parser.add_argument("--worker-figure", action="store_true",
                        help="also run scripts/bench_sweep_efficiency.py --isolation network")
    parser.add_argument("--lake", help="keep the lake here (default: a temporary folder)")
    args = parser.parse_args()
    from gpucompare.reports.build import ReportInputs, build_reports

    print(f"load before: {os.getloadavg()}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="gpucompare-bench-campaign-") as scratch:
        work = Path(scratch)
        lake_uri = args.lake or str(work / "lake")
        runs = {}
        if args.only in (None, "demo"):
            runs["demo"] = run_through_target("demo", demo_sweeps(), lake_uri, work)
        if args.only in (None, "3x3"):
            runs["3x3"] = run_through_target("3x3", [SWEEP_3X3], lake_uri, work)
        rows = {row["run_id"]: row for row in build_reports(ReportInputs.from_lake(lake_uri))
                .tables["campaign"].to_pylist()}
    print(f"load after: {os.getloadavg()}", file=sys.stderr)
    print(f"{'run':<6}{'configs':>8}{'provision s':>13}{'deploy s':>10}{'sweep s':>9}{'setup s':>9}"
          f"{'warm-up s':>11}{'timed s':>9}{'other s':>9}{'teardown s':>12}{'timed share':>13}"
          f"{'billed/timed':>14}")
    for name, run_id in runs.items():
        r = rows[run_id]
        print(f"{name:<6}{r['configurations']:>8}{r['provision_seconds']:>13.2f}{r['deploy_seconds']:>10.2f}"
              f"{r['sweep_seconds']:>9.1f}{r['setup_seconds']:>9.1f}{r['warmup_seconds']:>11.1f}"
              f"{r['timed_seconds']:>9.1f}{r['sweep_other_seconds']:>9.1f}{r['teardown_seconds']:>12.2f}"
              f"{r['timed_share'] * 100:>12.1f}%{r['overhead_ratio']:>14.2f}")
    if args.worker_figure:
        bench = REPO / ".venv-bench" / "bin" / "python"
        subprocess.run([str(bench), str(REPO / "scripts" / "bench_sweep_efficiency.py"), "--isolation",
                        "network"], cwd=REPO, check=True)


if __name__ == "__main__":
    main()
