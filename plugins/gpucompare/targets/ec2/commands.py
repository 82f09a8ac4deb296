"""The shell commands an ``ec2`` target sends to its instance through SSM (pure functions of
their inputs; the tests run exactly these in bash). A sweep's files follow ``targets.runs``,
the layout the ssh target uses; its lock makes a sweep run at most once (``sweep_commands``).
"""

from __future__ import annotations

import base64
import logging
import os
import posixpath

from bench_tasks.constants import WORKER_RUNTIME_ENV
from gpucompare.targets import container, runs
from gpucompare.targets.base import shell_quote
from gpucompare.targets.ec2.options import PROGRESS_UPLOAD_S, SCRIPT_PREAMBLE
from gpucompare.targets.runs import STDERR_TAIL_LINES

log = logging.getLogger(__name__)


# --- the commands sent to the instance (module level: pure functions of their inputs) ---


def deploy_commands(bundle_uri: str, bundle_sha256: str, workdir: str, python: str, *,
                    create_venv: bool, check_worker: bool = True, runtime: str | None = None) -> list[str]:
    """Fetch (``aws s3 cp`` with the instance's own profile) and check the worker bundle,
    create the worker environment if missing (``check_worker=False``: the worker runs in a
    container, checked by its own pull, ``targets.container``). The check runs ``sysinfo`` under
    the runtime's label, so a label the build contradicts fails the deploy, not the night
    (``bench_tasks.runtime_check``)."""
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
        label = f"env {WORKER_RUNTIME_ENV}={shell_quote(runtime)} " if runtime else ""
        commands.append(f"{label}{shell_quote(python)} -m bench_tasks sysinfo > /dev/null")
    return commands


#: The pull result's lines with the pull's start and end (epoch seconds, the instance's clock).
PULL_BEGAN, PULL_ENDED = "pull_began", "pull_ended"


def pull_commands(image: str, result_uri: str) -> list[str]:
    """After ``deploy_commands`` in the same SSM command: pull ``image`` (``container.pull_script``,
    in a subshell: its ``exit 0`` ends only the pull), then write the small result (the pull's
    start and end, ``PULL_BEGAN`` / ``PULL_ENDED``, and the script's ``pulled|present <ref>``) to
    ``result_uri`` with the instance's profile: the finish reads it there, since SSM's own answer
    keeps only 24,000 characters of a command's output."""
    return [
        f"{PULL_BEGAN}=$(date +%s); pull_out=$(mktemp)",
        f"( {container.pull_script(image)}\n) > \"$pull_out\"",
        f"{PULL_ENDED}=$(date +%s)",
        f'{{ echo "{PULL_BEGAN} ${PULL_BEGAN}"; echo "{PULL_ENDED} ${PULL_ENDED}"; cat "$pull_out"; }} '
        f'> "$pull_out.result"',
        f'aws s3 cp --only-show-errors "$pull_out.result" {shell_quote(result_uri)}',
        'cat "$pull_out.result"; rm -f "$pull_out" "$pull_out.result"',
    ]


def sweep_commands(*, config: dict, workdir: str, run_dir: str, python: str, destination: str,
                   progress_destination: str, partial_destination: str, timeout_s: int,
                   kill_grace_s: int = 30, worker_prefix: str | None = None,
                   container_name: str | None = None) -> list[str]:
    """Run one sweep at most once on the instance, however often this command is sent.

    The sweep's folder is ``<run dir>/sweep-<config hash>`` (``targets.runs``: the layout the
    ssh target uses). The command takes the folder's ``lock`` with ``flock`` and keeps it for
    as long as the worker runs (its children inherit it), so:

    * a finished sweep (``exit_code`` 0 and ``results.jsonl``) is reused: nothing runs again;
    * a running one (another command holds the lock) is re-attached to: this command waits
      on the lock, then reports that sweep's exit status; it never starts a second worker;
    * a dead or failed one (lock free, no exit status 0) is started again from scratch.

    Then it merges the run's finished sweeps into ``<run dir>/results.jsonl`` and copies that
    to ``destination``. The config travels base64-encoded, so no character in it reaches the
    shell; the worker runs under ``timeout`` (exit 124/137 past ``timeout_s``); its progress
    (standard error) goes to ``progress.log``, which a background loop copies to
    ``progress_destination`` every ``PROGRESS_UPLOAD_S`` (the orchestrator follows it), and
    its tail is repeated on standard error so SSM's output has it when the worker fails; the
    records so far go to ``partial_destination`` as they grow (``_worker_lines``).
    ``worker_prefix`` (shell text) replaces the interpreter: ``env GPUCOMPARE_WORKER_RUNTIME=… python``,
    or ``docker run … image python`` for a container runtime (``targets.container.shell_prefix``),
    whose container ``container_name`` is killed when the worker has ended (and checked gone: one
    left fails the sweep, ``container.reap_lines``) or when the script itself is killed, by an
    SSM cancel or time limit (``container.watchdog_line``).
    """
    name = runs.sweep_dir_name(config)
    merged, merged_tmp = shell_quote(run_dir + "/results.jsonl"), shell_quote(run_dir + "/results.jsonl.tmp")
    paths = runs.SweepPaths(posixpath.join(run_dir, name))
    finished = (f'[ -f {shell_quote(paths.exit_code)} ] && [ "$(cat {shell_quote(paths.exit_code)})" = 0 ] '
                f"&& [ -f {shell_quote(paths.results)} ]")
    return [
        *SCRIPT_PREAMBLE,
        f"mkdir -p {shell_quote(paths.sweep_dir)}",
        f"cd {shell_quote(workdir)}",
        f"exec 9>>{shell_quote(paths.lock)}",
        "attached=no",
        "if ! flock -n 9; then",
        f"  echo 'gpucompare: sweep {name} is running under another command: re-attaching' >&2",
        "  flock 9; attached=yes",
        "fi",
        f"if {finished}; then",
        f"  [ \"$attached\" = yes ] || echo 'gpucompare: sweep {name} already finished: reusing it' >&2",
        'elif [ "$attached" = yes ]; then',
        f"  rc=$(cat {shell_quote(paths.exit_code)} 2>/dev/null || echo 99)",
        f"  tail -n {STDERR_TAIL_LINES} {shell_quote(paths.progress)} >&2 || true",
        '  exit "$rc"',
        "else",
        *("  " + line for line in _worker_lines(
            config, paths, python=python, timeout_s=timeout_s, kill_grace_s=kill_grace_s,
            worker_prefix=worker_prefix, progress_destination=progress_destination,
            partial_destination=partial_destination, container_name=container_name)),
        "fi",
        # only finished sweeps count; a retried one replaces its file instead of adding to it
        f"cat {shell_quote(run_dir)}/sweep-*/{runs.RESULTS_FILE} > {merged_tmp}",
        f"mv {merged_tmp} {merged}",
        f"aws s3 cp --only-show-errors {merged} {shell_quote(destination)}",
    ]


def _worker_lines(config: dict, paths: runs.SweepPaths, *, python: str, timeout_s: int,
                  kill_grace_s: int, progress_destination: str, partial_destination: str,
                  worker_prefix: str | None = None, container_name: str | None = None) -> list[str]:
    """Start the sweep from scratch under the lock: config, worker, results, exit status.

    The progress loop also copies the worker's records so far (``partial.jsonl``, a line
    appended per configuration) to ``partial_destination`` whenever the file grew, and once more
    when the worker has ended: after a spot reclaim the replacement skips what they hold
    (``storage.RunStorage.lost_records``). That is at most one more small PUT per
    ``PROGRESS_UPLOAD_S`` while a sweep runs (180 an hour at 20 s: under $0.001 at S3's $0.005
    per 1,000 PUTs), none while no record is added."""
    encoded = base64.b64encode(runs.config_json(config).encode()).decode("ascii")
    upload_progress = (f"aws s3 cp --only-show-errors {shell_quote(paths.progress)} "
                       f"{shell_quote(progress_destination)}")
    partial = shell_quote(paths.partial)
    upload_partial = f"aws s3 cp --only-show-errors {partial} {shell_quote(partial_destination)}"
    # the records so far when the worker added one since the last copy (the file only grows;
    # its size is read before the copy, so a record added during it is copied the next time)
    partial_if_grown = (f'size=$(stat -c %s {partial} 2>/dev/null || echo none); '
                        f'if [ "$size" != none ] && [ "$size" != "$sent" ]; then '
                        f'{upload_partial} && sent=$size || true; fi')
    # a container of an earlier attempt of this sweep (same name) is killed before this one starts
    bound = ([f"docker kill {shell_quote(container_name)} >/dev/null 2>&1 || true",
              container.watchdog_line(container_name)] if container_name else [])
    reap = container.reap_lines(container_name, log_file=paths.progress) if container_name else []
    return [
        *bound,
        f"rm -f {shell_quote(paths.exit_code)} {shell_quote(paths.results)} {shell_quote(paths.partial)}",
        f"echo {shell_quote(encoded)} | base64 -d > {shell_quote(paths.config)}",
        f": > {shell_quote(paths.progress)}",
        # its own stdio (SSM waits for open pipes), not the lock (an uploader left behind must
        # not hold the sweep), and it stops when the script is gone
        f"( sent=none; while kill -0 $$ 2>/dev/null && sleep {PROGRESS_UPLOAD_S}; do "
        f"{upload_progress} || true; {partial_if_grown}; done )"
        " </dev/null >/dev/null 2>&1 9>&- &",
        "uploader=$!",
        "trap 'kill $uploader 2>/dev/null || true' EXIT",
        "rc=0",
        # the worker inherits the lock (while it lives no other command starts one), not the
        # command's pipes (a worker outliving a cancelled command must not hold SSM's output)
        f"timeout --kill-after={int(kill_grace_s)} {int(timeout_s)} {worker_prefix or shell_quote(python)} "
        "-m bench_tasks sweep "
        f"--config {shell_quote(paths.config)} --output {shell_quote(paths.partial)} "
        f"> {shell_quote(paths.stdout)} 2> {shell_quote(paths.progress)} < /dev/null || rc=$?",
        *reap,
        "kill $uploader 2>/dev/null || true",
        f"{upload_progress} || true",
        f"if [ -f {partial} ]; then {upload_partial} || true; fi",
        f'if [ "$rc" -eq 0 ]; then mv {shell_quote(paths.partial)} {shell_quote(paths.results)} || rc=98; fi',
        f'echo "$rc" > {shell_quote(paths.exit_code + ".tmp")}',
        f"mv {shell_quote(paths.exit_code + '.tmp')} {shell_quote(paths.exit_code)}",
        f"tail -n {STDERR_TAIL_LINES} {shell_quote(paths.progress)} >&2",
        'if [ "$rc" -ne 0 ]; then exit "$rc"; fi',
    ]
