"""Figures for the catalog importer (issue 13): parse speed, killed imports, concurrent imports.

    .venv/bin/python scripts/bench_catalog_import.py [--rows 20000] [--kills 6] [--races 3]

Prints one line per measurement. The kill and race trials are the ones
tests/system/test_catalog_concurrency.py
runs once, repeated: real ``python -m gpucompare import-catalog`` processes on a local Delta lake,
SIGKILL at spread-out moments, and five importers at once (three of them the same catalog).
"""

from __future__ import annotations

import argparse
import datetime as dt
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "plugins")]

from gpucompare.lake import tables as lake  # noqa: E402
from gpucompare.prices.catalogs import importer, skypilot  # noqa: E402

HEADER = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,Region,GpuInfo,SpotPrice\n"
KEY = ("provider", "instance_type", "region", "market", "effective_from")


def sample_path(provider: str) -> Path:
    return next(s.path for s in importer.samples() if s.provider == provider)


def big_catalog(path: Path, rows: int) -> Path:
    lines = [f"gpu_{n % 7}x,A100,{n % 7 + 1},8,64,{1 + n % 97 / 10},r{n},,{0.5 + n % 13 / 10}"
             for n in range(rows)]
    path.write_text(HEADER + "\n".join(lines) + "\n")
    return path


def command(uri: str, path: Path, provider: str) -> list[str]:
    return [sys.executable, "-m", "gpucompare", "import-catalog", "--format", "skypilot", "--provider",
            provider, str(path), "--lake", uri, "--date", "2026-11-30"]


def start(cmd: list[str]) -> subprocess.Popen[str]:
    import os

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "plugins")])}
    return subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def stored(uri: str) -> tuple[Counter, int]:
    """Rows per provider and how many keys are stored twice."""
    target = lake.open_lake(uri)
    if not target.has_table("prices"):
        return Counter(), 0
    table = target.read_kind("prices")
    keys = list(zip(*(table[c].to_pylist() for c in KEY), strict=True))
    return Counter(table["provider"].to_pylist()), len(keys) - len(set(keys))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--kills", type=int, default=6)
    parser.add_argument("--races", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-catalog-"))
    big = big_catalog(work / "vms.csv", args.rows)

    started = time.perf_counter()
    result = skypilot.parse_skypilot(big.read_bytes(), provider="x", effective_from=dt.date(2026, 11, 30),
                                     source="bench")
    parse_s = time.perf_counter() - started
    print(f"parse+check: {args.rows} catalog rows -> {result.rows.num_rows} price rows in {parse_s:.2f} s "
          f"({args.rows / parse_s:,.0f} rows/s)")

    outcomes: Counter = Counter()
    duplicates = 0
    for trial in range(args.kills):
        uri = str(work / f"kill-{trial}")
        assert start(command(uri, sample_path("lambda"), "lambda")).wait(timeout=300) == 0
        victim = start(command(uri, big, "bigcloud"))
        delay = 0.2 + trial * (parse_s * 1.6 / max(args.kills - 1, 1))
        time.sleep(delay)
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=60)
        counts, twice = stored(uri)
        duplicates += twice
        outcomes["absent" if counts["bigcloud"] == 0 else
                 "complete" if counts["bigcloud"] == 2 * args.rows else "PARTIAL"] += 1
        assert start(command(uri, big, "bigcloud")).wait(timeout=300) == 0
        counts, twice = stored(uri)
        duplicates += twice
        outcomes["rerun complete" if counts["bigcloud"] == 2 * args.rows else "RERUN WRONG"] += 1
    print(f"SIGKILL trials: {args.kills} (delays 0.2 to {0.2 + parse_s * 1.6:.1f} s): {dict(outcomes)}, "
          f"duplicate rows: {duplicates}")

    races: Counter = Counter()
    duplicates = 0
    for trial in range(args.races):
        uri = str(work / f"race-{trial}")
        jobs = [("lambda", sample_path("lambda"))] * 3 + [("gcp", sample_path("gcp")),
                                                               ("runpod", sample_path("runpod"))]
        procs = [start(command(uri, path, provider)) for provider, path in jobs]
        codes = [p.wait(timeout=300) for p in procs]
        races["exit 0"] += codes.count(0)
        races["exit != 0 (re-run)"] += len(codes) - codes.count(0)
        for code, (provider, path) in zip(codes, jobs, strict=True):
            if code != 0:
                assert start(command(uri, path, provider)).wait(timeout=300) == 0
        counts, twice = stored(uri)
        duplicates += twice
        expected = {s.provider: importer.read_sample(s).rows.num_rows
                    for s in importer.samples() if s.provider in ("lambda", "gcp", "runpod")}
        races["lake right" if counts == Counter(expected) else "LAKE WRONG"] += 1
    print(f"concurrent imports: {args.races} trials x 5 processes: {dict(races)}, "
          f"duplicate rows: {duplicates}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
