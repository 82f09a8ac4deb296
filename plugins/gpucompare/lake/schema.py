"""Arrow schemas of the lake's tables: results, prices, exchange rates, published scaling, run phases.

The results schema is derived from the record contract (``bench_tasks.record_fields.FIELDS``) so a
field added there appears in the lake without a second list to keep in step; the columns
the orchestrator adds at ingest follow. Everything here is plain data: no I/O.

Results columns, in order:

* every record field (types: str → string, int → int64, float → float64, bool → bool, str_list →
  list<string>, float_list → list<double>), except that ``started_at`` / ``finished_at``
  become ``timestamp[us, UTC]`` and ``mode`` is a partition column;
* ``provider, instance_type, region, market, target, source, dag_run_id, code_hash,
  ingest_key`` (the orchestrator's: ``run_id`` too is the orchestrator's, records must agree);
* ``ingested_at`` (timestamp of the ingest), ``published_value`` (the cell exactly as
  published, for ``target = published``), ``note`` (the publication's remark),
  ``flags`` (list<string>: why a value looks suspicious, never a rewrite of it),
  ``series_key`` (int64: the result's series as one number, ``lake.series``; the reports group
  by it);
* partition columns of the Delta table: ``mode`` (string) and ``date`` (date32, the UTC day
  the configuration started; for published figures, the publication).

All result columns are nullable in Arrow: the record contract (validated at ingest by
``bench_tasks.record.validate_record``) says which fields a *measured* record must fill,
while published figures legitimately lack most environment fields.
"""

from __future__ import annotations

import pyarrow as pa

from bench_tasks.record_fields import FIELDS, Field
from gpucompare.config import patterns

TARGETS: tuple[str, ...] = (*patterns.TARGET_KINDS, "published")
#: What names one machine you can buy, in the results, the prices and every report: the SQL
#: writes it ``{{machine_key}}`` (``reports.inputs.load_sql`` fills it in from here).
MACHINE_KEY: tuple[str, ...] = ("provider", "instance_type", "region", "market")
PRICE_UNITS: tuple[str, ...] = ("hour", "minute", "second")

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
    "bool": pa.bool_(),
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
    pa.field("series_key", pa.int64(),
             metadata={"doc": "64-bit key of the result's series (machine, configuration, methodology; "
                              "lake.series); null in rows written before it existed"}),
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


# ---- run_phases: what each step of a target's run took (issue 14) -----------------------------
#: Every phase name, in the order a run goes through them. The targets time the run-level
#: phases (``RUN_LEVEL_PHASES``) and store them in ``run_phases``; the per-configuration phases
#: (``CONFIG_PHASES``: process start + bind, warm-up, timed batches) are the records'
#: ``setup_seconds``, ``warmup_seconds`` and ``timed_seconds``, read from ``results`` by the
#: view ``sql/run_phases_all.sql`` rather than stored a second time.
PHASES: tuple[str, ...] = ("provision", "deploy", "pull", "sweep", "reclaim", "setup", "warmup", "timed",
                           "teardown")
#: pull: a container runtime's ``docker pull`` of its image (reused once on the host: seconds);
#: reclaim: what a machine lost mid-sweep or during its deploy cost the night (ec2 spot:
#: ``targets.ec2.reclaim``): the lost machine's interrupted step (status ``lost``), then the
#: replacement's launch, readiness and deploy (their own status)
RUN_LEVEL_PHASES: tuple[str, ...] = ("provision", "deploy", "pull", "sweep", "reclaim", "teardown")
CONFIG_PHASES: tuple[str, ...] = ("setup", "warmup", "timed")
#: lost: the machine was lost during this step (only a ``reclaim`` row has it)
PHASE_STATUSES: tuple[str, ...] = ("ok", "failed", "lost")
#: The status of the step during which the machine was lost, and the phase it is recorded as.
LOST_STATUS, RECLAIM_PHASE = "lost", "reclaim"

RUN_PHASES_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False, metadata={"doc": "the orchestrator's run id"}),
        pa.field("dag_run_id", pa.string(), metadata={"doc": "Airflow run, if any"}),
        pa.field("target", pa.string(), nullable=False, metadata={"doc": "the fleet entry's name"}),
        pa.field("kind", pa.string(), nullable=False, metadata={"doc": "local | ssh | ec2"}),
        pa.field("provider", pa.string(), nullable=False),
        pa.field("instance_type", pa.string(), nullable=False),
        pa.field("region", pa.string()),
        pa.field("market", pa.string(), metadata={"doc": "on_demand | spot: what the run got"}),
        pa.field("phase", pa.string(), nullable=False, metadata={"doc": "see schema.PHASES"}),
        pa.field("config_id", pa.string(), metadata={"doc": "null for run-level phases"}),
        pa.field("started_at", TIMESTAMP, nullable=False),
        pa.field("finished_at", TIMESTAMP, nullable=False),
        pa.field("seconds", pa.float64(), nullable=False, metadata={"doc": "monotonic clock, seconds"}),
        pa.field("billed", pa.bool_(), nullable=False,
                 metadata={"doc": "the machine was paid for during the phase"}),
        pa.field("status", pa.string(), nullable=False,
                 metadata={"doc": "ok | failed | lost (reclaim rows only)"}),
        pa.field("error", pa.string(), metadata={"doc": "why a failed phase failed (short)"}),
        pa.field("date", pa.date32(), nullable=False, metadata={"doc": "UTC day the phase started"}),
        pa.field("code_hash", pa.string()),
        pa.field("ingest_key", pa.string(), nullable=False,
                 metadata={"doc": "hash of the row: writing the same phase twice writes nothing"}),
        pa.field("ingested_at", TIMESTAMP),
    ]
)
