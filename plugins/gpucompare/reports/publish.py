"""Where the report set goes: its tables as Parquet and CSV, the day's history copy, the page.

Output layout under the chosen directory (local path or s3://)::

    <report>.csv                     one per report, header row, UTF-8 (list columns ;-joined)
    <report>/<report>.parquet        one folder per report (an Athena/Glue table location)
    index.html, summary.md           the page (rendered by gpucompare.reports.page / .summary)
    manifest.json                    what the set was built from (lake, table versions) and
                                     ``failures``: each part that failed and why (empty: none)

and, when a history root is given (the DAG gives the reports root), one more copy a day::

    <history>/report_history/<report>/report_date=YYYY-MM-DD/<report>.parquet

Every file is written whole: a local file under a temporary name, then renamed, so a reader
sees the old file or the new one, never half of one.

The tables' files are written by a :class:`TableWriter`, on one thread of their own, while the
caller goes on (the report command builds the next report and draws the page meanwhile): Arrow's
Parquet and CSV writers release the GIL, so on two cores the files cost the report set almost no
wall-clock time. ``TableWriter.join`` waits for them.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from gpucompare import settings
from gpucompare.lake.storage import put_bytes
from gpucompare.lake.tables import open_lake
from gpucompare.reports.page import render_page
from gpucompare.reports.report_set import HISTORY_TABLES, ReportSet
from gpucompare.reports.summary import render_failures_only, render_summary


def _output_location(out: str) -> tuple[pafs.FileSystem, str]:
    location = open_lake(out)
    return location.fs, location.root


def write_bytes(out: str, name: str, data: bytes) -> str:
    """Write one file below ``out`` (local or s3://), atomically; returns its path."""
    fs, root = _output_location(out)
    return _put(fs, root, name, data)


def _put(fs: pafs.FileSystem, root: str, name: str, data: bytes) -> str:
    """``name`` below ``root`` written whole (``storage.put_bytes``: two builds of one day, a rerun
    while the scheduled one runs, never write into each other's file); returns its path."""
    path = f"{root.rstrip('/')}/{name}"
    put_bytes(fs, path, data)
    return path


#: A text cell a spreadsheet would read as a formula starts with one of these (OWASP, "CSV
#: Injection": =, +, -, @, tab and carriage return); in the CSVs such a cell gets a leading
#: single quote, so the spreadsheet shows it as text. The Parquet files keep every value as is.
FORMULA_CHARACTERS = ("=", "+", "-", "@", "\t", "\r")
#: The same, as the pattern of the cell's first character (``-`` escaped inside the class).
FORMULA_START = "^([" + "".join("\\-" if c == "-" else c for c in FORMULA_CHARACTERS) + "])"


def csv_ready(table: pa.Table) -> pa.Table:
    """The table as CSV can hold it: list columns (``flags``) ;-joined, and every text cell that a
    spreadsheet would run as a formula (``FORMULA_START``: ``=HYPERLINK(…)`` in a free-text field)
    neutralised with a leading ``'``; numbers and everything else as is. The regex runs only on a
    column with such a cell (a first-character test finds them; most columns have none)."""
    starts = pa.array(FORMULA_CHARACTERS)
    for index, column in enumerate(table.schema):
        values = table.column(index)
        joined = pa.types.is_list(column.type) or pa.types.is_large_list(column.type)
        if joined:
            values = pc.binary_join(values, ";")
        elif not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
            continue
        if pc.any(pc.is_in(pc.utf8_slice_codeunits(values, 0, 1), value_set=starts)).as_py():
            values = pc.replace_substring_regex(values, pattern=FORMULA_START, replacement="'\\1")
        elif not joined:
            continue
        table = table.set_column(index, pa.field(column.name, values.type, metadata=column.metadata), values)
    return table


def _parquet_bytes(table: pa.Table) -> bytes:
    data = io.BytesIO()
    pq.write_table(table, data, compression="zstd")
    return data.getvalue()


#: What a writer is told when one file of the set cannot be made: (part name, the error).
OnError = Callable[[str, BaseException], None]


def _raise(name: str, exc: BaseException) -> None:
    raise exc


class TableWriter:
    """Writes report tables below ``out`` (``<name>.csv`` and ``<name>/<name>.parquet``) and the
    day's history copies on one background thread, in the order they were added, while the caller
    goes on. A table that cannot be written goes to ``on_error`` (default: raise, from
    :meth:`join`) and the next one is written. ``busy_s``: the seconds the thread spent writing."""

    def __init__(self, out: str, on_error: OnError = _raise) -> None:
        self.fs, self.root = _output_location(out)
        self.on_error = on_error
        self.busy_s = 0.0
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="report-files")
        self._pending: list[Future[list[str]]] = []

    def add(self, name: str, table: pa.Table) -> None:
        """Write ``table`` as ``<name>.csv`` and ``<name>/<name>.parquet`` (in the background)."""
        self._pending.append(self._pool.submit(self._timed, self._table_files, name, table))

    def add_history(self, tables: dict[str, pa.Table], history: str, report_date: dt.date) -> None:
        """The day's copy of each report below ``history`` (see :func:`write_history`)."""
        fs, root = _output_location(history)
        for name in HISTORY_TABLES:
            if name in tables:
                self._pending.append(self._pool.submit(self._timed, self._history_file, fs, root, name,
                                                       tables[name], report_date))

    def join(self) -> list[str]:
        """Wait for every file added; their paths, in the order added. The first error that
        ``on_error`` raised is raised here, once every file was tried."""
        written: list[str] = []
        first_error: BaseException | None = None
        for future in self._pending:
            try:
                written += future.result()
            except BaseException as exc:  # noqa: BLE001 - raised below, after the others
                first_error = first_error or exc
        self._pending = []
        self._pool.shutdown(wait=True)
        if first_error is not None:
            raise first_error
        return written

    def _timed(self, write: Callable[..., list[str]], *args: object) -> list[str]:
        started = time.perf_counter()
        try:
            return write(*args)
        finally:
            with self._lock:
                self.busy_s += time.perf_counter() - started

    def _table_files(self, name: str, table: pa.Table) -> list[str]:
        try:
            parquet = _parquet_bytes(table)
            text = io.BytesIO()
            pacsv.write_csv(csv_ready(table), text)
        except Exception as exc:  # noqa: BLE001 - handed to on_error: one table never stops the others
            self.on_error(name, exc)
            return []
        return [_put(self.fs, self.root, f"{name}/{name}.parquet", parquet),
                _put(self.fs, self.root, f"{name}.csv", text.getvalue())]

    def _history_file(self, fs: pafs.FileSystem, root: str, name: str, table: pa.Table,
                      report_date: dt.date) -> list[str]:
        try:
            data = _parquet_bytes(table)
        except Exception as exc:  # noqa: BLE001 - handed to on_error
            self.on_error(f"report_history/{name}", exc)
            return []
        return [_put(fs, root, f"report_history/{name}/report_date={report_date.isoformat()}/"
                     f"{name}.parquet", data)]


def write_tables(tables: dict[str, pa.Table], out: str, on_error: OnError = _raise) -> list[str]:
    """Write every table as ``<name>.csv`` and ``<name>/<name>.parquet`` below ``out`` and wait
    for them (:class:`TableWriter`); a table that cannot be written goes to ``on_error`` (default:
    raise) and the next one is written."""
    writer = TableWriter(out, on_error)
    for name, table in tables.items():
        writer.add(name, table)
    return writer.join()


def write_history(tables: dict[str, pa.Table], history: str, report_date: dt.date,
                  on_error: OnError = _raise) -> list[str]:
    """Keep the day's copy of each report in ``<history>/report_history/<report>/
    report_date=YYYY-MM-DD/<report>.parquet`` (Hive style: one table over time for BI).
    Building the same day again replaces that day's file. A report missing from ``tables`` (it
    failed) keeps the day's earlier copy, if any."""
    writer = TableWriter(history, on_error)
    writer.add_history(tables, history, report_date)
    return writer.join()


def write_site(report_set: ReportSet, out: str, *, generated_at: dt.datetime | None = None,
               writer: TableWriter | None = None) -> list[str]:
    """Write index.html, summary.md and (when the set knows what it was built from)
    manifest.json below ``out`` (local path or s3://); returns their paths. ``generated_at`` is the
    time the page states (default: now, read here at the edge; the page itself reads no clock). A
    page that cannot be rendered is recorded in ``report_set.failures`` (summary.md and
    manifest.json list every failure) and the rest is still written.

    ``writer``: the set's table files, still being written: the page is drawn meanwhile, then they
    are waited for (their paths come first in the list returned; the writer's seconds are the
    timing ``write parquet + csv``) before summary.md and manifest.json, which list every failure;
    a file that failed while the page was drawn has the page drawn again, so it lists it too."""
    generated_at = generated_at or dt.datetime.now(dt.UTC)
    failures = len(report_set.failures)
    page = _rendered(report_set, "index.html", lambda: render_page(report_set, generated_at))
    written = []
    if writer is not None:
        written += writer.join()
        report_set.timings["write parquet + csv"] = writer.busy_s
        if page is not None and len(report_set.failures) != failures:
            page = _rendered(report_set, "index.html", lambda: render_page(report_set, generated_at))
    if page is not None:
        written.append(write_bytes(out, "index.html", page.encode("utf-8")))
    summary = _rendered(report_set, "summary.md", lambda: render_summary(report_set))
    if summary is None:
        summary = render_failures_only(report_set)
    written.append(write_bytes(out, "summary.md", summary.encode("utf-8")))
    if report_set.manifest or report_set.failures:
        document = {**report_set.manifest, "failures": dict(report_set.failures)}
        manifest = json.dumps(document, indent=2, sort_keys=True, default=str) + "\n"
        written.append(write_bytes(out, "manifest.json", manifest.encode("utf-8")))
    return written


def _rendered(report_set: ReportSet, name: str, render: Callable[[], str]) -> str | None:
    """``render()``, or None after recording its failure under ``name`` in the set."""
    try:
        return render()
    except Exception as exc:  # noqa: BLE001 - recorded, the other files still written
        report_set.fail(name, exc)
        return None


def publish_latest(reports_root: str, dated: str) -> str:
    """Point ``<reports_root>/latest`` at the report set in ``<reports_root>/<dated>``.

    Locally ``latest`` is a symbolic link swapped in one rename, so a reader (or the UI
    plugin) sees the previous set or the new one, never a mix. On S3, where there are no
    links, the set's objects are copied under ``latest/``.
    """
    if settings.is_remote(reports_root):
        location = open_lake(reports_root)
        root = location.root.rstrip("/")
        pafs.copy_files(f"{root}/{dated}", f"{root}/latest", source_filesystem=location.fs,
                        destination_filesystem=location.fs)
        return f"{reports_root.rstrip('/')}/latest"
    root = Path(reports_root)
    latest = root / "latest"
    swap = root / f".latest-{dated}.tmp"
    swap.unlink(missing_ok=True)
    swap.symlink_to(dated, target_is_directory=True)  # relative: the folder can move
    if latest.is_dir() and not latest.is_symlink():
        shutil.rmtree(latest)  # a copied set from an older version of this code
    swap.replace(latest)
    return str(latest)
