"""CPU seconds of the report set's last two parts, the page (``write_site``: index.html and
summary.md) and the files (``write_tables``: Parquet + CSV), on one built report set.

    .venv/bin/python scripts/bench_report_parts.py --lake DIR [--repo DIR] [--repeat 5]

The lake is ``scripts/bench_reports.py``'s (``--lake`` there builds it). The set is built once,
the page rendered once untimed (the templates compile), then each part timed ``--repeat`` times
in this process; prints the medians. ``--repo DIR`` times another checkout (e.g. ``git archive``
of an older commit unpacked in a folder) on the same lake: the before and after of a change.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lake", type=Path, required=True, help="a lake built by bench_reports.py")
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parent.parent,
                        help="the checkout whose code is timed (default: this one)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    repo = args.repo.resolve()
    sys.path[:0] = [str(repo / "scripts"), str(repo), str(repo / "plugins")]
    import bench_reports

    from gpucompare.reports.build import build_reports
    from gpucompare.reports.publish import write_site, write_tables

    report_set = build_reports(bench_reports.bench_inputs(args.lake), None, currency="EUR")
    out = tempfile.mkdtemp(prefix="gpucompare-parts-")
    write_site(report_set, out)
    parts = {"page (index.html + summary.md)": lambda: write_site(report_set, out),
             "files (parquet + csv)": lambda: write_tables(report_set.tables, out)}
    print(f"code timed: {repo}")
    for name, action in parts.items():
        seconds = []
        for _ in range(args.repeat):
            started = time.process_time()
            action()
            seconds.append(time.process_time() - started)
        print(f"  {name:<32} median {statistics.median(seconds):.3f} CPU-s of {args.repeat}: "
              + ", ".join(f"{s:.3f}" for s in seconds))
    print(f"  index.html: {Path(out, 'index.html').stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
