"""The ``gpucompare`` command line: the registry of subcommands, the parser built from it and
:func:`main`.

Each command group (a module of this package) lists its subcommands as ``COMMANDS``, a tuple of
:class:`~gpucompare.cli.common.Command` (a name, a help line, a function that adds its arguments
and the function that runs it and returns an exit code); :data:`GROUPS` is the one list of the
groups, in the order ``gpucompare --help`` shows them. To add a subcommand, add a ``Command`` to
the group it belongs to (or a new group module to :data:`GROUPS`). The library modules a command
calls are imported inside its functions, so ``import gpucompare.cli`` stays light, and no library
module adds a parser of its own.

Bad input ends with exit code 2 and a one-line message naming the flag or field at fault;
nothing is written then.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable
from types import ModuleType

from gpucompare.airflow.notices import silence_dependency_notices
from gpucompare.cli import dags, fleet, lake, plan, prices, reports, scaling
from gpucompare.cli.common import Command
from gpucompare.errors import UsageError

#: the command groups, in the order of ``gpucompare --help``
GROUPS: tuple[ModuleType, ...] = (lake, prices, reports, plan, fleet, scaling, dags)


def collect(groups: Iterable[ModuleType]) -> dict[str, Command]:
    """Every group's commands by name (a name may be registered once)."""
    commands: dict[str, Command] = {}
    for group in groups:
        for command in group.COMMANDS:
            if command.name in commands:
                raise ValueError(f"subcommand {command.name!r} is already registered")
            commands[command.name] = command
    return commands


COMMANDS: dict[str, Command] = collect(GROUPS)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpucompare",
                                     description="gpucompare: results lake, prices and reports")
    from gpucompare import __version__

    parser.add_argument("--version", action="version", version=f"gpucompare {__version__}")
    parser.add_argument("--traceback", action="store_true",
                        help="on an unexpected failure (a bug), also print Python's traceback")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS.values():
        sub = subparsers.add_parser(command.name, help=command.help, description=command.help)
        command.configure(sub)
        sub.set_defaults(func=command.run, reads_only=command.reads_only)
    return parser


#: The exit code when the reader of the output went away (``gpucompare schema fleet | head``):
#: 128 + SIGPIPE, as the shell's own tools end.
EXIT_BROKEN_PIPE = 141


def main(argv: list[str] | None = None) -> int:
    from gpucompare.lake import panics

    silence_dependency_notices()  # the commands that import Airflow's API print Starlette's notice
    panics.hold_failed_writes()  # a failed delta-rs write's late panic text stays off the terminal
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
        unexpected = None if explained else unexpected_failure(exc, show=args.traceback)
        print(f"{parser.prog} {args.command}: error: {explained or unexpected}", file=sys.stderr)
        code = 2 if explained else 1
        panics.exit_if_held(code)  # returns unless a failed write is held: then ends the process here
        return code


def explained_failure(exc: BaseException, args: argparse.Namespace) -> str | None:
    """What to do about ``exc``: an environment's failure (a missing extra, credentials, a local
    path; gpucompare.errors) or a storage failure (lake.storage); None when it is neither."""
    from gpucompare.errors import explain_environment_error
    from gpucompare.lake.storage import explain_storage_error

    explained = explain_environment_error(exc)
    if explained is None:
        storage = explain_storage_error(exc, str(getattr(args, "lake", None) or getattr(args, "out", "")),
                                        writes=not getattr(args, "reads_only", False))
        explained = None if storage is None else str(storage)
    return explained


def unexpected_failure(exc: BaseException, *, show: bool = False) -> str:
    """One line for a failure nothing explains (a bug): its type and message, with how to see the
    traceback (``gpucompare --traceback …``; ``show``: print it now, on stderr)."""
    if show:
        import traceback

        traceback.print_exception(exc, file=sys.stderr)
    first = (str(exc).strip().splitlines() or [""])[0][:300]
    return (f"unexpected {type(exc).__name__}: {first} (a bug in gpucompare: please report it with the "
            "output of this command run again as gpucompare --traceback …)")
