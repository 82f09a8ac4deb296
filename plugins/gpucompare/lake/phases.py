"""The ``run_phases`` table: what each step of a target's run took, written and read.

One row per run-level phase a target went through (``schema.RUN_LEVEL_PHASES``: provision,
deploy, pull, sweep, reclaim, teardown; a retried step gives one row per attempt, a failed one
``status = failed``; the step during which the machine was lost is a ``reclaim`` row with
``status = lost``, the only place that status is allowed). The per-configuration phases
(setup, warm-up, timed) are NOT stored here: they are the records' own ``setup_seconds`` /
``warmup_seconds`` / ``timed_seconds`` in ``results``, and ``sql/run_phases_all.sql`` is the
view that puts both side by side. Storing them twice would give two copies that a re-ingest of
the results could set apart.

Writes follow the results table's discipline (``Lake.commit``): each row carries
``ingest_key``, a hash of the row itself, and a write replaces the rows with the same keys
in ONE commit (``predicate = ingest_key IN (…)``), so writing the same phases again commits
nothing, two writers lose nothing, and a write killed half-way leaves the table as it was.
Rows are appended as each step of a run ends (the pipeline's tasks do it, teardown last), so
a run that failed in provisioning still has its provision row.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from gpucompare.config import patterns
from gpucompare.lake import schema
from gpucompare.lake.commits import WriteSummary
from gpucompare.lake.rows import IngestError, check_run_id
from gpucompare.lake.tables import Lake

TABLE = "run_phases"
_TEXT_MAX = 250
_ERROR_MAX = 500


def _check_text(row: Mapping[str, Any], name: str, *, required: bool, limit: int = _TEXT_MAX) -> None:
    value = row.get(name)
    if value is None:
        if required:
            raise IngestError(f"run_phases: field {name} is required", field=name)
        return
    if not isinstance(value, str) or not value or len(value) > limit or not value.isprintable():
        raise IngestError(f"run_phases: field {name} must be printable text of 1 to {limit} characters, "
                          f"got {value!r}", field=name)


def _timestamp(value: Any, name: str) -> dt.datetime:
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise IngestError(f"run_phases: field {name} {value!r} is not an ISO 8601 time",
                              field=name) from None
    if not isinstance(value, dt.datetime) or value.tzinfo is None:
        raise IngestError(f"run_phases: field {name} must be a time with a zone, got {value!r}", field=name)
    return value.astimezone(dt.UTC)


def check_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """One phase row, checked (IngestError naming the field, the value and what is allowed)."""
    check_run_id(row.get("run_id"))
    choices = (("kind", patterns.TARGET_KINDS), ("phase", schema.RUN_LEVEL_PHASES),
               ("status", schema.PHASE_STATUSES))
    for name, allowed in choices:
        if row.get(name) not in allowed:
            raise IngestError(f"run_phases: field {name} {row.get(name)!r} is not one of {', '.join(allowed)}"
                              + (" (per-configuration phases come from the results)"
                                 if name == "phase" and row.get(name) in schema.CONFIG_PHASES else ""),
                              field=name)
    if row["status"] == schema.LOST_STATUS and row["phase"] != schema.RECLAIM_PHASE:
        raise IngestError(f"run_phases: field status {schema.LOST_STATUS!r} is allowed for phase "
                          f"{schema.RECLAIM_PHASE!r} only, got phase {row['phase']!r}", field="status")
    if row.get("market") is not None and row["market"] not in patterns.MARKETS:
        raise IngestError(f"run_phases: field market {row['market']!r} is not one of "
                          f"{', '.join(patterns.MARKETS)}", field="market")
    for name, pattern in (("provider", patterns.PROVIDER), ("instance_type", patterns.INSTANCE_TYPE)):
        if not isinstance(row.get(name), str) or not pattern.fullmatch(row[name]):
            raise IngestError(f"run_phases: field {name} {row.get(name)!r} is not valid", field=name)
    if row.get("region") is not None and not patterns.REGION.fullmatch(str(row["region"])):
        raise IngestError(f"run_phases: field region {row['region']!r} is not valid", field="region")
    if row.get("code_hash") is not None and not patterns.CODE_HASH.fullmatch(str(row["code_hash"])):
        raise IngestError(f"run_phases: field code_hash {row['code_hash']!r} is not a lower-case hex digest",
                          field="code_hash")
    _check_text(row, "target", required=True)
    _check_text(row, "dag_run_id", required=False)
    started, finished = _timestamp(row.get("started_at"), "started_at"), _timestamp(row.get("finished_at"),
                                                                                       "finished_at")
    seconds = row.get("seconds")
    if (isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds)
            or seconds < 0):
        raise IngestError(f"run_phases: field seconds must be a finite number >= 0, got {seconds!r}",
                          field="seconds")
    if finished < started:
        raise IngestError(f"run_phases: finished_at {finished.isoformat()} is before started_at "
                          f"{started.isoformat()}", field="finished_at")
    if not isinstance(row.get("billed"), bool):
        raise IngestError(f"run_phases: field billed must be true or false, got {row.get('billed')!r}",
                          field="billed")
    error = row.get("error")
    if error is not None and not isinstance(error, str):
        raise IngestError(f"run_phases: field error must be text, got {type(error).__name__}", field="error")
    checked = {name: row.get(name) for name in schema.RUN_PHASES_SCHEMA.names}
    checked.update(started_at=started, finished_at=finished, seconds=float(seconds), config_id=None,
                   date=started.date(), error=None if error is None else error[:_ERROR_MAX])
    return checked


def row_key(row: Mapping[str, Any]) -> str:
    """The hash of a checked row (``ingest_key`` and ``ingested_at`` aside)."""
    kept = {k: v for k, v in row.items() if k not in ("ingest_key", "ingested_at")}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:24]


def existing_keys(lake: Lake, keys: Iterable[str]) -> set[str]:
    """Which of ``keys`` the table holds already (the table is small: one column is read)."""
    wanted = set(keys)
    found: set[str] = set()
    for live in lake.snapshot(TABLE).files:
        column = pq.read_table(live.path, filesystem=lake.fs, columns=["ingest_key"]).column(0)
        found.update(key for key in column.to_pylist() if key in wanted)
    return found


def write_phases(lake: Lake, rows: Iterable[Mapping[str, Any]]) -> WriteSummary:
    """Write phase rows in ONE commit, each replacing any row with its ``ingest_key``; rows the
    table already holds are not written again (nothing at all is committed when all are)."""
    checked = [check_row(row) for row in rows]
    for row in checked:
        row["ingest_key"] = row_key(row)
    if not checked:
        return WriteSummary(table=TABLE, version=lake.version(TABLE), rows=0, changed=False)
    keys = sorted({row["ingest_key"] for row in checked})
    if lake.has_table(TABLE) and existing_keys(lake, keys) == set(keys):
        return WriteSummary(table=TABLE, version=lake.version(TABLE), rows=len(checked), changed=False)
    now = dt.datetime.now(dt.UTC)
    unique = {row["ingest_key"]: row | {"ingested_at": now} for row in checked}
    table = pa.Table.from_pylist(list(unique.values()), schema=schema.RUN_PHASES_SCHEMA)
    # keys are hex digests: safe inside the predicate's string literals
    predicate = "ingest_key IN (" + ", ".join(f"'{key}'" for key in keys) + ")"
    version = lake.commit(TABLE, lambda: table, predicate=predicate,
                          metadata={"run_id": checked[0]["run_id"], "rows": str(len(unique))})
    return WriteSummary(table=TABLE, version=version, rows=len(unique), changed=True)


def read_phases(lake: Lake, as_of: int | str | dt.datetime | None = None) -> pa.Table:
    """Every stored phase row (``schema.RUN_PHASES_SCHEMA``; empty if there is no table)."""
    wanted = schema.RUN_PHASES_SCHEMA
    snap = lake.snapshot(TABLE, as_of)
    if not snap.files:
        return wanted.empty_table()
    parts = [pq.read_table(f.path, filesystem=lake.fs, columns=wanted.names) for f in snap.files]
    return pa.concat_tables(parts).select(wanted.names).cast(wanted)
