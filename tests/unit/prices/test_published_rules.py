"""The published reference figures' rules, without a lake: the shipped copies equal the reference,
the outlier rule, and contradictory or mistyped cells refused naming the line (the import into a
lake: tests/integration/prices/test_published.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucompare.lake import tables as lake
from gpucompare.prices import published
from tests.conftest import REPO_ROOT

SHARED_REFERENCE = REPO_ROOT.parent / "shared" / "reference"


@pytest.mark.skipif(not SHARED_REFERENCE.exists(), reason="no shared reference folder beside the repo")
@pytest.mark.parametrize("name", ["published_results.csv", "published_prices.csv", "published_scaling.csv"])
def test_shipped_copies_equal_the_reference(name: str) -> None:
    assert (published.PUBLISHED_DIR / name).read_bytes() == (SHARED_REFERENCE / name).read_bytes()


def test_outlier_rule_on_a_small_series() -> None:
    def row(batch: int, value: float) -> dict:
        return {"source": "s", "provider": "p", "instance_type": "i", "gpu_count": 1, "mode": "score",
                "network": "alexnet", "batch_size": batch, "images_per_sec": value, "flags": []}

    rows = [row(1, 100), row(2, 190), row(4, 2000), row(8, 390), row(16, 30)]
    published.flag_outliers(rows)
    assert [r["flags"] for r in rows] == [[], [], ["outlier_vs_neighbours"], [], ["outlier_vs_neighbours"]]


def test_a_contradictory_mark_is_refused_naming_the_line(tmp_path: Path) -> None:
    broken = tmp_path / "results.csv"
    lines = published.SHIPPED_RESULTS.read_text(encoding="utf-8").splitlines()
    index = next(i for i, line in enumerate(lines) if line.endswith(",oom,-**,"))
    lines[index] = lines[index].replace(",oom,-**,", ",error,-**,")
    broken.write_text("\n".join(lines) + "\n", encoding="utf-8")
    target = lake.open_lake(str(tmp_path / "lake"))
    with pytest.raises(published.PublishedError, match=rf"results.csv line {index + 1}: status 'error'"):
        published.import_published(target, results_csv=broken)
    assert not (tmp_path / "lake").exists()


def test_a_value_that_differs_from_its_cell_is_refused(tmp_path: Path) -> None:
    broken = tmp_path / "results.csv"
    text = published.SHIPPED_RESULTS.read_text(encoding="utf-8")
    text = text.replace(',98.30,ok,"98,30"', ',98.3,ok,"93,80"')
    broken.write_text(text, encoding="utf-8")
    with pytest.raises(published.PublishedError, match="is not what the published cell '93,80' shows"):
        published.read_published_results(broken)
