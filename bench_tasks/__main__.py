"""Entry point: ``python -m bench_tasks ...`` (see ``bench_tasks.cli``)."""

from __future__ import annotations

import sys

from bench_tasks.cli import main

if __name__ == "__main__":
    sys.exit(main())
