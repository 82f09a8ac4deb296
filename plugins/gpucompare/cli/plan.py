"""``gpucompare plan``: each target's night before it runs (a thin layer over
:mod:`gpucompare.targets.plan`)."""

from __future__ import annotations

import argparse

from gpucompare.cli.common import Command, lake_location


# ---- plan ----------------------------------------------------------------------------------
def _configure_plan(parser: argparse.ArgumentParser) -> None:
    from gpucompare.targets import plan

    plan.configure(parser)


def _run_plan(args: argparse.Namespace) -> int:
    from gpucompare.targets import plan

    # no lake: no recorded phases, so constants and the shipped prices only (the cost guard's case
    # before a deployment's first night); said on stderr, not silently
    lake_location(args, warn_absent=True)
    return plan.run(args)


COMMANDS: tuple[Command, ...] = (
    Command("plan", "each target's night before it runs: expected time, cost and billed/timed per phase, "
            "from the lake's recorded phases (the cost guard's own estimate)", _configure_plan, _run_plan,
            reads_only=True),
)
