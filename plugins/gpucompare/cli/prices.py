"""``gpucompare import-published|load-prices|add-price|refresh-prices|import-catalog``: the commands
that bring prices and the published figures into the lake (a thin layer over :mod:`gpucompare.prices`)."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path
from typing import Any

from gpucompare.cli.common import Command, lake_argument, lake_location, parse_date
from gpucompare.config import patterns
from gpucompare.errors import UsageError


# ---- import-published --------------------------------------------------------------------
def _configure_import_published(parser: argparse.ArgumentParser) -> None:
    from gpucompare.prices import published

    parser.add_argument("--results", type=Path, default=published.SHIPPED_RESULTS,
                        help="published results CSV (default: the shipped copy)")
    parser.add_argument("--prices", type=Path, default=published.SHIPPED_PRICES,
                        help="published prices CSV (default: the shipped copy)")
    parser.add_argument("--scaling", type=Path, default=published.SHIPPED_SCALING,
                        help="published scaling CSV (default: the shipped copy)")
    lake_argument(parser)


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
    lake_argument(parser)


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
    lake_argument(parser)


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
    warning = declared.unmatched_warning(target, price)
    if warning:
        print(f"gpucompare add-price: {warning}", file=sys.stderr)
    return 0


def effective_date_argument(parser: argparse.ArgumentParser, rows: str) -> None:
    """``--date``: the date the price rows a command writes take effect (default today), one
    parse for refresh-prices and import-catalog."""
    parser.add_argument("--date", type=parse_date, default=None,
                        help=f"effective date of {rows} (default today)")


def _configure_refresh_prices(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--provider", required=True, choices=["aws"])
    parser.add_argument("--region", required=True, help="AWS region, e.g. us-east-1")
    parser.add_argument("--instance-types", default=None,
                        help="comma-separated instance types (default: every GPU type of "
                             "the p3, g4dn, g5, g6, p4d and p5 families)")
    lake_argument(parser)
    parser.add_argument("--csv", type=Path, default=None,
                        help="also append the new rows to this price CSV (e.g. a file under data/prices)")
    effective_date_argument(parser, "the new rows")
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
    effective_date_argument(parser, "the prices")
    parser.add_argument("--shipped", action="store_true",
                        help="import the samples shipped with gpucompare (gcp, azure, lambda, runpod, "
                             "nebius)")
    lake_argument(parser)


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


COMMANDS: tuple[Command, ...] = (
    Command("import-published", "bring the published reference figures into the lake (target=published)",
            _configure_import_published, _run_import_published),
    Command("load-prices", "write the shipped price and exchange-rate history and the fleet file's declared "
            "prices into the lake",
            _configure_load_prices, _run_load_prices),
    Command("add-price", "declare the price of a machine of your own (per hour, per month or an amortised "
            "purchase) into the lake's price history", _configure_add_price, _run_add_price),
    Command("refresh-prices", "append today's on-demand and spot prices from the AWS APIs",
            _configure_refresh_prices, _run_refresh_prices),
    Command("import-catalog",
            "import another provider's price catalog (SkyPilot vms.csv, Azure Retail Prices)",
            _configure_import_catalog, _run_import_catalog),
)
