"""The results' series_key (lake.series): one stored 64-bit number per series."""

from __future__ import annotations

import hashlib

import pyarrow as pa
import pytest

from gpucompare.lake import schema, series

#: one series, in SERIES_COLUMNS order
SERIES = ("aws", "g5.xlarge", "us-east-1", "on_demand", "score", "resnet-50", "float32", 32, 1, 1, "gpu",
          None, "score-resnet-50-float32-b32-g1", "official")


def table(rows: list[tuple]) -> pa.Table:
    columns = list(zip(*rows, strict=True))
    return pa.table({name: pa.array(values, schema.RESULTS_SCHEMA.field(name).type)
                     for name, values in zip(series.SERIES_COLUMNS, columns, strict=True)})


def test_the_key_is_the_documented_digest_and_never_changes() -> None:
    """The key is stored with every result: a change of the function would split each series
    between the rows written before and after it. So it is pinned here, computed the documented way
    (each value as its length, ':' and its text, a null as '-'; BLAKE2b-64, little-endian, signed)."""
    text = "".join("-" if v is None else f"{len(str(v))}:{v}" for v in SERIES)
    expected = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little", signed=True)
    assert series.series_key(SERIES) == expected == 4018054991204348155


def test_the_table_form_agrees_with_the_row_form_and_replaces_a_given_key() -> None:
    rows = [SERIES, SERIES[:2] + (None,) + SERIES[3:], SERIES[:-1] + ("robust",), SERIES]
    given = table(rows).append_column("series_key", pa.array([7, 7, 7, 7], pa.int64()))
    keyed = series.with_series_keys(given)
    assert keyed.column_names == given.column_names  # replaced in place, not added twice
    assert keyed["series_key"].to_pylist() == [series.series_key(r) for r in rows]
    assert keyed["series_key"][0] == keyed["series_key"][3] and len(set(keyed["series_key"].to_pylist())) == 3
    batch = series.with_series_keys(table(rows).to_batches()[0])
    assert batch.column(batch.schema.get_field_index("series_key")).to_pylist() == \
        keyed["series_key"].to_pylist()
    assert series.with_series_keys(table(rows).slice(0, 0))["series_key"].to_pylist() == []


@pytest.mark.parametrize("column", series.SERIES_COLUMNS)
def test_every_series_column_is_part_of_the_key(column: str) -> None:
    index = series.SERIES_COLUMNS.index(column)
    changed = list(SERIES)
    changed[index] = 64 if isinstance(SERIES[index], int) else "other"
    assert series.series_key(changed) != series.series_key(SERIES)


def test_a_null_methodology_is_official_and_values_cannot_run_into_each_other() -> None:
    """Records from before the methodology field are official (as every report reads them); a
    value holding what would be a separator elsewhere never makes two series one."""
    assert series.series_key(SERIES[:-1] + (None,)) == series.series_key(SERIES)
    shifted = ("aws", "g5.xlarge1", ":us-east-1", *SERIES[3:])
    assert series.series_key(shifted) != series.series_key(SERIES)
    regions = {series.series_key(SERIES[:2] + (region,) + SERIES[3:]) for region in ("-", None, "", "0:")}
    assert len(regions) == 4  # a null, an empty text and texts that look like the coding: four series
