"""Test configuration shared by every tier (tests/README.md: unit/, integration/, system/).

Fixtures that start real local services live in tests/support/ and are registered here:
``fixtures_sshd`` (an OpenSSH server on 127.0.0.1), ``fixtures_aws`` (moto's server on
127.0.0.1 as the AWS endpoint) and ``fixtures_airflow`` (an isolated AIRFLOW_HOME).
``REPO_ROOT``, ``DATA_DIR`` (the recorded inputs, tests/support/data/) and ``BENCH_PYTHON``
(the worker's interpreter) are the paths tests import from here.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
#: Recorded inputs of the tests (AWS pricing pages, nvidia-smi output, MXNet error texts).
DATA_DIR = REPO_ROOT / "tests" / "support" / "data"
BENCH_PYTHON = Path(os.environ.get("GPUCOMPARE_BENCH_PYTHON", REPO_ROOT / ".venv-bench" / "bin" / "python"))

#: Every test runs as one named deployment (the setting is required, issue 19); a test about the
#: name itself sets or removes it with monkeypatch.
os.environ.setdefault("GPUCOMPARE_DEPLOYMENT", "ci-tests")

#: Every worker the tests start is .venv-bench's CPU build of MXNet standing in for the GPU runtime
#: its target names (pip-cu112, ngc-24.06): the runtime check (bench_tasks/runtime_check.py) reports
#: and records the mismatch instead of refusing; the tests of the check itself remove the variable.
os.environ.setdefault("GPUCOMPARE_WORKER_RUNTIME_CHECK", "warn")

#: The settings' scratch folders default to shared places under the system temp folder; each test
#: process gets its own (so parallel test processes, e.g. pytest-xdist's workers, never share a
#: staging or work folder, and no test run leaves files in the developer's). A test about a
#: default removes the variable with monkeypatch.
_SCRATCH = Path(tempfile.mkdtemp(prefix="gpucompare-tests-"))
for _name, _folder in (("GPUCOMPARE_STAGING", "staging"), ("GPUCOMPARE_LOCAL_WORK_DIR", "work"),
                       ("GPUCOMPARE_CACHE_DIR", "cache")):
    os.environ.setdefault(_name, str(_SCRATCH / _folder))

for path in (REPO_ROOT, REPO_ROOT / "plugins"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

pytest_plugins = [
    "tests.support.fixtures_sshd",
    "tests.support.fixtures_aws",
    "tests.support.fixtures_airflow",
]

#: The files that take longest (minutes each: a fresh venv with Airflow, DAG runs, a Celery
#: deployment, MXNet jobs over several hosts, the ec2 target on moto behind the fault proxy). Run
#: first, so that with several test processes (`make test`, pytest-xdist --dist loadfile: files are
#: handed out in collection order) none of them starts last and keeps one process running alone.
SLOW_FILES_FIRST = (
    "tests/system/test_install_guide.py",
    "tests/system/test_dags_e2e.py",
    "tests/integration/targets/test_target_ec2.py",
    "tests/system/test_distributed_training.py",
    "tests/system/test_ec2_faults.py",
    "tests/system/test_distributed_airflow.py",
    "tests/system/test_dags_deferrable.py",
    "tests/system/test_lake_concurrency.py",
)


def pytest_collection_modifyitems(items: list) -> None:
    """The slow files first (``SLOW_FILES_FIRST``, in that order), every file's tests in their order."""
    rank = {name: index for index, name in enumerate(SLOW_FILES_FIRST)}

    def file_rank(item: object) -> int:
        path = Path(str(item.path)).relative_to(REPO_ROOT).as_posix()  # type: ignore[attr-defined]
        return rank.get(path, len(rank))

    items.sort(key=file_rank)  # stable: the rest keep their order
