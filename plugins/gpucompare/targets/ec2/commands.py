"""The shell commands an ``ec2`` target sends to its instance through SSM (pure functions of
their inputs; the tests run exactly these in bash).
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os

from gpucompare.targets.base import (
    shell_quote,
)
from gpucompare.targets.ec2.options import PROGRESS_UPLOAD_S, SCRIPT_PREAMBLE
from gpucompare.targets.runs import STDERR_TAIL_LINES

log = logging.getLogger(__name__)


# --- the commands sent to the instance (module level: pure functions of their inputs) ---


def deploy_commands(bundle_uri: str, bundle_sha256: str, workdir: str, python: str, *,
                    create_venv: bool, check_worker: bool = True) -> list[str]:
    """Fetch (``aws s3 cp`` with the instance's own profile) and check the worker bundle,
    create the worker environment if missing (``check_worker=False``: the worker runs in a
    container, checked by its own pull, ``targets.container``)."""
    commands = [
        *SCRIPT_PREAMBLE,
        f"mkdir -p {shell_quote(workdir)}",
        f"cd {shell_quote(workdir)}",
        # content-addressed directory: a complete one is never fetched again
        "if [ ! -f .complete ]; then "
        f"aws s3 cp --only-show-errors {shell_quote(bundle_uri)} bundle.tar.gz; "
        f"echo {shell_quote(bundle_sha256 + '  bundle.tar.gz')} | sha256sum -c -; "
        "tar -xzf bundle.tar.gz; rm -f bundle.tar.gz; touch .complete; fi",
    ]
    if create_venv:
        venv = os.path.dirname(os.path.dirname(python))
        commands += [
            # Ubuntu ships venv without ensurepip; the run command is root, so add it if missing
            "if ! python3 -c 'import ensurepip' 2>/dev/null && command -v apt-get >/dev/null; then "
            "apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv; fi",
            # marked complete only after pip succeeded: a half-made venv is made again
            f"if [ ! -f {shell_quote(venv + '/.complete')} ]; then rm -rf {shell_quote(venv)} "
            f"&& python3 -m venv {shell_quote(venv)} && "
            f"{shell_quote(venv + '/bin/pip')} install -q -r bench_tasks/requirements-gpu.txt && "
            f"touch {shell_quote(venv + '/.complete')}; fi",
        ]
    if check_worker:
        commands.append(f"{shell_quote(python)} -m bench_tasks sysinfo > /dev/null")
    return commands


def sweep_name(config_json: str) -> str:
    """The name of one sweep of a run: the hash of its configuration (a retry finds its own)."""
    return "sweep-" + hashlib.sha256(config_json.encode()).hexdigest()[:16]


def sweep_commands(*, config_json: str, workdir: str, rundir: str, python: str,
                   destination: str, progress_destination: str,
                   worker_prefix: str | None = None) -> list[str]:
    """Run one sweep, merge the run's sweep files into results.jsonl, copy it to S3.

    The config travels base64-encoded, so no character in it can reach the shell. The
    worker's progress (its standard error) goes to a file that a background loop copies to
    ``progress_destination`` every ``PROGRESS_UPLOAD_S`` (the orchestrator follows it); its
    tail is repeated on standard error so SSM's output has it when the worker fails.
    ``worker_prefix`` (shell text) replaces the interpreter: ``docker run … image python`` for a
    container runtime (``targets.container.shell_prefix``).
    """
    name = sweep_name(config_json)
    encoded = base64.b64encode(config_json.encode()).decode("ascii")
    config_path, output_path = f"{rundir}/{name}.json", f"{rundir}/{name}.jsonl"
    progress_path = f"{rundir}/{name}.log"
    upload_progress = (f"aws s3 cp --only-show-errors {shell_quote(progress_path)} "
                       f"{shell_quote(progress_destination)}")
    return [
        *SCRIPT_PREAMBLE,
        f"mkdir -p {shell_quote(rundir)}",
        f"cd {shell_quote(workdir)}",
        f"echo {shell_quote(encoded)} | base64 -d > {shell_quote(config_path)}",
        f": > {shell_quote(progress_path)}",
        # its own stdio: SSM (like any reader of the script's output) waits for open pipes
        f"( while sleep {PROGRESS_UPLOAD_S}; do {upload_progress} || true; done )"
        " </dev/null >/dev/null 2>&1 &",
        "uploader=$!",
        "trap 'kill $uploader 2>/dev/null || true' EXIT",
        "status=0",
        f"{worker_prefix or shell_quote(python)} -m bench_tasks sweep --config {shell_quote(config_path)} "
        f"--output {shell_quote(output_path + '.partial')} 2> {shell_quote(progress_path)} || status=$?",
        "kill $uploader 2>/dev/null || true",
        f"{upload_progress} || true",
        f"tail -n {STDERR_TAIL_LINES} {shell_quote(progress_path)} >&2",
        'if [ "$status" -ne 0 ]; then exit "$status"; fi',
        # only a finished sweep counts; a retried one replaces its file instead of adding to it
        f"mv {shell_quote(output_path + '.partial')} {shell_quote(output_path)}",
        f"cat {shell_quote(rundir)}/sweep-*.jsonl > {shell_quote(rundir + '/results.jsonl')}",
        f"aws s3 cp --only-show-errors {shell_quote(rundir + '/results.jsonl')} {shell_quote(destination)}",
    ]


