"""Time the report staging and regressions SQL of two revisions side by side on one lake.

    .venv/bin/python scripts/bench_sql_revisions.py --lake /tmp/benchlake --rev 4cc1a87 [--repeat 5]

Builds nothing: point it at a lake ``scripts/bench_reports.py --lake DIR --keep`` left (10
million results). For each query (``newest_by_series``, ``newest_by_config``, ``regressions``,
``latest_results``) it runs the text of ``sql/<name>.sql`` at ``--rev`` (``git show``; a query
the revision does not have is timed in the working tree only) and in the working tree,
alternating, on the same DuckDB views over the same live files, and prints the median wall
and CPU seconds of each, so a change to the SQL (e.g. one more key column) is measured apart
from the machine's load.
"""

from __future__ import annotations

import argparse
import datetime as dt
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
for path in (REPO, REPO / "plugins"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from gpucompare.lake.tables import open_lake  # noqa: E402
from gpucompare.reports import newest  # noqa: E402
from gpucompare.reports.inputs import (  # noqa: E402
    ResultFiles,
    connect,
    fill_fragments,
    load_sql,
)
from gpucompare.reports.report_set import RegressionRule  # noqa: E402

QUERIES = ("newest_by_series", "newest_by_config", "regressions", "latest_results")


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _sql_at(rev: str, name: str) -> str | None:
    shown = subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:sql/{name}.sql"], check=False,
                           capture_output=True, text=True)
    if shown.returncode != 0:
        return None  # the query is newer than the revision
    return fill_fragments(shown.stdout, f"{rev}:sql/{name}.sql")  # {{machine_key}} as load_sql writes it out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lake", required=True, help="a lake with results (bench_reports.py --keep)")
    parser.add_argument("--rev", required=True, help="the git revision to compare with, e.g. main")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    lake = open_lake(args.lake).require()
    rule = RegressionRule()
    con = connect()
    files = ResultFiles.of(lake, con)
    files.register("results")
    files.register("recent", since=max(files.by_date) - dt.timedelta(days=rule.lookback_days))
    params = {"history_runs": rule.history_runs, "min_history": rule.min_history,
              "mad_factor": rule.mad_factor, "min_drop": rule.min_drop}
    texts = {name: {label: text for label, text in ((args.rev, _sql_at(args.rev, name)),
                                                    ("working tree", load_sql(name))) if text is not None}
             for name in QUERIES}
    print(f"lake {args.lake}: {sum(len(p) for p in files.by_date.values())} live files")
    for name in QUERIES:
        if name == "latest_results":  # as in the build: only the newest partitions are read
            files.register("results", dates=newest.scan(con, files, None).dates)
        times: dict[str, list[tuple[float, float]]] = {label: [] for label in texts[name]}
        for _ in range(args.repeat):
            for label, text in texts[name].items():
                started, cpu = time.perf_counter(), _cpu()
                con.sql(text, params=params if name == "regressions" else None).to_arrow_table()
                times[label].append((time.perf_counter() - started, _cpu() - cpu))
        for label, samples in times.items():
            wall = statistics.median(s[0] for s in samples)
            cpu = statistics.median(s[1] for s in samples)
            print(f"  {name:<15} {label:<13} median {wall:6.2f} s wall, {cpu:6.2f} s CPU "
                  f"({args.repeat} runs)")
    con.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
