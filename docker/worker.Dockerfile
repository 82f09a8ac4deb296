# syntax=docker/dockerfile:1
# The benchmark worker for CUDA 11.2 + cuDNN 8 GPU hosts: `python -m bench_tasks …` is the entrypoint.
#
#   docker build -f docker/worker.Dockerfile -t gpucompare-worker:latest .   # from the repository root
#   docker run --rm --gpus all gpucompare-worker:latest                     # sysinfo: GPUs, CUDA, MXNet
#   docker run --rm --gpus all -v "$PWD/out:/sweep" -w /sweep gpucompare-worker:latest \
#       score --networks resnet-50 --batch-sizes 32 --devices gpu:0 --output /sweep/results.jsonl
#
# The ssh target runs it with `use_docker: true` (see README, "Targets: local and SSH"): the sweep
# directory mounted at /sweep, `--user` of the login user, `--gpus all`, `--init`, `--rm`.
# The host needs an NVIDIA driver for CUDA 11.2 (>= 460.32) and the NVIDIA Container Toolkit.

ARG UV_VERSION=0.13.9
FROM ghcr.io/astral-sh/uv:${UV_VERSION} AS uv

FROM nvidia/cuda:11.2.2-cudnn8-runtime-ubuntu20.04

# Ubuntu 20.04 ships Python 3.8; the worker is written for 3.11 (datetime.UTC and friends), so the
# interpreter is a standalone CPython installed by uv. MXNet's wheel links libquadmath and libgomp.
ARG PYTHON_VERSION=3.11
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates libquadmath0 libgomp1 \
 && rm -rf /var/lib/apt/lists/*

COPY --from=uv /uv /usr/local/bin/uv
ENV UV_PYTHON_INSTALL_DIR=/opt/python \
    UV_NO_CACHE=1 \
    VIRTUAL_ENV=/opt/worker \
    PATH=/opt/worker/bin:$PATH

# mxnet-cu112==1.9.1, numpy==1.23.5 (MXNet 1.9 breaks with numpy >= 1.24), pyyaml: the same
# file the ssh target installs on hosts without docker.
COPY bench_tasks/requirements-gpu.txt /opt/gpucompare/requirements-gpu.txt
RUN uv venv --python "${PYTHON_VERSION}" /opt/worker \
 && uv pip install --python /opt/worker/bin/python -r /opt/gpucompare/requirements-gpu.txt

COPY bench_tasks /opt/gpucompare/bench_tasks

# Any --user may run it: nothing is written outside the mounted sweep directory and /tmp.
ENV PYTHONPATH=/opt/gpucompare \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp \
    MXNET_HOME=/tmp/mxnet
WORKDIR /opt/gpucompare

LABEL org.opencontainers.image.title="gpucompare-worker" \
      org.opencontainers.image.description="MXNet 1.9.1 scoring and training benchmarks (CUDA 11.2, cuDNN 8)"

ENTRYPOINT ["python", "-m", "bench_tasks"]
CMD ["sysinfo"]
