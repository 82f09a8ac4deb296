"""Price catalogs of other providers: the shipped samples resolve to known GPUs, imports are
idempotent and keep history in a real (local Delta) lake, the Azure Retail Prices pages are
followed, and hostile catalogs are refused with the row and field named and nothing written.

The Azure API is not reachable here: ``tests/support/data/azure_retail/`` holds two recorded pages
(their README says how they were made) and a small opener stands in for prices.azure.com,
answering each URL the importer asks for with the recorded page of that URL.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
from pathlib import Path

import pytest

from gpucompare import cli
from gpucompare.config import gpus
from gpucompare.lake import tables as lake
from gpucompare.prices.catalogs import azure, common, importer, skypilot
from gpucompare.prices.tables import price_history
from tests.conftest import DATA_DIR

RECORDED = DATA_DIR / "azure_retail"
DAY = dt.date(2026, 11, 30)
AZURE_QUERY = ("https://prices.azure.com/api/retail/prices?$filter=serviceName eq 'Virtual Machines' "
               "and armRegionName eq 'eastus'")
HEADER = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,Region,GpuInfo,SpotPrice\n"
GOOD_ROW = "gpu_1x_a10,A10,1.0,30.0,200.0,0.75,us-east-1,,\n"


# ---- the shipped samples ----------------------------------------------------------------------
def test_every_sample_row_names_a_known_gpu() -> None:
    """Every accelerator in every shipped sample resolves; none is imported with an unknown GPU."""
    seen = set()
    for sample in importer.samples():
        with sample.path.open(encoding="utf-8", newline="") as handle:
            for row in csv.DictReader(handle):
                name = row["AcceleratorName"].strip()
                if name:
                    assert gpus.canonical(name) is not None, (sample.provider, name)
                    seen.add(name)
        result = importer.read_sample(sample)
        assert result.unknown_gpus == {}, sample.provider
        assert result.rows.num_rows > 0 and None not in result.rows["gpu_model"].to_pylist()
        assert set(result.rows["effective_from"].to_pylist()) == {sample.effective_from}
        assert all(sample.source in s for s in result.rows["source"].to_pylist())
    assert {"A100-80GB-SXM", "RTX4090", "RTX6000-Ada", "A6000", "H100", "T4", "P4"} <= seen


def test_every_azure_size_of_the_gpu_map_names_a_known_gpu() -> None:
    sizes = azure.azure_skus()
    assert len(sizes) >= 30 and sizes["Standard_ND96isr_H100_v5"] == ("H100", 8)
    assert {name: gpus.canonical(name) for name, _ in sizes.values() if gpus.canonical(name) is None} == {}


def test_samples_cover_five_providers_with_their_date_and_source() -> None:
    results = importer.shipped_catalogs()
    assert {r.provider for r in results} >= {"gcp", "azure", "lambda", "runpod", "nebius"}
    totals = importer.coverage(results)
    assert totals["providers"] >= 5 and totals["instance_types"] >= 60 and totals["gpu_models"] >= 15
    for sample in importer.samples():
        assert sample.source.startswith("SkyPilot catalog") and "https://github.com/" in sample.source


def test_gcp_gpu_rows_are_priced_alone_and_zones_collapse() -> None:
    gcp = next(r for r in importer.shipped_catalogs() if r.provider == "gcp")
    rows = {(r["instance_type"], r["region"], r["market"]): r for r in gcp.rows.to_pylist()}
    a100 = rows[("A100-x1", "us-central1", "on_demand")]  # two zones in the file, one row here
    assert (a100["price"], a100["gpu_model"], a100["gpu_count"]) == (2.93391, "A100", 1)
    assert "GPUs only" in a100["source"]
    assert rows[("T4-x1", "us-central1", "spot")]["price"] == 0.14
    assert not any(key[0].startswith("a2-") for key in rows)  # a VM row without a GPU is skipped
    assert gcp.without_gpu == 2


def test_runpod_countries_become_lower_case_regions() -> None:
    runpod = next(r for r in importer.shipped_catalogs() if r.provider == "runpod")
    regions = set(runpod.rows["region"].to_pylist())
    assert regions == {"ca", "nl", "us"}
    sxm = [r for r in runpod.rows.to_pylist() if r["instance_type"] == "1x_A100-80GB-SXM_SECURE"]
    assert [(r["gpu_model"], r["market"], r["price"]) for r in sxm] == [("A100-80GB", "on_demand", 1.89)]


# ---- the lake: idempotence and history ------------------------------------------------------------
def _catalog(tmp_path: Path, body: str, name: str = "vms.csv") -> Path:
    path = tmp_path / name
    path.write_text(HEADER + body, encoding="utf-8")
    return path


def test_the_same_catalog_twice_is_stored_once(tmp_path: Path) -> None:
    target = lake.open_lake(str(tmp_path / "lake"))
    sample = next(s for s in importer.samples() if s.provider == "lambda")
    first = importer.import_catalog(target, str(sample.path), fmt="skypilot", provider="lambda",
                                    effective_from=DAY)
    version = target.version("prices")
    again = importer.import_catalog(target, str(sample.path), fmt="skypilot", provider="lambda",
                                    effective_from=DAY)
    assert target.read_kind("prices").num_rows == first.rows.num_rows == again.rows.num_rows
    assert target.version("prices") == version  # identical rows: no new commit
    # the same catalog named by its file:// URL (another source text): the load is replaced, not added
    importer.import_catalog(target, sample.path.as_uri(), fmt="skypilot", provider="lambda",
                            effective_from=DAY)
    assert target.read_kind("prices").num_rows == first.rows.num_rows
    assert target.loads("prices") == ["catalog-skypilot-lambda-2026-11-30"]


def test_a_later_catalog_keeps_the_earlier_prices(tmp_path: Path) -> None:
    target = lake.open_lake(str(tmp_path / "lake"))
    importer.import_catalog(target, str(_catalog(tmp_path, GOOD_ROW)), fmt="skypilot", provider="lambda",
                            effective_from=DAY)
    later = _catalog(tmp_path, GOOD_ROW.replace("0.75", "0.86"), "later.csv")
    importer.import_catalog(target, str(later), fmt="skypilot", provider="lambda",
                            effective_from=DAY + dt.timedelta(days=30))
    history = price_history(target, include_shipped=False).to_pylist()
    a10 = sorted((r["effective_from"], r["price"]) for r in history if r["instance_type"] == "gpu_1x_a10")
    assert a10 == [(DAY, 0.75), (DAY + dt.timedelta(days=30), 0.86)]
    assert len(target.loads("prices")) == 2


def test_cli_imports_the_shipped_samples_and_counts_them(tmp_path: Path, capsys) -> None:
    where = str(tmp_path / "lake")
    assert cli.main(["import-catalog", "--shipped", "--lake", where]) == 0
    out = capsys.readouterr().out
    rows = lake.open_lake(where).read_kind("prices").num_rows
    assert f"stored in {where}: {rows} price row(s), 5 provider(s)" in out
    assert cli.main(["import-catalog", "--shipped", "--lake", where]) == 0  # idempotent
    assert lake.open_lake(where).read_kind("prices").num_rows == rows


def test_unknown_accelerators_are_imported_without_a_model_and_counted(tmp_path: Path, capsys) -> None:
    path = _catalog(tmp_path, GOOD_ROW + "gaudi_8x,Gaudi2,8,96,1024,10.4,us-east-1,,\n"
                              "gaudi_8x,Gaudi2,8,96,1024,10.4,us-west-1,,\n")
    where = str(tmp_path / "lake")
    assert cli.main(["import-catalog", "--format", "skypilot", "--provider", "lambda", str(path),
                     "--lake", where, "--date", "2026-11-30"]) == 0
    out = capsys.readouterr().out
    assert "2 row(s) imported with an unknown GPU (gpu_model empty): 'Gaudi2' (2 row(s))" in out
    stored = {r["instance_type"]: r["gpu_model"]
              for r in lake.open_lake(where).read_kind("prices").to_pylist()}
    assert stored == {"gpu_1x_a10": "A10", "gaudi_8x": None}


# ---- Azure Retail Prices ---------------------------------------------------------------------
def _recorded_opener(asked: list[str]):
    """Stands in for prices.azure.com: the first query answers page 1, its NextPageLink page 2."""
    page1 = (RECORDED / "page1.json").read_bytes()
    next_link = json.loads(page1)["NextPageLink"]
    pages = {common.https_url(AZURE_QUERY): page1,
             common.https_url(next_link): (RECORDED / "page2.json").read_bytes()}

    def opener(url: str, limit: int) -> bytes:
        asked.append(url)
        return pages[url]
    return opener


def test_azure_pages_are_followed_and_only_linux_gpu_prices_kept(tmp_path: Path) -> None:
    asked: list[str] = []
    result = importer.read_catalog(AZURE_QUERY, fmt="azure", effective_from=DAY,
                                   opener=_recorded_opener(asked))
    assert len(asked) == 2 and "skip=100" in asked[1]  # NextPageLink followed, then stopped at null
    rows = {(r["instance_type"], r["market"]): r for r in result.rows.to_pylist()}
    assert rows[("Standard_NC4as_T4_v3", "on_demand")]["price"] == 0.526
    assert rows[("Standard_NC4as_T4_v3", "spot")]["price"] == 0.062699
    assert rows[("Standard_NC24ads_A100_v4", "on_demand")]["gpu_model"] == "A100-80GB"
    nd96 = rows[("Standard_ND96asr_v4", "on_demand")]
    assert (nd96["gpu_model"], nd96["gpu_count"], nd96["price"]) == ("A100", 8, 27.197)
    assert result.other_terms == 3  # Windows, Low Priority, Reservation
    assert result.without_gpu == 1  # Standard_E8s_v5
    assert result.unknown_gpus == {"Standard_NG16ads_V620_v1": 1}  # an N-series size the table lacks
    assert rows[("Standard_NG16ads_V620_v1", "on_demand")]["gpu_model"] is None
    assert all(r["region"] in ("eastus", "eastus2") and r["currency"] == "USD" for r in rows.values())
    target = lake.open_lake(str(tmp_path / "lake"))
    importer.store(target, result)
    assert target.loads("prices") == ["catalog-azure-azure-2026-11-30"]


def test_azure_file_of_recorded_pages_is_read_without_following_links(tmp_path: Path) -> None:
    both = tmp_path / "pages.json"
    pages = [json.loads((RECORDED / n).read_text()) for n in ("page1.json", "page2.json")]
    both.write_text(json.dumps(pages))
    result = importer.read_catalog(str(both), fmt="azure", effective_from=DAY)
    assert result.rows.num_rows == 11 and not result.notes  # 3 priced rows on page 1, 8 on page 2
    one = importer.read_catalog(str(RECORDED / "page1.json"), fmt="azure", effective_from=DAY)
    assert "NextPageLink" in one.notes[0] and one.rows.num_rows == 3


@pytest.mark.parametrize("link", ["https://evil.example/api/retail/prices?$skip=100",
                                  "http://prices.azure.com/api/retail/prices?$skip=100",
                                  "file:///etc/passwd"])
def test_azure_next_page_on_another_host_is_refused(link: str) -> None:
    page = json.loads((RECORDED / "page1.json").read_text())
    page["NextPageLink"] = link

    def opener(url: str, limit: int) -> bytes:
        return json.dumps(page).encode()
    with pytest.raises(common.CatalogError, match="NextPageLink.*not allowed"):
        azure.fetch_azure(AZURE_QUERY, opener=opener)


def test_azure_pages_adding_up_to_too_much_are_refused() -> None:
    asked: list[str] = []
    with pytest.raises(common.CatalogError, match="add up to more than"):
        azure.fetch_azure(common.https_url(AZURE_QUERY), opener=_recorded_opener(asked),
                             max_bytes=len((RECORDED / "page1.json").read_bytes()))
    assert len(asked) == 1  # the second page was never asked for


def test_azure_page_loop_is_refused() -> None:
    page = json.loads((RECORDED / "page1.json").read_text())
    page["NextPageLink"] = common.https_url(AZURE_QUERY)

    def opener(url: str, limit: int) -> bytes:
        return json.dumps(page).encode()
    with pytest.raises(common.CatalogError, match="a loop"):
        azure.fetch_azure(common.https_url(AZURE_QUERY), opener=opener)


# ---- hostile catalogs -------------------------------------------------------------------------
HOSTILE_SKYPILOT = {
    # name: (file body after the header, or a full text, what the error must name)
    "wrong columns": ("full:name,gpu,price\nx,A100,1.0\n", "missing column(s) InstanceType"),
    "nan price": (GOOD_ROW + "gpu_1x_h100,H100,1,26,200,nan,us-east-1,,\n", "row 3, Price: nan"),
    "infinite price": (GOOD_ROW + "gpu_1x_h100,H100,1,26,200,inf,us-east-1,,\n", "row 3, Price: inf"),
    "negative price": ("gpu_1x_h100,H100,1,26,200,-2.49,us-east-1,,\n", "row 2, Price: -2.49"),
    "zero spot": ("gpu_1x_h100,H100,1,26,200,2.49,us-east-1,,0\n", "row 2, SpotPrice: 0.0"),
    "absurd price": ("gpu_1x_h100,H100,1,26,200,1e12,us-east-1,,\n", "row 2, Price: 1000000000000.0"),
    "text price": ("gpu_1x_h100,H100,1,26,200,2,49,us-east-1,,\n", "fields expected"),
    "shell in gpu": ("gpu_1x,A100; rm -rf /,1,26,200,2.49,us-east-1,,\n", "row 2, AcceleratorName"),
    "formula in gpu": ("gpu_1x,\"=HYPERLINK(\"\"x\"\")\",1,26,200,2.49,us-east-1,,\n",
                       "row 2, AcceleratorName"),
    "quote in type": ("\"gpu'1x\",A100,1,26,200,2.49,us-east-1,,\n", "row 2, InstanceType"),
    "space in region": ("gpu_1x,A100,1,26,200,2.49,us east 1,,\n", "row 2, Region"),
    "sql in region": ("gpu_1x,A100,1,26,200,2.49,x' OR '1'='1,,\n", "row 2, Region"),
    "negative count": ("gpu_1x,A100,-1,26,200,2.49,us-east-1,,\n", "row 2, AcceleratorCount"),
    "nan count": ("gpu_1x,A100,nan,26,200,2.49,us-east-1,,\n", "row 2, AcceleratorCount"),
    "short row": ("gpu_1x,A100,1\n", "row 2: 9 fields expected"),
    "doubled column": ("full:InstanceType,AcceleratorName,AcceleratorCount,Price,Region,Price\n",
                       "named twice"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_SKYPILOT))
def test_hostile_skypilot_catalog_names_row_and_field_and_writes_nothing(case: str, tmp_path: Path) -> None:
    body, expected = HOSTILE_SKYPILOT[case]
    path = tmp_path / "vms.csv"
    path.write_text(body[5:] if body.startswith("full:") else HEADER + body, encoding="utf-8")
    target = lake.open_lake(str(tmp_path / "lake"))
    importer.import_catalog(target, str(_catalog(tmp_path, GOOD_ROW, "good.csv")), fmt="skypilot",
                            provider="lambda", effective_from=DAY)
    before = (target.version("prices"), target.read_kind("prices").to_pylist())
    with pytest.raises(common.CatalogError) as caught:
        importer.import_catalog(target, str(path), fmt="skypilot", provider="lambda", effective_from=DAY)
    assert expected in str(caught.value)
    assert (target.version("prices"), target.read_kind("prices").to_pylist()) == before


def test_hostile_input_through_the_cli_exits_2_and_creates_no_lake(tmp_path: Path, capsys) -> None:
    path = _catalog(tmp_path, "gpu_1x_h100,H100,1,26,200,NaN,us-east-1,,\n")
    where = tmp_path / "lake"
    assert cli.main(["import-catalog", "--format", "skypilot", "--provider", "lambda", str(path),
                     "--lake", str(where)]) == 2
    assert "vms.csv row 2, Price: nan" in capsys.readouterr().err
    assert not where.exists()


@pytest.mark.parametrize(("location", "expected"), [
    ("ftp://example.com/vms.csv", "scheme 'ftp'"),
    ("http://example.com/vms.csv", "scheme 'http'"),
    ("javascript:alert(1)//x", "cannot read"),
    ("/nonexistent/vms.csv", "cannot read"),
    ("", "not a path or URL"),
])
def test_locations_other_than_https_and_files_are_refused(location: str, expected: str) -> None:
    with pytest.raises(common.CatalogError, match=expected):
        importer.read_catalog(location, fmt="skypilot", provider="gcp")


def test_a_huge_catalog_is_refused_before_it_is_read(tmp_path: Path) -> None:
    """A sparse file: its size is checked, its bytes are never read (nor stored on disk)."""
    huge = tmp_path / "vms.csv"
    with huge.open("wb") as handle:
        handle.truncate(common.MAX_BYTES + 1)
    with pytest.raises(common.CatalogError, match="larger than"):
        importer.read_catalog(str(huge), fmt="skypilot", provider="gcp")

    def endless(url: str, limit: int) -> bytes:
        return b"x" * (limit + 1)  # a server that would send more than allowed
    with pytest.raises(common.CatalogError, match="larger than"):
        importer.read_catalog("https://example.com/vms.csv", fmt="skypilot", provider="gcp", opener=endless,
                              max_bytes=1000)


def test_too_many_rows_and_bad_encoding_are_refused() -> None:
    data = (HEADER + GOOD_ROW * 6).encode()
    with pytest.raises(common.CatalogError, match="more than 5 rows"):
        skypilot.parse_skypilot(data, provider="x", effective_from=DAY, source="s", max_rows=5)
    with pytest.raises(common.CatalogError, match="not UTF-8"):
        skypilot.parse_skypilot(HEADER.encode() + b"\xff\xfe,A100\n", provider="x", effective_from=DAY,
                                source="s")


@pytest.mark.parametrize(("change", "expected"), [
    ({"retailPrice": float("nan")}, "item 1, retailPrice: nan"),
    ({"retailPrice": -0.5}, "item 1, retailPrice: -0.5"),
    ({"retailPrice": "0.526; DROP TABLE prices"}, "item 1, retailPrice"),
    ({"currencyCode": "XBT"}, "item 1, currencyCode: 'XBT'"),
    ({"armRegionName": "east us"}, "item 1, armRegionName"),
    ({"armSkuName": "Standard_N$(reboot)"}, "item 1, armSkuName"),
])
def test_hostile_azure_items_are_refused(change: dict, expected: str, tmp_path: Path) -> None:
    page = json.loads((RECORDED / "page1.json").read_text())
    page["Items"][0].update(change)
    page["NextPageLink"] = None
    path = tmp_path / "page.json"
    path.write_text(json.dumps(page))  # json writes NaN as the bare constant NaN, as a hostile server could
    with pytest.raises(common.CatalogError) as caught:
        importer.read_catalog(str(path), fmt="azure", effective_from=DAY)
    assert expected in str(caught.value)


@pytest.mark.parametrize("text", ["[1, 2]", "{\"Items\": 3}", "not json", "{\"Value\": []}"])
def test_files_that_are_not_azure_pages_are_refused(text: str, tmp_path: Path) -> None:
    path = tmp_path / "page.json"
    path.write_text(text)
    with pytest.raises(common.CatalogError, match="page|JSON"):
        importer.read_catalog(str(path), fmt="azure", effective_from=DAY)


def test_an_empty_catalog_writes_nothing(tmp_path: Path) -> None:
    target = lake.open_lake(str(tmp_path / "lake"))
    with pytest.raises(common.CatalogError, match="no price row with a GPU"):
        importer.import_catalog(target, str(_catalog(tmp_path, "cpu_4x,,,4,16,0.2,us-east-1,,\n")),
                                fmt="skypilot", provider="lambda")
    assert not target.has_table("prices")
