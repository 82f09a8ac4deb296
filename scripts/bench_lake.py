"""Measurements of the Delta lake: ingest time, ingest memory, concurrent writers, SIGKILL.

    .venv/bin/python scripts/bench_lake.py [--only ingest,memory,concurrency,kill] [--trials N]
        [--s3]   # also the concurrency and kill trials against moto's S3 server (started here)

* ingest: one night's run of one machine (54 configurations) into a lake that already holds
  30 nights, in-process (``lake_ingest.ingest_results``) and as the command (``python -m gpucompare
  ingest``, interpreter start included), five times each;
* memory: 200,000 records (~176 MB of JSON Lines) ingested by the command; peak RSS of that
  process (``ru_maxrss`` of the child);
* concurrency: per trial, two earlier runs compacted, then 4 ingests + a changed re-ingest of
  an earlier run + a compaction at once, each a process; rows per run read back by the product
  and by a plain ``deltalake`` reader;
* kill: SIGKILL of an ingest (12,000 records) and of a compaction at several moments; the
  interrupted run must be wholly there or wholly absent, every earlier row intact, and a
  re-run must complete it with no duplicate.

Prints Markdown tables (what was tried, how often, what happened) for the closing note.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
for path in (REPO, REPO / "plugins"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import pyarrow as pa  # noqa: E402

from gpucompare.lake import ingest as lake_ingest  # noqa: E402
from gpucompare.lake import tables as lake  # noqa: E402
from tests.support.lake_support import compact_command, ingest_command, run_records, start, write_records  # noqa: E402

CONTEXT = lake_ingest.RunContext(provider="local", instance_type="cpu")


def per_run(uri: str) -> tuple[Counter, Counter, int]:
    """Rows per run (product, plain Delta reader) and duplicated (run, configuration) keys."""
    from deltalake import DeltaTable

    target = lake.open_lake(uri)
    product = target.results_table(columns=["run_id", "config_id"])
    plain = pa.table(
        DeltaTable(
            target.table_uri("results"), storage_options=target.storage_options or None
        ).to_pyarrow_table(columns=["run_id", "config_id"])
    )
    keys = list(zip(product["run_id"].to_pylist(), product["config_id"].to_pylist(), strict=True))
    return (
        Counter(product["run_id"].to_pylist()),
        Counter(plain["run_id"].to_pylist()),
        len(keys) - len(set(keys)),
    )


def bench_ingest(work: Path) -> None:
    uri = str(work / "ingest-lake")
    target = lake.open_lake(uri)
    for night in range(30):
        run = f"night-{night}"
        lake_ingest.ingest_results(
            target, write_records(work / "n.jsonl", run_records(run, 54)), CONTEXT, run_id=run
        )
    inproc, command = [], []
    for attempt in range(5):
        run = f"tonight-{attempt}"
        path = write_records(work / f"t{attempt}.jsonl", run_records(run, 54))
        started = time.perf_counter()
        summary = lake_ingest.ingest_results(target, path, CONTEXT, run_id=run, code_hash="0123456789abcdef")
        inproc.append(time.perf_counter() - started)
        assert summary.changed
        run = f"cmd-{attempt}"
        path = write_records(work / f"c{attempt}.jsonl", run_records(run, 54))
        started = time.perf_counter()
        proc = start(ingest_command(uri, path, run))
        _, err = proc.communicate()
        command.append(time.perf_counter() - started)
        assert proc.returncode == 0, err
    print("\n### Ingest of one night's run (54 configurations, lake with 30 earlier runs)\n")
    print("| how | runs | median s | max s |\n|---|---|---|---|")
    for name, values in (
        ("in-process `lake_ingest.ingest_results`", inproc),
        ("`python -m gpucompare ingest` (process incl. start-up)", command),
    ):
        print(f"| {name} | {len(values)} | {statistics.median(values):.2f} | {max(values):.2f} |")
    print(f"\n(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")


def bench_memory(work: Path) -> None:
    path = write_records(work / "big.jsonl", run_records("big", 200_000, error_bytes=380))
    size = path.stat().st_size
    uri = str(work / "memory-lake")
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started = time.perf_counter()
    proc = start(ingest_command(uri, path, "big"))
    _, err = proc.communicate()
    elapsed = time.perf_counter() - started
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    assert proc.returncode == 0, err
    rows = lake.open_lake(uri).results_table(columns=["run_id"]).num_rows
    print("\n### Ingest memory\n")
    print(
        f"200,000 records, {size / 1e6:.0f} MB of JSON Lines: exit {proc.returncode}, {rows:,} rows, "
        f"{elapsed:.1f} s, peak RSS of the ingest process {peak_kib / 1024:.0f} MiB"
        f"{'' if before < peak_kib else ' (an earlier child was bigger: figure unreliable)'}"
    )


def concurrency_trial(uri: str, work: Path, rows: int = 40) -> tuple[bool, str]:
    target = lake.open_lake(uri)
    for n in range(2):
        run = f"earlier-{n}"
        lake_ingest.ingest_results(
            target, write_records(work / f"e{n}.jsonl", run_records(run, rows)), CONTEXT, run_id=run
        )
    target.compact()
    changed = write_records(work / "changed.jsonl", run_records("earlier-0", rows // 2, speed=99.0))
    new = {f"new-{n}": write_records(work / f"n{n}.jsonl", run_records(f"new-{n}", rows)) for n in range(4)}
    procs = [start(ingest_command(uri, p, r)) for r, p in new.items()]
    procs += [start(ingest_command(uri, changed, "earlier-0")), start(compact_command(uri))]
    for proc in procs:
        proc.communicate()
    codes = [p.returncode for p in procs]
    product, plain, doubled = per_run(uri)
    expected = Counter({"earlier-0": rows // 2, "earlier-1": rows, **{r: rows for r in new}})
    speeds = target.results_table(columns=["run_id", "images_per_sec"]).to_pylist()
    updated = all(
        r["images_per_sec"] >= 99.0 for r in speeds if r["run_id"] == "earlier-0" and r["images_per_sec"]
    )
    ok = codes == [0] * 6 and product == plain == expected and not doubled and updated
    kept = sum(product.values())
    return ok, (
        f"exit codes {codes}, {kept} of {sum(expected.values())} rows, plain reader {sum(plain.values())}, "
        f"duplicates {doubled}, update kept {updated}"
    )


def kill_ingest_trial(uri: str, work: Path, delay_s: float) -> tuple[str, bool]:
    target = lake.open_lake(uri)
    lake_ingest.ingest_results(
        target, write_records(work / "a.jsonl", run_records("earlier", 40)), CONTEXT, run_id="earlier"
    )
    path = write_records(work / "big.jsonl", run_records("victim", 12_000))
    proc = start(ingest_command(uri, path, "victim"))
    time.sleep(delay_s)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    product, plain, doubled = per_run(uri)
    state = {0: "absent", 12_000: "whole"}.get(product["victim"], f"PARTIAL {product['victim']}")
    ok = product == plain and product["earlier"] == 40 and product["victim"] in (0, 12_000) and not doubled
    rerun = start(ingest_command(uri, path, "victim"))
    rerun.communicate()
    product, plain, doubled = per_run(uri)
    ok = (
        ok
        and rerun.returncode == 0
        and product == plain == Counter({"earlier": 40, "victim": 12_000})
        and not doubled
    )
    return state, ok


def kill_compaction_trial(uri: str, work: Path, delay_s: float) -> bool:
    target = lake.open_lake(uri)
    runs = {f"run-{n}": 2000 for n in range(6)}
    for run, count in runs.items():
        lake_ingest.ingest_results(
            target, write_records(work / f"{run}.jsonl", run_records(run, count)), CONTEXT, run_id=run
        )
    proc = start(compact_command(uri))
    time.sleep(delay_s)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    product, plain, doubled = per_run(uri)
    ok = product == plain == Counter(runs) and not doubled
    again = start(compact_command(uri))
    again.communicate()
    product, plain, doubled = per_run(uri)
    return ok and again.returncode == 0 and product == plain == Counter(runs) and not doubled


class _S3:
    """moto's server in a process, a bucket per trial (the endpoint the lake's S3 code uses)."""

    def __enter__(self) -> _S3:
        from tests.support.fixtures_aws import FAKE_AWS_ENV, _start_server

        os.environ.update(FAKE_AWS_ENV)
        self.server, url = _start_server()
        os.environ["AWS_ENDPOINT_URL"] = url
        self.count = 0
        return self

    def bucket_uri(self) -> str:
        import boto3

        self.count += 1
        name = f"bench-lake-{os.getpid()}-{self.count}"
        boto3.client("s3").create_bucket(Bucket=name)
        return f"s3://{name}/lake"

    def __exit__(self, *exc: object) -> None:
        self.server.stop()


def _trial_lake(store: _S3 | None, work: Path) -> tuple[str, Path]:
    """A fresh lake URI for one trial (a new bucket on S3, else a folder) and the trial's folder."""
    folder = Path(tempfile.mkdtemp(dir=work))
    return (store.bucket_uri() if store else str(folder / "lake")), folder


def bench_concurrency(stores: list[tuple[str, _S3 | None]], trials: int, work: Path) -> None:
    print("\n### 4 ingests + a changed re-ingest + a compaction at once (processes)\n")
    print("| store | trial | result | detail |\n|---|---|---|---|")
    for name, store in stores:
        for trial in range(trials):
            ok, detail = concurrency_trial(*_trial_lake(store, work))
            print(f"| {name} | {trial + 1} | {'ok' if ok else 'FAILED'} | {detail} |", flush=True)


def bench_kills(stores: list[tuple[str, _S3 | None]], trials: int, work: Path) -> None:
    print("\n### SIGKILL of an ingest (12,000 records) and of a compaction\n")
    print(
        "| store | what | killed after | trials | interrupted run | all checks |\n"
        "|---|---|---|---|---|---|"
    )
    for name, store in stores:
        for delay in (0.3, 1.0, 2.0, 3.5, 8.0, 14.0):
            states, oks = Counter(), 0
            for _ in range(trials):
                state, ok = kill_ingest_trial(*_trial_lake(store, work), delay)
                states[state] += 1
                oks += ok
            print(f"| {name} | ingest | {delay} s | {trials} | {dict(states)} | {oks}/{trials} |", flush=True)
        for delay in (0.2, 0.6, 1.2):
            oks = sum(kill_compaction_trial(*_trial_lake(store, work), delay) for _ in range(trials))
            print(f"| {name} | compaction | {delay} s | {trials} | - | {oks}/{trials} |", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="ingest,memory,concurrency,kill")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--s3", action="store_true", help="also run concurrency and kill trials on moto's S3")
    args = parser.parse_args(argv)
    parts = set(args.only.split(","))
    work = Path(tempfile.mkdtemp(prefix="gpucompare-bench-lake-"))
    try:
        if "ingest" in parts:
            bench_ingest(work)
        if "memory" in parts:
            bench_memory(work)
        with _S3() if args.s3 else contextlib.nullcontext() as s3:
            stores = [("local", None)] + ([("s3 (moto, conditional PUT)", s3)] if s3 is not None else [])
            if "concurrency" in parts:
                bench_concurrency(stores, args.trials, work)
            if "kill" in parts:
                bench_kills(stores, args.trials, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
