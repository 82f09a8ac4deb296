"""Property (Hypothesis): whatever values a record holds, ``validate_record`` decides, and the
lake, the reports and the page agree with it (issues 23 and 32).

* a record ``validate_record`` accepts is ingested (``ingest`` exits 0), and the report set and
  the page (``run_reports``: every report, index.html, summary.md) build over the lake holding
  it as the NEWEST run of its cell (the case that reaches best_value's intervals) with no failure;
* a record it refuses makes ``ingest`` exit 2 and leaves the results table's version unchanged.

Real deltalake and DuckDB, the ``ingest`` command's own ``main`` (in-process: 30 examples as
processes would take minutes on the shared CI machine), one lake for the whole test. Before,
1e13 images/s, a negative cv or -1 MiB of GPU memory were accepted; 1e13 then stopped ``report``;
a sample of 0.0 (or 5e-324) was accepted and stopped best_value, then index.html (issue 32: the
test reached neither, as its runs were never the newest of their cell and no page was built).
"""

from __future__ import annotations

import copy
import itertools
import json

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from bench_tasks.record import validate_record
from bench_tasks.record_fields import RecordError, empty_record
from gpucompare import cli
from gpucompare.lake import tables as lake
from gpucompare.reports.build import run_reports
from tests.support.worker_support import PLAUSIBLE_RECORD

#: six repeats: enough samples for the median's interval and the ratio intervals of best_value
SIX = [119.0, 120.0, 121.0, 119.5, 120.5, 120.0]
BASE = {**PLAUSIBLE_RECORD, "run_id": "prop-0", "repeats": 6, "images_per_sec_samples": SIX}
#: the priced machines: the examples' (g5.xlarge) and a rival in the same cell, so the examples'
#: rows are ranked against another machine (best_value's ratio intervals run over their samples)
MACHINE = ["--provider", "aws", "--region", "us-east-1", "--target", "ec2", "--code-hash", "0123456789abcdef"]
INT_FIELDS = ("batch_size", "per_device_batch", "gpu_count", "num_nodes", "repeats", "parameters",
              "warmup_batches", "timed_batches", "gpu_memory_mib")
FLOAT_FIELDS = ("images_per_sec", "cv", "setup_seconds", "warmup_seconds", "timed_seconds")
LIST_FIELDS = ("images_per_sec_samples", "per_worker_images_per_sec")

floats = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1e-100, 1e-5, 1e7, 1e7 + 1, 1e13, 1e300, -1.0]),
)
ints = st.one_of(st.integers(min_value=-(2**70), max_value=2**70), st.sampled_from([0, -1, 1, 2**63]))
changes = st.one_of(
    st.tuples(st.sampled_from(INT_FIELDS), ints),
    st.tuples(st.sampled_from(FLOAT_FIELDS), floats),
    st.tuples(st.sampled_from(LIST_FIELDS), st.lists(floats, min_size=1, max_size=4)),
    st.tuples(st.sampled_from(("started_at", "finished_at")),
              st.sampled_from(["0001-01-01T00:30:00+01:00", "9999-12-31T23:59:59-01:00",
                               "2026-11-30T02:00:30Z", "2026-11-30T03:00:00+01:00"])),
)

_runs = itertools.count(1)


@pytest.fixture(scope="module")
def shared_lake(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The lake of every example, holding the rival machine's run first."""
    folder = tmp_path_factory.mktemp("property")
    rival = empty_record(**{**copy.deepcopy(BASE), "run_id": "rival", "images_per_sec": 60.0,
                            "images_per_sec_samples": [60.0, 61.0, 59.0, 60.5, 59.5, 60.0]})
    (folder / "rival.jsonl").write_text(json.dumps(rival) + "\n", encoding="utf-8")
    code = cli.main(["ingest", "--results", str(folder / "rival.jsonl"), "--lake", str(folder / "lake"),
                     "--instance-type", "g4dn.xlarge", "--run-id", "rival", *MACHINE])
    assert code == 0
    return str(folder / "lake")


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(changes, min_size=1, max_size=3))
@example(edits=[("images_per_sec_samples", [0.0, *SIX[1:]])])
@example(edits=[("images_per_sec_samples", [5e-324, *SIX[1:]])])
@example(edits=[("images_per_sec_samples", [1e-5, 1e-5, 1e-5, 1e7, 1e7, 1e7])])
def test_validate_record_decides_what_the_lake_and_the_reports_take(
    shared_lake: str, tmp_path_factory: pytest.TempPathFactory, edits: list[tuple[str, object]]
) -> None:
    run_number = next(_runs)
    run_id = f"prop-{run_number}"
    # each example's record starts a minute after the last: it is the newest run of its cell
    started = f"2026-11-30T{2 + run_number // 60:02d}:{run_number % 60:02d}:00+00:00"
    finished = f"2026-11-30T{2 + run_number // 60:02d}:{run_number % 60:02d}:30+00:00"
    record = empty_record(**{**copy.deepcopy(BASE), "run_id": run_id, "started_at": started,
                             "finished_at": finished})
    for name, value in edits:
        record[name] = value
    try:
        validate_record(copy.deepcopy(record))
        accepted = True
    except RecordError:
        accepted = False
    results = tmp_path_factory.mktemp("records") / "r.jsonl"
    results.write_text(json.dumps(record) + "\n", encoding="utf-8")
    before = lake.open_lake(shared_lake).version("results")
    code = cli.main(["ingest", "--results", str(results), "--lake", shared_lake,
                     "--instance-type", "g5.xlarge", "--run-id", run_id, *MACHINE])
    after = lake.open_lake(shared_lake).version("results")
    if not accepted:
        assert code == 2 and after == before, (edits, code)
        return
    assert code == 0, edits
    assert after == before + 1
    out = tmp_path_factory.mktemp("reports")
    report_set = run_reports(shared_lake, str(out))  # ReportsIncomplete if any part failed
    assert report_set.failures == {}, (edits, report_set.failures)
    assert report_set.rows_scanned >= 1
    assert "part(s) of this report set failed" not in (out / "index.html").read_text(encoding="utf-8")


def test_the_base_record_is_valid() -> None:
    assert validate_record(empty_record(**BASE))["status"] == "ok"
