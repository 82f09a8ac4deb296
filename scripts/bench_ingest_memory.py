"""Memory of ingest in bytes, and the report's time and memory against distinct batch sizes.

    .venv/bin/python scripts/bench_ingest_memory.py [--only ingest,report] [--counts 3000,10000]
        [--sizes 100,1000,10000] [--work DIR]

* ingest: files of valid records whose ``error`` holds ~64 KiB each (3,000 records = ~206 MB,
  10,000 = ~688 MB), ingested by ``python -m gpucompare ingest`` as a process of its own; peak
  RSS of that process (``ru_maxrss`` of the one child waited for), wall time and exit code;
  then the same file again under another code hash (a re-ingest: the run's files replaced);
* report: a lake of one run with N distinct batch sizes (one record each), then
  ``python -m gpucompare report`` as a process; peak RSS, wall time and exit code.

Prints Markdown tables for the closing note. Figures, not pass/fail: the machine is shared.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
for path in (REPO, REPO / "plugins"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from bench_tasks.record_fields import empty_record  # noqa: E402
from bench_tasks.record_text import MAX_ERROR_BYTES  # noqa: E402

RUN = "bench-memory"


def _record(index: int, *, error_bytes: int) -> dict:
    started = dt.datetime(2026, 11, 30, 2, 0, tzinfo=dt.UTC) + dt.timedelta(seconds=index % 14_400)
    failed = error_bytes > 0
    speed = 10.0 + index % 7
    return empty_record(
        run_id=RUN, config_id=f"score-resnet-50-b{index + 1}-cpu", mode="score", network="resnet-50",
        image_shape="3,224,224", dtype="float32", batch_size=index + 1, per_device_batch=index + 1,
        devices=["cpu:0"], device_kind="cpu", gpu_count=1, num_nodes=1, warmup_batches=5, timed_batches=10,
        repeats=3, images_per_sec=None if failed else speed, cv=None if failed else 0.01,
        images_per_sec_samples=[] if failed else [speed] * 3, status="error" if failed else "ok",
        error=(f"{index}:" + "x" * error_bytes)[:error_bytes] if failed else None,
        started_at=started.isoformat(), finished_at=(started + dt.timedelta(seconds=1)).isoformat(),
        host="bench1",
    )


def write_file(path: Path, count: int, *, error_bytes: int = 0) -> int:
    with open(path, "w", encoding="utf-8") as handle:
        for index in range(count):
            handle.write(json.dumps(_record(index, error_bytes=error_bytes)) + "\n")
    return path.stat().st_size


def measure(command: list[str]) -> tuple[int, float, float, str]:
    """(exit code, wall seconds, peak RSS in MB, last stderr line) of ``command`` run through a
    fresh Python process, so ``RUSAGE_CHILDREN`` holds that one command only."""
    probe = (
        "import resource, subprocess, sys, time, json\n"
        "t = time.perf_counter()\n"
        "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "w = time.perf_counter() - t\n"
        "rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024\n"
        "tail = (p.stderr.strip().splitlines() or [''])[-1][:160]\n"
        "print(json.dumps([p.returncode, w, rss, tail]))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "plugins")])}
    done = subprocess.run([sys.executable, "-c", probe, *command], capture_output=True, text=True, env=env,
                          check=True)
    code, wall, rss, tail = json.loads(done.stdout.strip().splitlines()[-1])
    return code, wall, rss, tail


def ingest_command(lake: Path, results: Path, code_hash: str = "0123456789abcdef") -> list[str]:
    return [sys.executable, "-m", "gpucompare", "ingest", "--results", str(results), "--lake", str(lake),
            "--provider", "local", "--instance-type", "cpu", "--run-id", RUN,
            "--code-hash", code_hash]


def bench_ingest(work: Path, counts: list[int]) -> None:
    print("| records | file size | ingest | exit | wall | peak RSS |")
    print("| ---: | ---: | --- | ---: | ---: | ---: |")
    error_bytes = MAX_ERROR_BYTES - 512  # ~64 KiB of text in every record
    for count in counts:
        results = work / f"big-{count}.jsonl"
        size = write_file(results, count, error_bytes=error_bytes)
        lake = work / f"lake-{count}"
        for what, code_hash in (("first", "0123456789abcdef"), ("re-ingest", "fedcba9876543210")):
            code, wall, rss, tail = measure(ingest_command(lake, results, code_hash))
            print(f"| {count:,} | {size / 1e6:,.0f} MB | {what} | {code} | {wall:.1f} s | {rss:,.0f} MB |"
                  + ("" if code == 0 else f" {tail}"), flush=True)
        results.unlink()
        shutil.rmtree(lake, ignore_errors=True)


def bench_report(work: Path, sizes: list[int]) -> None:
    print("| distinct batch sizes | exit | wall | peak RSS |")
    print("| ---: | ---: | ---: | ---: |")
    for size in sizes:
        results = work / f"sizes-{size}.jsonl"
        write_file(results, size)
        lake = work / f"lake-sizes-{size}"
        code, _, _, tail = measure(ingest_command(lake, results))
        if code != 0:
            print(f"| {size:,} | ingest {code} | | | {tail}")
            continue
        out = work / f"out-{size}"
        code, wall, rss, tail = measure([sys.executable, "-m", "gpucompare", "report", "--lake", str(lake),
                                          "--out", str(out)])
        print(f"| {size:,} | {code} | {wall:.1f} s | {rss:,.0f} MB |" + ("" if code == 0 else f" {tail}"),
              flush=True)
        shutil.rmtree(lake, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)
        results.unlink()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="ingest,report")
    parser.add_argument("--counts", default="3000,10000")
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="gpucompare-bench-memory-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        if "ingest" in args.only:
            bench_ingest(work, [int(c) for c in args.counts.split(",")])
        if "report" in args.only:
            bench_report(work, [int(s) for s in args.sizes.split(",")])
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
