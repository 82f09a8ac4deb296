"""The Athena/Glue DDL in sql/athena/ is the one generated from the schemas, and says what BI needs.

No Athena is reachable from here; the DDL is checked against the lake's Arrow schema and
the reports' real output schemas, and against a report written by the real code.
"""

from __future__ import annotations

import re

import pyarrow.parquet as pq
import pytest

from gpucompare.lake.tables import open_lake
from gpucompare.reports.athena import ATHENA_DIR, athena_ddl
from gpucompare.reports.build import build_reports
from gpucompare.reports.report_set import HISTORY_TABLES, ReportError
from tests.support.reports_data import ingest, inputs, record


def _columns(statement: str) -> list[str]:
    body = statement[statement.index("(") + 1 : statement.index("\n)")]
    return re.findall(r"`([a-z0-9_]+)`", body)


def test_shipped_ddl_is_the_generated_one():
    for name, text in athena_ddl().items():
        assert (ATHENA_DIR / name).read_text(encoding="utf-8") == text, (
            f"sql/athena/{name} is stale: run python -m gpucompare athena-ddl --out sql/athena"
        )


def test_lake_tables_are_declared_as_delta_tables_read_through_their_log():
    """Athena reads Delta through Glue: only LOCATION and table_type (columns and partitions
    come from the log)."""
    text = athena_ddl(lake="s3://my-lake/prefix")["results.sql"]
    for kind in ("results", "prices", "fx", "published_scaling"):
        start = text.index(f"CREATE EXTERNAL TABLE IF NOT EXISTS gpucompare.{kind}\n")
        statement = text[start : text.index(";", start)]
        assert statement.splitlines()[1:] == [f"LOCATION 's3://my-lake/prefix/{kind}/'",
                                              "TBLPROPERTIES ('table_type' = 'DELTA')"]
    assert "PARTITIONED BY" not in text and "projection" not in text


def test_report_tables_match_the_parquet_the_reports_write(tmp_path):
    lake = open_lake(str(tmp_path / "lake"))
    ingest(lake, [record()])
    build_reports(inputs(lake, [], []), str(tmp_path / "out"))
    text = athena_ddl(reports_uri="s3://bi-bucket/reports/latest")["reports.sql"]
    for name in HISTORY_TABLES:
        start = text.index(f"CREATE EXTERNAL TABLE IF NOT EXISTS gpucompare.{name} (")
        statement = text[start : text.index("TBLPROPERTIES", start)]
        written = pq.read_schema(tmp_path / "out" / name / f"{name}.parquet")
        assert _columns(statement) == written.names, name
        assert f"LOCATION 's3://bi-bucket/reports/latest/{name}/'" in statement


@pytest.mark.parametrize("lake_uri", ["http://example.com/lake", "s3://Bad_Bucket/x", "s3://b/x';DROP"])
def test_bad_locations_are_refused(lake_uri):
    with pytest.raises(ReportError, match="--lake"):
        athena_ddl(lake=lake_uri)
