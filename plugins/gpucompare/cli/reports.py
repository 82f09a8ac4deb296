"""``gpucompare report|compare|athena-ddl``: the commands that build reports from the lake and
describe them to Athena (a thin layer over :mod:`gpucompare.reports`)."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

from gpucompare import settings
from gpucompare.cli.common import Command, lake_argument, lake_location, location_origin
from gpucompare.config import patterns
from gpucompare.errors import UsageError


# ---- report, compare, athena-ddl ---------------------------------------------------------
def _age_years(text: str) -> int:
    if not text.isdigit() or int(text) > 100:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of years between 0 and 100")
    return int(text)


def _configure_report(parser: argparse.ArgumentParser) -> None:
    from gpucompare.reports.report_set import REPORTS

    parser.description = ("Build the report set from the lake: " + ", ".join(REPORTS)
                          + ", index.html, summary.md.")
    lake_argument(parser)
    parser.add_argument("--out", default=None,
                        help="output directory (local path or s3://bucket/prefix); default: as the reports "
                             "DAG writes, REPORTS/<today>/ published as REPORTS/latest with the day's "
                             "history, REPORTS being the reports setting (GPUCOMPARE_REPORTS or "
                             "[gpucompare] reports)")
    parser.add_argument("--currency", default="EUR", type=str.upper, choices=patterns.CURRENCIES,
                        help="currency of every money column (default EUR)")
    ranking = parser.add_argument_group(
        "ranking", "what best_value ranks (every row is shown either way); defaults from the settings")
    ranking.add_argument("--published-max-age-years", type=_age_years, default=None, metavar="N",
                         help="published figures older than N years are not ranked (default "
                              "GPUCOMPARE_PUBLISHED_MAX_AGE_YEARS, 3)")
    ranking.add_argument("--rank-old-published", action="store_true", default=None,
                         help="rank old published figures too")
    ranking.add_argument("--rank-flagged", action="store_true", default=None,
                         help="rank figures carrying flags too")
    ranking.add_argument("--with-projections", action="store_true", default=None,
                         help="also write best_value_with_projections: the ranking with projected machines "
                              "added, labelled (default GPUCOMPARE_BEST_VALUE_WITH_PROJECTIONS, false)")
    parser.add_argument("--nights", type=_nights, default=1, metavar="N",
                        help="intervals over the last N runs of each configuration on its machine, the "
                             "night as the unit (default 1: the latest run, its interval covers that "
                             "night's instance)")
    parser.add_argument("--history", default=None,
                        help="also keep the day's copy of each report under HISTORY/report_history/ "
                             "(the reports root)")
    parser.add_argument("--as-of", default=None, metavar="VERSION|TIMESTAMP",
                        help="rebuild the reports as they were: a results table version (0, 1, …) "
                             "or an ISO timestamp")


def _nights(text: str) -> int:
    from gpucompare.reports.report_set import MAX_NIGHTS

    if not text.strip().isdigit() or not 1 <= int(text) <= MAX_NIGHTS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of nights from 1 to {MAX_NIGHTS}")
    return int(text)


def _configure_compare(parser: argparse.ArgumentParser) -> None:
    from gpucompare.reports.compare import COMPARE_BY

    parser.description = ("Two machines, nights or worker runtimes side by side per configuration: "
                          "median images/s with its 95 % interval, the change B vs A with its interval "
                          "and the Mann-Whitney U p-value ('~' where not significant), a geomean row.")
    lake_argument(parser)
    parser.add_argument("--by", required=True, choices=COMPARE_BY,
                        help="machine: provider/instance_type[/region[/market]]; night: a date "
                             "YYYY-MM-DD or a run id; runtime: a worker runtime")
    parser.add_argument("a", help="side A (the base)")
    parser.add_argument("b", help="side B (compared with A)")
    parser.add_argument("--nights", type=_nights, default=1, metavar="N",
                        help="pool the repeats of each side's last N runs per configuration (default 1)")
    parser.add_argument("--out", default=None,
                        help="also write compare.parquet and compare.csv into this local directory")


def _run_compare(args: argparse.Namespace) -> int:
    from gpucompare.lake.storage import LakeError
    from gpucompare.reports import compare
    from gpucompare.reports.inputs import ReportInputs
    from gpucompare.reports.report_set import ReportError

    try:
        # the lake line every command prints, and advice when there is no lake
        inputs = ReportInputs.from_lake(lake_location(args, must_exist=True))
        table = compare.compare(inputs, args.by, args.a, args.b, nights=args.nights)
    except (ReportError, LakeError) as exc:
        raise UsageError(str(exc)) from None
    print(compare.render(table, args.by, args.a, args.b))
    if args.out:
        import pyarrow.csv as pa_csv
        import pyarrow.parquet as pq

        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, out / "compare.parquet")
        pa_csv.write_csv(table, out / "compare.csv")
        print(f"wrote {out / 'compare.parquet'} and {out / 'compare.csv'}")
    return 0


def _run_report(args: argparse.Namespace) -> int:
    from gpucompare.lake.storage import LakeError
    from gpucompare.reports.build import options_from_settings, run_reports
    from gpucompare.reports.report_set import ReportError, ReportOptions, ReportsIncomplete
    from gpucompare.reports.summary import describe_provenance

    try:
        defaults = options_from_settings()
        options = ReportOptions(
            published_max_age_years=(defaults.published_max_age_years if args.published_max_age_years is None
                                     else args.published_max_age_years),
            rank_old_published=args.rank_old_published or defaults.rank_old_published,
            rank_flagged=args.rank_flagged or defaults.rank_flagged,
            with_projections=args.with_projections or defaults.with_projections,
            nights=args.nights,
            practical_margin=defaults.practical_margin,
        )
        lake_location(args, must_exist=True)
        out, history, dated = _report_destination(args)
        report_set = run_reports(args.lake, out, currency=args.currency, options=options,
                                 history=history, as_of=args.as_of)
    except ReportsIncomplete as incomplete:  # the rest is written; say what failed, exit 1
        report_set = incomplete.report_set
        for name, message in incomplete.failures.items():
            print(f"gpucompare report: {name} failed: {message}", file=sys.stderr)
    except (ReportError, LakeError) as exc:
        raise UsageError(str(exc)) from None
    if dated is not None:
        from gpucompare.reports.publish import publish_latest

        args.out = publish_latest(args.out, dated)  # REPORTS/latest → REPORTS/<today>
    counts = ", ".join(f"{name} {table.num_rows}" for name, table in report_set.tables.items())
    print(f"reports of {report_set.rows_scanned:,} results in {args.out} ({report_set.currency}): {counts}")
    files = report_set.manifest.get("results_files")
    if isinstance(files, int) and report_set.files_read is not None and report_set.files_read < files:
        print(f"  newest results found reading {report_set.files_read:,} of {files:,} results file(s); the "
              "rest from the lake's report cache (_report_cache/)")
    print(describe_provenance(report_set))
    missing = report_set.missing_prices.num_rows
    if missing:
        print(f"  {missing} result(s) without a price: see cost_per_million.csv (price_source missing)")
    regressions = report_set.tables.get("regressions")
    flagged = 0 if regressions is None else sum(1 for value in regressions["regression"].to_pylist() if value)
    print(f"  {flagged} regression(s) flagged; open {args.out.rstrip('/')}/index.html")
    return 1 if report_set.failures else 0


def _report_destination(args: argparse.Namespace) -> tuple[str, str | None, str | None]:
    """(folder, history root, dated folder name): ``--out`` as given, else the reports setting's
    ``<today>`` folder with the history beside it, as the reports DAG writes them."""
    origin = location_origin(args.out, "reports")
    if args.out is not None:
        print(f"gpucompare report: reports in {args.out} (from {origin})", file=sys.stderr)
        return args.out, args.history, None
    args.out = settings.reports_uri()
    dated = dt.datetime.now(dt.UTC).date().isoformat()
    print(f"gpucompare report: reports in {args.out} (from {origin})", file=sys.stderr)
    return f"{args.out.rstrip('/')}/{dated}", args.history or args.out, dated


def _configure_athena_ddl(parser: argparse.ArgumentParser) -> None:
    from gpucompare.reports.athena import ATHENA_HISTORY, ATHENA_LAKE, ATHENA_REPORTS

    parser.description = "CREATE EXTERNAL TABLE statements for the lake's Delta tables and the reports."
    parser.add_argument("--database", default="gpucompare", help="Glue database (default gpucompare)")
    parser.add_argument("--lake", default=None, help="s3:// URI of the lake (default: the lake setting "
                        f"when it is on S3, else {ATHENA_LAKE})")
    parser.add_argument("--reports", default=None,
                        help="s3:// URI of the report folder BI reads (default: REPORTS/latest of the "
                             f"reports setting when it is on S3, else {ATHENA_REPORTS})")
    parser.add_argument("--history", default=None,
                        help="s3:// URI of the reports root holding report_history/ (default: the reports "
                             f"setting when it is on S3, else {ATHENA_HISTORY})")
    parser.add_argument("--out", type=Path, default=None,
                        help="write results.sql, reports.sql and report_history.sql here "
                             "(default: print them)")


def _run_athena_ddl(args: argparse.Namespace) -> int:
    from gpucompare.reports.athena import ATHENA_HISTORY, ATHENA_LAKE, ATHENA_REPORTS, athena_ddl
    from gpucompare.reports.report_set import ReportError

    lake, reports = settings.lake_uri(), settings.reports_uri()
    args.lake = args.lake or (lake if lake.startswith("s3://") else ATHENA_LAKE)
    root = reports.rstrip("/") if reports.startswith("s3://") else None
    args.reports = args.reports or (f"{root}/latest" if root else ATHENA_REPORTS)
    args.history = args.history or root or ATHENA_HISTORY
    print(f"gpucompare athena-ddl: lake {args.lake}, reports {args.reports}", file=sys.stderr)
    try:
        files = athena_ddl(args.database, args.lake, args.reports, args.history)
    except ReportError as exc:
        raise UsageError(str(exc)) from None
    for name, text in files.items():
        if args.out is None:
            print(text)
        else:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / name).write_text(text, encoding="utf-8")
            print(f"wrote {args.out / name}")
    return 0


# ---- rank ------------------------------------------------------------------------------------
def _configure_rank(parser: argparse.ArgumentParser) -> None:
    from bench_tasks.constants import MODES, NETWORKS

    parser.description = ("The best_value ranking of the lake the settings name, built now: per network "
                          "and mode, each machine's cost per million images with its 95 % interval, the "
                          "verdict against the cheapest, the age of the measurement and of the price, and "
                          "the price's source.")
    lake_argument(parser)
    parser.add_argument("--network", choices=NETWORKS, default=None, help="only this network")
    parser.add_argument("--mode", choices=MODES, default=None, help="only scoring or training")
    parser.add_argument("--currency", default=None, type=str.upper, choices=patterns.CURRENCIES,
                        help="currency of the costs (default: the currency setting)")
    parser.add_argument("--json", action="store_true", help="the rows as JSON, for scripts")


def _run_rank(args: argparse.Namespace) -> int:
    import json

    from gpucompare.reports import ranking
    from gpucompare.reports.read import read_table

    uri = lake_location(args, must_exist=True)
    table = read_table("best_value", lake=uri, currency=args.currency)
    rows = ranking.rank_rows(table.to_pylist(), network=args.network, mode=args.mode)
    if args.json:
        print(json.dumps(ranking.json_rows(rows), indent=2))
        return 0
    for line in ranking.table_lines(rows, today=dt.datetime.now(dt.UTC).date()):
        print(line)
    return 0


COMMANDS: tuple[Command, ...] = (
    Command("rank", "print the best_value ranking: cost per million with its interval, verdict, ages, "
            "price source", _configure_rank, _run_rank, reads_only=True),
    Command("report", "build every report (Parquet + CSV), index.html and summary.md from the lake",
            _configure_report, _run_report, reads_only=True),
    Command("compare", "benchstat-style comparison of two machines, nights or runtimes per configuration",
            _configure_compare, _run_compare, reads_only=True),
    Command("athena-ddl", "write the Athena/Glue DDL of the results lake and the reports for your S3 paths",
            _configure_athena_ddl, _run_athena_ddl),
)
