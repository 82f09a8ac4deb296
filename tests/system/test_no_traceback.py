"""No traceback reaches a user: every ``gpucompare`` subcommand, ``bench-tasks`` and the analyst API
(``gpucompare.read``), each under four conditions a newcomer meets, end in one line naming what to
do, never in Python's "Traceback (most recent call last)".

Conditions (columns of the table the last test prints):

* ``bad args``: a value the command refuses (an unknown flag for commands that take no value);
* ``no extras``: a real venv without the optional extras (aws, ssh, celery, postgres): built once per
  session from ``.venv`` (its site-packages hard-linked, then pip uninstalls the extras' packages), so
  a command that needs boto3 must name the ``aws`` extra;
* ``no credentials``: no AWS variable or profile, an S3 lake; every AWS endpoint and the instance
  metadata endpoint point at a closed port on 127.0.0.1 (nothing leaves this machine);
* ``unwritable``: a lake or output folder under ``/proc`` (no user can create one there, root included).

Each run is a real process, as a user starts it. A system test: it builds a venv and starts about
ninety processes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

TRACEBACK = "Traceback (most recent call last)"
#: the distributions of the optional extras (pyproject [project.optional-dependencies])
EXTRAS = ("boto3", "botocore", "s3transfer", "apache-airflow-providers-amazon",
          "apache-airflow-providers-ssh", "paramiko", "sshtunnel", "apache-airflow-providers-celery",
          "celery",
          "apache-airflow-providers-postgres", "psycopg2-binary")
CLOSED = "http://127.0.0.1:9"  # the discard port: nothing listens there
FORBIDDEN = "/proc/forbidden"
S3_LAKE = "s3://gpucompare-no-such-bucket/lake"
CONDITIONS = ("bad args", "no extras", "no credentials", "unwritable")

#: each subcommand's ordinary arguments ({tmp}: the test's folder)
ORDINARY: dict[str, list[str]] = {
    "ingest": ["--results", "{tmp}/none.jsonl", "--provider", "local", "--instance-type", "local-cpu",
               "--run-id", "r1"],
    "compact": [],
    "migrate-lake": ["--from", "{tmp}/old-lake"],
    "lake-info": [],
    "import-published": [],
    "load-prices": [],
    "add-price": ["--provider", "local", "--instance-type", "local-cpu", "--per-hour", "0.1",
                  "--currency", "EUR", "--label", "test"],
    "refresh-prices": ["--provider", "aws", "--region", "us-east-1"],
    "import-catalog": ["--shipped"],
    "rank": [],
    "report": ["--out", "{tmp}/out"],
    "compare": ["--by", "machine", "local/local-cpu", "aws/g5.xlarge"],
    "athena-ddl": ["--lake", S3_LAKE, "--reports", "s3://gpucompare-no-such-bucket/reports"],
    "plan": [],
    "schema": ["fleet"],
    "iam-policy": [],
    "release-name": ["--deployment", "ci-tests", "--bucket", "gpucompare-no-such-bucket"],
    "scaling-run": ["--group", "nope"],
    "dags": ["install", "{tmp}/dags"],
}
#: a refused value per subcommand (else an unknown flag)
BAD: dict[str, list[str]] = {
    "ingest": ["--provider", "local", "--instance-type", "bad type!", "--results", "x", "--run-id", "r"],
    "add-price": ["--provider", "local", "--instance-type", "local-cpu", "--per-hour", "-1",
                  "--currency", "XYZ", "--label", "x"],
    "refresh-prices": ["--provider", "aws", "--region", "not a region"],
    "rank": ["--network", "nope"],
    "report": ["--currency", "GBP"],
    "compact": ["--older-than-days", "-3"],
    "import-catalog": ["{tmp}/none.csv"],
    "plan": ["--fleet", "{tmp}/none.yaml"],
    "schema": ["nope"],
    "iam-policy": ["--account", "12"],
    "release-name": ["--deployment", "Not_A_Name", "--bucket", "gpucompare-no-such-bucket"],
    "dags": ["install"],
}
#: commands that write into a lake (--lake) or an output folder (its flag) for "unwritable"
UNWRITABLE_OUT = {"report": ["--out", FORBIDDEN], "dags": ["install", FORBIDDEN + "/dags"],
                  "compare": ["--by", "machine", "a/b", "c/d", "--out", FORBIDDEN]}
#: commands without --lake
NO_LAKE = {"schema", "iam-policy", "release-name", "dags", "athena-ddl", "scaling-run"}
BENCH = {"bad args": ["score", "--networks", "nope", "--batch-sizes", "1"],
         "unwritable": ["score", "--networks", "alexnet", "--batch-sizes", "1", "--output", FORBIDDEN + "/x"],
         "no extras": ["describe", "--network", "alexnet"],
         "no credentials": ["describe", "--network", "alexnet"]}
API = ("import gpucompare\ngpucompare.read({name!r}, lake={lake!r})")
API_CASES = {"bad args": ("nope", "{tmp}/lake"), "no extras": ("best_value", "{tmp}/lake"),
             "no credentials": ("best_value", S3_LAKE), "unwritable": ("best_value", FORBIDDEN + "/lake")}

RESULTS: dict[tuple[str, str], str] = {}


@pytest.fixture(scope="session")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv like .venv without the optional extras: hard links of .venv's packages, extras uninstalled."""
    venv = tmp_path_factory.mktemp("no-extras") / "venv"
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    here = Path(sysconfig.get_paths()["purelib"])
    there = venv / here.relative_to(Path(sys.prefix))
    shutil.rmtree(there)
    subprocess.run(["cp", "-al", str(here), str(there)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "uninstall", "-y", "-q", *EXTRAS], check=True,
                   capture_output=True)
    assert subprocess.run([str(python), "-c", "import boto3"], capture_output=True).returncode != 0
    return python


def _env(tmp: Path, *, credentials: bool = True) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUCOMPARE_", "AWS_", "AIRFLOW__"))}
    env.update(GPUCOMPARE_LAKE=str(tmp / "lake"), GPUCOMPARE_REPORTS=str(tmp / "reports"),
               AIRFLOW_HOME=str(tmp / "airflow"), AWS_CONFIG_FILE=os.devnull,
               AWS_SHARED_CREDENTIALS_FILE=os.devnull, AWS_EC2_METADATA_DISABLED="true",
               AWS_ENDPOINT_URL=CLOSED, AWS_METADATA_ENDPOINT=CLOSED,
               AWS_EC2_METADATA_SERVICE_ENDPOINT=CLOSED,
               AWS_DEFAULT_REGION="us-east-1", AWS_REGION="us-east-1")
    if credentials:
        env.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")  # noqa: S105 - a fake
    return env


def _args(command: str, condition: str, tmp: Path) -> list[str]:
    ordinary = ORDINARY[command]
    if condition == "bad args":
        chosen = BAD.get(command, [*ordinary, "--no-such-flag"])
    elif condition == "unwritable":
        chosen = UNWRITABLE_OUT.get(command) or (ordinary if command in NO_LAKE
                                                 else [*ordinary, "--lake", FORBIDDEN + "/lake"])
    elif condition == "no credentials" and command not in NO_LAKE:
        chosen = [*ordinary, "--lake", S3_LAKE]
    else:
        chosen = ordinary
    return [a.replace("{tmp}", str(tmp)) for a in chosen]


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str]:
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=300, check=False)
    return done.returncode, done.stdout + done.stderr


def _record(key: tuple[str, str], code: int, output: str) -> None:
    RESULTS[key] = f"TRACEBACK {code}" if TRACEBACK in output else f"exit {code}"


@pytest.mark.parametrize("condition", CONDITIONS)
def test_no_subcommand_shows_a_traceback(condition: str, tmp_path: Path, bare_python: Path) -> None:
    python = str(bare_python) if condition == "no extras" else sys.executable
    env = _env(tmp_path, credentials=condition != "no credentials")
    shown = {}
    for command in ORDINARY:
        code, output = _run([python, "-m", "gpucompare", command, *_args(command, condition, tmp_path)], env,
                            tmp_path)
        _record((command, condition), code, output)
        if TRACEBACK in output:
            shown[command] = output[-1500:]
    bench = [a.replace("{tmp}", str(tmp_path)) for a in BENCH[condition]]
    code, output = _run([python, "-m", "bench_tasks", *bench], env, tmp_path)
    _record(("bench-tasks", condition), code, output)
    if TRACEBACK in output:
        shown["bench-tasks"] = output[-1500:]
    assert shown == {}


@pytest.mark.parametrize("condition", CONDITIONS)
def test_the_analyst_api_raises_gpucompare_errors_only(condition: str, tmp_path: Path,
                                                       bare_python: Path) -> None:
    """``gpucompare.read`` in a notebook: a failure is a gpucompare error whose message says what to do
    (a missing lake, a name that is not a table), never a ModuleNotFoundError or a library's internals."""
    python = str(bare_python) if condition == "no extras" else sys.executable
    name, lake = (v.replace("{tmp}", str(tmp_path)) for v in API_CASES[condition])
    script = ("from gpucompare.errors import GpucompareError\n"
              f"try:\n    {API.format(name=name, lake=lake).replace(chr(10), chr(10) + '    ')}\n"
              "except GpucompareError as exc:\n    print('gpucompare error:', exc)\n")
    code, output = _run([python, "-c", script], _env(tmp_path, credentials=condition != "no credentials"),
                        tmp_path)
    _record(("gpucompare.read", condition), code, output)
    assert TRACEBACK not in output, output[-2000:]
    assert "gpucompare error:" in output or code == 0, output[-2000:]


def test_print_the_table() -> None:
    """The table of the two tests above (commands × conditions: exit code, or TRACEBACK)."""
    commands = [*ORDINARY, "bench-tasks", "gpucompare.read"]
    lines = ["command".ljust(18) + "".join(c.ljust(16) for c in CONDITIONS)]
    for command in commands:
        cells = (RESULTS.get((command, c), "-").ljust(16) for c in CONDITIONS)
        lines.append(command.ljust(18) + "".join(cells))
    print("\n" + "\n".join(lines))
    assert not any(v.startswith("TRACEBACK") for v in RESULTS.values())
