"""Coverage of the reports' 95 % intervals and the rates of their verdicts, by simulation.

    .venv/bin/python scripts/sim_coverage.py [--replicates 2000] [--seed 1] [--quick]

A two-level noise model (gpucompare/reports/simulation.py): within-night CV 0.2–5 %, between-night
(instance-to-instance) CV 0–5 %, 1–10 nights, 1–10 repeats a night, 24 configurations a run; the
intervals and verdicts come from the reports' own code (reports/evidence.py, reports/verdicts.py).
Per cell it prints:

* ``covers``: what the interval says it covers (one night: this night's instance; else the type);
* ``coverage``: the share of 95 % intervals that hold that truth (``–``: the design gives none:
  1 repeat on 1 night);
* ``width``: the median relative width of the interval, (high - low) / centre;
* ``false dearer @1.00`` / ``@1.02``: two machines whose true cost differs by 0 % / 2 % (inside the
  3 % margin): how often the dearer-looking one is called ``dearer`` although what was measured
  (the two instances at one night, the two types over nights) is within the margin;
* ``dearer vs type @1.00``: the same at 1.00 judged against the types even at one night (what a
  reader who ignores interval_covers would take it to mean: at one night with between-night
  noise, instances of one type do differ);
* ``dearer @2x``: how often a machine twice as dear per image is called ``dearer`` (power);
* ``equivalent @1.00``: how often two equal machines are called ``equivalent``.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
if str(REPO / "plugins") not in sys.path:
    sys.path.insert(0, str(REPO / "plugins"))

from gpucompare.reports.simulation import Cell, coverage, measure, median_width, verdict_rates  # noqa: E402

WITHIN = (0.002, 0.01, 0.05)
BETWEEN = (0.0, 0.02, 0.05)
NIGHTS = (1, 2, 3, 5, 10)
REPEATS = (1, 2, 3, 5, 10)
HEADER = (f"{'within':>6} {'between':>7} {'nights':>6} {'repeats':>7}  {'covers':<22} {'coverage':>8} "
          f"{'width':>7}  {'false dearer @1.00':>18} {'@1.02':>6} {'dearer vs type @1.00':>20} "
          f"{'dearer @2x':>10} {'equivalent @1.00':>16}")


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f} %"


def row(cell: Cell, replicates: int, seed: int) -> str:
    """One printed line: a cell's coverage, width and verdict rates."""
    rng = np.random.default_rng(seed)
    measured = measure(rng, cell, replicates)
    same = verdict_rates(rng, cell, 1.0, replicates)
    near = verdict_rates(rng, cell, 1.02, replicates)
    double = verdict_rates(rng, cell, 2.0, replicates)
    covers = "this night's instance" if cell.nights == 1 else f"{cell.nights} nights of this type"
    design = f"{cell.within_cv:>6.1%} {cell.between_cv:>7.1%} {cell.nights:>6} {cell.repeats:>7}"
    return (f"{design}  {covers:<22} "
            f"{_percent(coverage(measured)):>8} {_percent(median_width(measured)):>7}  "
            f"{_percent(same.false_dearer):>18} {_percent(near.false_dearer):>6} "
            f"{_percent(same.false_dearer_type):>20} {_percent(double.dearer):>10} "
            f"{_percent(same.equivalent):>16}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicates", type=int, default=2000, help="simulated measurements per cell")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="3 repeats and 1, 2 and 5 nights only")
    args = parser.parse_args(argv)
    nights, repeats = ((1, 2, 5), (3,)) if args.quick else (NIGHTS, REPEATS)
    started = time.perf_counter()
    print(HEADER)
    for within, between, night_count, repeat_count in itertools.product(WITHIN, BETWEEN, nights, repeats):
        print(row(Cell(within, between, night_count, repeat_count), args.replicates, args.seed), flush=True)
    print(f"{args.replicates} replicates a cell, seed {args.seed}, {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
