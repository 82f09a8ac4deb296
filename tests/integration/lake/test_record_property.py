"""Property (Hypothesis): whatever values a record holds, ``validate_record`` decides, and the
lake and the reports agree with it (issue 23).

* a record ``validate_record`` accepts is ingested (``ingest`` exits 0) and every report of the
  set builds over the lake holding it (no failure recorded);
* a record it refuses makes ``ingest`` exit 2 and leaves the results table's version unchanged.

Real deltalake and DuckDB, the ``ingest`` command's own ``main`` (in-process: 30 examples as
processes would take minutes on the shared CI machine), one lake for the whole test. Before,
1e13 images/s, a negative cv or -1 MiB of GPU memory were accepted; 1e13 then stopped ``report``.
"""

from __future__ import annotations

import copy
import itertools
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench_tasks.record import RecordError, empty_record, validate_record
from gpucompare import cli
from gpucompare.lake import tables as lake
from gpucompare.reports.build import build_reports
from gpucompare.reports.inputs import ReportInputs
from tests.support.worker_support import PLAUSIBLE_RECORD

BASE = {**PLAUSIBLE_RECORD, "run_id": "prop-0"}
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
    return str(tmp_path_factory.mktemp("property") / "lake")


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(changes, min_size=1, max_size=3))
def test_validate_record_decides_what_the_lake_and_the_reports_take(
    shared_lake: str, tmp_path_factory: pytest.TempPathFactory, edits: list[tuple[str, object]]
) -> None:
    run_id = f"prop-{next(_runs)}"
    record = empty_record(**{**copy.deepcopy(BASE), "run_id": run_id})
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
    code = cli.main(["ingest", "--results", str(results), "--lake", shared_lake, "--provider", "local",
                     "--instance-type", "g5.xlarge", "--run-id", run_id, "--code-hash", "0123456789abcdef"])
    after = lake.open_lake(shared_lake).version("results")
    if not accepted:
        assert code == 2 and after == before, (edits, code)
        return
    assert code == 0, edits
    assert after == (0 if before is None else before + 1)
    report_set = build_reports(ReportInputs.from_lake(shared_lake), keep_going=True)
    assert report_set.failures == {}, (edits, report_set.failures)
    assert report_set.rows_scanned >= 1


def test_the_base_record_is_valid() -> None:
    assert validate_record(empty_record(**BASE))["status"] == "ok"
