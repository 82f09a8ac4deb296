"""``gpucompare rank`` on the demo's lake (tests/support/page_site: two nights of the local CPU plus the
published figures) once a price is declared for the CPU: the table says which machine is best, at what
cost with what interval, and why the 2017 figures are not ranked; ``--json`` gives the same rows."""

from __future__ import annotations

import json

import pytest

from gpucompare.cli import registry
from tests.support.page_site import demo_lake


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    root = tmp_path_factory.mktemp("rank")
    demo_lake(root / "lake")
    code = registry.main(["add-price", "--lake", str(root / "lake"), "--provider", "local", "--instance-type",
                          "local-cpu", "--per-month", "25", "--currency", "EUR", "--from", "2026-01-01",
                          "--label", "example price"])
    assert code == 0
    return str(root / "lake")


def test_rank_prints_the_ranking_with_verdicts_ages_and_sources(lake, capsys):
    assert registry.main(["rank", "--lake", lake, "--network", "alexnet", "--mode", "score"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("alexnet · score · official methodology · EUR per million images · 1 ranked of")
    ours = next(line for line in out.splitlines() if "local local-cpu" in line)
    assert " best " in ours and "declared: example price" in ours
    assert any("not ranked: old published" in line for line in out.splitlines())
    assert "train" not in out  # --mode score


def test_rank_json_has_the_rows_and_their_evidence(lake, capsys):
    assert registry.main(["rank", "--lake", lake, "--network", "alexnet", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    ranked = [r for r in rows if r["ranked"]]
    assert {r["mode"] for r in rows} == {"score", "train"}
    assert ranked and all(r["provider"] == "local" and r["verdict"] == "best" for r in ranked)
    assert all(r["price_source"] == "declared" for r in ranked)
    assert {"cost_per_million_low", "interval_covers", "settle_with", "measured_at"} <= set(rows[0])


def test_rank_refuses_an_unknown_network_and_a_missing_lake(tmp_path, capsys):
    with pytest.raises(SystemExit) as caught:
        registry.main(["rank", "--lake", str(tmp_path), "--network", "resnet-5"])
    assert caught.value.code == 2
    assert registry.main(["rank", "--lake", str(tmp_path / "none")]) == 2
    assert "no lake at" in capsys.readouterr().err
