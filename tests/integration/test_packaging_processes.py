"""The installable package in real processes: the thin DAG files ``gpucompare dags install``
writes are parsed by Airflow's DagBag (twice in one process, as tests and ``dags test`` do),
and several processes installing the DAG files or unpacking the local worker's bundle at once
leave complete files (split from tests/unit/test_packaging.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from gpucompare.airflow import dag_files
from gpucompare.targets import bundle as _worker_bundle
from tests.conftest import REPO_ROOT


def test_dags_install_writes_thin_files_that_airflow_parses_twice(tmp_path: Path) -> None:
    written = dag_files.install(tmp_path / "dags")
    shipped = sorted(p.stem for p in (REPO_ROOT / "dags").glob("gpucompare_*.py"))
    assert sorted(p.stem for p in written) == shipped
    code = (
        "import json, sys\n"
        "from airflow.dag_processing.dagbag import DagBag\n"
        "runs = [DagBag(sys.argv[1]) for _ in range(2)]\n"
        "print(json.dumps([[sorted(b.dags), {d: b.dags[d].fileloc for d in b.dags}, list(b.import_errors)]\n"
        "                  for b in runs]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "dags")], capture_output=True,
                          text=True, timeout=300, check=True)
    for dag_ids, filelocs, errors in json.loads(done.stdout.splitlines()[-1]):
        assert errors == []
        assert dag_ids == sorted(p.stem for p in written)
        assert all(Path(f).parent == tmp_path / "dags" for f in filelocs.values())


def test_concurrent_dags_installs_leave_complete_files(tmp_path: Path) -> None:
    """Four processes install into one folder at once: every file is whole, no temp file left."""
    code = "import sys; from gpucompare.airflow.dag_files import install; install(sys.argv[1])"
    processes = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], env=dict(os.environ))
                 for _ in range(4)]
    assert [p.wait(timeout=120) for p in processes] == [0, 0, 0, 0]
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted(f"{n}.py" for n in dag_files.dag_names())
    assert all((tmp_path / n).read_text() == dag_files.thin_file(n[:-3]) for n in names)


def test_unpacked_bundle_holds_only_the_worker_even_when_unpacked_concurrently(tmp_path: Path) -> None:
    """The local worker's PYTHONPATH: only bench_tasks (never the orchestrator's site-packages)."""
    code = ("import sys; from pathlib import Path\n"
            "from gpucompare.targets.bundle import unpacked_bundle\n"
            "print(unpacked_bundle(Path(sys.argv[1])))")
    processes = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE,
                                  text=True) for _ in range(6)]
    outputs = {p.communicate(timeout=120)[0].strip() for p in processes}
    assert all(p.returncode == 0 for p in processes)
    assert len(outputs) == 1
    root = Path(outputs.pop())
    assert [p.name for p in root.iterdir()] == ["bench_tasks"]
    assert (root / "bench_tasks" / "requirements-gpu.txt").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".unpack-")]
    assert _worker_bundle.unpacked_bundle(tmp_path) == root
