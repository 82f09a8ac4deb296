"""The sweep's side of one measuring process (``bench_tasks.runner``): start, talk, time out, kill.

A ``RunnerProcess`` starts ``python -m bench_tasks _runner`` in its own session (so killing its
process group ends anything MXNet started), waits for its ``ready`` line (its pid and MXNet's
build details), sends one configuration (JSON) per line and reads one result line back. Every
read has a deadline: past it ``RunnerTimeout`` is raised and the caller kills the process; a
process that ends without answering raises ``RunnerGone`` with how it ended (exit code or
signal) and the tail of its standard error, which ``bench_tasks.errors`` classifies.

Which configurations share a process, and when a process is replaced, is the sweep's policy
(``bench_tasks.sweep``); this module only runs one process. Standard library only.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_tasks.configs import Config
from bench_tasks.gpumemory import ProcessMemory

STDERR_TAIL_BYTES = 16_384
_PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent)


class RunnerGone(Exception):
    """The runner process ended without answering; ``text`` is what it left on stderr."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


class RunnerTimeout(Exception):
    pass


class RunnerProcess:
    """One ``python -m bench_tasks _runner`` process and its line protocol."""

    def __init__(self, python: str = sys.executable) -> None:
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_PARENT, env.get("PYTHONPATH")) if p)
        env["PYTHONUNBUFFERED"] = "1"
        self.process = subprocess.Popen(
            [python, "-m", "bench_tasks", "_runner"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
            env=env, start_new_session=True,
        )
        self._buffer = b""
        self.measured = 0  # configurations this process has run
        self._selector = selectors.DefaultSelector()
        assert self.process.stdout is not None
        os.set_blocking(self.process.stdout.fileno(), False)
        self._selector.register(self.process.stdout, selectors.EVENT_READ)
        self.hello: dict[str, Any] | None = None
        self.memory: ProcessMemory | None = None  # its devices' free memory (GPU checks)
        self.fresh_reason = "series_start"  # why it was started (the record of its first config)
        self.spawned_at = time.monotonic()
        self.start_s: float | None = None  # spawn → ready: interpreter, mxnet import, build details

    def _read_line(self, deadline: float) -> dict[str, Any]:
        assert self.process.stdout is not None
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RunnerTimeout()
            if not self._selector.select(timeout=min(remaining, 1.0)):
                continue
            chunk = self.process.stdout.read(65536)
            if not chunk:  # EOF: the process is gone
                self.process.wait()
                raise RunnerGone(self._death_text())
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def _death_text(self) -> str:
        code = self.process.returncode
        if code is not None and code < 0:
            how = f"measuring process killed by signal {signal.Signals(-code).name}"
        else:
            how = f"measuring process exited with code {code}"
        return f"{how}\n{self.stderr_tail()}"

    def stderr_tail(self) -> str:
        self._stderr.flush()
        size = self._stderr.seek(0, os.SEEK_END)
        self._stderr.seek(max(0, size - STDERR_TAIL_BYTES))
        return self._stderr.read().decode("utf-8", errors="replace")

    def wait_ready(self, deadline: float) -> dict[str, Any]:
        """The runner's first line: its pid and MXNet's details (version, features, GPUs)."""
        if self.hello is None:
            event = self._read_line(deadline)
            if event.get("event") != "ready":
                raise RunnerGone(f"unexpected first line from the measuring process: {event!r}")
            self.hello = event
            self.start_s = time.monotonic() - self.spawned_at
        return self.hello

    def run(self, config: Config, deadline: float) -> dict[str, Any]:
        self.wait_ready(deadline)
        assert self.process.stdin is not None
        try:
            self.process.stdin.write((json.dumps(config.to_json()) + "\n").encode())
            self.process.stdin.flush()
        except BrokenPipeError:
            self.process.wait()
            raise RunnerGone(self._death_text()) from None
        self.measured += 1
        return self._read_line(deadline)

    def kill(self) -> None:
        """End the runner and anything it started (its own process group)."""
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait()
        self.close()

    def stop(self, grace_s: float = 10.0) -> None:
        """Let the runner finish (end of its input), or kill it after ``grace_s``."""
        if self.process.poll() is None and self.process.stdin is not None:
            try:
                self.process.stdin.close()
                self.process.wait(timeout=grace_s)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                pass
        self.kill()

    def close(self) -> None:
        self._selector.close()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None and not stream.closed:
                try:
                    stream.close()
                except BrokenPipeError:
                    pass
        self._stderr.close()

