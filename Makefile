# gpucompare: `make demo` runs the main job on the embedded default, `make test` runs every test.
# Both create what they need: the orchestrator environment (.venv) and the worker's (.venv-bench).

# The interpreters the two venvs are built from: scripts/python-env.sh finds them (orchestrator:
# python3.11, 3.12, 3.13, 3.10 in that order, worker: python3.11 … python3.8, on PATH or under ~/.pyenv/versions), or
# name one: `make demo PYTHON=/usr/bin/python3.12 WORKER_PYTHON=python3.10`.
export PYTHON ?=
export WORKER_PYTHON ?=
VENV := .venv
BENCH_VENV := .venv-bench
export AIRFLOW_HOME := $(CURDIR)/.airflow
export AIRFLOW__CORE__DAGS_FOLDER := $(CURDIR)/dags
export AIRFLOW__CORE__PLUGINS_FOLDER := $(CURDIR)/plugins
export AIRFLOW__CORE__LOAD_EXAMPLES := False
export AIRFLOW__CORE__UNIT_TEST_MODE := False
export GPUCOMPARE_BENCH_PYTHON := $(CURDIR)/$(BENCH_VENV)/bin/python
# This Airflow's name in paid machines' tags and S3 keys (required; docs/targets-ec2.md)
export GPUCOMPARE_DEPLOYMENT ?= local-demo
# The checkout's lake and reports, through the settings every command and DAG reads (not a
# different default): `gpucompare …` run by hand from the checkout needs the same two exports.
export GPUCOMPARE_LAKE := $(CURDIR)/lake
export GPUCOMPARE_REPORTS := $(CURDIR)/reports
PYTEST_ARGS ?=
# `make test` runs the test files on this many processes (pytest-xdist, `--dist loadfile`: a file's
# tests stay together and in order; each process has its own Airflow home, servers and scratch
# folders). TEST_WORKERS=0 runs them in this process, one after the other. The files marked slow
# are handed out first (tests/support/slow_first.py), so no process is left alone with them at the end.
# Three on two cores: most of the suite's time is spent waiting on the processes and servers it starts
# (the whole suite passed at 3 under a load of 7-10 from other work on the same machine).
TEST_WORKERS ?= 3
TEST_ORDER := --dist loadfile --no-loadscope-reorder -p tests.support.slow_first
# The quick tier (`make test-fast`, under 2 minutes): the unit tests, tests/unit/ (see tests/README.md).
FAST_TESTS := tests/unit

.PHONY: demo test test-fast lint envs check-constraints system-deps bench-fidelity bench-sweep bench-reports clean

envs: $(VENV)/.installed $(BENCH_VENV)/.installed

# python-env.sh makes the venv (or rebuilds one whose Python is gone or whose install was cut
# short: it leaves .installing until pip has finished).
$(VENV)/.installed: requirements.txt constraints.txt pyproject.toml
	@scripts/python-env.sh venv orchestrator $(VENV)
	$(VENV)/bin/python -m pip install -q --disable-pip-version-check -r requirements.txt -c constraints.txt
	$(VENV)/bin/python -m pip install -q --disable-pip-version-check --no-deps -e .
	rm -f $(VENV)/.installing
	touch $@

$(BENCH_VENV)/.installed: bench_tasks/requirements-cpu.txt
	@scripts/python-env.sh venv worker $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install -q --disable-pip-version-check -r bench_tasks/requirements-cpu.txt
	rm -f $(BENCH_VENV)/.installing
	touch $@

# CI: requirements.txt + constraints.txt resolve on every Python the orchestrator supports (3.10.0 …)
check-constraints: $(VENV)/.installed
	$(VENV)/bin/python scripts/check_constraints.py

# OpenSSH server, Chromium, PostgreSQL and Redis for the tests with real parts.
system-deps:
	scripts/install-system-deps.sh

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .

test: envs system-deps lint
	$(VENV)/bin/python -m pytest -n $(TEST_WORKERS) $(TEST_ORDER) --durations=30 $(PYTEST_ARGS)

test-fast: envs
	$(VENV)/bin/python -m pytest $(FAST_TESTS) $(PYTEST_ARGS)

demo: envs
	$(VENV)/bin/python scripts/demo.py

bench-reports: envs
	$(VENV)/bin/python scripts/bench_reports.py

bench-fidelity: envs
	$(BENCH_VENV)/bin/python scripts/bench_fidelity.py

bench-sweep: envs
	$(BENCH_VENV)/bin/python scripts/bench_sweep_efficiency.py

clean:
	rm -rf $(VENV) $(BENCH_VENV) .airflow lake reports
