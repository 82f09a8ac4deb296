"""The distributed Airflow deployment, proved on this machine without Docker.

`docker/compose.yaml` runs Airflow with the CeleryExecutor: PostgreSQL, Redis, the scheduler,
the API server, the DAG processor and Celery workers. Docker cannot run here, so this test
starts the same parts as plain processes: PostgreSQL and Redis from Debian's packages, then
`airflow scheduler`, `airflow dag-processor`, `airflow api-server` and `airflow celery worker`
with the very configuration the compose file spells out (`gpucompare.airflow.deployment`, checked
against compose.yaml by tests/integration/airflow/test_compose.py). It triggers the nightly DAG on the `local`
target through the public REST API with a JWT from `/auth/token`, like a user's script
would, waits for the run to succeed, and reads the results back from the lake.

Then the deferred sweeps of issue 19 on that deployment: ssh hosts (the loopback sshd) and ec2
instances (moto behind the fault proxy, whose stand-in SSM agent runs their commands here)
whose sweeps last long enough to overlap, with the pool at 4 slots and the Celery worker's 2
slots (``worker_concurrency``): more sweeps in flight at once than the worker has slots shows
that a deferred sweep holds none (it waits in the triggerer), and the pool is never exceeded.

Stand-ins: containers are processes on 127.0.0.1 with ports chosen at run time; the
compose file's host names (postgres, redis, airflow-apiserver) become 127.0.0.1.
Every process is started in its own process group and the group is stopped by a fixture
finalizer, so nothing is left running even when the test fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from gpucompare.airflow.deployment import (
    ADMIN_PASSWORD_ENV,
    ADMIN_USER,
    API_SERVER_HEALTH_PATH,
    COMPONENT_COMMANDS,
    SCHEDULER_HEALTH_PATH,
    SHARED_STORAGE_SETTINGS,
    Endpoints,
    Layout,
    Secrets,
    celery_deployment_env,
)
from tests.conftest import BENCH_PYTHON, REPO_ROOT
from tests.support.deferred_fleet import SCORE_ONLY, fleet_targets, most_at_once, slow_worker
from tests.support.system_parts import require_part

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

NIGHTLY_DAG_ID = "gpucompare_nightly"
STARTUP_TIMEOUT_S = 120.0
RUN_TIMEOUT_S = 300.0
WORKER_CONCURRENCY = 2  # the Celery worker's slots
#: the deferred-sweeps test: how many targets (half of them ec2), how long each sweep lasts, the pool
DEFERRED_TARGETS = int(os.environ.get("GPUCOMPARE_CELERY_DEFERRED_TARGETS", "6"))
DEFERRED_SWEEP_S = float(os.environ.get("GPUCOMPARE_CELERY_DEFERRED_SWEEP_S", "25"))
DEFERRED_POOL_SLOTS = 4
DEFERRAL_MARGIN_S = 10.0  # the deployment's GPUCOMPARE_DEFERRAL_MARGIN_S


# ---------------------------------------------------------------------------------------------
# Processes


@dataclass
class ServiceProcess:
    """A long-running process in its own process group, with its output in a log file."""

    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    stop_signal: int = signal.SIGTERM

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def terminate(self) -> None:
        """Ask the whole group (API workers, Celery pool, task processes) to stop."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, self.stop_signal)

    def kill(self) -> None:
        # Children sometimes outlive their leader (uvicorn, the Celery pool): sweep the group.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=5)


def _stat_fields(pid: int | str) -> list[str]:
    # The command name may contain spaces and parentheses: the fields after the last ')'.
    return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()


def descendants(root_pids: list[int]) -> dict[int, str]:
    """Every live process below ``root_pids`` (pid -> start time), through /proc parent links.

    Needed because some children leave their parent's process group on purpose (the local
    target runs the benchmark worker in a session of its own), so killpg alone would miss them.
    The start time lets :func:`kill_if_same` tell one of them from a later process reusing its pid.
    """
    children: dict[int, list[tuple[int, str]]] = {}
    for proc_dir in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = _stat_fields(proc_dir.name)
            children.setdefault(int(fields[1]), []).append((int(proc_dir.name), fields[19]))
    found: dict[int, str] = {}
    pending = list(root_pids)
    while pending:
        for child, started in children.get(pending.pop(), []):
            if child not in found:
                found[child] = started
                pending.append(child)
    return found


def kill_if_same(pid: int, started: str) -> None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        if _stat_fields(pid)[19] == started:
            os.kill(pid, signal.SIGKILL)


@dataclass
class ProcessRegistry:
    """Every process the test started, stopped in reverse order by one finalizer."""

    log_dir: Path
    processes: list[ServiceProcess] = field(default_factory=list)

    def start(
        self,
        name: str,
        argv: list[str],
        *,
        env: dict[str, str] | None = None,
        user: str | None = None,
        stop_signal: int = signal.SIGTERM,
    ) -> ServiceProcess:
        log_path = self.log_dir / f"{name}.log"
        with log_path.open("wb") as log:
            popen = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                user=user,
                group=user,
                extra_groups=[] if user else None,
                start_new_session=True,  # its own process group, so stop() reaches every child
            )
        process = ServiceProcess(name, popen, log_path, stop_signal)
        self.processes.append(process)
        return process

    def stop_all(self, grace_s: float = 20.0) -> None:
        """Stop everything at once (graceful first), then kill whatever is left, strays included."""
        strays = descendants([process.popen.pid for process in self.processes])
        for process in reversed(self.processes):
            process.terminate()
        deadline = time.monotonic() + grace_s
        for process in reversed(self.processes):
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
        for process in reversed(self.processes):
            process.kill()
        for pid, started in strays.items():
            kill_if_same(pid, started)

    def diagnostics(self) -> str:
        return "\n".join(
            f"--- {p.name} ({'running' if p.alive() else f'exited {p.popen.returncode}'}) ---\n{p.log_tail()}"
            for p in self.processes
        )


def free_ports(count: int) -> list[int]:
    """Ports free on 127.0.0.1 right now, all distinct (held open together while chosen)."""
    with contextlib.ExitStack() as stack:
        probes = [
            stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(count)
        ]
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        return [probe.getsockname()[1] for probe in probes]


def wait_until(predicate, *, timeout_s: float, what: str, registry: ProcessRegistry, interval_s: float = 1.0):
    """Poll ``predicate`` until it returns a truthy value; fail with every process's log tail."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for process in registry.processes:
            if not process.alive():
                pytest.fail(f"{process.name} exited while waiting for {what}\n{registry.diagnostics()}")
        result = predicate()
        if result:
            return result
        time.sleep(interval_s)
    pytest.fail(f"timed out after {timeout_s:.0f}s waiting for {what}\n{registry.diagnostics()}")


# ---------------------------------------------------------------------------------------------
# PostgreSQL and Redis from Debian's packages


def postgres_bin_dir() -> Path | None:
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"), reverse=True)
    return candidates[0].parent if candidates else None


def require_system_services() -> Path:
    bin_dir = postgres_bin_dir()
    missing = [
        name
        for name, ok in (("postgresql", bin_dir), ("redis-server", shutil.which("redis-server")))
        if not ok
    ]
    require_part(" and ".join(missing), not missing)
    assert bin_dir is not None
    return bin_dir


def postgres_user() -> str | None:
    """PostgreSQL refuses to run as root: run it as the ``postgres`` account when we are root."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        pytest.fail("running as root but there is no 'postgres' account (install the postgresql package)")
    return "postgres"


def start_postgres(registry: ProcessRegistry, data_root: Path, password: str) -> int:
    """initdb a fresh cluster (password auth) and start it on a free port of 127.0.0.1."""
    bin_dir = require_system_services()
    user = postgres_user()
    password_file = data_root / "pwfile"
    password_file.write_text(password + "\n")
    if user:
        shutil.chown(data_root, user=user)
        shutil.chown(password_file, user=user)
    initdb = subprocess.run(
        [
            str(bin_dir / "initdb"),
            "-D",
            str(data_root / "data"),
            "-U",
            "airflow",
            f"--pwfile={password_file}",
            "--auth=scram-sha-256",
            "--no-sync",
            "-E",
            "UTF8",
            "--no-instructions",
        ],
        capture_output=True,
        text=True,
        user=user,
        group=user,
        extra_groups=[] if user else None,
        timeout=120,
    )
    assert initdb.returncode == 0, f"initdb failed:\n{initdb.stdout}\n{initdb.stderr}"
    (port,) = free_ports(1)
    registry.start(
        "postgres",
        [
            str(bin_dir / "postgres"),
            "-D",
            str(data_root / "data"),
            "-p",
            str(port),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            f"unix_socket_directories={data_root}",
            "-c",
            "fsync=off",
            "-c",
            "max_connections=200",
        ],
        user=user,
        stop_signal=signal.SIGINT,  # PostgreSQL's "fast shutdown"
    )
    return port


def postgres_accepts(port: int, password: str, database: str = "postgres") -> bool:
    import psycopg2

    try:
        psycopg2.connect(
            host="127.0.0.1", port=port, user="airflow", password=password, dbname=database, connect_timeout=2
        ).close()
    except psycopg2.OperationalError:
        return False
    return True


def create_database(port: int, password: str, name: str) -> None:
    import psycopg2

    connection = psycopg2.connect(
        host="127.0.0.1", port=port, user="airflow", password=password, dbname="postgres"
    )
    connection.autocommit = True
    with connection.cursor() as cursor:
        cursor.execute(f'CREATE DATABASE "{name}"')
    connection.close()


def start_redis(registry: ProcessRegistry, work_dir: Path) -> int:
    (port,) = free_ports(1)
    registry.start(
        "redis",
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            "--dir",
            str(work_dir),
        ],
    )
    return port


def redis_accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as connection:
            connection.sendall(b"PING\r\n")
            return connection.recv(16).startswith(b"+PONG")
    except OSError:
        return False


# ---------------------------------------------------------------------------------------------
# The REST API


def http_json(
    method: str, url: str, *, token: str | None = None, body: dict | None = None
) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as error:
        payload = error.read()
        try:
            return error.code, json.loads(payload or b"{}")
        except json.JSONDecodeError:
            return error.code, {"raw": payload.decode(errors="replace")}
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0, {}


def http_ok(url: str) -> bool:
    return http_json("GET", url)[0] == 200


# ---------------------------------------------------------------------------------------------
# The deployment


@dataclass
class Deployment:
    """A running Celery deployment: where its API is, how to log in, where the lake is."""

    api_url: str
    admin_password: str
    env: dict[str, str]
    postgres_port: int
    postgres_password: str
    registry: ProcessRegistry
    #: the fleet file every process reads (GPUCOMPARE_FLEET): a copy of the repository's
    fleet_file: Path

    def token(self) -> str:
        status, payload = http_json(
            "POST",
            f"{self.api_url}/auth/token",
            body={"username": ADMIN_USER, "password": self.admin_password},
        )
        assert status == 201, f"/auth/token answered {status}: {payload}"
        return payload["access_token"]

    def api(self, method: str, path: str, token: str, body: dict | None = None) -> tuple[int, dict]:
        return http_json(method, f"{self.api_url}/api/v2{path}", token=token, body=body)


def airflow_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "airflow", *args]


def process_env(airflow_env: dict[str, str], airflow_home: Path, shared_dir: Path) -> dict[str, str]:
    """The test's environment minus any Airflow or gpucompare settings of its own, plus the deployment's.

    The gpucompare settings that must name shared storage point into ``shared_dir``, the
    stand-in for compose's shared volumes.
    """
    env = {key: value for key, value in os.environ.items() if not key.startswith(("AIRFLOW", "GPUCOMPARE_"))}
    env.update(airflow_env)
    env.update(
        {key: str(shared_dir / key.removeprefix("GPUCOMPARE_").lower()) for key in SHARED_STORAGE_SETTINGS}
    )
    env.update(
        {
            "AIRFLOW_HOME": str(airflow_home),
            # a copy of the repository's fleet file, which a test may rewrite for one run
            "GPUCOMPARE_FLEET": str(shared_dir / "fleet.yaml"),
            "GPUCOMPARE_BENCH_PYTHON": str(BENCH_PYTHON),
            # the deployment's name is required (issue 19), as compose's airflow.env sets it
            "GPUCOMPARE_DEPLOYMENT": "ci-distributed",
            # A cron that has not fired since the DAG's start date (29 February 2028 is next):
            # unpausing then creates no catch-up run, and the run the test triggers is the only one.
            "GPUCOMPARE_NIGHTLY_SCHEDULE": "0 2 29 2 *",
            # Airflow's own deferral timeout (a wait's deadline + this margin) and the scheduler's
            # check of it come soon, and retries follow at once, so the test of a triggerer that is
            # down sees every try of a step time out within a couple of minutes (defaults: 300 s,
            # every 15 s, 60 s doubling); no other test here waits anywhere near its deadline.
            "GPUCOMPARE_DEFERRAL_MARGIN_S": str(DEFERRAL_MARGIN_S),
            "AIRFLOW__SCHEDULER__TRIGGER_TIMEOUT_CHECK_INTERVAL": "3",
            "GPUCOMPARE_RETRY_DELAY_S": "1",
        }
    )
    return env


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    base = tmp_path_factory.mktemp("distributed")
    log_dir = base / "logs"
    log_dir.mkdir()
    registry = ProcessRegistry(log_dir)
    # PostgreSQL's files must be reachable by the postgres account: not under pytest's 0700 root dir.
    pg_root = Path(tempfile.mkdtemp(prefix="gpucompare-pg-"))
    try:
        yield _start_deployment(registry, base, pg_root)
    finally:
        registry.stop_all()
        shutil.rmtree(pg_root, ignore_errors=True)


def _start_deployment(registry: ProcessRegistry, base: Path, pg_root: Path) -> Deployment:
    postgres_password = secrets.token_urlsafe(16)
    admin_password = secrets.token_urlsafe(16)
    pg_port = start_postgres(registry, pg_root, postgres_password)
    redis_port = start_redis(registry, base)
    wait_until(
        lambda: postgres_accepts(pg_port, postgres_password),
        timeout_s=60,
        what="PostgreSQL",
        registry=registry,
        interval_s=0.3,
    )
    wait_until(
        lambda: redis_accepts(redis_port), timeout_s=30, what="Redis", registry=registry, interval_s=0.3
    )
    create_database(pg_port, postgres_password, "airflow")

    from cryptography.fernet import Fernet

    api_port, health_port, log_port, trigger_log_port = free_ports(4)
    api_url = f"http://127.0.0.1:{api_port}"
    airflow_home = base / "airflow"
    airflow_home.mkdir()
    passwords_file = airflow_home / "auth" / "passwords.json"
    airflow_env = celery_deployment_env(
        Endpoints(
            postgres_host="127.0.0.1",
            postgres_port=pg_port,
            postgres_user="airflow",
            postgres_password=postgres_password,
            postgres_db="airflow",
            redis_host="127.0.0.1",
            redis_port=redis_port,
            api_server_url=api_url,
            worker_log_server_port=log_port,
            trigger_log_server_port=trigger_log_port,
            scheduler_health_port=health_port,
        ),
        Secrets(
            fernet_key=Fernet.generate_key().decode(),
            jwt_secret=secrets.token_urlsafe(64),
            api_secret_key=secrets.token_urlsafe(32),
        ),
        Layout(
            dags_folder=str(REPO_ROOT / "dags"),
            plugins_folder=str(REPO_ROOT / "plugins"),
            passwords_file=str(passwords_file),
            worker_concurrency=WORKER_CONCURRENCY,
        ),
    )
    shared_dir = base / "shared"
    env = process_env(airflow_env, airflow_home, shared_dir)
    shared_dir.mkdir()
    fleet_file = Path(env["GPUCOMPARE_FLEET"])
    shutil.copyfile(REPO_ROOT / "dags" / "config" / "fleet.yaml", fleet_file)

    # Compose's airflow-init service, the same command: migrate, create the pool, write the passwords file.
    init = subprocess.run(
        [sys.executable, "-m", "gpucompare.airflow.deployment", "init", str(passwords_file)],
        env={**env, ADMIN_PASSWORD_ENV: admin_password},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert init.returncode == 0, f"deployment init failed:\n{init.stdout[-3000:]}\n{init.stderr[-3000:]}"

    # Every Airflow component of compose.yaml, with compose's command; only the API server's
    # address differs (compose publishes container port 8080).
    for service, command in COMPONENT_COMMANDS.items():
        extra: tuple[str, ...] = ()
        if service == "airflow-apiserver":
            extra = ("--host", "127.0.0.1", "--port", str(api_port))
        elif service == "airflow-worker":
            extra = ("--celery-hostname", f"gpucompare-test-{api_port}")
        registry.start(service, airflow_argv(*command, *extra), env=env)
    wait_until(
        lambda: http_ok(f"{api_url}{API_SERVER_HEALTH_PATH}"),
        timeout_s=STARTUP_TIMEOUT_S,
        what="the API server's health endpoint",
        registry=registry,
    )
    wait_until(
        lambda: http_ok(f"http://127.0.0.1:{health_port}{SCHEDULER_HEALTH_PATH}"),
        timeout_s=STARTUP_TIMEOUT_S,
        what="the scheduler's health endpoint",
        registry=registry,
    )
    return Deployment(api_url, admin_password, env, pg_port, postgres_password, registry, fleet_file)


def celery_results(deployment: Deployment) -> list[str]:
    """Statuses of the tasks the Celery result backend recorded (proof the work went through Celery)."""
    import psycopg2

    connection = psycopg2.connect(
        host="127.0.0.1",
        port=deployment.postgres_port,
        user="airflow",
        password=deployment.postgres_password,
        dbname="airflow",
    )
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT status FROM celery_taskmeta")
            return [row[0] for row in cursor.fetchall()]
    finally:
        connection.close()


def task_instances(deployment: Deployment, dag_id: str, run_id: str, token: str) -> list[dict]:
    """Every task instance of the run, page by page (the API answers at most 100 at a time)."""
    found: list[dict] = []
    while True:
        status, page = deployment.api(
            "GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances?limit=100&offset={len(found)}", token
        )
        assert status == 200, (status, page)
        found += page["task_instances"]
        if not page["task_instances"] or len(found) >= page["total_entries"]:
            return found


def trigger_and_wait(
    deployment: Deployment, dag_id: str, conf: dict, timeout_s: float = RUN_TIMEOUT_S
) -> tuple[str, dict, list[dict]]:
    """Unpause and trigger ``dag_id`` through the public API; return run id, run and task instances."""
    token = deployment.token()
    wait_until(
        lambda: deployment.api("GET", f"/dags/{dag_id}", token)[0] == 200,
        timeout_s=STARTUP_TIMEOUT_S,
        what=f"the DAG processor to serialize {dag_id}",
        registry=deployment.registry,
    )
    status, payload = deployment.api("PATCH", f"/dags/{dag_id}", token, {"is_paused": False})
    assert status == 200 and payload["is_paused"] is False, (status, payload)
    status, run = deployment.api(
        "POST", f"/dags/{dag_id}/dagRuns", token, {"logical_date": None, "conf": conf}
    )
    assert status == 200, f"trigger answered {status}: {run}"
    run_id = run["dag_run_id"]

    def finished() -> dict | None:
        code, current = deployment.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}", token)
        return current if code == 200 and current["state"] in ("success", "failed") else None

    final = wait_until(
        finished,
        timeout_s=timeout_s,
        what=f"run {run_id} of {dag_id}",
        registry=deployment.registry,
        interval_s=2.0,
    )
    return run_id, final, task_instances(deployment, dag_id, run_id, deployment.token())


# ---------------------------------------------------------------------------------------------
# Tests


def test_api_refuses_a_trigger_without_a_token(deployment: Deployment) -> None:
    status, _ = http_json(
        "POST", f"{deployment.api_url}/api/v2/dags/{NIGHTLY_DAG_ID}/dagRuns", body={"logical_date": None}
    )
    assert status in (401, 403)
    status, _ = http_json(
        "POST",
        f"{deployment.api_url}/auth/token",
        body={"username": ADMIN_USER, "password": deployment.admin_password + "x"},
    )
    assert status == 401


def test_init_created_the_pool_of_the_fleet(deployment: Deployment) -> None:
    from gpucompare import settings
    from gpucompare.config import fleet

    status, pool = deployment.api("GET", f"/pools/{settings.DEFAULTS['pool']}", deployment.token())
    assert status == 200, pool
    # The deployment runs with (a copy of) the repository's fleet file.
    assert pool["slots"] == fleet.load_fleet(REPO_ROOT / "dags" / "config" / "fleet.yaml").max_instances


def test_nightly_dag_runs_on_celery_workers(deployment: Deployment) -> None:
    run_id, run, task_instances = trigger_and_wait(deployment, NIGHTLY_DAG_ID, {})
    summary = [(ti["task_id"], ti["map_index"], ti["state"]) for ti in task_instances]
    assert run["state"] == "success", (
        f"{run_id} ended {run['state']}: {summary}\n{deployment.registry.diagnostics()}"
    )
    ran = [ti for ti in task_instances if ti["state"] == "success"]
    assert ran and all(ti["executor"] in (None, "CeleryExecutor") for ti in ran), summary
    assert {"score_sweep", "train_sweep", "ingest"} <= {ti["task_id"].rsplit(".", 1)[-1] for ti in ran}, (
        summary
    )

    # The results are in the lake the workers share, tagged with this run.
    from gpucompare.lake.tables import open_lake

    rows = [
        row
        for row in open_lake(deployment.env["GPUCOMPARE_LAKE"]).results_table().to_pylist()
        if row["dag_run_id"] == run_id
    ]
    assert {row["mode"] for row in rows} == {"score", "train"}, rows
    assert {row["target"] for row in rows} == {"local"}
    assert all(row["images_per_sec"] > 0 for row in rows if row["status"] == "ok")
    assert any(row["status"] == "ok" for row in rows)

    # Each task that ran went through the broker to a Celery worker, which records the outcome in
    # the result backend just after the task itself reported success (hence the short wait).
    wait_until(
        lambda: celery_results(deployment).count("SUCCESS") >= len(ran),
        timeout_s=60,
        what=f"{len(ran)} successful tasks in the Celery result backend",
        registry=deployment.registry,
    )


@contextlib.contextmanager
def connections_in(deployment: Deployment, token: str, conn_ids: list[str]) -> Iterator[None]:
    """The test's Airflow connections (``AIRFLOW_CONN_<ID>`` of this process, as the fixtures
    publish them) created in the deployment's database through the REST API, as a user adds
    them; deleted at the end. The deployment's processes never see this process's environment."""
    try:
        for conn_id in conn_ids:
            conn = json.loads(os.environ[f"AIRFLOW_CONN_{conn_id.upper()}"])
            body = {"connection_id": conn_id, "extra": json.dumps(conn.get("extra", {}))}
            body.update(
                {key: conn[key] for key in ("conn_type", "host", "port", "login", "password") if key in conn}
            )
            status, answer = deployment.api("POST", "/connections", token, body)
            assert status == 201, (conn_id, status, answer)
        yield
    finally:
        for conn_id in conn_ids:
            deployment.api("DELETE", f"/connections/{conn_id}", token)


@contextlib.contextmanager
def pool_of(deployment: Deployment, token: str, slots: int) -> Iterator[str]:
    """The gpucompare pool at ``slots`` slots, deferred tasks counted, through the REST API; then
    back to what it was."""
    from gpucompare import settings

    name = settings.DEFAULTS["pool"]
    status, before = deployment.api("GET", f"/pools/{name}", token)
    assert status == 200, before
    status, pool = deployment.api(
        "PATCH", f"/pools/{name}", token, {"pool": name, "slots": slots, "include_deferred": True}
    )
    assert status == 200 and pool["slots"] == slots and pool["include_deferred"], (status, pool)
    try:
        yield name
    finally:
        deployment.api(
            "PATCH",
            f"/pools/{name}",
            token,
            {"pool": name, "slots": before["slots"], "include_deferred": before["include_deferred"]},
        )


@contextlib.contextmanager
def fleet_of(deployment: Deployment, document: dict[str, Any]) -> Iterator[None]:
    """The deployment's fleet file replaced by ``document`` (read by the run's ``load_fleet``
    task on a worker), then restored."""
    import yaml

    original = deployment.fleet_file.read_text()
    deployment.fleet_file.write_text(yaml.safe_dump(document, sort_keys=False))
    try:
        yield
    finally:
        deployment.fleet_file.write_text(original)


@contextlib.contextmanager
def pool_samples(
    deployment: Deployment, token: str, name: str, interval_s: float = 0.5
) -> Iterator[list[dict]]:
    """The pool as the API reports it (``occupied_slots``: queued, running and, with
    ``include_deferred``, deferred tasks: what the scheduler checks), read every ``interval_s``
    seconds by a thread while the block runs."""
    samples: list[dict] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            status, pool = deployment.api("GET", f"/pools/{name}", token)
            if status == 200:
                samples.append(pool)
            stop.wait(interval_s)

    thread = threading.Thread(target=sample, name="pool-sampler", daemon=True)
    thread.start()
    try:
        yield samples
    finally:
        stop.set()
        thread.join(timeout=30)


def _interval(ti: dict) -> tuple[datetime, datetime, int]:
    return datetime.fromisoformat(ti["start_date"]), datetime.fromisoformat(ti["end_date"]), ti["pool_slots"]


def triggered(deployment: Deployment, run_id: str, task_id: str) -> set[int]:
    """Map indexes of ``task_id`` in the run whose trigger the triggerer ran.

    The triggerer writes each trigger's log beside its task's log
    (``<AIRFLOW_HOME>/logs/dag_id=…/run_id=…/task_id=…/map_index=…/attempt=N.log.trigger.<job>.log``),
    starting with ``trigger <dag>/<run>/<task>/<map index>/<try> (ID n) starting``. (Its last line,
    "Trigger fired event", was missing from 2 of 20 sweeps' files in a 20-target run although those
    tasks resumed with the event: not a reliable mark.)
    """
    task_logs = (
        Path(deployment.env["AIRFLOW_HOME"])
        / "logs"
        / f"dag_id={NIGHTLY_DAG_ID}"
        / f"run_id={run_id}"
        / f"task_id={task_id}"
    )
    found = set()
    for path in task_logs.glob("map_index=*/attempt=*.log.trigger.*.log"):
        index = int(path.parent.name.removeprefix("map_index="))
        if f"trigger {NIGHTLY_DAG_ID}/{run_id}/{task_id}/{index}/" in path.read_text(errors="replace"):
            found.add(index)
    return found


# the deployment's start-up (when this test runs first) plus the run's own limit in trigger_and_wait
@pytest.mark.timeout(STARTUP_TIMEOUT_S * 3 + RUN_TIMEOUT_S + 60 * DEFERRED_TARGETS)
def test_deferred_sweeps_hold_no_celery_worker_slot_and_stay_within_the_pool(
    deployment: Deployment, sshd: Any, working_instances: dict[str, Any], aws_client: Any, tmp_path: Path
) -> None:
    """Issue 19 on the real deployment: ``DEFERRED_TARGETS`` targets, half ec2 instances on moto
    (their commands run by the stand-in SSM agent), half ssh hosts on the loopback sshd, each
    sweep ``DEFERRED_SWEEP_S`` seconds longer than the real worker's (a slower machine), the
    pool at 4 slots with deferred tasks counted, one Celery worker with 2 slots.

    A sweep task that held its worker slot while it waits could never have more than 2 sweeps
    in flight (start to end of their task instances) at once: more than 2 shows the waits left
    the worker (to the triggerer, which logged running each sweep's trigger). The pool, read from
    the API every half second while the run lasts, was full (deferred sweeps counted) and never
    over its 4 slots. All targets' results are in the lake; all instances are terminated."""
    token = deployment.token()
    python = slow_worker(tmp_path / "slow-python", BENCH_PYTHON, DEFERRED_SWEEP_S)
    ec2_count = DEFERRED_TARGETS // 2
    targets = fleet_targets(
        count=DEFERRED_TARGETS,
        ec2_count=ec2_count,
        ssh_conn_id=sshd.conn_id,
        root=tmp_path / "machines",
        python=python,
        poll_interval_s=1.0,
    )
    defaults = {**working_instances["defaults"], "poll_interval_s": 1.0}
    fleet = {
        "max_instances": DEFERRED_POOL_SLOTS,
        "defaults": {"ec2": defaults},
        "profiles": {"tiny": SCORE_ONLY},
        "targets": targets,
    }
    with (
        connections_in(deployment, token, [sshd.conn_id, defaults["aws_conn_id"]]),
        pool_of(deployment, token, DEFERRED_POOL_SLOTS) as pool,
        fleet_of(deployment, fleet),
        pool_samples(deployment, token, pool) as samples,
    ):
        began = time.monotonic()
        run_id, run, tis = trigger_and_wait(
            deployment, NIGHTLY_DAG_ID, {}, timeout_s=RUN_TIMEOUT_S + 60 * DEFERRED_TARGETS
        )
        wall_s = time.monotonic() - began
    summary = sorted((ti["task_id"], ti["map_index"], ti["state"]) for ti in tis)
    assert run["state"] == "success", (
        f"{run_id} ended {run['state']}: {summary}\n{deployment.registry.diagnostics()}"
    )

    sweeps = [ti for ti in tis if ti["task_id"] == "target.score_sweep"]
    assert sorted(ti["map_index"] for ti in sweeps) == list(range(DEFERRED_TARGETS))
    assert {ti["state"] for ti in sweeps} == {"success"}
    assert all(ti["executor"] in (None, "CeleryExecutor") for ti in tis if ti["state"] == "success"), summary
    # every sweep (and every ec2 launch) waited in the triggerer: its trigger ran there (and the
    # task, which only its resumed part ends with success, resumed on a worker)
    assert triggered(deployment, run_id, "target.score_sweep") == set(range(DEFERRED_TARGETS))
    ec2_indexes = {index for index, target in enumerate(targets) if target["kind"] == "ec2"}
    assert triggered(deployment, run_id, "target.prepare") == ec2_indexes
    sweeps_at_once = most_at_once((start, end, 1) for start, end, _ in map(_interval, sweeps))
    assert sweeps_at_once > WORKER_CONCURRENCY, [
        (ti["map_index"], ti["start_date"], ti["end_date"]) for ti in sweeps
    ]
    pool_steps = [_interval(ti) for ti in tis if ti["pool"] == pool and ti["start_date"]]
    assert len(pool_steps) == DEFERRED_TARGETS * 5  # prepare, deploy, score_sweep, train_sweep, collect
    # The pool as the scheduler counts it was full at times (deferred sweeps included) and never
    # over. (Not from the intervals above: a resumed task waits for its slot in ``scheduled``, which
    # holds none, so its start-to-end interval overstates what it held.)
    occupied = [sample["occupied_slots"] for sample in samples]
    assert len(occupied) > 10 and max(occupied) == DEFERRED_POOL_SLOTS, occupied
    assert max(sample["deferred_slots"] for sample in samples) > 0, samples

    # every target's results are in the lake, and every instance of the run is terminated
    from gpucompare.lake.tables import open_lake

    rows = [
        row
        for row in open_lake(deployment.env["GPUCOMPARE_LAKE"]).results_table().to_pylist()
        if row["dag_run_id"] == run_id
    ]
    assert sorted((r["target"], r["mode"], r["status"]) for r in rows) == sorted(
        [("ec2", "score", "ok")] * ec2_count + [("ssh", "score", "ok")] * (DEFERRED_TARGETS - ec2_count)
    )
    reservations = aws_client("ec2").describe_instances(
        Filters=[{"Name": "tag:gpucompare:run-id", "Values": [f"*{run_id}*"]}]
    )["Reservations"]
    instances = [i for r in reservations for i in r["Instances"]]
    assert len(instances) == ec2_count
    assert {i["State"]["Name"] for i in instances} <= {"shutting-down", "terminated"}
    assert working_instances["agent"].running() == []
    print(
        "\nFIGURES "
        + json.dumps(
            {
                "targets": DEFERRED_TARGETS,
                "ec2_targets": ec2_count,
                "sweep_extra_s": DEFERRED_SWEEP_S,
                "pool_slots": DEFERRED_POOL_SLOTS,
                "worker_concurrency": WORKER_CONCURRENCY,
                "dag_wall_s": round(wall_s, 1),
                "sweeps_at_once": sweeps_at_once,
                "pool_occupied_max": max(occupied),
                "pool_deferred_max": max(sample["deferred_slots"] for sample in samples),
                "pool_samples": len(samples),
                "pool_task_intervals_at_once": most_at_once(pool_steps),
            }
        )
    )


@contextlib.contextmanager
def triggerer_stopped(deployment: Deployment) -> Iterator[None]:
    """The triggerer frozen (SIGSTOP to its process group: alive, holding its triggers, running
    none of them, as a triggerer that hangs or lost its triggers), thawed at the end."""
    (triggerer,) = [p for p in deployment.registry.processes if p.name == "airflow-triggerer"]
    os.killpg(triggerer.popen.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.killpg(triggerer.popen.pid, signal.SIGCONT)


def task_log(deployment: Deployment, run_id: str, task_id: str, map_index: int, attempt: int) -> str:
    path = (Path(deployment.env["AIRFLOW_HOME"]) / "logs" / f"dag_id={NIGHTLY_DAG_ID}" / f"run_id={run_id}"
            / f"task_id={task_id}" / f"map_index={map_index}" / f"attempt={attempt}.log")
    return path.read_text(errors="replace") if path.exists() else ""


@pytest.mark.timeout(STARTUP_TIMEOUT_S * 3 + RUN_TIMEOUT_S + 120)
def test_with_the_triggerer_down_airflows_deferral_timeout_fails_the_wait_and_the_instance_is_terminated(
    deployment: Deployment, working_instances: dict[str, Any], aws_client: Any, tmp_path: Path
) -> None:
    """Issue 29: the deferral's ``timeout`` (the wait's deadline + ``deferral_margin_s``) is what
    ends a wait whose trigger never runs. An ec2 target on moto whose instance must be running and
    its agent online within 8 + 8 s; the triggerer is frozen before the run starts, so the
    trigger's own deadline can never fire (disabled). Airflow's scheduler must time the deferred
    ``prepare`` out on every try (no trigger ran, the task failed with the deferral timeout), then
    the group's ``terminate`` must terminate the paid instance the first try launched."""
    token = deployment.token()
    (target,) = fleet_targets(count=1, ec2_count=1, ssh_conn_id="unused", root=tmp_path / "machines",
                              python=BENCH_PYTHON, poll_interval_s=1.0)
    defaults = {**working_instances["defaults"], "poll_interval_s": 1.0,
                "launch_timeout_s": 8, "agent_timeout_s": 8}
    fleet = {"defaults": {"ec2": defaults}, "profiles": {"tiny": SCORE_ONLY}, "targets": [target]}
    began = time.monotonic()
    with (
        connections_in(deployment, token, [defaults["aws_conn_id"]]),
        fleet_of(deployment, fleet),
        triggerer_stopped(deployment),
    ):
        run_id, run, tis = trigger_and_wait(deployment, NIGHTLY_DAG_ID, {}, timeout_s=RUN_TIMEOUT_S)
    wall_s = time.monotonic() - began
    states = {ti["task_id"]: ti["state"] for ti in tis}
    assert run["state"] == "failed", (run["state"], states)
    (prepare,) = [ti for ti in tis if ti["task_id"] == "target.prepare"]
    assert prepare["state"] == "failed" and prepare["try_number"] == 4, prepare  # 3 retries, each timed out
    for attempt in range(1, 5):
        log = task_log(deployment, run_id, "target.prepare", 0, attempt)
        assert "TaskDeferralTimeout" in log or "Trigger timeout" in log, (attempt, log[-3000:])
    assert triggered(deployment, run_id, "target.prepare") == set()  # no trigger ever ran
    assert states["target.terminate"] == "success", states
    # the instance the first try launched (each retry found it: one launch) is terminated
    reservations = aws_client("ec2").describe_instances(
        Filters=[{"Name": "tag:gpucompare:run-id", "Values": [f"*{run_id}*"]}])["Reservations"]
    instances = [i for r in reservations for i in r["Instances"]]
    assert len(instances) == 1, instances
    assert instances[0]["State"]["Name"] in ("shutting-down", "terminated"), instances[0]["State"]
    figures = {"deferral_margin_s": DEFERRAL_MARGIN_S, "prepare_tries": prepare["try_number"],
               "run_wall_s": round(wall_s, 1)}
    print("\nFIGURES " + json.dumps(figures))


def test_stop_all_leaves_no_process_behind(tmp_path: Path) -> None:
    """The finalizer's cleanup itself: a child in its own session (as the local target starts the
    benchmark worker) and a child that ignores SIGTERM are both gone after stop_all()."""
    registry = ProcessRegistry(tmp_path)
    script = "trap '' TERM; setsid sleep 300 & sleep 300 & echo started; wait"
    leader = registry.start("tree", ["bash", "-c", script])
    wait_until(
        lambda: "started" in leader.log_tail(), timeout_s=10, what="the process tree", registry=registry
    )
    tree = descendants([leader.popen.pid])
    assert len(tree) >= 2
    registry.stop_all(grace_s=1.0)
    deadline = time.monotonic() + 5  # SIGKILL is delivered asynchronously
    while (still_running := [pid for pid, started in tree.items() if _is_running(pid, started)]) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.1)
    assert not still_running and leader.popen.poll() is not None


def _is_running(pid: int, started: str) -> bool:
    try:
        fields = _stat_fields(pid)
    except OSError:
        return False
    return fields[19] == started and fields[0] != "Z"
