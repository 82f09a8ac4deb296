"""``gpucompare ingest|compact|migrate-lake|lake-info``: the commands that write, tidy, convert
and describe the results lake (a thin layer over :mod:`gpucompare.lake`)."""

from __future__ import annotations

import argparse

from gpucompare.cli.common import Command, lake_argument, lake_location
from gpucompare.config import patterns
from gpucompare.errors import UsageError
from gpucompare.lake import schema
from gpucompare.targets.bundle import local_code_hash


# ---- ingest ------------------------------------------------------------------------------
def _configure_ingest(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--results", required=True,
                        help="JSON Lines file written by bench_tasks: a local path or s3://bucket/key")
    lake_argument(parser)
    parser.add_argument("--provider", required=True, help="e.g. aws, leadergpu, local")
    parser.add_argument("--instance-type", required=True, help="the provider's machine name, e.g. g5.xlarge")
    parser.add_argument("--region", default=None, help="provider region, e.g. us-east-1")
    parser.add_argument("--market", default=patterns.DEFAULT_MARKET, choices=patterns.MARKETS)
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
    parser.add_argument("--replace", action="store_true",
                        help="replace the run's rows even when they were measured on another machine "
                             "(without it such a run id is refused, exit 2); says what it replaces")


def _run_ingest(args: argparse.Namespace) -> int:
    from gpucompare.lake import ingest as lake_ingest
    from gpucompare.lake import tables as lake
    from gpucompare.lake.rows import IngestError
    from gpucompare.lake.storage import LakeError

    context = lake_ingest.RunContext(provider=args.provider, instance_type=args.instance_type,
                                     region=args.region, market=args.market, target=args.target,
                                     source=args.source, dag_run_id=args.dag_run_id)
    target = lake.open_lake(lake_location(args))
    try:
        summary = lake_ingest.ingest_results(target, args.results, context, run_id=args.run_id,
                                             code_hash=args.code_hash or local_code_hash(),
                                             replace=args.replace)
    except (IngestError, LakeError) as exc:
        raise UsageError(str(exc)) from None
    print(f"ingested {args.results} into {args.lake}: {summary.describe()}")
    return 0


# ---- compact -----------------------------------------------------------------------------
def _configure_compact(parser: argparse.ArgumentParser) -> None:
    lake_argument(parser)
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


# ---- lake-info ---------------------------------------------------------------------------
def _configure_lake_info(parser: argparse.ArgumentParser) -> None:
    lake_argument(parser)


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


COMMANDS: tuple[Command, ...] = (
    Command("ingest", "validate a bench_tasks results file and write it into the lake",
            _configure_ingest, _run_ingest),
    Command("compact", "Delta optimize (compact small files) + vacuum (7-day retention) of the results",
            _configure_compact, _run_compact),
    Command("migrate-lake", "convert a lake in the old Hive layout into the Delta tables",
            _configure_migrate, _run_migrate),
    Command("lake-info", "what the lake holds: files and rows per table, results per mode, date and target",
            _configure_lake_info, _run_lake_info, reads_only=True),
)
