"""The report cache (reports.newest) under real concurrency and SIGKILL.

Three real processes find every series' newest partition over and over, through the cache, while
this process ingests new nights into the lake (real ingest commits) and one of them keeps removing
the cache (a report's first run, or a compaction's): each answer is checked, in its process,
against a scan of every file of the same snapshot with no cache. Then a process that rewrites the
cache in a loop is SIGKILLed at random moments: the cache is written under a hidden temporary name
and renamed into place, so after each kill it is absent (killed before its first write) or whole,
and whole means right.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from gpucompare.lake.tables import Lake, open_lake
from gpucompare.reports import newest
from gpucompare.reports.inputs import ResultFiles, connect
from tests.conftest import REPO_ROOT
from tests.support.reports_data import ingest, record

FINDER = """
import json, sys
from pathlib import Path
from gpucompare.lake.tables import open_lake
from gpucompare.reports import newest
from gpucompare.reports.inputs import ResultFiles, connect

lake, mode, rounds = open_lake(sys.argv[1]), sys.argv[2], int(sys.argv[3])
cache = newest.NewestCache(lake)
print("ready", flush=True)
checked = wrong = from_cache = 0
for _ in range(rounds):
    if mode == "remove":
        Path(cache.path).unlink(missing_ok=True)
    con = connect()
    files = ResultFiles.of(lake, con, lake.snapshot("results"))
    cold = files.run(lambda: newest.scan(con, files, None))
    if mode == "rewrite":  # every round writes the cache anew
        cache.save(cold)
    found = files.run(lambda: newest.find_newest(con, files, cache))
    con.close()
    checked += 1
    from_cache += found.files_read < len(files.relative)
    wrong += sorted(found.groups.to_pylist(), key=str) != sorted(cold.groups.to_pylist(), key=str)
print(json.dumps({"checked": checked, "wrong": wrong, "from_cache": from_cache}), flush=True)
"""

NIGHT = dt.date(2026, 11, 1)


def _process(lake: Lake, mode: str, rounds: int) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=f"{REPO_ROOT / 'plugins'}{os.pathsep}{REPO_ROOT}")
    process = subprocess.Popen([sys.executable, "-c", FINDER, lake.uri, mode, str(rounds)], env=env,
                               stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    return process


def _night(lake: Lake, night: int) -> None:
    day = NIGHT + dt.timedelta(days=night)
    for i, machine in enumerate(("g5.xlarge", "g6.xlarge")):
        ingest(lake, [record(batch_size=b, images_per_sec=100.0 * (i + 1) + night, night=day, minute=b % 7)
                      for b in (16, 32, 64) if (night + b + i) % 5], instance_type=machine)


def _cold(lake: Lake, relative: frozenset[str]) -> list[dict]:
    con = connect()
    try:
        files = ResultFiles.of(lake, con, lake.snapshot("results"))
        return sorted(files.run(lambda: newest.scan(con, files, relative)).groups.to_pylist(), key=str)
    finally:
        con.close()


def test_finders_racing_ingests_and_a_remover_always_answer_as_a_full_scan(tmp_path: Path) -> None:
    lake = open_lake(str(tmp_path / "lake"))
    for night in range(3):
        _night(lake, night)
    finders = [_process(lake, "use", 40), _process(lake, "use", 40), _process(lake, "remove", 40)]
    night = 3
    while any(f.poll() is None for f in finders):
        _night(lake, night)  # a new version (new files) while the finders read and write the cache
        night += 1
    results = [json.loads(f.communicate()[0].strip().splitlines()[-1]) for f in finders]
    assert [f.returncode for f in finders] == [0, 0, 0]
    assert all(r == {"checked": 40, "wrong": 0, "from_cache": r["from_cache"]} for r in results), results
    assert results[0]["from_cache"] + results[1]["from_cache"] > 0  # the cache was in play
    assert night > 4  # ingests happened while they ran
    print(f"{night - 3} night(s) ingested while the finders ran: {results}")
    kept = newest.NewestCache(lake).load()
    assert kept is not None
    assert sorted(kept.groups.to_pylist(), key=str) == _cold(lake, kept.files)


def test_a_cache_writer_killed_at_any_moment_leaves_no_cache_or_a_whole_one(tmp_path: Path) -> None:
    lake = open_lake(str(tmp_path / "lake"))
    for night in range(6):
        _night(lake, night)
    outcomes = {"absent": 0, "whole": 0}
    rng = random.Random(20261206)
    for _ in range(12):
        writer = _process(lake, "rewrite", 10_000)  # rewrites the cache in a loop
        time.sleep(rng.uniform(0.05, 1.0))
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        kept = newest.NewestCache(lake).load()
        if kept is None:
            assert not Path(newest.NewestCache(lake).path).exists()  # absent, never unreadable
            outcomes["absent"] += 1
        else:
            assert sorted(kept.groups.to_pylist(), key=str) == _cold(lake, kept.files)
            outcomes["whole"] += 1
    assert outcomes["whole"] > 0, outcomes
    print(f"cache after 12 SIGKILLs of a writer: {outcomes}")
