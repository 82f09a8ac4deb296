"""The report history under real concurrency and SIGKILL: readers always see a whole day.

Two real processes write the same day's history over and over (a rerun while the
scheduled build runs) while this process reads it; then writers are SIGKILLed at random
moments. Each write goes to a hidden temporary file of its own and is renamed into place,
so a reader sees one writer's complete table or the other's, never a mix or a torn file,
and a killed writer leaves at most a hidden temporary file that no reader picks up.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import signal
import subprocess
import sys
import time

import pyarrow as pa
import pyarrow.parquet as pq

import gpucompare
from gpucompare.reports.publish import write_history
from gpucompare.reports.report_set import HISTORY_TABLES
from tests.conftest import REPO_ROOT

DAY = dt.date(2026, 11, 30)
WRITER = """
import datetime as dt, sys
import pyarrow.parquet as pq
from gpucompare.reports.publish import write_history
from gpucompare.reports.report_set import HISTORY_TABLES
table = pq.read_table(sys.argv[1])
tables = {name: table for name in HISTORY_TABLES}
print("ready", flush=True)
for _ in range(int(sys.argv[3])):
    write_history(tables, sys.argv[2], dt.date(2026, 11, 30))
"""


def _table(rows: int, marker: str) -> pa.Table:
    return pa.table({"network": [marker] * rows, "cost_per_million": [float(i) for i in range(rows)]})


def _writer(source, root, rounds):
    env = dict(os.environ, PYTHONPATH=f"{REPO_ROOT / 'plugins'}{os.pathsep}{REPO_ROOT}")
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(source), str(root), str(rounds)],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )


def _read_day(root) -> pa.Table:
    history = gpucompare.read_history("cost_per_million", reports=str(root))
    return pa.Table.from_pandas(history, preserve_index=False)


def test_concurrent_writers_of_one_day_never_show_a_torn_or_mixed_table(tmp_path):
    small, large = tmp_path / "small.parquet", tmp_path / "large.parquet"
    pq.write_table(_table(10, "small"), small)
    pq.write_table(_table(50_000, "large"), large)
    writers = [_writer(small, tmp_path / "reports", 30), _writer(large, tmp_path / "reports", 30)]
    reads, seen = 0, set()
    try:
        while any(w.poll() is None for w in writers):
            if (tmp_path / "reports" / "report_history").exists():
                try:
                    day = _read_day(tmp_path / "reports")
                except FileNotFoundError:  # the listing raced a rename: no data read, retry
                    continue
                if day.num_rows == 0:  # the folders exist but no day is renamed in yet: no history
                    continue
                markers = set(day["network"].to_pylist())
                assert (len(markers), day.num_rows) in ((1, 10), (1, 50_000)), (markers, day.num_rows)
                seen |= markers
                reads += 1
    finally:
        for w in writers:
            w.wait(timeout=120)
    assert [w.returncode for w in writers] == [0, 0]
    assert reads > 5 and seen  # the reader really ran while they wrote
    print(f"{reads} whole reads while two writers wrote 30 times each; tables seen: {sorted(seen)}")
    folder = tmp_path / "reports" / "report_history" / "cost_per_million" / f"report_date={DAY}"
    assert sorted(p.name for p in folder.iterdir()) == ["cost_per_million.parquet"]  # no temporary left


def test_a_writer_killed_at_any_moment_leaves_a_whole_day_or_the_previous_one(tmp_path):
    old, new = tmp_path / "old.parquet", tmp_path / "new.parquet"
    pq.write_table(_table(20, "old"), old)
    pq.write_table(_table(200_000, "new"), new)
    root = tmp_path / "reports"
    tables = {name: pq.read_table(old) for name in HISTORY_TABLES}
    write_history(tables, str(root), DAY)
    rng = random.Random(12)
    outcomes = {"old": 0, "new": 0}
    folder = root / "report_history" / "cost_per_million" / f"report_date={DAY}"
    for _ in range(8):
        writer = _writer(new, root, 1)
        assert writer.stdout.readline().strip() == "ready"  # imports done: the writes start now
        time.sleep(rng.uniform(0.0, 0.4))  # before, during or after the six writes
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=60)
        day = _read_day(root)
        [marker] = set(day["network"].to_pylist())
        assert day.num_rows == {"old": 20, "new": 200_000}[marker]
        outcomes[marker] += 1
        # a new day for the next round: the previous state again
        write_history(tables, str(root), DAY)
    leftovers = [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]
    # hidden temporaries a killed writer may leave are never read as data
    assert _read_day(root).num_rows == 20
    assert all(name.startswith(".") for name in leftovers)
    print(f"SIGKILL outcomes over 8 kills: {outcomes}, hidden temporaries left: {len(leftovers)}")
