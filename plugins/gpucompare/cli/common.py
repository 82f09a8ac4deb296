"""What the command groups of ``gpucompare`` share: the :class:`Command` record each group
lists, the ``--lake`` flag and where a command's lake and reports come from (said on stderr),
and the date argument type."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpucompare import settings
from gpucompare.errors import UsageError


@dataclass(frozen=True)
class Command:
    """One subcommand: its name, help line, the function that adds its arguments and the one
    that runs it and returns an exit code; ``reads_only``: it never commits to the lake (its
    storage errors then say nothing of commits)."""

    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    reads_only: bool = False


def lake_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lake", default=None, help="lake URI: a local path or s3://bucket/prefix "
                        "(default: the lake setting, GPUCOMPARE_LAKE or [gpucompare] lake, the one the "
                        "DAGs use; S3 endpoint from AWS_ENDPOINT_URL if set)")


def location_origin(flag: str | None, name: str) -> str:
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
    origin = location_origin(args.lake, "lake")
    args.lake = uri  # from here on: a failure below names this lake (explained_failure reads it)
    print(f"gpucompare {args.command}: lake {uri} (from {origin})", file=sys.stderr)
    if settings.is_remote(uri):
        print(f"gpucompare {args.command}: S3 identity {s3_identity()}", file=sys.stderr)
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
    return uri


def s3_identity() -> str:
    """Which identity the command's S3 calls use (``lake.identity``): the ``lake_conn_id``
    connection if this machine's Airflow has it, else the environment."""
    from gpucompare.lake.identity import s3_access

    return s3_access().describe()


def parse_date(text: str) -> dt.date:
    """An argparse type: a date YYYY-MM-DD."""
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date YYYY-MM-DD") from None
