"""The ``gpucompare`` command line (``python -m gpucompare`` and the console script
``gpucompare = gpucompare.cli:main``): one module per command group (lake, prices, reports, plan,
fleet, scaling, dags), :mod:`~gpucompare.cli.common` for what they share and
:mod:`~gpucompare.cli.registry` that builds the parser from the groups and runs a command."""

from __future__ import annotations

from gpucompare.cli.registry import EXIT_BROKEN_PIPE, build_parser, main

__all__ = ["EXIT_BROKEN_PIPE", "build_parser", "main"]
