"""``python -m gpucompare``: the command line of the lake, prices and reports."""

from __future__ import annotations

import sys

from gpucompare.cli import main

if __name__ == "__main__":
    sys.exit(main())
