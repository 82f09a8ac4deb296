"""The ``local`` target: the worker in a subprocess on this machine (the embedded default).

It crosses the same boundary as the remote targets, the command
``python -m bench_tasks sweep --config … --output …``, run with the worker environment's
interpreter (option ``python``, else the ``bench_python`` setting, ``GPUCOMPARE_BENCH_PYTHON``,
else ``./.venv-bench/bin/python`` in the current directory) from the directory that holds
``bench_tasks``. A missing or broken worker environment is a :class:`WorkerEnvironmentError`:
permanent (no retry can create it), naming the setting and the commands that create one for the
install at hand (a checkout: ``make envs``; a wheel: a venv from the shipped requirements). The
worker's progress lines (its standard error) go to the line sink as they are printed. The
worker runs in its own process group, so the time limit and ``teardown`` stop it with every
process it started (the sweep isolates each configuration in a process of its own).

Options (``TargetSpec.options``): ``python`` (absolute path of the worker interpreter),
``work_dir`` (absolute path; runs go to ``<work_dir>/<run id>/``, default
``$GPUCOMPARE_LOCAL_WORK_DIR`` or ``<tmp>/gpucompare-local``), ``kill_grace_s`` (seconds
between SIGTERM and SIGKILL, default 10), ``remove_run_dir`` (teardown deletes the run's
directory, default false).
"""

from __future__ import annotations

import functools
import os
import selectors
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench_tasks.constants import WORKER_RUNTIME_ENV
from gpucompare import settings
from gpucompare.config import models, runtime_choice
from gpucompare.config.validation import ValidationError, validate
from gpucompare.targets import runs
from gpucompare.targets.base import LineSink, Target, TargetConfigError, TargetError, TargetSpec, TargetState
from gpucompare.targets.bundle import unpacked_bundle
from gpucompare.targets.phases import timed_phase
from gpucompare.targets.polling import poll_until

DEPLOY_CHECK_TIMEOUT_S = 120
_READ_CHUNK = 65536


def default_bench_python() -> Path:
    """The worker interpreter: the ``bench_python`` setting (``$GPUCOMPARE_BENCH_PYTHON``)."""
    return settings.bench_python()


class WorkerEnvironmentError(TargetConfigError):
    """The local target's worker interpreter is missing or cannot import the worker and MXNet:
    permanent (a retry meets the same environment); the message says how to make one."""


def checkout_root() -> Path | None:
    """The checkout this library runs from (an editable install), or None for an installed wheel."""
    import gpucompare

    root = Path(gpucompare.__file__).resolve().parents[2]
    checkout = (root / "Makefile").is_file() and (root / "bench_tasks" / "__init__.py").is_file()
    return root if checkout else None


def worker_environment_advice() -> str:
    """How to create the worker environment and point the ``bench_python`` setting at it."""
    from gpucompare import resources

    setting = ("the setting bench_python (GPUCOMPARE_BENCH_PYTHON or [gpucompare] bench_python; "
               "or the target option 'python')")
    root = checkout_root()
    if root is not None:
        return (f"create it from the checkout with `make -C {root} envs` and set {setting} to "
                f"{root / '.venv-bench' / 'bin' / 'python'}")
    requirements = resources.worker_dir() / "requirements-cpu.txt"
    return ("create one apart from Airflow's (MXNet 1.9.1 needs numpy < 1.24): `python3.11 -m venv "
            f"/opt/gpucompare-worker && /opt/gpucompare-worker/bin/pip install -r {requirements}`, then set "
            f"{setting} to /opt/gpucompare-worker/bin/python (docs/install.md, 'Worker environment')")


def default_work_dir() -> Path:
    """The local target's run folders: the ``local_work_dir`` setting (``$GPUCOMPARE_LOCAL_WORK_DIR``)."""
    return settings.local_work_dir()


@dataclass(frozen=True)
class LocalOptions:
    python: Path
    work_dir: Path
    kill_grace_s: float
    remove_run_dir: bool

    @classmethod
    def parse(cls, options: dict[str, Any]) -> LocalOptions:
        """Check the options of a local target (``config.models.LocalOptions``); an error names
        the option, the value and what is allowed."""
        try:
            checked = validate(models.LocalOptions, options, prefix="options")
        except ValidationError as exc:
            raise TargetConfigError(f"local target: {exc}") from None
        return cls(
            python=Path(checked.python) if checked.python else default_bench_python(),
            work_dir=Path(checked.work_dir) if checked.work_dir else default_work_dir(),
            kill_grace_s=checked.kill_grace_s,
            remove_run_dir=checked.remove_run_dir,
        )


class LocalTarget(Target):
    """Runs the worker as a subprocess of this process, with the worker environment."""

    kind = "local"

    def __init__(self, spec: TargetSpec, *, line_sink: LineSink | None = None) -> None:
        super().__init__(spec, line_sink=line_sink)
        if spec.kind != self.kind:
            raise TargetError(f"kind: expected {self.kind!r} for LocalTarget, got {spec.kind!r}")
        self.options = LocalOptions.parse(spec.options)

    @functools.cached_property
    def code_root(self) -> Path:
        """The folder holding only ``bench_tasks``: the worker's unpacked bundle."""
        return unpacked_bundle()

    # -- the interface -----------------------------------------------------------------
    @timed_phase("provision")
    def prepare(self, run_id: str) -> TargetState:
        run_dir = self.options.work_dir / runs.run_dir_name(run_id)
        run_dir.mkdir(parents=True, exist_ok=True)
        return TargetState(spec=self.spec.to_dict(), run_id=run_id, resource_id=None,
                           market=self.spec.market, workdir=str(run_dir))

    @timed_phase("deploy")
    def deploy(self, state: TargetState) -> TargetState:
        """Check that the worker interpreter runs and imports the worker and MXNet."""
        python = self.options.python
        if not python.exists():
            raise WorkerEnvironmentError(f"deploy: worker interpreter {python} does not exist; "
                                         + worker_environment_advice())
        check = "import bench_tasks, mxnet; print(mxnet.__version__)"
        try:
            done = subprocess.run([str(python), "-c", check], cwd=self.code_root, env=self._env(),
                                  capture_output=True, text=True, timeout=DEPLOY_CHECK_TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            raise TargetError(
                f"deploy: {python} took over {DEPLOY_CHECK_TIMEOUT_S}s to import mxnet") from exc
        if done.returncode != 0:  # not a worker environment: retrying meets the same one
            raise WorkerEnvironmentError(f"deploy: {python} cannot import the worker and mxnet "
                                         f"(exit {done.returncode}); {worker_environment_advice()}:\n"
                                         f"{runs.tail_text(done.stderr)}")
        version = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "?"
        state.extra["python"] = str(python)
        state.extra["mxnet_version"] = version
        self.line_sink(f"[local] worker interpreter {python}, mxnet {version}")
        return state

    @timed_phase("sweep")
    def run_sweep(self, state: TargetState, sweep_config: dict[str, Any], *,
                  timeout_s: float) -> TargetState:
        config = runs.with_run_id(sweep_config, state.run_id)
        sweep_dir = self._run_dir(state, "run_sweep") / runs.sweep_dir_name(config)
        results = sweep_dir / runs.RESULTS_FILE
        if _finished_ok(sweep_dir):
            self.line_sink(f"[local] sweep {sweep_dir.name} already finished; reusing its results")
            runs.remember_results(state, str(results))
            return state
        self._stop_sweep(sweep_dir)  # a previous attempt that is still running (a killed task)
        _reset_sweep_dir(sweep_dir)
        (sweep_dir / runs.CONFIG_FILE).write_text(runs.config_json(config))
        exit_code = self._run_worker(sweep_dir, timeout_s)
        (sweep_dir / runs.EXIT_CODE_FILE).write_text(f"{exit_code}\n")
        if exit_code != 0:
            raise TargetError(f"run_sweep: the worker exited with {exit_code}; its stderr ended with:\n"
                              f"{_tail_of_file(sweep_dir / runs.PROGRESS_FILE)}")
        partial = sweep_dir / runs.PARTIAL_RESULTS_FILE
        if not partial.is_file():
            raise TargetError(f"run_sweep: the worker exited with 0 but wrote no results ({partial})")
        partial.replace(results)
        runs.remember_results(state, str(results))
        return state

    def collect(self, state: TargetState, local_path: str) -> str:
        run_dir = self._run_dir(state, "collect")
        sources = [Path(p) for p in runs.result_files(state, "collect")]
        outside = [str(p) for p in sources if p.parent.parent != run_dir]
        if outside:
            raise TargetError(f"collect: results file(s) outside the run directory {run_dir}: "
                              f"{', '.join(outside)}")
        missing = [str(p) for p in sources if not p.is_file()]
        if missing:
            raise TargetError(f"collect: results file(s) missing: {', '.join(missing)}")
        return runs.concatenate_files(sources, Path(local_path))

    @timed_phase("teardown")
    def teardown(self, state: TargetState | None) -> None:
        """Stop any sweep of the run still running; delete the run directory if asked to."""
        if state is None or not state.workdir:
            return
        run_dir = self._run_dir(state, "teardown")
        if not run_dir.is_dir():
            return
        for sweep_dir in sorted(run_dir.glob("sweep-*")):
            if not (sweep_dir / runs.EXIT_CODE_FILE).exists():
                (sweep_dir / runs.STOP_FILE).touch()
            self._stop_sweep(sweep_dir)
        if self.options.remove_run_dir:
            shutil.rmtree(run_dir, ignore_errors=True)

    def _run_dir(self, state: TargetState, step: str) -> Path:
        """The state's run directory, if it is one ``prepare`` makes: ``<work_dir>/<name>``.

        The state travels through XCom; this keeps any other directory out of rmtree and kill.
        """
        if not state.workdir:
            raise TargetError(f"{step}: the state has no run directory (prepare did not run)")
        run_dir = Path(state.workdir)
        if run_dir.parent != self.options.work_dir or run_dir.name in {"", ".", ".."}:
            raise TargetError(f"{step}: the state's run directory {run_dir} is not in the target's "
                              f"work_dir {self.options.work_dir}")
        return run_dir

    # -- running the worker ------------------------------------------------------------
    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        # The worker runs from this package's bench_tasks (unpacked alone, see code_root),
        # whatever the worker environment has installed.
        env["PYTHONPATH"] = str(self.code_root)
        env["PYTHONUNBUFFERED"] = "1"
        # the runtime goes into every record (worker_runtime); auto here is cpu or pip-cu112
        env[WORKER_RUNTIME_ENV] = runtime_choice.choose(self.spec.to_dict(), self.spec.worker_runtime)
        return env

    def worker_command(self, sweep_dir: Path) -> list[str]:
        return [str(self.options.python), "-m", "bench_tasks", "sweep",
                "--config", str(sweep_dir / runs.CONFIG_FILE),
                "--output", str(sweep_dir / runs.PARTIAL_RESULTS_FILE)]

    def _run_worker(self, sweep_dir: Path, timeout_s: float) -> int:
        """Run the worker, stream its lines, enforce the time limit; return its exit status."""
        if not timeout_s or timeout_s <= 0:
            raise TargetError(f"run_sweep: timeout_s must be > 0, got {timeout_s!r}")
        command = self.worker_command(sweep_dir)
        self.line_sink(f"[local] running {' '.join(command)} (time limit {timeout_s:.0f}s)")
        with open(sweep_dir / runs.PROGRESS_FILE, "wb") as progress, subprocess.Popen(
            command, cwd=self.code_root, env=self._env(), stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        ) as process:
            (sweep_dir / runs.PID_FILE).write_text(f"{process.pid}\n")
            if (sweep_dir / runs.STOP_FILE).exists():  # a teardown came before the pid file
                _kill_group(process.pid, self.options.kill_grace_s, process)
            deadline = time.monotonic() + timeout_s
            try:
                timed_out = not self._stream(process, progress, deadline)
            except BaseException:
                # The task itself is being stopped (SIGTERM from Airflow, a failed sink...):
                # the worker is in a session of its own and must not outlive it.
                _kill_group(process.pid, self.options.kill_grace_s, process)
                raise
            if timed_out:
                self.line_sink(f"[local] time limit of {timeout_s:.0f}s reached; stopping the worker")
                _kill_group(process.pid, self.options.kill_grace_s, process)
            exit_code = process.wait()
        (sweep_dir / runs.PID_FILE).unlink(missing_ok=True)
        if timed_out:
            raise TargetError(f"run_sweep: time limit of {timeout_s:.0f}s exceeded; the worker was "
                              f"killed. Its stderr ended with:\n"
                              f"{_tail_of_file(sweep_dir / runs.PROGRESS_FILE)}")
        return exit_code

    def _stream(self, process: subprocess.Popen, progress: Any, deadline: float) -> bool:
        """Pass the worker's output lines on until it closes them; False if time ran out."""
        splitter = runs.LineSplitter()
        assert process.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                if not selector.select(timeout=min(remaining, 1.0)):
                    continue
                chunk = os.read(process.stdout.fileno(), _READ_CHUNK)
                if not chunk:
                    break
                progress.write(chunk)
                progress.flush()
                for line in splitter.feed(chunk):
                    self.line_sink(line)
        for line in splitter.flush():
            self.line_sink(line)
        # Output closed: the worker is exiting; give it the rest of the time to do so.
        try:
            process.wait(timeout=max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            return False
        return True

    def _stop_sweep(self, sweep_dir: Path) -> None:
        """Kill the process group named in the sweep's pid file, if it is still that worker."""
        pid_file = sweep_dir / runs.PID_FILE
        try:
            pid = int(pid_file.read_text().strip())
        except (OSError, ValueError):
            return
        if _is_worker_of(pid, sweep_dir):
            self.line_sink(f"[local] stopping the worker still running for {sweep_dir.name} (pid {pid})")
            _kill_group(pid, self.options.kill_grace_s)
        pid_file.unlink(missing_ok=True)


def _finished_ok(sweep_dir: Path) -> bool:
    try:
        exit_code = (sweep_dir / runs.EXIT_CODE_FILE).read_text().strip()
    except OSError:
        return False
    return exit_code == "0" and (sweep_dir / runs.RESULTS_FILE).is_file()


def _reset_sweep_dir(sweep_dir: Path) -> None:
    sweep_dir.mkdir(parents=True, exist_ok=True)
    for name in (runs.RESULTS_FILE, runs.PARTIAL_RESULTS_FILE, runs.EXIT_CODE_FILE,
                 runs.PROGRESS_FILE, runs.PID_FILE, runs.STOP_FILE):
        (sweep_dir / name).unlink(missing_ok=True)


def _is_worker_of(pid: int, sweep_dir: Path) -> bool:
    """True if ``pid`` is alive and its command line names this sweep (not a recycled pid)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    return str(sweep_dir / runs.CONFIG_FILE) in cmdline


def _kill_group(pgid: int, grace_s: float, process: subprocess.Popen | None = None) -> None:
    """SIGTERM the process group, then SIGKILL it if it is still there after ``grace_s``."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return

    def gone() -> bool | None:
        if process is not None:
            process.poll()  # reap our own child: a zombie leader would keep its group "alive"
        return None if _group_alive(pgid) else True

    if poll_until(gone, every_s=0.1, deadline=time.monotonic() + grace_s):
        return
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _tail_of_file(path: Path) -> str:
    try:
        return runs.tail_text(path.read_text(errors="replace"))
    except OSError:
        return "(no output)"
