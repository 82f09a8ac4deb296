# syntax=docker/dockerfile:1
# gpucompare's Airflow image: Airflow 3.3.2 on Python 3.11 with the project's pinned packages, its
# DAGs, plugins and SQL, and the CPU worker environment the local target runs.
#
#   docker build -f docker/airflow.Dockerfile -t gpucompare-airflow:latest .   # from the repository root
#
# docker/compose.yaml builds it for every Airflow service. The layout under /opt/airflow is the
# repository's (dags/, plugins/, sql/, bench_tasks/), installed editable as `make envs` does, so
# the package's entry points (UI plugin, [gpucompare] config, the gpucompare command) are
# registered and its resources (sql/, the fleet file, the worker) resolve to these folders.

FROM apache/airflow:3.3.2-python3.11

USER root
# libgomp1, libquadmath0: MXNet's CPU wheel (local target). openssh-client: ssh-keyscan, to read
# a rented host's key once when setting up its connection.
RUN apt-get update \
 && apt-get install -y --no-install-recommends libgomp1 libquadmath0 openssh-client \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/*
# Mount points of docker/compose.yaml, owned by the airflow user so that named volumes mounted
# there start with that owner (an absent mount point would be created for root).
RUN mkdir -p /opt/gpucompare/lake /opt/gpucompare/reports /opt/gpucompare/work /opt/airflow/auth \
 && chown -R airflow:0 /opt/gpucompare /opt/airflow/auth \
 && chmod -R g+rwX /opt/gpucompare /opt/airflow/auth
USER airflow

# The orchestrator's packages, pinned as in .venv; the test tools at the end of requirements.txt
# (from "# test tools" on) stay out of the image.
COPY --chown=airflow:0 requirements.txt constraints.txt /tmp/gpucompare/
RUN sed '/^# test tools/,$d' /tmp/gpucompare/requirements.txt > /tmp/gpucompare/requirements-runtime.txt \
 && pip install --no-cache-dir -r /tmp/gpucompare/requirements-runtime.txt -c /tmp/gpucompare/constraints.txt

# The worker environment of the local target (MXNet on the CPU), apart from Airflow's: MXNet 1.9
# needs numpy < 1.24, pyarrow needs numpy >= 2.
COPY --chown=airflow:0 bench_tasks/requirements-cpu.txt /tmp/gpucompare/requirements-cpu.txt
RUN python -m venv /opt/airflow/.venv-bench \
 && /opt/airflow/.venv-bench/bin/pip install --no-cache-dir --disable-pip-version-check \
        -r /tmp/gpucompare/requirements-cpu.txt

COPY --chown=airflow:0 pyproject.toml /opt/airflow/pyproject.toml
COPY --chown=airflow:0 bench_tasks /opt/airflow/bench_tasks
COPY --chown=airflow:0 plugins /opt/airflow/plugins
COPY --chown=airflow:0 sql /opt/airflow/sql
COPY --chown=airflow:0 dags /opt/airflow/dags
COPY --chown=airflow:0 README.md /opt/airflow/README.md
RUN pip install --no-cache-dir --no-deps -e /opt/airflow

ENV PYTHONPATH=/opt/airflow:/opt/airflow/plugins \
    GPUCOMPARE_BENCH_PYTHON=/opt/airflow/.venv-bench/bin/python \
    AIRFLOW__CORE__DAGS_FOLDER=/opt/airflow/dags \
    AIRFLOW__CORE__PLUGINS_FOLDER=/opt/airflow/plugins \
    AIRFLOW__CORE__LOAD_EXAMPLES=False

LABEL org.opencontainers.image.title="gpucompare-airflow" \
      org.opencontainers.image.description="Airflow 3.3.2 with the gpucompare DAGs, plugins and worker"
