"""The ``python -m gpucompare`` command line: a registry of subcommands.

Each subcommand is registered once with :func:`register` (a name, a help line, a function
that adds its arguments and the function that runs it and returns an exit code); the
library modules they call are imported inside those functions, so ``import gpucompare.cli``
stays light. This file is the one place that lists every subcommand and its arguments: no
library module adds a parser of its own.

Bad input ends with exit code 2 and a one-line message naming the flag or field at fault;
nothing is written then.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpucompare import settings
from gpucompare.airflow.notices import silence_dependency_notices
from gpucompare.config import patterns
from gpucompare.errors import UsageError
from gpucompare.lake import schema
from gpucompare.targets.bundle import local_code_hash


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


COMMANDS: dict[str, Command] = {}


def register(name: str, help: str, configure: Callable[[argparse.ArgumentParser], None],  # noqa: A002
             run: Callable[[argparse.Namespace], int]) -> None:
    """Add a subcommand (a name may be registered once)."""
    if name in COMMANDS:
        raise ValueError(f"subcommand {name!r} is already registered")
    COMMANDS[name] = Command(name, help, configure, run)


def _lake_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lake", default=None, help="lake URI: a local path or s3://bucket/prefix "
                        "(default: the lake setting, GPUCOMPARE_LAKE or [gpucompare] lake, the one the "
                        "DAGs use; S3 endpoint from AWS_ENDPOINT_URL if set)")


def _origin(flag: str | None, name: str) -> str:
    """Where a location came from: the flag, the environment variable or the Airflow setting."""
    if flag:
        return "--" + name if name == "lake" else "--out"
    return settings.origin(name)


def no_lake_advice(uri: str, origin: str) -> str:
    """Where a reading command looked for a lake, and how to make one or point to one."""
    text = (f"no lake at {uri} (from {origin}). Create it with `gpucompare load-prices` and "
            "`gpucompare import-published` (or let the nightly DAG ingest a run), or point to an existing "
            "lake with --lake or GPUCOMPARE_LAKE")
    here = Path.cwd() / "lake"
    if not settings.is_remote(uri) and here.is_dir() and here.resolve() != Path(uri).resolve():
        text += f" (this folder has one: export GPUCOMPARE_LAKE={here})"
    return text


def lake_location(args: argparse.Namespace, *, must_exist: bool = False, warn_absent: bool = False) -> str:
    """The lake a command uses: ``--lake``, else the lake setting (as the DAGs read it); printed on
    stderr. ``must_exist``: a command that only reads ends with exit 2 and advice when it is absent;
    ``warn_absent``: a command that can do without (``plan``) says so and goes on."""
    uri = args.lake or settings.lake_uri()
    origin = _origin(args.lake, "lake")
    print(f"gpucompare {args.command}: lake {uri} (from {origin})", file=sys.stderr)
    if must_exist or warn_absent:
        from gpucompare.lake import tables as lake
        from gpucompare.lake.storage import LakeError

        try:
            exists = lake.open_lake(uri).exists()
        except LakeError as exc:
            raise UsageError(str(exc)) from None
        if not exists and must_exist:
            raise UsageError(no_lake_advice(uri, origin))
        if not exists:
            print(f"gpucompare {args.command}: {no_lake_advice(uri, origin)}; going on without one",
                  file=sys.stderr)
    args.lake = uri
    return uri


def _date(text: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date YYYY-MM-DD") from None


# ---- ingest ------------------------------------------------------------------------------
def _configure_ingest(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--results", required=True,
                        help="JSON Lines file written by bench_tasks: a local path or s3://bucket/key")
    _lake_argument(parser)
    parser.add_argument("--provider", required=True, help="e.g. aws, leadergpu, local")
    parser.add_argument("--instance-type", required=True, help="the provider's machine name, e.g. g5.xlarge")
    parser.add_argument("--region", default=None, help="provider region, e.g. us-east-1")
    parser.add_argument("--market", default=patterns.DEFAULT_MARKET, choices=schema.MARKETS)
    parser.add_argument("--target", default="local", choices=[t for t in schema.TARGETS if t != "published"])
    parser.add_argument("--source", default=None,
                        help="where the figures come from (default: gpucompare <target> run)")
    parser.add_argument("--dag-run-id", default=None, help="the Airflow run ingesting the file, if any")
    parser.add_argument("--run-id", required=True,
                        help="the run's identity (the orchestrator's, e.g. fleet.target_run_id): its rows "
                             "are "
                             "replaced; every record's run_id must equal it")
    parser.add_argument("--code-hash", default=None,
                        help="content hash of the worker code that measured the file "
                             "(default: the hash of the local bench_tasks bundle)")


def _run_ingest(args: argparse.Namespace) -> int:
    from gpucompare.lake import ingest as lake_ingest
    from gpucompare.lake import tables as lake
    from gpucompare.lake.storage import LakeError

    context = lake_ingest.RunContext(provider=args.provider, instance_type=args.instance_type,
                                     region=args.region, market=args.market, target=args.target,
                                     source=args.source, dag_run_id=args.dag_run_id)
    target = lake.open_lake(lake_location(args))
    try:
        summary = lake_ingest.ingest_results(target, args.results, context, run_id=args.run_id,
                                             code_hash=args.code_hash or local_code_hash())
    except (lake.IngestError, LakeError) as exc:
        raise UsageError(str(exc)) from None
    print(f"ingested {args.results} into {args.lake}: {summary.describe()}")
    return 0


# ---- import-published --------------------------------------------------------------------
def _configure_import_published(parser: argparse.ArgumentParser) -> None:
    from gpucompare.prices import published

    parser.add_argument("--results", type=Path, default=published.SHIPPED_RESULTS,
                        help="published results CSV (default: the shipped copy)")
    parser.add_argument("--prices", type=Path, default=published.SHIPPED_PRICES,
                        help="published prices CSV (default: the shipped copy)")
    parser.add_argument("--scaling", type=Path, default=published.SHIPPED_SCALING,
                        help="published scaling CSV (default: the shipped copy)")
    _lake_argument(parser)


def _run_import_published(args: argparse.Namespace) -> int:
    from gpucompare.lake import tables as lake
    from gpucompare.prices import published

    target = lake.open_lake(lake_location(args))
    try:
        summary = published.import_published(target, results_csv=args.results, prices_csv=args.prices,
                                             scaling_csv=args.scaling)
    except (published.PublishedError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    print(summary.describe())
    return 0


# ---- prices ------------------------------------------------------------------------------
def _configure_load_prices(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Write the shipped price and exchange-rate history, and the prices the fleet "
                          "file declares (its prices entries and targets' price), into the lake.")
    parser.add_argument("--fleet", default=None,
                        help="the fleet file whose declared prices are loaded (default: the fleet setting, "
                             "GPUCOMPARE_FLEET, else the shipped example)")
    _lake_argument(parser)


def _run_load_prices(args: argparse.Namespace) -> int:
    from gpucompare.config import fleet
    from gpucompare.config.validation import ValidationError
    from gpucompare.lake import tables as lake
    from gpucompare.lake.storage import LakeError
    from gpucompare.prices import declared
    from gpucompare.prices import tables as prices

    try:
        fleet_prices = fleet.load_fleet(args.fleet, fx_rate=prices.shipped_fx_rate).declared_prices
    except ValidationError as exc:
        raise UsageError(str(exc)) from None
    target = lake.open_lake(lake_location(args))
    try:
        written = [target.write_table("prices", "shipped", prices.shipped_prices()),
                   target.write_table("fx", "shipped", prices.shipped_fx())]
        own = declared.store(target, fleet_prices)
    except LakeError as exc:
        raise UsageError(str(exc)) from None
    print(f"loaded the shipped price and exchange-rate history into {args.lake}: "
          + "; ".join(w.describe() for w in written))
    for price, summary in zip(fleet_prices, own, strict=True):
        print(f"  {price.provider} {price.instance_type}: {price.hourly():.4f} {price.currency}/h from "
              f"{price.effective_from}, {price.note()} ({'written' if summary.changed else 'unchanged'})")
    return 0


# ---- add-price ---------------------------------------------------------------------------
#: the flags of add-price by the field of config.models.DeclaredPrice they set (errors name flags)
_PRICE_FLAGS = {"purchase.price": "--purchase-price", "purchase.life_months": "--life-months",
                "purchase.life_years": "--life-years", "purchase.power_per_hour": "--power-per-hour",
                "purchase": "--purchase-price", "effective_from": "--from"}


def _configure_add_price(parser: argparse.ArgumentParser) -> None:
    from gpucompare.config.models import HOURS_PER_MONTH

    parser.description = (
        "Declare the price of a machine of your own (a rented server's monthly fee, an on-premises "
        "host's amortised cost, a negotiated rate) into the lake's price history. Give exactly one of "
        f"--per-hour, --per-month (÷ {HOURS_PER_MONTH} h) or --purchase-price with --life-months or "
        "--life-years (+ --power-per-hour). Reports show it as price_source 'declared' with --label.")
    parser.add_argument("--provider", required=True, help="the provider name the results carry, e.g. local")
    parser.add_argument("--instance-type", required=True, help="the machine name the results carry, "
                        "e.g. local-cpu")
    parser.add_argument("--region", default=None, help="only in this region (default: every region)")
    parser.add_argument("--market", default=patterns.DEFAULT_MARKET,
                        help=f"{' or '.join(patterns.MARKETS)} (default {patterns.DEFAULT_MARKET})")
    parser.add_argument("--gpu-model", default=None, help="the GPU model, e.g. 'Tesla T4'")
    parser.add_argument("--gpu-count", default=None, help="GPUs of the machine")
    parser.add_argument("--per-hour", default=None, metavar="PRICE", help="price per hour")
    parser.add_argument("--per-month", default=None, metavar="PRICE",
                        help=f"price per month (per hour = PRICE / {HOURS_PER_MONTH})")
    parser.add_argument("--purchase-price", default=None, metavar="PRICE", help="what the machine cost")
    parser.add_argument("--life-months", default=None, help="months the purchase is spread over")
    parser.add_argument("--life-years", default=None, help="years the purchase is spread over")
    parser.add_argument("--power-per-hour", default=None, metavar="PRICE",
                        help="running cost per hour added to the amortised price (electricity, hosting)")
    parser.add_argument("--currency", required=True, help="EUR or USD")
    parser.add_argument("--from", dest="effective_from", default=None, metavar="YYYY-MM-DD",
                        help="the date the price is valid from (default today, UTC; a result is priced "
                             "by the price valid on its date)")
    parser.add_argument("--label", required=True,
                        help="what the price is, shown beside it in every report "
                             "(e.g. 'our rack, invoice 2026-114')")
    _lake_argument(parser)


def declared_price_from_args(args: argparse.Namespace) -> Any:
    """The ``DeclaredPrice`` the flags state (an error names the flag at fault)."""
    from gpucompare.config import validation
    from gpucompare.config.models import DeclaredPrice

    document: dict[str, Any] = {
        "provider": args.provider, "instance_type": args.instance_type, "market": args.market,
        "currency": args.currency, "label": args.label,
        "effective_from": args.effective_from or dt.datetime.now(dt.UTC).date().isoformat(),
    }
    optional = {"region": args.region, "gpu_model": args.gpu_model, "gpu_count": args.gpu_count,
                "per_hour": args.per_hour, "per_month": args.per_month}
    document.update({k: v for k, v in optional.items() if v is not None})
    bought = {"price": args.purchase_price, "life_months": args.life_months,
              "life_years": args.life_years, "power_per_hour": args.power_per_hour}
    if any(v is not None for v in bought.values()):
        document["purchase"] = {k: v for k, v in bought.items() if v is not None}
    try:
        return validation.validate(DeclaredPrice, document)
    except validation.ValidationError as exc:
        flag = _PRICE_FLAGS.get(exc.field, "--" + exc.field.replace("_", "-"))
        raise validation.ValidationError(flag, exc.message, exc.allowed, exc.more) from None


def _run_add_price(args: argparse.Namespace) -> int:
    from gpucompare.config.validation import ValidationError
    from gpucompare.lake import tables as lake
    from gpucompare.lake.storage import LakeError
    from gpucompare.prices import declared

    try:
        price = declared_price_from_args(args)
    except ValidationError as exc:
        raise UsageError(str(exc)) from None
    target = lake.open_lake(lake_location(args))
    try:
        (summary,) = declared.store(target, [price])
    except LakeError as exc:
        raise UsageError(str(exc)) from None
    print(f"declared {price.provider} {price.instance_type} ({price.market}"
          f"{', ' + price.region if price.region else ''}): {price.hourly():.4f} {price.currency}/h "
          f"from {price.effective_from}, {price.note()}; {summary.describe()} in {args.lake}")
    return 0


def _configure_refresh_prices(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--provider", required=True, choices=["aws"])
    parser.add_argument("--region", required=True, help="AWS region, e.g. us-east-1")
    parser.add_argument("--instance-types", default=None,
                        help="comma-separated instance types (default: every GPU type of "
                             "the p3, g4dn, g5, g6, p4d and p5 families)")
    _lake_argument(parser)
    parser.add_argument("--csv", type=Path, default=None,
                        help="also append the new rows to this price CSV (e.g. a file under data/prices)")
    parser.add_argument("--date", type=_date, default=None,
                        help="effective date of the new rows (default today)")
    parser.add_argument("--aws-conn-id", default=None,
                        help="take credentials from this Airflow connection (needs Airflow); "
                             "default: the usual AWS environment / profile chain")


def _run_refresh_prices(args: argparse.Namespace) -> int:
    from gpucompare.lake import tables as lake
    from gpucompare.prices import refresh

    region = args.region
    if not patterns.REGION.fullmatch(region):
        raise UsageError(f"--region {region!r} is not a valid region name (e.g. us-east-1)")
    instance_types = None
    if args.instance_types:
        instance_types = [t.strip() for t in args.instance_types.split(",") if t.strip()]
        bad = [t for t in instance_types if not patterns.INSTANCE_TYPE.fullmatch(t)]
        if bad:
            raise UsageError(f"--instance-types: {bad[0]!r} is not a valid instance type")
    target = lake.open_lake(lake_location(args))
    new_rows = refresh.refresh_aws_to_lake(target, region=region, instance_types=instance_types,
                                           today=args.date, csv_path=args.csv, aws_conn_id=args.aws_conn_id)
    print(f"refreshed {new_rows.num_rows} AWS price row(s) for {region} into {args.lake}")
    return 0


# ---- import-catalog -----------------------------------------------------------------------
def _configure_import_catalog(parser: argparse.ArgumentParser) -> None:
    from gpucompare.prices.catalogs.importer import FORMATS as CATALOG_FORMATS

    parser.add_argument("location", nargs="?", default=None,
                        help="the catalog: a path, file:// or https:// URL (SkyPilot vms.csv, or an Azure "
                             "Retail Prices query such as https://prices.azure.com/api/retail/prices?"
                             "$filter=serviceName eq 'Virtual Machines' and armRegionName eq 'eastus')")
    parser.add_argument("--format", dest="fmt", choices=CATALOG_FORMATS, default=None,
                        help="skypilot (vms.csv of github.com/skypilot-org/skypilot-catalog) or azure")
    parser.add_argument("--provider", default=None, help="the provider the catalog prices, e.g. gcp "
                        "(skypilot: required; azure: azure)")
    parser.add_argument("--date", type=_date, default=None,
                        help="effective date of the prices (default today)")
    parser.add_argument("--shipped", action="store_true",
                        help="import the samples shipped with gpucompare (gcp, azure, lambda, runpod, "
                             "nebius)")
    _lake_argument(parser)


def _run_import_catalog(args: argparse.Namespace) -> int:
    from gpucompare.lake import tables as lake
    from gpucompare.lake.storage import LakeError
    from gpucompare.prices.catalogs import common, importer

    if args.shipped == (args.location is not None):
        raise UsageError("give a catalog LOCATION or --shipped (not both)")
    target = lake.open_lake(lake_location(args))
    try:
        if args.shipped:
            results = importer.import_shipped(target)
        else:
            if args.fmt is None:
                raise UsageError("--format is required with a LOCATION (allowed: skypilot, azure)")
            if args.fmt == "skypilot" and args.provider is None:
                raise UsageError("--provider is required for a SkyPilot catalog (e.g. gcp, lambda, runpod)")
            results = [importer.import_catalog(target, args.location, fmt=args.fmt, provider=args.provider,
                                               effective_from=args.date)]
    except (common.CatalogError, LakeError) as exc:
        raise UsageError(str(exc)) from None
    for result in results:
        print(result.describe())
    totals = importer.coverage(results)
    print(f"stored in {args.lake}: {totals['rows']} price row(s), {totals['providers']} provider(s), "
          f"{totals['instance_types']} instance type(s), {totals['gpu_models']} GPU model(s)")
    return 0


# ---- lake-info ---------------------------------------------------------------------------
def _configure_lake_info(parser: argparse.ArgumentParser) -> None:
    _lake_argument(parser)


def _run_lake_info(args: argparse.Namespace) -> int:
    from gpucompare.lake import tables as lake
    from gpucompare.lake.reading import describe as describe_lake
    from gpucompare.lake.storage import LakeError

    try:
        target = lake.open_lake(lake_location(args, must_exist=True))
    except LakeError as exc:
        raise UsageError(str(exc)) from None
    for line in describe_lake(target):
        print(line)
    return 0


# ---- report, athena-ddl ------------------------------------------------------------------
def _age_years(text: str) -> int:
    if not text.isdigit() or int(text) > 100:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of years between 0 and 100")
    return int(text)


def _configure_report(parser: argparse.ArgumentParser) -> None:
    from gpucompare.reports.report_set import REPORTS

    parser.description = ("Build the report set from the lake: " + ", ".join(REPORTS)
                          + ", index.html, summary.md.")
    _lake_argument(parser)
    parser.add_argument("--out", default=None,
                        help="output directory (local path or s3://bucket/prefix); default: as the reports "
                             "DAG writes, REPORTS/<today>/ published as REPORTS/latest with the day's "
                             "history, REPORTS being the reports setting (GPUCOMPARE_REPORTS or "
                             "[gpucompare] reports)")
    parser.add_argument("--currency", default="EUR", type=str.upper, choices=schema.CURRENCIES,
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
                        help="intervals and ties from the repeats of the last N runs of each configuration "
                             "on its machine, pooled (default 1: the latest run's repeats)")
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
    _lake_argument(parser)
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
        inputs = ReportInputs.from_lake(args.lake)
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
    origin = _origin(args.out, "reports")
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


# ---- compact -----------------------------------------------------------------------------
def _configure_compact(parser: argparse.ArgumentParser) -> None:
    _lake_argument(parser)
    parser.add_argument("--older-than-days", type=int, default=None, metavar="N",
                        help="compact only partitions dated more than N days before today (UTC); "
                             "default: every partition")


def _run_compact(args: argparse.Namespace) -> int:
    from gpucompare.lake import tables as lake
    from gpucompare.lake.storage import LakeError

    if args.older_than_days is not None and args.older_than_days < 0:
        raise UsageError(f"--older-than-days must be >= 0, got {args.older_than_days}")
    before = lake.compaction_cutoff(args.older_than_days)
    try:
        summary = lake.open_lake(lake_location(args, must_exist=True)).compact(before=before)
    except LakeError as exc:
        raise UsageError(str(exc)) from None
    print(f"{args.lake}: {summary.describe()}")
    return 0


# ---- migrate-lake ------------------------------------------------------------------------
def _configure_migrate(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--from", dest="source", required=True,
                        help="a lake in the old Hive layout "
                             "(results/mode=…/date=…/*.parquet, prices/, fx/, …)")
    parser.add_argument("--to", "--lake", dest="lake", default=None,
                        help="the new (Delta) lake: a local path or s3:// (default: the lake setting)")


def _run_migrate(args: argparse.Namespace) -> int:
    from gpucompare.lake import migrate as migration
    from gpucompare.lake import tables as lake
    from gpucompare.lake.storage import LakeError

    try:
        dropped = migration.dropped_columns(args.source)
        counts = migration.migrate(args.source, lake.open_lake(lake_location(args)))
    except (LakeError, migration.MigrationError) as exc:
        raise UsageError(str(exc)) from None
    for kind, columns in dropped.items():
        print(f"{kind}: dropped {len(columns)} column(s) the Delta table does not have: {', '.join(columns)}")
    for kind, (old, new) in counts.items():
        print(f"{kind}: {old} row(s) in {args.source}, {new} row(s) in {args.lake}"
              f"{'' if old == new else '  MISMATCH'}")
    return 0 if all(old == new for old, new in counts.values()) else 1


register("ingest", "validate a bench_tasks results file and write it into the lake",
         _configure_ingest, _run_ingest)
register("import-published", "bring the published reference figures into the lake (target=published)",
         _configure_import_published, _run_import_published)
register("load-prices", "write the shipped price and exchange-rate history and the fleet file's declared "
         "prices into the lake",
         _configure_load_prices, _run_load_prices)
register("add-price", "declare the price of a machine of your own (per hour, per month or an amortised "
         "purchase) into the lake's price history", _configure_add_price, _run_add_price)
register("refresh-prices", "append today's on-demand and spot prices from the AWS APIs",
         _configure_refresh_prices, _run_refresh_prices)
register("import-catalog", "import another provider's price catalog (SkyPilot vms.csv, Azure Retail Prices)",
         _configure_import_catalog, _run_import_catalog)
register("compact", "Delta optimize (compact small files) + vacuum (7-day retention) of the results",
         _configure_compact, _run_compact)
register("migrate-lake", "convert a lake in the old Hive layout into the Delta tables",
         _configure_migrate, _run_migrate)
register("lake-info", "what the lake holds: files and rows per table, results per mode, date and target",
         _configure_lake_info, _run_lake_info)
register("report", "build every report (Parquet + CSV), index.html and summary.md from the lake",
         _configure_report, _run_report)
register("compare", "benchstat-style comparison of two machines, nights or runtimes per configuration",
         _configure_compare, _run_compare)
register("athena-ddl", "write the Athena/Glue DDL of the results lake and the reports for your S3 paths",
         _configure_athena_ddl, _run_athena_ddl)


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


register("plan", "each target's night before it runs: expected time, cost and billed/timed per phase, "
         "from the lake's recorded phases (the cost guard's own estimate)", _configure_plan, _run_plan)


# ---- schema ------------------------------------------------------------------------------
#: what ``schema`` prints: the JSON schema of a model of gpucompare.config.models
SCHEMAS = ("fleet", "trigger", "form")


def _configure_schema(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("what", choices=SCHEMAS, help="fleet: the fleet file; trigger: the manual DAG's "
                        "params; form: the trigger form's Params as the DAG declares them")


def _run_schema(args: argparse.Namespace) -> int:
    import json

    from gpucompare.config import models

    if args.what == "fleet":
        document = models.FleetFile.model_json_schema()
    elif args.what == "trigger":
        document = models.TriggerParams.model_json_schema()
    else:
        document = models.form_fields()
    print(json.dumps(document, indent=2, sort_keys=True))
    return 0


register("schema", "print the JSON schema of the fleet file, the trigger params or the trigger form",
         _configure_schema, _run_schema)

# ---- scaling-run ---------------------------------------------------------------------------
def _configure_scaling_run(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Prepare and deploy the group's hosts, run every point of its scaling profile "
                          "(MXNet's parameter server across the hosts), ingest, tear the hosts down.")
    parser.add_argument("--group", required=True, help="name of a scaling_groups entry")
    parser.add_argument("--fleet", help="fleet file (default: $GPUCOMPARE_FLEET or dags/config/fleet.yaml)")
    _lake_argument(parser)
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


register("scaling-run", "run one scaling group of the fleet file now and ingest its records",
         _configure_scaling_run, _run_scaling_run)


# ---- iam-policy ----------------------------------------------------------------------------
def _configure_iam_policy(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Print the orchestrator role's IAM policy for the fleet file: RunInstances only "
                          "for its ec2 instance types, its instance profiles and the runtimes' AMI owners "
                          "(gpucompare.targets.ec2.iam). Placeholders stay where no value is given.")
    parser.add_argument("--fleet", help="fleet file (default: $GPUCOMPARE_FLEET or the shipped example)")
    parser.add_argument("--instance-type", action="append", default=[], dest="instance_types",
                        help="an EC2 type to allow beyond the fleet's (repeatable; manual runs)")
    parser.add_argument("--account", default="ACCOUNT_ID", help="the AWS account id (12 digits)")
    parser.add_argument("--deployment", default="DEPLOYMENT",
                        help="this deployment's name (GPUCOMPARE_DEPLOYMENT)")
    parser.add_argument("--bucket", default="RESULTS_BUCKET", help="the results bucket")
    parser.add_argument("--tag-guard", action="store_true",
                        help="print instead the service control policy that denies everyone the gpucompare "
                             "tags after launch")


def _run_iam_policy(args: argparse.Namespace) -> int:
    import json
    import re

    from gpucompare import settings
    from gpucompare.config import fleet, validation
    from gpucompare.targets.ec2 import iam

    if args.tag_guard:
        print(json.dumps(iam.tag_guard_policy(), indent=2))
        return 0
    try:
        loaded = fleet.load_fleet(args.fleet)
        specs = [t.spec for t in loaded.targets]
        for value in args.instance_types:
            if not patterns.EC2_INSTANCE_TYPE.fullmatch(value):
                raise UsageError(f"--instance-type: {value!r} is not an EC2 type such as g5.xlarge")
        if args.account != "ACCOUNT_ID" and not re.fullmatch(r"[0-9]{12}", args.account):
            raise UsageError(f"--account: {args.account!r} is not a 12-digit AWS account id")
        if args.deployment != "DEPLOYMENT" and not re.fullmatch(settings.DEPLOYMENT_PATTERN, args.deployment):
            raise UsageError(f"--deployment: {args.deployment!r} is not a deployment name "
                             f"({settings.DEPLOYMENT_PATTERN})")
        if args.bucket != "RESULTS_BUCKET" and not patterns.BUCKET.fullmatch(args.bucket):
            raise UsageError(f"--bucket: {args.bucket!r} is not an S3 bucket name")
        prefix = (loaded.defaults.get("ec2") or {}).get("results_prefix") or "gpucompare"
        policy = iam.orchestrator_policy([*iam.fleet_instance_types(specs), *args.instance_types],
                                         instance_profiles=iam.fleet_instance_profiles(specs),
                                         account=args.account, deployment=args.deployment,
                                         bucket=args.bucket, prefix=prefix)
    except (ValueError, validation.ValidationError) as exc:
        raise UsageError(str(exc)) from None
    print(json.dumps(policy, indent=2))
    return 0


register("iam-policy", "print the orchestrator's IAM policy for the fleet file's ec2 targets",
         _configure_iam_policy, _run_iam_policy)


# ---- dags ----------------------------------------------------------------------------------
def _configure_dags(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="dags_command", required=True, metavar="ACTION")
    install = actions.add_parser("install", help="write one thin DAG file per shipped DAG into DIR")
    install.add_argument("directory", type=Path, metavar="DIR", help="the Airflow DAGs folder")
    install.add_argument("--force", action="store_true",
                         help="overwrite files of the same name that gpucompare did not write")
    actions.add_parser("list", help="the DAGs shipped in the package")


def _run_dags(args: argparse.Namespace) -> int:
    from gpucompare.airflow import dag_files

    if args.dags_command == "list":
        for name in dag_files.dag_names():
            print(name)
        return 0
    written = dag_files.install(args.directory, force=args.force)
    for path in written:
        print(f"wrote {path}")
    print(f"{len(written)} DAG file(s) in {args.directory}; they run the DAGs of the installed gpucompare")
    return 0


register("dags", "put the shipped DAGs into an Airflow DAGs folder", _configure_dags, _run_dags)


# ---- entry point -------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpucompare",
                                     description="gpucompare: results lake, prices and reports")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS.values():
        sub = subparsers.add_parser(command.name, help=command.help, description=command.help)
        command.configure(sub)
        sub.set_defaults(func=command.run)
    return parser


#: The exit code when the reader of the output went away (``gpucompare schema fleet | head``):
#: 128 + SIGPIPE, as the shell's own tools end.
EXIT_BROKEN_PIPE = 141


def main(argv: list[str] | None = None) -> int:
    silence_dependency_notices()  # the commands that import Airflow's API print Starlette's notice
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UsageError as exc:
        print(f"{parser.prog} {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the pipe's reader closed early: end quietly, and keep Python from complaining again
        # when it flushes stdout at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except Exception as exc:  # noqa: BLE001 - every failure ends in one line, never a traceback
        explained = explained_failure(exc, args)
        print(f"{parser.prog} {args.command}: error: {explained or unexpected_failure(exc)}", file=sys.stderr)
        return 2 if explained else 1


def explained_failure(exc: BaseException, args: argparse.Namespace) -> str | None:
    """What to do about ``exc``: an environment's failure (a missing extra, credentials, a local
    path; gpucompare.errors) or a storage failure (lake.storage); None when it is neither."""
    from gpucompare.errors import explain_environment_error
    from gpucompare.lake.storage import explain_storage_error

    explained = explain_environment_error(exc)
    if explained is None:
        storage = explain_storage_error(exc, str(getattr(args, "lake", None) or getattr(args, "out", "")))
        explained = None if storage is None else str(storage)
    return explained


def unexpected_failure(exc: BaseException) -> str:
    """One line for a failure nothing explains (a bug): its type and message, with how to see the
    traceback (``GPUCOMPARE_TRACEBACK=1``, printed then on stderr)."""
    if os.environ.get("GPUCOMPARE_TRACEBACK"):
        import traceback

        traceback.print_exception(exc, file=sys.stderr)
    first = (str(exc).strip().splitlines() or [""])[0][:300]
    return (f"unexpected {type(exc).__name__}: {first} (a bug in gpucompare: please report it with the "
            "output of this command run again with GPUCOMPARE_TRACEBACK=1)")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
