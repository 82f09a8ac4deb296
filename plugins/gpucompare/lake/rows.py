"""The rows a lake write accepts: the run id and load names (they go into Delta predicates and file
names), the checks of price and exchange-rate rows, a run's rows completed with the orchestrator's
columns, and the ingest key that makes a repeated ingest a no-op.

``lake.tables.Lake`` writes with these; ``lake.ingest`` and ``lake.phases`` check with them.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pyarrow as pa

from gpucompare.config import patterns
from gpucompare.errors import PermanentError
from gpucompare.lake import schema
from gpucompare.lake.series import with_series_keys
from gpucompare.lake.storage import LakeError


class IngestError(PermanentError):
    """A results file refused at ingest; ``line`` (1-based) and ``field`` name the first culprit."""

    def __init__(self, message: str, *, line: int | None = None, field: str | None = None) -> None:
        super().__init__(message)
        self.line = line
        self.field = field


def safe_name(text: str) -> str:
    """``text`` reduced to characters safe in a file name and a run id."""
    cleaned = patterns.NOT_PLAIN_RUN.sub("_", text).strip("._")
    return cleaned[:80] or "unnamed"


def check_run_id(run_id: Any) -> str:
    """The orchestrator's run id, checked (it goes into a Delta predicate)."""
    if not isinstance(run_id, str) or not patterns.RUN_ID.fullmatch(run_id):
        raise IngestError(
            f"run id {run_id!r} is not valid ({patterns.RUN_ID_ALLOWED})", field="run_id"
        )
    return run_id



# ---- checks of the small tables -------------------------------------------------------------
def check_price_rows(rows: pa.Table) -> None:
    """Refuse price rows no report can use: unknown units or currencies, prices <= 0."""
    for column, allowed in (
        ("unit", schema.PRICE_UNITS),
        ("currency", patterns.CURRENCIES),
        ("market", patterns.MARKETS),
    ):
        bad = [v for v in rows.column(column).to_pylist() if v not in allowed]
        if bad:
            raise LakeError(f"prices: {column} {bad[0]!r} is not one of {', '.join(allowed)}")
    check_positive(rows, "price", "prices")


def check_positive(rows: pa.Table, column: str, kind: str) -> None:
    for value in rows.column(column).to_pylist():
        if value is None or not value > 0 or value == float("inf"):
            raise LakeError(f"{kind}: {column} must be a finite number > 0, got {value!r}")


# ---- the rows of one run (written by Lake.write_results, built by lake.ingest) -------------
def with_orchestrator_columns(table: pa.Table, *, code_hash: str | None) -> pa.Table:
    """``table`` with every column of RESULTS_SCHEMA (code_hash filled when given, series_key
    always: ``lake.series``)."""
    for f in schema.RESULTS_SCHEMA:
        if f.name not in table.column_names:
            table = table.append_column(f, pa.nulls(table.num_rows, f.type))
    # columns this code does not know (a newer writer's) are kept: the table's schema merges them
    extra = [f for f in table.schema if f.name not in schema.RESULTS_SCHEMA.names]
    table = table.select(schema.RESULTS_SCHEMA.names + [f.name for f in extra]).cast(
        pa.schema(list(schema.RESULTS_SCHEMA) + extra)
    )
    if code_hash is not None:
        table = table.set_column(
            table.schema.get_field_index("code_hash"),
            schema.RESULTS_SCHEMA.field("code_hash"),
            pa.array([code_hash] * table.num_rows, pa.string()),
        )
    return with_series_keys(table)


def table_key(table: pa.Table) -> str:
    """Hash of a results table's data, ``ingested_at`` and ``ingest_key`` aside."""
    digest = hashlib.sha256()
    kept = table.drop_columns([c for c in ("ingested_at", "ingest_key") if c in table.column_names])
    for row in kept.to_pylist():
        digest.update(json.dumps(row, sort_keys=True, default=str).encode())
        digest.update(b"\n")
    return digest.hexdigest()[:24]

