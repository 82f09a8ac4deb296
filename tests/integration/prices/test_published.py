"""Import of the published reference figures: kept as published, suspicious values flagged."""

from __future__ import annotations

import csv
import datetime as dt
import shutil
from pathlib import Path

import pyarrow.compute as pc
import pytest

from gpucompare import cli
from gpucompare.lake import schema
from gpucompare.lake import tables as lake
from gpucompare.prices import published
from gpucompare.prices import tables as price_tables


def csv_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def key(row: dict) -> tuple:
    return (row["source"], row["instance_type"], int(row["gpu_count"]), row["mode"], row["network"],
            int(row["batch_size"]))


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> lake.Lake:
    target = lake.open_lake(str(tmp_path_factory.mktemp("published") / "lake"))
    published.import_published(target)
    return target


def test_every_published_cell_is_imported_as_published(imported: lake.Lake) -> None:
    source_rows = {key(r): r for r in csv_rows(published.SHIPPED_RESULTS)}
    table = imported.results_table()
    assert table.num_rows == len(source_rows) == 378
    assert set(table["target"].to_pylist()) == {"published"}
    for row in table.to_pylist():
        original = source_rows[key(row)]
        assert row["published_value"] == original["published_value"]  # verbatim, commas included
        assert row["source"] == original["source"] and row["provider"] == original["provider"]
        assert row["gpu_model"] == original["gpu_model"]
        if original["images_per_sec"]:
            assert row["images_per_sec"] == float(original["images_per_sec"])
        else:
            assert row["images_per_sec"] is None
        assert row["date"] == dt.date(2017, 6, 1)


def test_status_marks_follow_the_article(imported: lake.Lake) -> None:
    table = imported.results_table()
    by_value = {}
    for row in table.select(["published_value", "status", "error"]).to_pylist():
        by_value.setdefault(row["published_value"], set()).add((row["status"], row["error"] is not None))
    assert by_value["-**"] == {("oom", True)}
    assert by_value["-*"] == {("batch_smaller_than_devices", True)}
    oom = table.filter(pc.field("status") == "oom").to_pylist()
    assert [(r["instance_type"], r["network"], r["batch_size"]) for r in oom] == [("ltbv14", "resnet-50", 32)]


def test_known_defects_are_flagged_and_values_untouched(imported: lake.Lake) -> None:
    table = imported.results_table()
    rows = table.to_pylist()
    outliers = [r for r in rows if "outlier_vs_neighbours" in r["flags"]]
    assert [(r["instance_type"], r["gpu_count"], r["network"], r["batch_size"], r["images_per_sec"],
             r["published_value"]) for r in outliers] == [("ltbv14", 4, "alexnet", 128, 13341.50, "13341,50")]
    comma = {key(r) for r in rows if "decimal_comma" in r["flags"]}
    expected_comma = {key(r) for r in csv_rows(published.SHIPPED_RESULTS) if "," in r["published_value"]}
    assert comma == expected_comma and len(comma) > 90
    scaled = [r for r in rows if "batch_scaled_x8" in r["flags"]]
    assert scaled and all(r["network"] == "alexnet" and r["mode"] == "train" and r["batch_size"] % 8 == 0
                          for r in scaled)
    assert set().union(*(set(r["flags"]) for r in rows)) <= set(schema.FLAGS)


def test_prices_and_scaling_come_in_too(imported: lake.Lake) -> None:
    prices = price_tables.price_history(imported, include_shipped=False)
    assert sorted(prices["instance_type"].to_pylist()) == ["ltbv14", "ltbv19", "ltbv20", "p2.xlarge"]
    assert set(prices["unit"].to_pylist()) == {"minute"} and prices["region"].null_count == 4
    scaling = imported.published_scaling_table()
    mxnet_16 = scaling.filter((pc.field("framework") == "MXNet") & (pc.field("gpu_count") == 16))
    assert sorted(zip(mxnet_16["network"].to_pylist(), mxnet_16["speedup"].to_pylist(), strict=True)) == [
        ("googlenet", 13.5), ("inception-bn", 14.7)]


def test_re_import_replaces_the_previous_import(imported: lake.Lake) -> None:
    files = imported.list_files("results")
    published.import_published(imported)
    assert imported.list_files("results") == files
    assert imported.results_table().num_rows == 378


def test_cli_import_published_into_s3(s3_bucket: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    results = tmp_path / "published_results.csv"
    shutil.copy(published.SHIPPED_RESULTS, results)
    uri = f"s3://{s3_bucket}/lake"
    assert cli.main(["import-published", "--lake", uri, "--results", str(results)]) == 0
    out = capsys.readouterr().out
    assert "imported 378 published result(s), 4 price(s), 18 scaling point(s)" in out
    assert "outlier_vs_neighbours: 1" in out
    target = lake.open_lake(uri)
    assert target.results_table().num_rows == 378
    assert target.published_scaling_table().num_rows == 18
