"""The order ``make test`` hands files to its pytest-xdist processes: files with a test marked
``slow`` first, the rest after, each group in collection order (a pytest plugin: the Makefile
loads it with ``-p tests.support.slow_first`` next to ``--dist loadfile --no-loadscope-reorder``).

With ``--dist loadfile`` a file goes whole to one process, the next file to whichever process is
free. xdist's own order (files with the most tests first) left the system files, minutes long and
of few tests each, for the end, where one process ran them while the other had nothing left.
Started first, the long files run side by side and the short ones fill in behind them.
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    slow_files = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow_files)  # stable: collection order within each group
