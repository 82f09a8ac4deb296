"""A real, isolated Airflow for the tests: its own AIRFLOW_HOME and SQLite database per session.

Airflow reads its configuration once, when ``airflow`` is first imported, so this module
sets the environment as it is imported (``tests/conftest.py`` registers it before any test
module is collected): ``AIRFLOW_HOME`` in a fresh temporary directory, the SQLite metadata
database there, the repository's ``dags/`` and ``plugins/`` folders, no example DAGs, DAGs
unpaused when they are first stored (so asset events queue their consumers), and a
one-second first retry delay for the DAGs' network steps (``GPUCOMPARE_RETRY_DELAY_S``) so a
retried task does not keep a test waiting. Nothing of the developer's ``.airflow/`` is used.

Fixtures:

* ``airflow_db`` (session): the metadata database, migrated once (``airflow db migrate``,
  the real command) with the pool ``gpucompare_instances`` created; returns AIRFLOW_HOME.
* ``dagbag`` (session): the repository's DAG files parsed once (``DagBag``).
* ``gpucompare_dirs`` (function): a fresh lake, reports folder, staging folder and local
  work folder in ``tmp_path``, set as ``GPUCOMPARE_*`` for the test (tasks read them at
  run time).
* ``write_fleet`` (function): ``write_fleet(document)`` writes a fleet file (a dict) into
  ``tmp_path`` and points ``GPUCOMPARE_FLEET`` at it; returns its path.
* ``run_dag`` (function): ``run_dag(dag_id, conf=None)`` runs one DAG run with
  ``dag.test()`` (every task in this process, real scheduler dependency logic) and returns
  a :class:`DagRunResult` (the run, and each task instance's state by id and map index).
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
AIRFLOW_BIN = Path(sys.executable).with_name("airflow")
POOL_NAME = "gpucompare_instances"

_HOME = Path(tempfile.mkdtemp(prefix="gpucompare-airflow-"))
AIRFLOW_ENV: dict[str, str] = {
    "AIRFLOW_HOME": str(_HOME),
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{_HOME / 'airflow.db'}",
    "AIRFLOW__CORE__DAGS_FOLDER": str(REPO_ROOT / "dags"),
    "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO_ROOT / "plugins"),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
    # unpaused, so an asset event queues the DAGs scheduled on it (as in a running deployment)
    "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
    "GPUCOMPARE_RETRY_DELAY_S": "1",
    "GPUCOMPARE_POOL": POOL_NAME,
    "GPUCOMPARE_DEPLOYMENT": os.environ.get("GPUCOMPARE_DEPLOYMENT") or "ci-tests",
    # the API's tokens are signed with HS512: a key of 64 bytes or more, as RFC 7518 asks (Airflow
    # would otherwise generate a short one per process, and PyJWT warns about it)
    "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(48),
}

if "airflow" in sys.modules:  # pragma: no cover - a fixture module imported airflow too early
    warnings.warn("airflow was imported before tests.support.fixtures_airflow set AIRFLOW_HOME; "
                  "the tests may use another Airflow home", stacklevel=1)
os.environ.update(AIRFLOW_ENV)
# Importing airflow configures logging (it replaces the root logger's handlers). Done here, once,
# before any test: inside a test it would drop that test's caplog handler, so whether a test sees
# its log records would depend on which tier ran it and in which order.
import airflow  # noqa: E402, F401


@pytest.fixture(scope="session", autouse=True)
def _remove_airflow_home() -> Iterator[None]:
    yield
    shutil.rmtree(_HOME, ignore_errors=True)


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """The session's metadata database, migrated, with the pool the DAGs use; AIRFLOW_HOME."""
    env = {**os.environ, **AIRFLOW_ENV}
    done = subprocess.run([str(AIRFLOW_BIN), "db", "migrate"], env=env, capture_output=True, text=True,
                          timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"airflow db migrate failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    from airflow.models.pool import Pool

    Pool.create_or_update_pool(POOL_NAME, slots=2, description="gpucompare test pool",
                               include_deferred=True)
    return _HOME


@pytest.fixture(scope="session")
def dagbag() -> Any:
    """The DAG files parsed once (parsing needs no database)."""
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(str(REPO_ROOT / "dags"))


@dataclass
class GpuCompareDirs:
    lake: Path
    reports: Path
    staging: Path
    work: Path


@pytest.fixture
def gpucompare_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> GpuCompareDirs:
    dirs = GpuCompareDirs(lake=tmp_path / "lake", reports=tmp_path / "reports",
                          staging=tmp_path / "staging", work=tmp_path / "work")
    monkeypatch.setenv("GPUCOMPARE_LAKE", str(dirs.lake))
    monkeypatch.setenv("GPUCOMPARE_REPORTS", str(dirs.reports))
    monkeypatch.setenv("GPUCOMPARE_STAGING", str(dirs.staging))
    monkeypatch.setenv("GPUCOMPARE_LOCAL_WORK_DIR", str(dirs.work))
    return dirs


@pytest.fixture
def write_fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[dict[str, Any]], Path]:
    def write(document: dict[str, Any]) -> Path:
        import yaml

        path = tmp_path / "fleet.yaml"
        path.write_text(yaml.safe_dump(document, sort_keys=False))
        monkeypatch.setenv("GPUCOMPARE_FLEET", str(path))
        return path

    return write


@dataclass
class DagRunResult:
    """A finished DAG run and the state of each of its task instances."""

    dag_run: Any
    states: dict[tuple[str, int], str | None]
    #: the UI label of each mapped task instance (``rendered_map_index``)
    labels: dict[tuple[str, int], str | None] = field(default_factory=dict)

    @property
    def state(self) -> str:
        return str(self.dag_run.state)

    @property
    def run_id(self) -> str:
        return self.dag_run.run_id

    def task_states(self, task_id: str) -> list[str | None]:
        """States of every map index of ``task_id``, in map-index order."""
        return [state for (tid, _), state in sorted(self.states.items()) if tid == task_id]

    def xcom(self, task_id: str, map_index: int = -1) -> Any:
        """The value ``task_id`` (at ``map_index``) returned in this run."""
        from airflow.models.xcom import XComModel
        from airflow.utils.session import create_session

        with create_session() as session:
            row = session.scalars(XComModel.get_many(
                run_id=self.run_id, key="return_value", task_ids=task_id,
                dag_ids=self.dag_run.dag_id, map_indexes=map_index)).first()
            assert row is not None, f"no return value of {task_id}[{map_index}] in {self.run_id}"
            return XComModel.deserialize_value(row)


@pytest.fixture
def run_dag(airflow_db: Path, dagbag: Any) -> Callable[..., DagRunResult]:
    def run(dag_id: str, conf: dict[str, Any] | None = None) -> DagRunResult:
        dag = dagbag.dags[dag_id]
        dag_run = dag.test(run_conf=conf)
        from airflow.models.taskinstance import TaskInstance
        from airflow.utils.session import create_session

        with create_session() as session:
            rows = session.query(TaskInstance.task_id, TaskInstance.map_index, TaskInstance.state,
                                 TaskInstance.rendered_map_index).filter(
                TaskInstance.dag_id == dag_id, TaskInstance.run_id == dag_run.run_id).all()
        states = {(task_id, map_index): (str(state) if state is not None else None)
                  for task_id, map_index, state, _ in rows}
        labels = {(task_id, map_index): label for task_id, map_index, _, label in rows}
        return DagRunResult(dag_run=dag_run, states=states, labels=labels)

    return run


def parse_again(dagbag: Any, dag_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Parse ``dag_id``'s file again, with the fleet file as the test wrote it, in place of the
    session's parse, for this test (the nightly DAG reads its scaling groups' pool slots, as its
    schedule, at parse time)."""
    from airflow.dag_processing.dagbag import DagBag

    fresh = DagBag(dagbag.dags[dag_id].fileloc)
    monkeypatch.setitem(dagbag.dags, dag_id, fresh.dags[dag_id])
