"""Ingest: a worker's results file (JSON Lines, local or s3://) validated record by record
and written as the rows of one run in ONE commit of the results table (see ``lake.tables``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from bench_tasks.record import validate_record
from bench_tasks.record_fields import RecordError
from bench_tasks.record_text import loads_record
from gpucompare.config import patterns
from gpucompare.lake import schema
from gpucompare.lake.commits import WriteSummary
from gpucompare.lake.rows import IngestError, check_run_id
from gpucompare.lake.series import with_series_keys
from gpucompare.lake.storage import filesystem_for
from gpucompare.lake.tables import (
    BATCH_BYTES,
    BATCH_ROWS,
    Lake,
)

# ---- ingest of worker result files --------------------------------------------------------
_FREE_TEXT_MAX = 250


@dataclass(frozen=True)
class RunContext:
    """The orchestrator's columns for the records of one results file."""

    provider: str
    instance_type: str
    region: str | None = None
    market: str = patterns.DEFAULT_MARKET
    target: str = "local"
    source: str | None = None
    dag_run_id: str | None = None

    def validated(self) -> RunContext:
        """Self, after checking every value a user may have typed (raises IngestError)."""
        checks = (
            ("provider", self.provider, patterns.PROVIDER, "lower-case letters, digits, - and _ (max 40)"),
            (
                "instance_type",
                self.instance_type,
                patterns.INSTANCE_TYPE,
                "letters, digits, '.', - and _ (max 64)",
            ),
        )
        for name, value, pattern, allowed in checks:
            if not isinstance(value, str) or not pattern.fullmatch(value):
                raise IngestError(f"{name} {value!r} is not valid (allowed: {allowed})", field=name)
        if self.region is not None and not patterns.REGION.fullmatch(self.region):
            raise IngestError(f"region {self.region!r} is not valid (e.g. us-east-1)", field="region")
        if self.market not in patterns.MARKETS:
            raise IngestError(
                f"market {self.market!r} is not one of {', '.join(patterns.MARKETS)}", field="market"
            )
        measured_targets = tuple(t for t in schema.TARGETS if t != "published")
        if self.target not in measured_targets:
            raise IngestError(
                f"target {self.target!r} is not one of {', '.join(measured_targets)} "
                "(published figures come in through import-published)",
                field="target",
            )
        for name in ("source", "dag_run_id"):
            value = getattr(self, name)
            if value is not None and (len(value) > _FREE_TEXT_MAX or not value.isprintable()):
                raise IngestError(
                    f"{name} must be printable text of at most {_FREE_TEXT_MAX} characters", field=name
                )
        return self


@dataclass
class IngestSummary:
    """What one ingest did (see ``ingest_results``)."""

    run_id: str
    records: int
    write: WriteSummary
    dates: list[dt.date] = field(default_factory=list)
    #: what ``replace=True`` replaced: the run's rows measured on another machine, described
    replaced: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.write.changed

    def describe(self) -> str:
        days = ", ".join(d.isoformat() for d in self.dates)
        text = f"run {self.run_id}: {self.records} record(s) ({days}); {self.write.describe()}"
        if self.replaced:
            text += f"; replaced {', '.join(self.replaced)}"
        return text


def machine_text(machine: tuple[str, str, str | None]) -> str:
    """``aws g5.xlarge (us-east-1)``: a (provider, instance_type, region) as a person reads it."""
    provider, instance_type, region = machine
    return f"{provider} {instance_type}" + (f" ({region})" if region else "")


def _other_machines(lake: Lake, run_id: str, context: RunContext, replace: bool) -> list[str]:
    """The run's rows already in the lake from another machine than ``context``'s, described;
    IngestError unless ``replace`` (a run id names one machine's run: a second machine's file
    under the same id would silently take the first one's place)."""
    mine = (context.provider, context.instance_type, context.region)
    others = {m: rows for m, rows in lake.run_machines(run_id).items() if m != mine}
    described = [f"{rows} row(s) of run {run_id} measured on {machine_text(m)}" for m, rows in others.items()]
    if described and not replace:
        raise IngestError(
            f"run id {run_id!r} is already in the lake for another machine ({'; '.join(described)}), "
            f"not {machine_text(mine)}: give this run its own --run-id, or --replace to replace those rows",
            field="run_id",
        )
    return described


def _timestamp(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(dt.UTC)


#: Longest line of a results file (bytes, newline included). A valid record is far shorter:
#: ``error`` holds at most 64 KiB of UTF-8 (at most 384 KiB once JSON-escaped), each of the other
#: strings 256 bytes, the lists at most ``MAX_LIST_ITEMS`` items. A longer line is refused, naming
#: its number, after reading no more than this many bytes of it: memory stays bounded whatever the
#: file holds.
MAX_LINE_BYTES = 2 * 1024 * 1024


def _regular_file(location: str) -> str:
    """``location`` if it is a regular file; IngestError saying what it is otherwise."""
    path = Path(location)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise IngestError(f"{location}: cannot read results file: no such file") from None
    except OSError as exc:
        raise IngestError(f"{location}: cannot read results file: {exc.strerror or exc}") from None
    if stat.S_ISDIR(mode):
        raise IngestError(f"{location}: cannot read results file: is a directory (give the .jsonl file)")
    if not stat.S_ISREG(mode):
        raise IngestError(
            f"{location}: cannot read results file: is not a regular file (a FIFO, device or socket); "
            "copy the records into a file first"
        )
    return location


class _ResultsFile:
    """A results file (local path, or s3:// copied to a local temporary file) read line by line."""

    def __init__(self, location: str | Path) -> None:
        self.location = str(location)
        self.name = self.location.rsplit("/", 1)[-1]
        self._temp: str | None = None
        if self.location.startswith("s3://"):
            fs, path = filesystem_for(self.location)
            handle, self._temp = tempfile.mkstemp(prefix="gpucompare-ingest-", suffix=".jsonl")
            try:
                with os.fdopen(handle, "wb") as out, fs.open_input_stream(path) as stream:
                    while chunk := stream.read(8 << 20):
                        out.write(chunk)
            except OSError as exc:
                self.close()
                raise IngestError(f"{self.location}: cannot read results file: {exc}") from None
            self.local = self._temp
        else:
            self.local = _regular_file(self.location)

    def raw_lines(self) -> Iterator[tuple[int, bytes]]:
        """(line number, bytes) of every non-blank line, each read with a bound of
        ``MAX_LINE_BYTES``: a longer line raises IngestError naming it."""
        try:
            with open(self.local, "rb") as handle:
                line_no = 0
                while line := handle.readline(MAX_LINE_BYTES + 1):
                    line_no += 1
                    if len(line) > MAX_LINE_BYTES:
                        raise IngestError(
                            f"{self.name} line {line_no}: longer than {MAX_LINE_BYTES} bytes (the "
                            "limit of one record line; a valid record is far shorter)",
                            line=line_no, field="record",
                        )
                    if line.strip():
                        yield line_no, line
        except OSError as exc:
            raise IngestError(f"{self.location}: cannot read results file: {exc}") from None

    def lines(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """(line number, validated record) of every non-blank line; IngestError on the first bad one."""
        for line_no, raw in self.raw_lines():
            yield line_no, parse_line(_decode(raw, line_no, self.name), line_no, self.name)

    def close(self) -> None:
        if self._temp is not None:
            Path(self._temp).unlink(missing_ok=True)
            self._temp = None


def _decode(raw: bytes, line_no: int, name: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise IngestError(
            f"{name} line {line_no}: not UTF-8 text ({exc.reason} at byte {exc.start})",
            line=line_no, field="record",
        ) from None


def parse_line(line: str, line_no: int, name: str = "results") -> dict[str, Any]:
    """One JSON Lines record, parsed strictly (``bench_tasks.record_text.loads_record``: duplicate
    keys, oversized number literals refused) and validated (IngestError naming the line and
    field otherwise)."""
    try:
        record = loads_record(line)
    except RecordError as exc:
        raise IngestError(
            f"{name} line {line_no}: field {exc.field}: {exc.message}", line=line_no, field=exc.field
        ) from None
    except json.JSONDecodeError as exc:
        raise IngestError(
            f"{name} line {line_no}: not valid JSON ({exc.msg})", line=line_no, field="record"
        ) from None
    except RecursionError:
        raise IngestError(f"{name} line {line_no}: nested too deeply", line=line_no, field="record") from None
    try:
        return validate_record(record)
    except RecordError as exc:
        raise IngestError(
            f"{name} line {line_no}: field {exc.field}: {exc.message}", line=line_no, field=exc.field
        ) from None


def _row(record: dict[str, Any], context: RunContext, ingested_at: dt.datetime) -> dict[str, Any]:
    started = _timestamp(record["started_at"])
    row = dict(record)
    row.update(
        started_at=started,
        finished_at=_timestamp(record["finished_at"]),
        provider=context.provider,
        instance_type=context.instance_type,
        region=context.region,
        market=context.market,
        target=context.target,
        source=context.source or f"gpucompare {context.target} run",
        dag_run_id=context.dag_run_id,
        ingested_at=ingested_at,
        published_value=None,
        note=None,
        flags=[],
        date=started.date(),
    )
    return row


def _results_batch(rows: list[dict[str, Any]]) -> pa.RecordBatch:
    """Rows of the results table as one Arrow batch, their series keys filled (``lake.series``)."""
    return with_series_keys(pa.RecordBatch.from_pylist(rows, schema=schema.RESULTS_SCHEMA))


def results_rows(
    records: list[dict[str, Any]], context: RunContext, *, ingested_at: dt.datetime | None = None
) -> pa.Table:
    """Validated records plus the orchestrator's columns, as a results table."""
    ingested_at = ingested_at or dt.datetime.now(dt.UTC)
    return with_series_keys(pa.Table.from_pylist(
        [_row(r, context, ingested_at) for r in records], schema=schema.RESULTS_SCHEMA
    ))


def ingest_results(
    lake: Lake,
    results_file: str | Path,
    context: RunContext,
    *,
    run_id: str,
    code_hash: str | None = None,
    batch_rows: int = BATCH_ROWS,
    batch_bytes: int = BATCH_BYTES,
    replace: bool = False,
) -> IngestSummary:
    """Validate a worker results file (local path or s3:// URI) and make it the rows of run
    ``run_id`` (the orchestrator's identity of the run) in ONE commit.

    Two streaming passes, so memory stays bounded in bytes whatever the file's size: each line is
    read with a bound (``MAX_LINE_BYTES``) and the Arrow batches close at ``batch_rows`` rows or
    ``batch_bytes`` bytes of record text. The first pass validates every record (line and field
    named on the first error; nothing written then), checks that every record's ``run_id`` is the
    orchestrator's and that no configuration appears twice, and hashes the data (order-free: the
    same records in another line order are the same run); the second turns the records into
    Arrow batches, written as Parquet files one batch at a time and committed in the same
    transaction that removes the run's previous rows (``Lake.replace_run_rows``). If the run's
    rows already carry the same hash, nothing is written. Rows of the run from another machine
    are refused unless ``replace`` (``_other_machines``)."""
    context = context.validated()
    check_run_id(run_id)
    if code_hash is not None and not patterns.CODE_HASH.fullmatch(code_hash):
        raise IngestError(f"code hash {code_hash!r} is not a lower-case hex digest (8-64 characters)",
                          field="code_hash")
    source = _ResultsFile(results_file)
    try:
        key, count, dates = _first_pass(source, context, run_id, code_hash)
        replaced = _other_machines(lake, run_id, context, replace)
        ingested_at = dt.datetime.now(dt.UTC)

        def batches() -> pa.RecordBatchReader:
            def generate() -> Iterator[pa.RecordBatch]:
                pending: list[dict[str, Any]] = []
                size = 0
                for line_no, raw in source.raw_lines():
                    record = parse_line(_decode(raw, line_no, source.name), line_no, source.name)
                    pending.append(
                        _row(record, context, ingested_at) | {"code_hash": code_hash, "ingest_key": key}
                    )
                    size += len(raw)
                    if len(pending) >= batch_rows or size >= batch_bytes:
                        yield _results_batch(pending)
                        pending, size = [], 0
                if pending:
                    yield _results_batch(pending)

            return pa.RecordBatchReader.from_batches(schema.RESULTS_SCHEMA, generate())

        write = lake.replace_run(
            run_id, key, count, batches, {"target": context.target, "code_hash": code_hash or ""}
        )
    finally:
        source.close()
    return IngestSummary(run_id=run_id, records=count, write=write, dates=sorted(dates),
                         replaced=replaced if write.changed else [])


def _first_pass(
    source: _ResultsFile, context: RunContext, run_id: str, code_hash: str | None
) -> tuple[str, int, set[dt.date]]:
    """(ingest key, record count, dates) of a results file, every record
    validated. The key is order-free: the sum (mod 2^256) of each record's SHA-256, hashed with
    the context and count."""
    seen: set[str] = set()  # configuration ids so far (a set: no line numbers kept for 200,000 rows)
    dates: set[dt.date] = set()
    total = 0
    count = 0
    for line_no, raw in source.raw_lines():
        record = parse_line(_decode(raw, line_no, source.name), line_no, source.name)
        if record["run_id"] != run_id:
            raise IngestError(
                f"{source.name} line {line_no}: field run_id: {record['run_id']!r} is not this "
                f"run's id {run_id!r} (the orchestrator names the run, not the host)",
                line=line_no,
                field="run_id",
            )
        cell = record["config_id"]
        if cell in seen:
            raise IngestError(
                f"{source.name} line {line_no}: field config_id: {cell!r} appears twice "
                "in this file (one record per configuration and run)",
                line=line_no,
                field="config_id",
            )
        seen.add(cell)
        dates.add(_timestamp(record["started_at"]).date())
        one = hashlib.sha256(json.dumps(record, sort_keys=True).encode()).digest()
        total = (total + int.from_bytes(one, "big")) % (1 << 256)
        count += 1
    if not count:
        raise IngestError(f"{source.name}: no records (an empty results file is refused)")
    digest = hashlib.sha256(json.dumps([context.__dict__, code_hash, count, f"{total:064x}"],
                                       sort_keys=True).encode())
    return digest.hexdigest()[:24], count, dates
