"""``gpucompare dags install|list``: the shipped DAGs put into an Airflow DAGs folder (a thin layer
over :mod:`gpucompare.airflow.dag_files`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from gpucompare.cli.common import Command


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


COMMANDS: tuple[Command, ...] = (
    Command("dags", "put the shipped DAGs into an Airflow DAGs folder", _configure_dags, _run_dags),
)
