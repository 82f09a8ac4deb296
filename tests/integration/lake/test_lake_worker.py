"""A file written by the real worker (MXNet on the CPU, in ``.venv-bench``) goes into the lake.

Both sides of the one boundary: ``python -m bench_tasks score`` writes JSON Lines, the
orchestrator's ``python -m gpucompare ingest`` validates and stores them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from gpucompare.lake import tables as lake
from tests.conftest import REPO_ROOT
from tests.support.bench_helpers import run_bench_python


def test_worker_output_is_ingested_as_is(tmp_path: Path) -> None:
    results = tmp_path / "results.jsonl"
    worker = run_bench_python(["-m", "bench_tasks", "score", "--networks", "alexnet", "--batch-sizes", "1,2",
                               "--devices", "cpu", "--warmup", "1", "--batches", "1", "--repeats", "1",
                               "--output", str(results)], timeout=600)
    assert worker.returncode == 0, worker.stderr
    records = [json.loads(line) for line in results.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert len(records) == 2

    uri = str(tmp_path / "lake")
    command = [sys.executable, "-m", "gpucompare", "ingest", "--results", str(results), "--lake", uri,
               "--provider", "local", "--instance-type", "cpu", "--target", "local",
               "--run-id", records[0]["run_id"]]
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr

    table = lake.open_lake(uri).results_table().sort_by("batch_size")
    assert table["batch_size"].to_pylist() == [1, 2]
    assert table["images_per_sec"].to_pylist() == [r["images_per_sec"] for r in sorted(
        records, key=lambda r: r["batch_size"])]
    assert set(table["run_id"].to_pylist()) == {records[0]["run_id"]}
    assert set(table["target"].to_pylist()) == {"local"}
    assert table["date"][0].as_py().isoformat() == records[0]["started_at"][:10]
