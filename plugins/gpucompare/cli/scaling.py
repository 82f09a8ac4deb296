"""``gpucompare scaling-run``: one scaling group of the fleet file run now and ingested (a thin
layer over :mod:`gpucompare.scaling`)."""

from __future__ import annotations

import argparse
import datetime as dt
import sys

from gpucompare.cli.common import Command, lake_argument, lake_location
from gpucompare.errors import UsageError


# ---- scaling-run ---------------------------------------------------------------------------
def _configure_scaling_run(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Prepare and deploy the group's hosts, run every point of its scaling profile "
                          "(MXNet's parameter server across the hosts), ingest, tear the hosts down.")
    parser.add_argument("--group", required=True, help="name of a scaling_groups entry")
    parser.add_argument("--fleet", help="fleet file (default: $GPUCOMPARE_FLEET or dags/config/fleet.yaml)")
    lake_argument(parser)
    parser.add_argument("--results", default="scaling-results.jsonl",
                        help="where the run's records are written before ingest")
    parser.add_argument("--run-id", help="run id (default: scaling-<group>-<UTC time>)")


def _run_scaling_run(args: argparse.Namespace) -> int:
    from gpucompare.config import fleet
    from gpucompare.config.validation import ValidationError
    from gpucompare.prices.tables import shipped_fx_rate
    from gpucompare.scaling.launcher import plan_scaling_group
    from gpucompare.scaling.run import run_scaling_plan

    try:
        parsed = fleet.load_fleet(args.fleet, fx_rate=shipped_fx_rate)
        groups = {g.name: g for g in parsed.scaling_groups}
        if args.group not in groups:
            raise ValidationError("--group", f"{args.group!r} is not a scaling group of {parsed.source}",
                                  ", ".join(groups) or "(none defined)")
        group = groups[args.group]
        specs = {t.name: t.spec for t in parsed.targets}
        run_id = args.run_id or f"scaling-{group.name}-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%SZ}"
        plan = plan_scaling_group(group, [specs[n] for n in group.targets],
                                  parsed.scaling_profiles[group.profile], fleet.target_run_id(run_id, "cli"))
    except ValueError as exc:  # ValidationError and the plan's refusals: bad input, nothing ran
        raise UsageError(str(exc)) from None
    written = run_scaling_plan(plan, lake_uri=lake_location(args), results_path=args.results,
                               line_sink=lambda line: print(line, file=sys.stderr, flush=True))
    print(f"{len(plan['points'])} point(s) of {group.name} ingested: {', '.join(written)}")
    return 0


COMMANDS: tuple[Command, ...] = (
    Command("scaling-run", "run one scaling group of the fleet file now and ingest its records",
            _configure_scaling_run, _run_scaling_run),
)
