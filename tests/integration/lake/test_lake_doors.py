"""The lake's last unguarded doors (issue 32), through ``python -m gpucompare`` as a process:
each case exits 0 or 2 with a message that says what to do, and loses nothing.

Real deltalake on real folders; a real full disk (a 1 MiB tmpfs mounted here, which needs root:
without it the full-disk test is skipped, naming why); moto's S3 server behind the fault proxy
(tests/support/fault_proxy.py) answering HTTP 500 to every S3 request. Each docstring says what
was wrong before.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpucompare.lake import tables as lake
from tests.support.fault_proxy import FaultProxy
from tests.support.lake_support import REPO_ROOT, ingest_command, run_records, write_records

RUN = "r1"


def run(command: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "plugins")]),
                   **env}
    return subprocess.run(command, env=environment, capture_output=True, text=True, timeout=900, check=False)


def ingest(uri: str, results: Path, run_id: str, provider: str, instance_type: str, *extra: str,
           **env: str) -> subprocess.CompletedProcess[str]:
    command = ingest_command(uri, results, run_id, instance_type=instance_type)
    command[command.index("--provider") + 1] = provider
    return run([*command, *extra], **env)


def rows_by_machine(uri: str) -> dict[tuple[str, str], int]:
    table = lake.open_lake(uri).results_table(columns=["provider", "instance_type"])
    counts: dict[tuple[str, str], int] = {}
    for row in table.to_pylist():
        key = (row["provider"], row["instance_type"])
        counts[key] = counts.get(key, 0) + 1
    return counts


def test_a_run_id_of_another_machine_is_refused_unless_replace_which_says_what_it_replaces(
        tmp_path: Path) -> None:
    """Before: run r1 ingested from aws g5.xlarge (40 rows), then from gcp a2-highgpu-1g (10
    rows) under the same id, silently replaced the first machine's rows (exit 0)."""
    uri = str(tmp_path / "lake")
    first = write_records(tmp_path / "aws.jsonl", run_records(RUN, 40))
    second = write_records(tmp_path / "gcp.jsonl", run_records(RUN, 10))
    assert ingest(uri, first, RUN, "aws", "g5.xlarge").returncode == 0
    refused = ingest(uri, second, RUN, "gcp", "a2-highgpu-1g")
    assert refused.returncode == 2, refused.stderr
    assert ("run id 'r1' is already in the lake for another machine (40 row(s) of run r1 measured on aws "
            "g5.xlarge), not gcp a2-highgpu-1g" in refused.stderr), refused.stderr
    assert "--replace" in refused.stderr and "Traceback" not in refused.stderr
    assert rows_by_machine(uri) == {("aws", "g5.xlarge"): 40}
    assert lake.open_lake(uri).version("results") == 0
    again = ingest(uri, first, RUN, "aws", "g5.xlarge")  # the same machine: as before, unchanged
    assert again.returncode == 0 and "unchanged" in again.stdout, again.stderr
    replaced = ingest(uri, second, RUN, "gcp", "a2-highgpu-1g", "--replace")
    assert replaced.returncode == 0, replaced.stderr
    assert "replaced 40 row(s) of run r1 measured on aws g5.xlarge" in replaced.stdout, replaced.stdout
    assert rows_by_machine(uri) == {("gcp", "a2-highgpu-1g"): 10}


@pytest.mark.parametrize("how", ["symlink", "relative"])
def test_a_percent_behind_a_symlink_or_a_relative_path_is_refused_before_anything_is_written(
        tmp_path: Path, how: str) -> None:
    """Before: through a symlink to ``real%41/`` or a relative ``--lake`` inside a ``%41`` folder,
    ingest wrote version 0 (delta-rs decoded %41 as A), then every ingest and lake-info exited 1."""
    real = tmp_path / "real%41"
    real.mkdir()
    results = write_records(tmp_path / "good.jsonl", run_records(RUN, 2))
    if how == "symlink":
        (tmp_path / "link").symlink_to(real, target_is_directory=True)
        uri, cwd = str(tmp_path / "link" / "lake"), tmp_path
    else:
        uri, cwd = "lake", real
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "plugins")])}
    for command in (ingest_command(uri, results, RUN),
                    [sys.executable, "-m", "gpucompare", "lake-info", "--lake", uri]):
        done = subprocess.run(command, cwd=cwd, env=environment, capture_output=True, text=True, timeout=600,
                              check=False)
        assert done.returncode == 2, done.stderr
        assert f"resolves to '{real}/lake'" in done.stderr and "holds '%'" in done.stderr, done.stderr
    assert list(real.iterdir()) == [] and not (tmp_path / "realA").exists()


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs (a real filesystem that fills up), unmounted afterwards."""
    mount_point = tmp_path / "small-disk"
    mount_point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount_point)],
                             capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill(folder: Path) -> None:
    """Use up every free byte of ``folder``'s filesystem."""
    with open(folder / "filler", "wb") as handle:
        try:
            while True:
                handle.write(b"\0" * 65536)
                handle.flush()
        except OSError:
            pass


def test_a_full_disk_ends_ingest_and_compact_with_exit_2_and_loses_nothing(full_disk: Path,
                                                                           tmp_path: Path) -> None:
    """Before: ingest and compact on a full disk ended in tracebacks (exit 1); then compact printed
    delta-rs's own panic lines (``thread '…' panicked at …``, ``note: run with RUST_BACKTRACE=1``)
    before its exit-2 message."""
    uri = str(full_disk / "lake")
    for number in range(3):  # three runs in one partition: something for compaction to rewrite
        small = write_records(tmp_path / f"s{number}.jsonl", run_records(f"s{number}", 4))
        assert run(ingest_command(uri, small, f"s{number}")).returncode == 0
    fill(full_disk)
    big = write_records(tmp_path / "big.jsonl", run_records("big", 400, error_bytes=2000))
    for done in (run(ingest_command(uri, big, "big")),
                 run([sys.executable, "-m", "gpucompare", "compact", "--lake", uri])):
        assert done.returncode == 2, done.stderr
        assert "the disk holding it is full (or over quota)" in done.stderr, done.stderr
        assert "No space left on device" in done.stderr and "Traceback" not in done.stderr
        assert "panicked" not in done.stderr and "RUST_BACKTRACE" not in done.stderr, done.stderr
    (full_disk / "filler").unlink()
    target = lake.open_lake(uri)
    assert target.version("results") == 2
    assert sorted(set(target.results_table(columns=["run_id"])["run_id"].to_pylist())) == ["s0", "s1", "s2"]


def test_s3_answering_http_500_ends_ingest_and_lake_info_with_exit_2(
        aws_endpoint: str, s3_bucket: str, tmp_path: Path) -> None:
    """Before: an S3 endpoint answering HTTP 500 made ingest and lake-info exit 1 with a
    traceback; then lake-info said "nothing was committed" (it commits nothing) and, given its lake
    by the setting alone, named no lake ("error: : …"). Moto's server behind the fault proxy, every
    S3 request answered 500 after a first good ingest; botocore's and delta-rs's own retries run
    first."""
    proxy = FaultProxy(aws_endpoint, read_timeout_s=60)
    try:
        env = {"AWS_ENDPOINT_URL": proxy.url, "AWS_ACCESS_KEY_ID": "testing",
               "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}
        uri = f"s3://{s3_bucket}/lake-500"
        first = write_records(tmp_path / "first.jsonl", run_records(RUN, 2))
        assert run(ingest_command(uri, first, RUN), **env).returncode == 0
        for method in ("GET", "PUT", "HEAD", "POST", "DELETE"):
            proxy.add(f"S3:{method}", "error500", times=10**6)
        second = write_records(tmp_path / "second.jsonl", run_records("r2", 2))
        ingested = run(ingest_command(uri, second, "r2"), **env)
        # lake-info given the lake by --lake, and by the lake setting alone (before, the setting's
        # case printed "error: : …", no lake named)
        infos = [run([sys.executable, "-m", "gpucompare", "lake-info", "--lake", uri], **env),
                 run([sys.executable, "-m", "gpucompare", "lake-info"], **env, GPUCOMPARE_LAKE=uri)]
        for done in (ingested, *infos):
            assert done.returncode == 2, done.stderr
            assert f"error: {uri} (endpoint {proxy.url}): the storage service answered with a server error " \
                   "(HTTP 5xx) even after retries: try again later" in done.stderr, done.stderr
            assert "InternalError" in done.stderr and "Traceback" not in done.stderr
        # the write says nothing was committed; a read-only command says nothing of commits
        assert "nothing was committed (the lake is as it was)" in ingested.stderr, ingested.stderr
        for done in infos:
            assert "commit" not in done.stderr.split("error:", 1)[1], done.stderr
        proxy.clear()
        info = run([sys.executable, "-m", "gpucompare", "lake-info", "--lake", uri], **env)
        assert info.returncode == 0 and "results: version 0, 2 live file(s), 2 row(s)" in info.stdout, info
    finally:
        proxy.close()
