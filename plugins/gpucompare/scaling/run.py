"""A scaling group's run: prepare and deploy every host (each target's own steps), run the
points of the plan over the hosts' channels (``launcher``), ingest, tear everything down;
and the ``scaling-run`` subcommand.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gpucompare.config import patterns
from gpucompare.scaling.launcher import (
    DistributedRunError,
    HostChannel,
    ParameterServerLauncher,
    ScalingPoint,
)

log = logging.getLogger(__name__)


# -- the run of a group ------------------------------------------------------------------------

def host_run_id(run_id: str, spec: Mapping[str, Any]) -> str:
    """Each host's own run id for its target (an ec2 target finds its instance by run id, so
    the hosts of one group must not share one); the records carry the group's run id."""
    return f"{run_id}.{spec['name']}"


def run_scaling_plan(plan: Mapping[str, Any], *, lake_uri: str, results_path: str,
                     dag_run_id: str | None = None, line_sink: Callable[[str], None] | None = None,
                     poll_interval_s: float = 2.0) -> list[str]:
    """One group's whole scaling run: prepare and deploy every host, run the points, ingest;
    and, whatever happened, tear every host down (a paid instance is always given back).

    Every host's phases (provision, deploy, the points' wall time as its ``sweep``, teardown)
    go into the lake's ``run_phases`` at the end, under the group's run id and the host's
    target name, the failed ones too: a failed run's results are not written, but what it
    cost is (``targets.phases``)."""
    from gpucompare.lake.ingest import RunContext
    from gpucompare.targets import make_target

    sink = line_sink or log.info
    targets = [make_target(spec, line_sink=sink) for spec in plan["specs"]]
    states: list[Any] = [None] * len(targets)
    try:
        for index, target in enumerate(targets):
            states[index] = target.prepare(host_run_id(plan["run_id"], plan["specs"][index]))
            states[index] = target.deploy(states[index])
        launcher = ParameterServerLauncher(
            [channel_for(t, s) for t, s in zip(targets, states, strict=True)], run_id=plan["run_id"],
            interface=plan.get("interface"), ps_verbose=int(plan.get("ps_verbose") or 0),
            poll_interval_s=poll_interval_s, line_sink=sink)
        points = [ScalingPoint(**{**p, "devices": tuple(p["devices"])}) for p in plan["points"]]
        spec = plan["specs"][0]
        markets = {s.market for s in states if s.market}
        # a spot group whose hosts fell back to on-demand (some or all) is recorded as asked
        market = markets.pop() if len(markets) == 1 else spec.get("market", patterns.DEFAULT_MARKET)
        context = RunContext(provider=spec["provider"], instance_type=spec["instance_type"],
                             region=spec.get("region"), market=market, target=spec["kind"],
                             dag_run_id=dag_run_id, source=f"gpucompare scaling group {plan['group']}")
        with contextlib.ExitStack() as timing:  # the points run on every host at once: each one's sweep
            for target in targets:
                timing.enter_context(target.phases.timed("sweep"))
            return measure_and_ingest(launcher, points, results_path=results_path, lake_uri=lake_uri,
                                      context=context)
    finally:
        try:
            _teardown_all(targets, states, plan["run_id"], sink)
        finally:
            _record_phases(targets, states, plan["run_id"], lake_uri=lake_uri, dag_run_id=dag_run_id)


def _record_phases(targets: Sequence[Any], states: Sequence[Any], run_id: str, *, lake_uri: str,
                   dag_run_id: str | None) -> None:
    """Each host's timed phases into ``run_phases`` (only logged if that fails: the run's
    outcome is what it is either way)."""
    from gpucompare.targets.bundle import local_code_hash
    from gpucompare.targets.phases import PhaseContext, record_quietly

    code_hash = local_code_hash()
    for target, state in zip(targets, states, strict=True):
        context = PhaseContext.of(target.spec.to_dict(), run_id, market=getattr(state, "market", None),
                                  dag_run_id=dag_run_id, code_hash=code_hash)
        record_quietly(lake_uri, target.phases, context)


def _teardown_all(targets: Sequence[Any], states: Sequence[Any], run_id: str,
                  sink: Callable[[str], None]) -> None:
    from gpucompare.targets.base import TargetState

    failures = []
    for target, state in zip(targets, states, strict=True):
        spec = target.spec.to_dict()
        try:
            target.teardown(state or TargetState(spec=spec, run_id=host_run_id(run_id, spec)))
        except Exception as exc:  # every host must get its teardown, then the error is raised
            failures.append(f"{target.spec.name}: {exc}")
            sink(f"[dist] teardown of {target.spec.name} failed: {exc}")
    if failures:
        raise DistributedRunError("teardown failed on " + "; ".join(failures))


def channel_for(target: Any, state: Any, *, address: str | None = None) -> HostChannel:
    """The channel of a prepared and deployed target: its own (``Target.channel``)."""
    return target.channel(state, address=address)


def run_points(launcher: ParameterServerLauncher, points: Sequence[ScalingPoint],
               results_path: str) -> str:
    """Run every point; write their records (JSON Lines) to ``results_path`` only if all
    succeeded, atomically, and return the path. Any failure raises before anything is written."""

    records = [launcher.run_point(point).record for point in points]
    destination = Path(results_path)
    destination.parent.mkdir(parents=True, exist_ok=True)
    partial = destination.with_name(f".{destination.name}.partial")
    partial.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
    partial.replace(destination)
    return str(destination)


def measure_and_ingest(launcher: ParameterServerLauncher, points: Sequence[ScalingPoint], *,
                       results_path: str, lake_uri: str, context: Any) -> list[str]:
    """Run the points, then ingest their records into the lake (``context``: the lake's
    ``RunContext``: provider, instance type, target kind…). A failed point raises before
    anything is written, so a failed run leaves the lake as it was."""
    from gpucompare.lake.ingest import ingest_results
    from gpucompare.lake.tables import open_lake
    from gpucompare.targets.bundle import local_code_hash

    path = run_points(launcher, points, results_path)
    # the launcher's run id is the orchestrator's (plan["run_id"]): the records must carry it
    summary = ingest_results(open_lake(lake_uri), path, context, run_id=launcher.run_id,
                             code_hash=local_code_hash())
    return [summary.describe()]
