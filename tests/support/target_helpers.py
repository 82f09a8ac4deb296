"""Helpers shared by the target tests: tiny sweeps, a recording line sink, process checks."""

from __future__ import annotations

import json
import os
import shlex
import threading
import time
from pathlib import Path

from bench_tasks.record import validate_record
from tests.support.proc_helpers import children_of, command_line, is_alive, process_ids

TINY_SWEEP = {
    "warmup": 1, "batches": 1, "repeats": 1,
    "matrix": [{"modes": ["score"], "networks": ["alexnet"], "batch_sizes": [1], "devices": ["cpu"]}],
}
#: Runs far longer than any time limit below (thousands of timed batches).
ENDLESS_SWEEP = {
    "warmup": 1, "batches": 100000, "repeats": 1,
    "matrix": [{"modes": ["score"], "networks": ["alexnet"], "batch_sizes": [1], "devices": ["cpu"]}],
}


_HELD_WORKER = """\
#!/bin/sh
# The real worker interpreter, except that `-m bench_tasks {command}` first waits: {why}
if [ "$1" = -m ] && [ "$2" = bench_tasks ] && [ "$3" = {command} ]; then
  {wait}
fi
exec {python} "$@"
"""


def held_worker(path: Path, python: Path, *, wait: str, why: str, command: str = "sweep") -> Path:
    """Write ``path``: an interpreter that runs ``python``, but runs the shell command ``wait``
    before a sweep (``python -m bench_tasks sweep``; ``command``: another subcommand, such as the
    deploy's ``sysinfo`` check); every other use is the real interpreter at once. The held
    command's pid is the worker's own (``exec``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_HELD_WORKER.format(wait=wait, why=why, python=shlex.quote(str(python)),
                                        command=shlex.quote(command)))
    path.chmod(0o755)
    return path


def gated_worker(path: Path, python: Path, gate: Path) -> Path:
    """A worker whose sweep waits (up to 600 s) until ``gate`` exists: a stand-in for a sweep
    that is certainly still running when the test does something to it (drops the
    connection); however fast the tiny sweep, it cannot finish before the test creates ``gate``."""
    quoted = shlex.quote(str(gate))
    return held_worker(path, python, why=f"until {gate.name} exists", wait=(
        f"waited=0; while [ ! -e {quoted} ] && [ $waited -lt 6000 ]; "
        "do sleep 0.1; waited=$((waited + 1)); done"))


class Sink:
    """A line sink that remembers each line and when it arrived."""

    def __init__(self) -> None:
        self.lines: list[tuple[float, str]] = []

    def __call__(self, line: str) -> None:
        self.lines.append((time.monotonic(), line))

    def texts(self) -> list[str]:
        return [line for _, line in self.lines]

    def first(self, needle: str) -> float:
        return next(at for at, line in self.lines if needle in line)


def worker_processes(marker: str) -> list[int]:
    """Live processes whose command line contains ``marker`` (a sweep directory)."""
    return [pid for pid in process_ids()
            if pid != os.getpid() and is_alive(pid) and marker in command_line(pid)]


def processes_end(marker: str, within_s: float = 15) -> None:
    """Fail unless every process naming ``marker`` has ended within ``within_s``.

    A sweep's exit status is written by its ``run.sh`` (whose command line names the sweep
    directory) just before that shell exits, so "the exit status exists" does not yet mean
    "no process is left": on a loaded machine the shell can still be there for a moment. The
    workers these tests stop would otherwise live for minutes, so a short bound still fails
    when a stop missed them."""
    deadline = time.monotonic() + within_s
    while (left := worker_processes(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"still running {within_s}s after the stop: " + "; ".join(
        f"{pid}: {command_line(pid) or '(gone)'}" for pid in left)


class ProcessWatcher(threading.Thread):
    """Remembers every process of a sweep (the worker and its runners) while it runs.

    The runners' command lines do not name the sweep, so they are found as descendants.
    """

    def __init__(self, marker: str) -> None:
        super().__init__(daemon=True)
        self.marker = marker
        self.seen: set[int] = set()
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            todo = worker_processes(self.marker) + list(self.seen)
            visited: set[int] = set()
            while todo:
                pid = todo.pop()
                if pid not in visited:
                    visited.add(pid)
                    self.seen.add(pid)
                    todo.extend(children_of(pid))
            time.sleep(0.2)

    def stop(self) -> set[int]:
        self._done.set()
        self.join(timeout=10)
        return self.seen


def stand_in_ssh_target(sshd, tmp_path: Path, script: str, *, poll_interval_s: float):
    """An ssh target on the test's sshd (``fixtures_sshd``) whose worker interpreter is ``script``
    (a shell stand-in, formatted with ``box``: a folder the test and the stand-in share, e.g. for a
    release file). Returns the target and the box."""
    from gpucompare.targets.base import TargetSpec
    from gpucompare.targets.ssh.target import SSHTarget

    box = tmp_path / "box"
    box.mkdir()
    python = tmp_path / "fake-python"
    python.write_text(script.format(box=box))
    python.chmod(0o755)
    spec = TargetSpec(name="rented-box", kind="ssh", provider="leadergpu", instance_type="cpu-test",
                      options={"ssh_conn_id": sshd.conn_id, "remote_dir": str(tmp_path / "remote"),
                               "python": str(python), "poll_interval_s": poll_interval_s, "kill_grace_s": 1})
    return SSHTarget(spec, line_sink=lambda _: None), box


def read_records(path: str) -> list[dict]:
    return [validate_record(json.loads(line)) for line in Path(path).read_text().splitlines() if line]


def wait_for(predicate, timeout_s: float, what: str) -> None:
    """Poll ``predicate`` until it is true; fail the test after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.1)


class Background(threading.Thread):
    """Runs a call in a thread and keeps its result or exception for the test to check."""

    def __init__(self, call) -> None:
        super().__init__(daemon=True)
        self._call = call
        self.result = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self._call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            self.error = exc

    def finish(self, timeout_s: float):
        self.join(timeout=timeout_s)
        assert not self.is_alive(), f"still running after {timeout_s}s"
        return self
