"""The report cache's log replay (reports.newest.files_to_read) on hand-written Delta log entries.

The entries stand in for commits of any Delta writer (delta-rs's optimize, another engine's
compaction or repair): each is the JSON lines of one ``_delta_log/<version>.json``, with only the
fields the replay reads. The integration tests (tests/integration/reports/test_report_cache.py) run
the same replay over commits the lake itself made.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpucompare.lake.tables import Lake, open_lake
from gpucompare.reports import newest
from gpucompare.reports.inputs import ResultFiles

P1, P2 = {"mode": "score", "date": "2026-03-01"}, {"mode": "score", "date": "2026-03-02"}


def path(partition: dict[str, str], name: str) -> str:
    return f"mode={partition['mode']}/date={partition['date']}/{name}.parquet"


def add(partition: dict[str, str], name: str, *, data_change: bool = True) -> dict:
    return {"add": {"path": path(partition, name), "partitionValues": partition, "dataChange": data_change}}


def remove(partition: dict[str, str], name: str, *, data_change: bool = False) -> dict:
    return {"remove": {"path": path(partition, name), "partitionValues": partition,
                       "dataChange": data_change}}


@pytest.fixture
def lake(tmp_path: Path) -> Lake:
    target = open_lake(str(tmp_path / "lake"))
    Path(target.path("results", "_delta_log")).mkdir(parents=True)
    return target


def commit(lake: Lake, version: int, *actions: dict) -> None:
    lines = [{"commitInfo": {"operation": "TEST"}}, *actions]
    Path(lake.path("results", "_delta_log", f"{version:020d}.json")).write_text(
        "\n".join(json.dumps(line) for line in lines) + "\n")


def replay(lake: Lake, cached_files: set[str], cached_version: int, version: int, live: set[str]):
    cached = newest.Newest(groups=newest.GROUPS_SCHEMA.empty_table(), files=frozenset(cached_files),
                           version=cached_version, results=0, files_read=0)
    files = ResultFiles(con=None, by_date={}, relative={f"/abs/{p}": p for p in live}, version=version)
    return newest.files_to_read(lake, cached, files)


def test_added_files_are_read_and_a_compaction_of_covered_files_is_not(lake: Lake) -> None:
    a, b = path(P1, "a"), path(P1, "b")
    commit(lake, 3, add(P2, "c"))  # a night's ingest
    commit(lake, 4, remove(P1, "a"), remove(P1, "b"), add(P1, "ab", data_change=False))  # compaction
    assert replay(lake, {a, b}, 2, 4, {path(P1, "ab"), path(P2, "c")}) == {path(P2, "c")}


def test_a_compaction_of_a_partition_holding_a_file_not_covered_is_read(lake: Lake) -> None:
    a = path(P1, "a")
    commit(lake, 3, add(P1, "new"))
    commit(lake, 4, remove(P1, "a"), remove(P1, "new"), add(P1, "merged", data_change=False))
    assert replay(lake, {a}, 2, 4, {path(P1, "merged")}) == {path(P1, "merged")}


def test_a_file_added_without_a_data_change_and_without_a_rewrite_is_read(lake: Lake) -> None:
    """An add with dataChange false that replaces nothing in its partition (a repair, a converted
    file): its rows were never grouped, so it is read."""
    a = path(P1, "a")
    commit(lake, 3, remove(P1, "a"), add(P1, "a2", data_change=False), add(P2, "stray", data_change=False))
    assert replay(lake, {a}, 2, 3, {path(P1, "a2"), path(P2, "stray")}) == {path(P2, "stray")}


def test_rows_removed_a_missing_entry_a_newer_cache_or_other_files_mean_no_replay(lake: Lake) -> None:
    a, b = path(P1, "a"), path(P1, "b")
    commit(lake, 3, remove(P1, "a", data_change=True), add(P1, "a-replaced"))  # a replaced run
    assert replay(lake, {a, b}, 2, 3, {b, path(P1, "a-replaced")}) is None
    assert replay(lake, {a, b}, 3, 5, {a, b}) is None  # entries 4 and 5 are not there
    assert replay(lake, {a, b}, 6, 5, {a, b}) is None  # a cache of a newer version
    assert replay(lake, {a, b}, 5, 5, {a}) is None  # same version, other files: not this table's cache
    assert replay(lake, {a, b}, 5, 5, {a, b}) == set()


def test_logged_paths_are_uri_decoded(lake: Lake) -> None:
    commit(lake, 3, {"add": {"path": "mode=score/date=2026-03-01/part%20one.parquet", "partitionValues": P1,
                             "dataChange": True}})
    assert replay(lake, set(), 2, 3, {"mode=score/date=2026-03-01/part one.parquet"}) == {
        "mode=score/date=2026-03-01/part one.parquet"}
