"""Every writer of the results table stores each row's series_key (lake.series), computed from the
row's own series columns whatever the input said: the streamed ingest of a worker's results file,
the published import (through ``Lake.write_results``) and, in test_lake.py, ``migrate-lake``."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from gpucompare.lake import ingest as lake_ingest
from gpucompare.lake import tables as lake
from gpucompare.prices import published
from tests.support.lake_support import expected_series_keys, run_records, write_records


def test_the_streamed_ingest_and_the_published_import_store_each_rows_series_key(tmp_path: Path) -> None:
    target = lake.open_lake(str(tmp_path / "lake"))
    records = run_records("run-a", 40)
    records[0]["methodology"] = None  # an old record: its series is official's
    context = lake_ingest.RunContext(provider="local", instance_type="cpu")
    # small batches: the key is filled batch by batch, and must not depend on the cut
    lake_ingest.ingest_results(target, write_records(tmp_path / "a.jsonl", records), context, run_id="run-a",
                               batch_rows=7)
    published.import_published(target)
    table = target.results_table()
    assert table.num_rows == 40 + published.read_published_results(published.SHIPPED_RESULTS).num_rows
    keys = table["series_key"].to_pylist()
    assert None not in keys and keys == expected_series_keys(table)
    # the published figures' series are their own; each configuration of the run its own series
    measured = table.filter(pa.compute.equal(table["run_id"], "run-a"))
    assert len(set(measured["series_key"].to_pylist())) == len(set(measured["config_id"].to_pylist()))
