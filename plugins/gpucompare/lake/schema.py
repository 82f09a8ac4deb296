"""Arrow schemas of the lake's tables: results, prices, exchange rates, published scaling.

The results schema is derived from the record contract (``bench_tasks.record.FIELDS``) so a
field added there appears in the lake without a second list to keep in step; the columns
the orchestrator adds at ingest follow. Everything here is plain data: no I/O.

Results columns, in order:

* every record field (types: str → string, int → int64, float → float64, str_list →
  list<string>, float_list → list<double>), except that ``started_at`` / ``finished_at``
  become ``timestamp[us, UTC]`` and ``mode`` is a partition column;
* ``provider, instance_type, region, market, target, source, dag_run_id, code_hash,
  ingest_key`` (the orchestrator's: ``run_id`` too is the orchestrator's, records must agree);
* ``ingested_at`` (timestamp of the ingest), ``published_value`` (the cell exactly as
  published, for ``target = published``), ``note`` (the publication's remark),
  ``flags`` (list<string>: why a value looks suspicious, never a rewrite of it);
* partition columns of the Delta table: ``mode`` (string) and ``date`` (date32, the UTC day
  the configuration started; for published figures, the publication).

All result columns are nullable in Arrow: the record contract (validated at ingest by
``bench_tasks.record.validate_record``) says which fields a *measured* record must fill,
while published figures legitimately lack most environment fields.
"""

from __future__ import annotations

import pyarrow as pa

from bench_tasks.record import FIELDS, Field

#: Values of the orchestrator's enumerated columns.
MARKETS: tuple[str, ...] = ("on_demand", "spot")
TARGETS: tuple[str, ...] = ("local", "ssh", "ec2", "published")
PRICE_UNITS: tuple[str, ...] = ("hour", "minute", "second")
CURRENCIES: tuple[str, ...] = ("EUR", "USD")

#: Flags the published import may set on a row (see gpucompare.prices.published).
FLAGS: tuple[str, ...] = (
    "decimal_comma",  # published with a decimal comma ("98,30")
    "outlier_vs_neighbours",  # ≥ 5× (or ≤ 1/5 of) the neighbouring batch sizes
    "batch_scaled_x8",  # the article's AlexNet training column: batch label × 8
)

SECONDS_PER_UNIT: dict[str, int] = {"hour": 3600, "minute": 60, "second": 1}

TIMESTAMP = pa.timestamp("us", tz="UTC")
_TIMESTAMP_FIELDS = frozenset({"started_at", "finished_at"})
PARTITION_COLUMNS: tuple[str, ...] = ("mode", "date")

_KIND_TO_ARROW: dict[str, pa.DataType] = {
    "str": pa.string(),
    "int": pa.int64(),
    "float": pa.float64(),
    "str_list": pa.list_(pa.string()),
    "float_list": pa.list_(pa.float64()),
}


def _record_field(field: Field) -> pa.Field:
    arrow_type = TIMESTAMP if field.name in _TIMESTAMP_FIELDS else _KIND_TO_ARROW[field.kind]
    return pa.field(field.name, arrow_type, nullable=True, metadata={"doc": field.doc} if field.doc else None)


ORCHESTRATOR_FIELDS: tuple[pa.Field, ...] = (
    pa.field("provider", pa.string(), metadata={"doc": "aws, leadergpu, local, …"}),
    pa.field("instance_type", pa.string(), metadata={"doc": "the provider's machine name"}),
    pa.field("region", pa.string(), metadata={"doc": "provider region; null where none applies"}),
    pa.field("market", pa.string(), metadata={"doc": "on_demand | spot"}),
    pa.field("target", pa.string(), metadata={"doc": "local | ssh | ec2 | published"}),
    pa.field("source", pa.string(), metadata={"doc": "where the figure comes from"}),
    pa.field("dag_run_id", pa.string(), metadata={"doc": "Airflow run that ingested it, if any"}),
    pa.field("code_hash", pa.string(),
             metadata={"doc": "content hash of the worker code (bench_tasks bundle) that measured it"}),
    pa.field("ingest_key", pa.string(),
             metadata={"doc": "hash of the run's ingested data: an unchanged re-ingest writes nothing"}),
    pa.field("ingested_at", TIMESTAMP),
    pa.field("published_value", pa.string(), metadata={"doc": "the published cell, verbatim"}),
    pa.field("note", pa.string()),
    pa.field("flags", pa.list_(pa.string()), metadata={"doc": "suspicions, see schema.FLAGS"}),
)

PARTITION_SCHEMA = pa.schema([pa.field("mode", pa.string()), pa.field("date", pa.date32())])

#: The results table as readers see it (files + partition columns from the Delta log).
RESULTS_SCHEMA = pa.schema(
    [_record_field(f) for f in FIELDS if f.name != "mode"]
    + list(ORCHESTRATOR_FIELDS)
    + list(PARTITION_SCHEMA)
)

#: What a results Parquet file holds (the partition values live in the Delta log).
RESULTS_FILE_SCHEMA = pa.schema([f for f in RESULTS_SCHEMA if f.name not in PARTITION_COLUMNS])

PRICES_SCHEMA = pa.schema(
    [
        pa.field("provider", pa.string(), nullable=False),
        pa.field("instance_type", pa.string(), nullable=False),
        pa.field("region", pa.string(), metadata={"doc": "null: valid in every region"}),
        pa.field("market", pa.string(), nullable=False),
        pa.field("gpu_model", pa.string()),
        pa.field("gpu_count", pa.int64()),
        pa.field("price", pa.float64(), nullable=False),
        pa.field("currency", pa.string(), nullable=False),
        pa.field("unit", pa.string(), nullable=False, metadata={"doc": "hour | minute | second"}),
        pa.field("effective_from", pa.date32(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
    ]
)

FX_SCHEMA = pa.schema(
    [
        pa.field("base", pa.string(), nullable=False),
        pa.field("quote", pa.string(), nullable=False),
        pa.field("rate", pa.float64(), nullable=False, metadata={"doc": "1 base = rate quote"}),
        pa.field("effective_from", pa.date32(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
    ]
)

PUBLISHED_SCALING_SCHEMA = pa.schema(
    [
        pa.field("source", pa.string(), nullable=False),
        pa.field("framework", pa.string(), nullable=False),
        pa.field("network", pa.string(), nullable=False),
        pa.field("gpu_model", pa.string(), nullable=False),
        pa.field("gpu_count", pa.int64(), nullable=False),
        pa.field("speedup", pa.float64(), nullable=False),
    ]
)


def empty_results() -> pa.Table:
    """A results table with no rows and the full schema."""
    return RESULTS_SCHEMA.empty_table()
