"""``python -m gpucompare.cli``: the same command line as ``python -m gpucompare``."""

from __future__ import annotations

import sys

from gpucompare.cli import main

if __name__ == "__main__":
    sys.exit(main())
