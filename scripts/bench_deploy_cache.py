"""Deploy time of an ssh host, first night vs the nights after (the environment cache).

    .venv/bin/python scripts/bench_deploy_cache.py            # the real requirements, from PyPI
    .venv/bin/python scripts/bench_deploy_cache.py --linked   # no download (tests' stand-in)

Starts a throwaway OpenSSH server on 127.0.0.1 (``tests/support/fixtures_sshd.py``) and times the ssh
target's ``deploy`` on it four times, as four nights would: night 1 on an empty host (uploads
the worker code, makes ``env-cpu-<hash>`` with ``pip install -r requirements-cpu.txt``, checks
that the environment imports MXNet), night 2 with nothing changed (code there, ``environment
ready``), night 3 after a change to the worker's code (a new code upload, the environment
reused: its name is the requirements file's hash), night 4 after a change to the requirements
file (a new environment). ``--linked`` swaps the download of MXNet (about 50 MB with numpy)
for the local wheel of ``tests/support/env_cache_support.py``, which links ``.venv-bench``'s packages.
The base interpreter is the one ``.venv-bench`` was made from. Noisy on a shared machine: the
load average is printed with the figures.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
for path in (REPO_ROOT, REPO_ROOT / "plugins"):
    sys.path.insert(0, str(path))

from gpucompare.targets import make_target  # noqa: E402
from gpucompare.targets.base import TargetSpec  # noqa: E402
from gpucompare.targets.bundle import build_bundle, package_dir  # noqa: E402
from gpucompare.targets.ssh import target as ssh  # noqa: E402
from tests.support.env_cache_support import base_python, linked_worker  # noqa: E402
from tests.support.fixtures_sshd import start_sshd  # noqa: E402

BENCH_PYTHON = REPO_ROOT / ".venv-bench" / "bin" / "python"


def main() -> None:
    parser = argparse.ArgumentParser(description="ssh deploy time with and without the environment cache")
    parser.add_argument("--linked", action="store_true", help="no PyPI download: link .venv-bench's MXNet")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gpucompare-bench-deploy-"))
    os.environ.setdefault("AIRFLOW_HOME", str(work / "airflow"))
    source = work / "source"
    if args.linked:
        linked_worker(source, BENCH_PYTHON, "night 1")
    else:
        shutil.copytree(package_dir(), source / "bench_tasks", ignore=shutil.ignore_patterns("__pycache__"))
    ssh.build_bundle = lambda: build_bundle(cache_dir=work / "cache", root=source / "bench_tasks")
    server = start_sshd(work / "sshd", conn_id="bench_deploy_ssh")
    os.environ[server.conn_env_var] = server.connection_json()
    spec = TargetSpec(name="ssh", kind="ssh", provider="loopback", instance_type="cpu",
                      options={"ssh_conn_id": server.conn_id, "remote_dir": str(work / "remote"),
                               "base_python": base_python(BENCH_PYTHON), "requirements": "cpu",
                               "env_timeout_s": 3600})

    def code_change() -> None:
        with open(source / "bench_tasks" / "__init__.py", "a") as handle:
            handle.write("# a code change\n")

    def requirements_change() -> None:
        with open(source / "bench_tasks" / "requirements-cpu.txt", "a") as handle:
            handle.write("# a requirements change\n")

    nights = [("1: empty host", None), ("2: nothing changed", None), ("3: worker code changed", code_change),
              ("4: requirements changed", requirements_change)]
    print(f"load before: {os.getloadavg()}", file=sys.stderr)
    rows = []
    try:
        for index, (name, change) in enumerate(nights):
            if change:
                change()
            lines: list[str] = []
            target = make_target(spec, line_sink=lines.append)
            state = target.prepare(f"nightly__night-{index + 1}")
            started = time.perf_counter()
            target.deploy(state)
            seconds = time.perf_counter() - started
            target.close()
            what = next((line for line in lines if "environment" in line and "[ssh]" not in line), "?")
            rows.append((name, seconds, what))
    finally:
        server.stop()
    print(f"load after: {os.getloadavg()}", file=sys.stderr)
    print(f"{'night':<26}{'deploy s':>10}  environment")
    for name, seconds, what in rows:
        print(f"{name:<26}{seconds:>10.1f}  {what}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
