"""Catalog imports as real processes: several at once into one lake, and imports killed with
SIGKILL at several moments. Each writer is ``python -m gpucompare import-catalog`` in a process
of its own against a real local Delta table; afterwards the prices are read by the product and
by a plain Delta reader (``deltalake.DeltaTable``, none of our code), and no price row may be
there twice. Stands in for two people (or a DAG and a person) refreshing catalogs at once.
"""

from __future__ import annotations

import signal
import sys
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from gpucompare.lake import tables as lake
from gpucompare.prices.catalogs import importer
from tests.support.lake_support import start

BIG = 20_000
KEY = ("provider", "instance_type", "region", "market", "effective_from")


def command(uri: str, path: Path | str, provider: str, date: str = "2026-11-30") -> list[str]:
    return [sys.executable, "-m", "gpucompare", "import-catalog", "--format", "skypilot", "--provider",
            provider, str(path), "--lake", uri, "--date", date]


def stored(uri: str) -> Counter:
    """Rows per provider, as the product and a plain Delta reader read them (equal), no key twice."""
    from deltalake import DeltaTable

    target = lake.open_lake(uri)
    product = target.read_kind("prices")
    plain = pa.table(DeltaTable(target.table_uri("prices")).to_pyarrow_table(columns=list(KEY)))
    for table in (product, plain):
        keys = list(zip(*(table[c].to_pylist() for c in KEY), strict=True))
        assert len(keys) == len(set(keys)), "a price row is stored twice"
    assert Counter(product["provider"].to_pylist()) == Counter(plain["provider"].to_pylist())
    return Counter(product["provider"].to_pylist())


def sample(provider: str) -> importer.Sample:
    return next(s for s in importer.samples() if s.provider == provider)


def test_concurrent_imports_store_each_catalog_once(tmp_path: Path) -> None:
    uri = str(tmp_path / "lake")
    jobs = [("lambda", sample("lambda").path)] * 3
    jobs += [("gcp", sample("gcp").path), ("runpod", sample("runpod").path)]
    procs = [start(command(uri, path, provider)) for provider, path in jobs]
    failed = []
    for proc, (provider, path) in zip(procs, jobs, strict=True):
        out, err = proc.communicate(timeout=300)
        if proc.returncode != 0:
            failed.append((provider, path, err))
    for provider, path, _err in failed:  # a writer that lost a commit race says so and is re-run
        rerun = start(command(uri, path, provider))
        assert rerun.wait(timeout=300) == 0, rerun.stderr.read() if rerun.stderr else ""
    expected = {p: importer.read_sample(sample(p)).rows.num_rows for p in ("lambda", "gcp", "runpod")}
    assert stored(uri) == Counter(expected)
    assert len(lake.open_lake(uri).loads("prices")) == 3


@pytest.mark.parametrize("delay_s", [0.3, 2.0])
def test_a_killed_import_leaves_the_lake_as_it_was_or_complete(delay_s: float, tmp_path: Path) -> None:
    uri = str(tmp_path / "lake")
    first = start(command(uri, sample("lambda").path, "lambda"))
    assert first.wait(timeout=300) == 0
    before = stored(uri)
    # a big catalog (checking it takes a few seconds): 20 000 GPU rows in 20 000 regions
    big = tmp_path / "vms.csv"
    rows = [f"gpu_{n % 7}x,A100,{n % 7 + 1},8,64,{1 + n % 97 / 10},r{n},,{0.5 + n % 13 / 10}"
            for n in range(BIG)]
    big.write_text("InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,Region,GpuInfo,"
                   "SpotPrice\n" + "\n".join(rows) + "\n")
    victim = start(command(uri, big, "bigcloud"))
    time.sleep(delay_s)
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=60)
    after = stored(uri)
    assert after["lambda"] == before["lambda"]
    assert after["bigcloud"] in (0, 2 * BIG)  # nothing or everything (on-demand + spot per row)
    again = start(command(uri, big, "bigcloud"))  # the re-run completes it, no duplicate (stored checks)
    assert again.wait(timeout=300) == 0
    assert stored(uri) == Counter({"lambda": before["lambda"], "bigcloud": 2 * BIG})
