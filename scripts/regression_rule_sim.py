"""How often the regressions rule flags a drop, on simulated nights run through the real rule.

    .venv/bin/python scripts/regression_rule_sim.py [--series 300] [--seed 27] [--k 2.5,3]

Each case is ``--series`` independent series (one configuration each, its own batch size) of 8
nights on one machine: 7 nights of history, then tonight. A night's figure is the median of its
repeats; each repeat is 100 × (1 + night effect) × (1 + within-night noise), both normal with
the case's CVs, tonight multiplied by (1 − drop). The records go through the real ingest path into
a Delta lake in a temporary folder, and the ``regressions`` report is built by the product
(sql/regressions.sql, then the U test of reports/uncertainty.py) once per mad factor k. Prints a
Markdown table: per case and k, the share of series whose verdict is regression, and
significant_below_floor. k = 3 is the rule before this change (its regressions are the same; it
had no below-floor verdict).
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
for path in (REPO, REPO / "plugins"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import numpy as np  # noqa: E402

from bench_tasks.record import validate_record  # noqa: E402
from gpucompare.lake.tables import open_lake  # noqa: E402
from gpucompare.reports.build import build_reports  # noqa: E402
from gpucompare.reports.report_set import RegressionRule  # noqa: E402
from tests.support.reports_data import ingest, inputs, record  # noqa: E402

#: name -> (drop, within-night CV, between-night CV, repeats a night)
CASES: dict[str, tuple[float, float, float, int]] = {
    "10 % drop, CV 5 %": (0.10, 0.05, 0.0, 3),
    "2 % drop, CV 0.1 %": (0.02, 0.001, 0.0, 3),
    "no drop, CV 10 %": (0.0, 0.10, 0.0, 3),
    "no drop, CV 0.5 % + nights 2 %": (0.0, 0.005, 0.02, 3),
    "no drop, CV 0.5 % + nights 5 %": (0.0, 0.005, 0.05, 3),
    "10 % drop, CV 5 %, 1 repeat": (0.10, 0.05, 0.0, 1),
    "no drop, CV 10 %, 1 repeat": (0.0, 0.10, 0.0, 1),
}
NIGHTS = 8
LAST = dt.date(2026, 3, 10)


def _records(rng: np.random.Generator, series: int) -> tuple[list[dict], dict[int, str]]:
    """Every night's records of every case, and which case each batch size belongs to."""
    records, case_of = [], {}
    nights = [LAST - dt.timedelta(days=NIGHTS - 1 - i) for i in range(NIGHTS)]
    for index, (name, (drop, within, between, repeats)) in enumerate(CASES.items()):
        for trial in range(series):
            batch = 1 + index * series + trial
            case_of[batch] = name
            for number, night in enumerate(nights):
                level = 100.0 * (1 + rng.normal(0, between)) * (1 - drop if number == NIGHTS - 1 else 1)
                samples = [float(level * (1 + v)) for v in rng.normal(0, within, repeats)]
                base = record(images_per_sec=statistics.median(samples), night=night, batch_size=batch)
                base.update(images_per_sec_samples=samples, repeats=repeats,
                            cv=float(np.std(samples) / np.mean(samples)))
                records.append(validate_record(base))
    return records, case_of


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=300)
    parser.add_argument("--seed", type=int, default=27)
    parser.add_argument("--k", default="2.5,3", help="mad factors to try, comma-separated")
    args = parser.parse_args()
    records, case_of = _records(np.random.default_rng(args.seed), args.series)
    factors = [float(k) for k in args.k.split(",")]
    with tempfile.TemporaryDirectory() as folder:
        lake = open_lake(str(Path(folder) / "lake"))
        for night in sorted({r["started_at"][:10] for r in records}):
            ingest(lake, [r for r in records if r["started_at"][:10] == night])
        verdicts = {}
        for k in factors:
            rule = RegressionRule(history_runs=7, min_history=3, mad_factor=k, min_drop=0.05,
                                  lookback_days=28)
            table = build_reports(inputs(lake, [], []), rule=rule).tables["regressions"]
            verdicts[k] = {row["batch_size"]: row["verdict"] for row in table.to_pylist()}
    print(f"{args.series} series per case, 7 nights of history, seed {args.seed}, floor 5 %\n")
    heads = (f"k={k:g}: regression | k={k:g}: significant below floor" for k in factors)
    print("| case | " + " | ".join(heads) + " |")
    print("|---|" + "---|---|" * len(factors))
    for name in CASES:
        batches = [b for b, case in case_of.items() if case == name]
        cells = []
        for k in factors:
            for verdict in ("regression", "significant_below_floor"):
                share = sum(verdicts[k][b] == verdict for b in batches) / len(batches)
                cells.append(f"{share:.1%}")
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
