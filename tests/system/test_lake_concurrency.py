"""Concurrent writers and killed writers, as real processes, on a local lake and on S3 (moto).

Stands in for the nightly DAG's parallel ingest tasks and the reports DAG's compaction running
at the same time: every writer is ``python -m gpucompare ingest|compact`` in a process of its
own, against a real Delta table (local folder, or moto's S3 server with conditional PUTs).
After each trial the lake is read twice: by the product (``Lake.results_table``) and by a plain
Delta reader (``deltalake.DeltaTable``, none of our code). Repetitions are kept small for CI;
scripts/bench_lake.py repeats the same trials for the figures of the closing note.
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from gpucompare.lake import ingest as lake_ingest
from gpucompare.lake import tables as lake
from tests.support.lake_support import compact_command, ingest_command, run_records, start, write_records

ROWS = 40  # per run
CONTEXT = lake_ingest.RunContext(provider="local", instance_type="cpu")


def per_run(uri: str) -> tuple[Counter, Counter]:
    """Rows per run as the product reads them and as a plain Delta reader reads them; also
    checks that no configuration of a run appears twice."""
    from deltalake import DeltaTable

    target = lake.open_lake(uri)
    product = target.results_table(columns=["run_id", "config_id"])
    plain = pa.table(
        DeltaTable(
            target.table_uri("results"), storage_options=target.storage_options or None
        ).to_pyarrow_table(columns=["run_id", "config_id"])
    )
    for table in (product, plain):
        keys = list(zip(table["run_id"].to_pylist(), table["config_id"].to_pylist(), strict=True))
        assert len(keys) == len(set(keys)), "a configuration appears twice"
    return Counter(product["run_id"].to_pylist()), Counter(plain["run_id"].to_pylist())


def ingest_now(uri: str, path: Path, run_id: str) -> None:
    """``python -m gpucompare ingest`` as a process; asserts it exited 0."""
    proc = start(ingest_command(uri, path, run_id))
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err


def test_four_ingests_and_a_compaction_at_once_lose_nothing(lake_uri: str, tmp_path: Path) -> None:
    """Two earlier runs, compacted; then four new runs, a changed re-ingest of an earlier run
    and a compaction, all at once, into the same partitions. Every process exits 0 and every
    row is there exactly once, the re-ingested run with its new values."""
    earlier = {
        f"earlier-{n}": write_records(tmp_path / f"e{n}.jsonl", run_records(f"earlier-{n}", ROWS))
        for n in range(2)
    }
    target = lake.open_lake(lake_uri)
    for run_id, path in earlier.items():  # the earlier nights: written in this process, quicker
        lake_ingest.ingest_results(target, path, CONTEXT, run_id=run_id)
    target.compact()
    changed = write_records(tmp_path / "changed.jsonl", run_records("earlier-0", ROWS // 2, speed=99.0))
    new = {
        f"new-{n}": write_records(tmp_path / f"n{n}.jsonl", run_records(f"new-{n}", ROWS)) for n in range(4)
    }
    procs = [start(ingest_command(lake_uri, p, r)) for r, p in new.items()]
    procs.append(start(ingest_command(lake_uri, changed, "earlier-0")))
    procs.append(start(compact_command(lake_uri)))
    results = [(p.returncode, p.communicate(timeout=600)) for p in procs]
    assert [p.returncode for p in procs] == [0] * 6, [r[1][1][-500:] for r in results]
    expected = Counter({"earlier-0": ROWS // 2, "earlier-1": ROWS, **{r: ROWS for r in new}})
    product, plain = per_run(lake_uri)
    assert product == plain == expected
    speeds = lake.open_lake(lake_uri).results_table(columns=["run_id", "images_per_sec"])
    rerun = {
        v
        for r, v in zip(speeds["run_id"].to_pylist(), speeds["images_per_sec"].to_pylist(), strict=True)
        if r == "earlier-0" and v is not None
    }
    assert min(rerun) >= 99.0  # the update was not undone by the compaction


def test_four_writers_of_one_run_at_once_leave_it_once(lake_uri: str, tmp_path: Path) -> None:
    """Four ingests of the same run with different data, into a lake with no table yet (so
    they also race to create it): every process exits 0 and the run is there once, wholly one
    writer's rows (each replace carries the run's transaction id: a writer that committed
    second re-reads the log and removes the first one's files)."""
    files = [
        write_records(tmp_path / f"w{n}.jsonl", run_records("same", ROWS - 4 * n, speed=100.0 * (n + 1)))
        for n in range(4)
    ]
    procs = [start(ingest_command(lake_uri, path, "same")) for path in files]
    results = [(p.returncode, p.communicate(timeout=600)) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [r[1][1][-500:] for r in results]
    product, plain = per_run(lake_uri)
    assert product == plain
    (rows,) = product.values()
    speeds = lake.open_lake(lake_uri).results_table(columns=["images_per_sec"])["images_per_sec"].to_pylist()
    writers = {int(v // 100.0) for v in speeds}  # speed = 100 * (writer + 1) + index % 7
    assert len(writers) == 1 and rows == ROWS - 4 * (writers.pop() - 1)


@pytest.mark.parametrize("delay_s", [0.5, 2.5])
def test_a_killed_ingest_is_wholly_absent_or_wholly_there_and_a_rerun_completes_it(
    delay_s: float, tmp_path: Path
) -> None:
    uri = str(tmp_path / "lake")
    ingest_now(uri, write_records(tmp_path / "a.jsonl", run_records("earlier", ROWS)), "earlier")
    big = 12_000
    path = write_records(tmp_path / "big.jsonl", run_records("victim", big))
    proc = start(ingest_command(uri, path, "victim"))
    time.sleep(delay_s)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    product, plain = per_run(uri)
    assert product == plain
    assert product["earlier"] == ROWS and product["victim"] in (0, big)
    ingest_now(uri, path, "victim")  # the re-run completes it, no duplicate (per_run checks)
    product, plain = per_run(uri)
    assert product == plain == Counter({"earlier": ROWS, "victim": big})


@pytest.mark.parametrize("delay_s", [0.3, 1.0])
def test_a_killed_compaction_loses_nothing_and_the_next_one_finishes(delay_s: float, tmp_path: Path) -> None:
    uri = str(tmp_path / "lake")
    runs = {f"run-{n}": ROWS * 50 for n in range(6)}
    target = lake.open_lake(uri)
    for run_id, count in runs.items():  # the earlier nights: written in this process, quicker
        lake_ingest.ingest_results(
            target,
            write_records(tmp_path / f"{run_id}.jsonl", run_records(run_id, count)),
            CONTEXT,
            run_id=run_id,
        )
    proc = start(compact_command(uri))
    time.sleep(delay_s)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    product, plain = per_run(uri)
    assert product == plain == Counter(runs)
    done = start(compact_command(uri))
    assert done.wait(timeout=300) == 0
    product, plain = per_run(uri)
    assert product == plain == Counter(runs)
    assert len(lake.open_lake(uri).snapshot("results").files) == 2  # one file per partition


def test_six_concurrent_ingests_each_print_the_version_of_its_own_commit(tmp_path: Path) -> None:
    """Before (issue 32): 2 of 6 concurrent writers printed a version that was not their commit's
    (``DeltaTable.history()`` numbers its entries down from the version the table was loaded at;
    a commit landing in between shifted them). The log's own commit files are the truth here."""
    import json
    import re

    uri = str(tmp_path / "lake")
    writers = []
    for number in range(6):
        run_id = f"six-{number}"
        path = write_records(tmp_path / f"{run_id}.jsonl", run_records(run_id, 20))
        writers.append((run_id, start(ingest_command(uri, path, run_id))))
    printed = {}
    for run_id, process in writers:
        out, err = process.communicate(timeout=600)
        assert process.returncode == 0, err
        printed[run_id] = int(re.search(r"table version (\d+)", out).group(1))
    committed = {}
    for log_file in sorted((tmp_path / "lake" / "results" / "_delta_log").glob("*.json")):
        for line in log_file.read_text().splitlines():
            info = json.loads(line).get("commitInfo")
            if info and info.get("run_id"):
                committed[info["run_id"]] = int(log_file.stem)
    assert printed == committed and sorted(printed.values()) == list(range(6))
