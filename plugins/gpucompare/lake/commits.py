"""How the lake commits: the retry policy of a commit conflict, the tokens and application
transaction ids that find and guard a commit, the remove action of a replaced file, the Parquet
properties of writes through delta-rs, and what a write or a compaction reports.

``lake.tables.Lake`` makes the commits with these; nothing here opens a table.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any

import tenacity

from gpucompare.lake.datafiles import partition_text
from gpucompare.lake.reading import RunFile

#: Whole-transaction attempts when a commit meets a real conflict (delta-rs retries the rest).
COMMIT_ATTEMPTS = 12
#: Commit metadata key of a write's own token, and how far back the log is searched for it.
COMMIT_ID_KEY = "gpucompare_commit"
COMMIT_SEARCH = 200
#: Parquet row group and file size of the writes through delta-rs (small tables, compaction).
ROW_GROUP_ROWS = 8192
TARGET_FILE_BYTES = 32 * 1024 * 1024


def commit_conflict_retries() -> tenacity.Retrying:
    """The one retry policy of lake commits: a commit conflict (delta-rs ``CommitFailedError``:
    another writer took the version, or a concurrent compaction or delete touched the same
    files, or a writer of the same run committed first; delta-rs has already retried a plain
    lost race ``max_commit_retries`` times; or the table was created meanwhile) is
    retried from the start, with fresh data, up to ``COMMIT_ATTEMPTS`` times, waits of full
    jitter growing exponentially so racing writers fall apart. Any other error is raised at once."""
    from deltalake.exceptions import CommitFailedError

    return tenacity.Retrying(
        retry=tenacity.retry_if_exception_type((CommitFailedError, TableCreatedMeanwhile)),
        stop=tenacity.stop_after_attempt(COMMIT_ATTEMPTS),
        wait=tenacity.wait_random_exponential(multiplier=0.1, max=2.0),
        reraise=True,
    )



class TableCreatedMeanwhile(Exception):  # noqa: N818 - a condition, retried like a conflict
    """Another writer created the results table between our look and our create."""


def run_transaction_id(run_id: str) -> str:
    """The application transaction id every replace of run ``run_id`` commits: delta-rs refuses
    a commit when a winning concurrent commit holds the same id (two writers of one run)."""
    return f"gpucompare-results-run-{run_id}"


def commit_token(log_entry: str) -> str | None:
    """The ``COMMIT_ID_KEY`` of a commit file's commitInfo action (None when it has none)."""
    for line in log_entry.splitlines():
        action = json.loads(line) if line.strip() else {}
        info = action.get("commitInfo")
        if info is not None:
            return info.get(COMMIT_ID_KEY)
    return None


def remove_action(found: RunFile) -> Any:
    """The remove action of ``found``, one of a run's old files (committed with its new ones)."""
    from deltalake.transaction import RemoveAction

    return RemoveAction(
        path=found.logged,
        data_change=True,
        deletion_timestamp=int(dt.datetime.now(dt.UTC).timestamp() * 1000),
        size=found.size,
        partition_values={c: None if v is None else partition_text(v) for c, v in found.partition.items()},
    )


def writer_properties() -> Any:
    """zstd Parquet in row groups of ``ROW_GROUP_ROWS`` (writes through delta-rs: the small
    tables and compaction; the results of a run are written by ``lake.datafiles``)."""
    from deltalake import WriterProperties

    return WriterProperties(compression="ZSTD", max_row_group_size=ROW_GROUP_ROWS)


@dataclass(frozen=True)
class WriteSummary:
    """What one write did: the table, its version after it, the rows, whether anything changed."""

    table: str
    version: int | None
    rows: int
    changed: bool

    def describe(self) -> str:
        what = "committed" if self.changed else "unchanged (already in the lake)"
        return f"{self.table}: {self.rows} row(s) {what}, table version {self.version}"


@dataclass(frozen=True)
class CompactionSummary:
    """What ``Lake.compact`` did."""

    files_before: int
    files_after: int
    files_added: int
    files_removed: int
    vacuumed: int
    version: int

    def describe(self) -> str:
        return (
            f"results: {self.files_before} live file(s) -> {self.files_after} "
            f"({self.files_removed} rewritten into {self.files_added}), {self.vacuumed} file(s) "
            f"older than the 7-day retention removed, table version {self.version}"
        )
