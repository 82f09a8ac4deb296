"""The on-disk layout of a run, shared by the targets that run the worker themselves.

A run (one Airflow DAG run on one target) owns a directory; each sweep of the run gets a
sub-directory named by the hash of its configuration, so a retried ``run_sweep`` with the
same configuration finds its own earlier attempt (finished: reuse it; still running:
re-attach; failed: start again) and two sweeps of one run (score, then train) never mix::

    <run dir>/sweep-<config hash>/
        sweep.json              the configuration the worker reads
        results.partial.jsonl   the worker's --output while it runs
        results.jsonl           renamed from the partial file once the worker exited with 0
        progress.log            the worker's standard error: its progress lines
        pid                     the process (group) running the worker
        exit_code               the worker's exit status, written last
        stop                    a teardown's request to stop (closes the race with a launch)
        lock                    ec2: held (``flock``) by the command running the worker and
                                its children; a second command for the same sweep waits on it
                                (re-attaches) instead of starting a second worker

``collect`` concatenates the ``results.jsonl`` of every sweep of the run, in the order
the sweeps ran (their remote paths are kept in ``TargetState.extra["result_files"]``).
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpucompare.config import patterns
from gpucompare.targets.base import TargetError, TargetState

CONFIG_FILE = "sweep.json"
PARTIAL_RESULTS_FILE = "results.partial.jsonl"
RESULTS_FILE = "results.jsonl"
PROGRESS_FILE = "progress.log"
PID_FILE = "pid"
EXIT_CODE_FILE = "exit_code"
STOP_FILE = "stop"  # left by teardown: a worker starting after it is stopped at once
LOCK_FILE = "lock"  # flock'ed by the command that runs the worker (ec2)

#: Lines of the worker's standard error quoted in an error message.
STDERR_TAIL_LINES = 40

#: Exit statuses that mean the worker was stopped by a signal or by `timeout`.
TIMEOUT_EXIT_CODES = frozenset({124, 137, 143, -9, -15})

def check_run_id(run_id: Any) -> str:
    """A run id follows the one rule, ``patterns.RUN_ID`` (Airflow's run ids included)."""
    if not isinstance(run_id, str) or not patterns.RUN_ID.fullmatch(run_id):
        raise TargetError(f"run_id: {run_id!r} is not a run id: {patterns.RUN_ID_ALLOWED}")
    return run_id


def run_key(run_id: str) -> str:
    """The run id as a path component (S3 keys, staging, directories): Airflow's ':' and '+' become '-'."""
    return patterns.NOT_PLAIN.sub("-", run_id)


def run_dir_name(run_id: str) -> str:
    """A directory name for the run: the run id itself when it is plain, else a safe form.

    Airflow run ids hold ``:`` and ``+`` (``manual__2026-11-30T01:10:20+00:00``); those are
    replaced and a hash of the original keeps different ids apart.
    """
    check_run_id(run_id)
    if patterns.PLAIN_RUN_ID.fullmatch(run_id):
        return run_id
    safe = patterns.NOT_PLAIN_RUN.sub("_", run_id).strip("._-")[:80] or "run"
    digest = hashlib.sha256(run_id.encode()).hexdigest()[:10]
    return f"{safe}-{digest}"


def with_run_id(sweep_config: dict[str, Any], run_id: str) -> dict[str, Any]:
    """The sweep configuration with the run's id, unless the configuration names its own."""
    if not isinstance(sweep_config, dict):
        raise TargetError(f"sweep_config: expected a mapping, got {type(sweep_config).__name__}")
    config = dict(sweep_config)
    config.setdefault("run_id", run_id)
    return config


def config_json(sweep_config: dict[str, Any]) -> str:
    """The canonical JSON of a configuration: the bytes that are hashed and written."""
    try:
        return json.dumps(sweep_config, sort_keys=True, indent=2, allow_nan=False) + "\n"
    except (TypeError, ValueError) as exc:
        raise TargetError(f"sweep_config: not JSON-serialisable: {exc}") from exc


def sweep_dir_name(sweep_config: dict[str, Any]) -> str:
    """``sweep-<hash>``: the same configuration always maps to the same directory."""
    return "sweep-" + hashlib.sha256(config_json(sweep_config).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class SweepPaths:
    """Where one sweep's files are on the host (the layout of the module docstring)."""

    sweep_dir: str

    def _file(self, name: str) -> str:
        return posixpath.join(self.sweep_dir, name)

    config = property(lambda self: self._file(CONFIG_FILE))
    partial = property(lambda self: self._file(PARTIAL_RESULTS_FILE))
    results = property(lambda self: self._file(RESULTS_FILE))
    progress = property(lambda self: self._file(PROGRESS_FILE))
    pid = property(lambda self: self._file(PID_FILE))
    exit_code = property(lambda self: self._file(EXIT_CODE_FILE))
    lock = property(lambda self: self._file(LOCK_FILE))
    script = property(lambda self: self._file("run.sh"))
    stdout = property(lambda self: self._file("stdout.log"))
    launcher = property(lambda self: self._file("launcher.log"))
    claim = property(lambda self: self._file("claim"))
    container = property(lambda self: self._file("container"))
    stop = property(lambda self: self._file(STOP_FILE))


def remember_results(state: TargetState, results_path: str) -> None:
    """Record a finished sweep's results file in the state (once, in the order of the runs)."""
    files = list(state.extra.get("result_files", []))
    if results_path not in files:
        files.append(results_path)
    state.extra["result_files"] = files
    state.remote_results = results_path


def result_files(state: TargetState, step: str) -> list[str]:
    """The results files ``collect`` must bring back; an error if no sweep finished."""
    files = list(state.extra.get("result_files", []))
    if not files:
        raise TargetError(f"{step}: no finished sweep in this run (run_sweep has not succeeded)")
    return files


class LineTail:
    """The last lines of a stream, for error messages (a failure quotes the stderr tail)."""

    def __init__(self, max_lines: int = STDERR_TAIL_LINES) -> None:
        self._lines: deque[str] = deque(maxlen=max_lines)

    def add(self, line: str) -> None:
        self._lines.append(line)

    def extend(self, lines: Iterable[str]) -> None:
        self._lines.extend(lines)

    def text(self) -> str:
        return "\n".join(self._lines) if self._lines else "(no output)"


class LineSplitter:
    """Turns chunks of bytes into complete text lines, holding back an unfinished last line."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, chunk: bytes) -> list[str]:
        data = self._pending + chunk
        *complete, self._pending = data.split(b"\n")
        return [line.decode("utf-8", errors="replace").rstrip("\r") for line in complete]

    def flush(self) -> list[str]:
        rest, self._pending = self._pending, b""
        return [rest.decode("utf-8", errors="replace")] if rest else []


def tail_text(text: str, lines: int = STDERR_TAIL_LINES) -> str:
    """The last ``lines`` lines of ``text``."""
    tail = LineTail(lines)
    tail.extend(text.splitlines())
    return tail.text()


def concatenate_files(sources: list[Path], destination: Path) -> str:
    """Write the sources one after the other to ``destination`` (atomically); return its path."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    tmp = destination.with_name(f".{destination.name}.partial")
    with open(tmp, "wb") as out:
        for source in sources:
            data = source.read_bytes()
            out.write(data)
            if data and not data.endswith(b"\n"):
                out.write(b"\n")
    tmp.replace(destination)
    return str(destination)
