#!/usr/bin/env bash
# scripts/gpu_check.sh: prove the GPU path on one host with an NVIDIA driver, Docker and the NVIDIA
# Container Toolkit, before a paid night depends on it (docs/worker.md, "Proving the GPU path").
#
# From one container of the runtime's image on one GPU it: pulls the image (timed), runs the worker's
# `sysinfo` under the runtime's label (the runtime check: bench_tasks/runtime_check.py), measures one
# score configuration with bench_tasks (which also records whether the GPU was ours alone:
# bench_tasks/exclusive.py) and the same network and batch with MXNet's own benchmark_score.py, and
# prints the ratio of the two throughputs. Every container runs with the flags of the targets'
# containers (plugins/gpucompare/targets/container.py: name, label, NVIDIA's ulimits, no network,
# --ipc host; tests/integration/targets/test_gpu_check.py holds the two equal) and is killed on exit.
# Exit status: 0 when every check passed, 1 when one failed, 2 on bad usage.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RUNTIMES_CSV="$REPO/plugins/gpucompare/data/runtimes.csv"
RUNTIME=ngc-24.06
IMAGE=""
GPU=0
NETWORK=resnet-50
BATCH=32
BENCHMARK_SCORE=/opt/mxnet/example/image-classification/benchmark_score.py
DRY_RUN=no

usage() {
  cat <<EOF
usage: scripts/gpu_check.sh [--runtime NAME] [--image REF] [--gpu N] [--network NET] [--batch-size B]
                            [--benchmark-score PATH] [--dry-run] [--help]

Proves the GPU path on this host (NVIDIA driver, Docker, NVIDIA Container Toolkit): pulls the
runtime's image (timed), runs the worker's sysinfo under the runtime's label (runtime check), one
score configuration of bench_tasks (with its GPU exclusivity check) and MXNet's own
benchmark_score.py in the same image on the same GPU, then prints the pull time, the runtime check,
the exclusivity check, both throughputs and their ratio (bench_tasks / benchmark_score).

  --runtime NAME          a container runtime of plugins/gpucompare/data/runtimes.csv (default ngc-24.06)
  --image REF             the image instead of the runtime's (default: the table's image[@digest])
  --gpu N                 the GPU index both measurements use (default 0; CUDA_VISIBLE_DEVICES=N)
  --network NET           a network both know (default resnet-50)
  --batch-size B          the batch size (default 32)
  --benchmark-score PATH  benchmark_score.py inside the image
                          (default /opt/mxnet/example/image-classification/benchmark_score.py)
  --dry-run               print the commands, run nothing
  --help                  this text

Exit status: 0 every check passed, 1 a check failed, 2 bad usage.
EOF
}

fail_usage() { echo "gpu_check: $1" >&2; echo "run scripts/gpu_check.sh --help" >&2; exit 2; }

while [ $# -gt 0 ]; do
  case "$1" in
    --runtime) RUNTIME=${2:?}; shift 2 ;;
    --image) IMAGE=${2:?}; shift 2 ;;
    --gpu) GPU=${2:?}; shift 2 ;;
    --network) NETWORK=${2:?}; shift 2 ;;
    --batch-size) BATCH=${2:?}; shift 2 ;;
    --benchmark-score) BENCHMARK_SCORE=${2:?}; shift 2 ;;
    --dry-run) DRY_RUN=yes; shift ;;
    -h|--help) usage; exit 0 ;;
    *) fail_usage "unknown argument '$1'" ;;
  esac
done

# every value reaches a command line: checked here, not quoted into trouble
[[ "$RUNTIME" =~ ^[a-z0-9][a-z0-9.-]{0,39}$ ]] || fail_usage "--runtime '$RUNTIME': letters, digits, '.' and '-'"
[[ "$GPU" =~ ^[0-9]{1,2}$ ]] || fail_usage "--gpu '$GPU': a GPU index, 0 to 99"
[[ "$BATCH" =~ ^[1-9][0-9]{0,3}$ ]] || fail_usage "--batch-size '$BATCH': 1 to 9999"
case "$NETWORK" in alexnet|vgg-16|inception-bn|inception-v3|resnet-50|resnet-152) ;;
  *) fail_usage "--network '$NETWORK': alexnet, vgg-16, inception-bn, inception-v3, resnet-50 or resnet-152" ;;
esac
[[ "$BENCHMARK_SCORE" =~ ^(/[A-Za-z0-9._-]+)+$ ]] || fail_usage "--benchmark-score '$BENCHMARK_SCORE': an absolute path"

if [ -z "$IMAGE" ]; then
  # name,mxnet,cuda,cudnn,python,cc_min,cc_max,ptx,delivery,image,digest,... (no comma before source)
  row=$(grep -v '^#' "$RUNTIMES_CSV" | awk -F, -v r="$RUNTIME" '$1 == r {print $9 " " $10 " " $11}')
  read -r delivery image digest <<<"${row:-none}" || true
  [ "${delivery:-}" = docker ] || fail_usage "--runtime '$RUNTIME' is not a container runtime of $RUNTIMES_CSV"
  IMAGE=$image${digest:+@$digest}
fi
[[ "$IMAGE" =~ ^[A-Za-z0-9][A-Za-z0-9._/:@-]{0,300}$ ]] || fail_usage "--image '$IMAGE': not an image reference"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
chmod 755 "$WORK"
NAMES=()
cleanup() {
  for name in "${NAMES[@]}"; do docker kill "$name" >/dev/null 2>&1 || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

show() { printf '%q ' "$@"; printf '\n'; }

# docker run of the worker's image with the targets' flags; $1 a step name, then the command
run_in_image() {
  local step=$1; shift
  local name="gpucompare-check-$step-$$"
  NAMES+=("$name")
  local argv=(docker run --rm --init --gpus all --user "$(id -u):$(id -g)"
    --name "$name" --label "gpucompare.container=$name"
    --ulimit memlock=-1 --ulimit stack=67108864 --network none --ipc host
    --volume "$REPO:/opt/gpucompare/code:ro" --volume "$WORK:$WORK" --workdir /opt/gpucompare/code
    --env "CUDA_VISIBLE_DEVICES=$GPU" --env HOME=/tmp --env PYTHONPATH=/opt/gpucompare/code
    --env PYTHONUNBUFFERED=1 --env "GPUCOMPARE_WORKER_RUNTIME=$RUNTIME"
    --env "GPUCOMPARE_WORKER_IMAGE=$PINNED" "$PINNED" "$@")
  if [ "$DRY_RUN" = yes ]; then show "${argv[@]}"; return 0; fi
  "${argv[@]}"
}

json_field() {  # json_field FILE FIELD: one field of the first JSON line (host python3)
  python3 -c 'import json,sys; r=json.loads(open(sys.argv[1]).readline()); v=r.get(sys.argv[2]); print("null" if v is None else v)' "$1" "$2"
}

SCORE_ARGS=(python -m bench_tasks score --networks "$NETWORK" --batch-sizes "$BATCH" --devices gpu:0
  --warmup 5 --batches 50 --repeats 3 --run-id gpu-check --output "$WORK/score.jsonl")
REFERENCE_ARGS=(sh -c "cd \"\$(dirname \"\$1\")\" && exec python \"\$1\" --network \"\$2\" --batch-size \"\$3\"" \
  benchmark_score "$BENCHMARK_SCORE" "$NETWORK" "$BATCH")

if [ "$DRY_RUN" = yes ]; then
  PINNED="$IMAGE"
  echo "# 1. pull (timed)"
  show docker pull "$IMAGE"
  show docker image inspect --format '{{index .RepoDigests 0}}' "$IMAGE"
  echo "# 2. the runtime check: sysinfo under the runtime's label (exit 2 names a mismatch)"
  PINNED="${IMAGE%%:*}@sha256:DIGEST-THE-PULL-PRINTED"
  run_in_image sysinfo python -m bench_tasks sysinfo
  echo "# 3. one score configuration of bench_tasks (records gpu_exclusive)"
  run_in_image score "${SCORE_ARGS[@]}"
  echo "# 4. MXNet's own benchmark_score.py, same image, same GPU"
  run_in_image reference "${REFERENCE_ARGS[@]}"
  exit 0
fi

command -v docker >/dev/null || { echo "gpu_check: docker is not installed" >&2; exit 1; }
command -v nvidia-smi >/dev/null || echo "gpu_check: warning: no nvidia-smi on this host (no NVIDIA driver?)" >&2
failed=0

echo "== pull $IMAGE"
start=$(date +%s.%N)
if docker image inspect "$IMAGE" >/dev/null 2>&1; then pulled="present (not downloaded)"
else docker pull "$IMAGE" >&2; pulled="downloaded"; fi
PULL_S=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$start" "$(date +%s.%N)")
PINNED=$(docker image inspect --format '{{index .RepoDigests 0}}' "$IMAGE")

echo "== sysinfo (runtime check)"
if run_in_image sysinfo python -m bench_tasks sysinfo > "$WORK/sysinfo.json" 2> "$WORK/sysinfo.err"; then
  RUNTIME_CHECK="ok ($RUNTIME matches the build it imports)"
else
  RUNTIME_CHECK="FAILED: $(tail -n 1 "$WORK/sysinfo.err")"; failed=1
fi

echo "== bench_tasks score $NETWORK batch $BATCH on GPU $GPU"
if run_in_image score "${SCORE_ARGS[@]}" 2> "$WORK/score.err" && [ -s "$WORK/score.jsonl" ]; then
  status=$(json_field "$WORK/score.jsonl" status)
  OURS="$(json_field "$WORK/score.jsonl" images_per_sec) images/s"
  EXCLUSIVE="gpu_exclusive=$(json_field "$WORK/score.jsonl" gpu_exclusive) $(json_field "$WORK/score.jsonl" gpu_exclusive_note)"
  [ "$status" = ok ] || { failed=1; OURS="none (status $status: $(json_field "$WORK/score.jsonl" error | head -c 300))"; }
  [[ "$EXCLUSIVE" == gpu_exclusive=True* ]] || failed=1
else
  OURS="none: $(tail -n 1 "$WORK/score.err")"; EXCLUSIVE="not checked (the worker did not run)"; failed=1
fi

echo "== MXNet's benchmark_score.py $NETWORK batch $BATCH on GPU $GPU"
if run_in_image reference "${REFERENCE_ARGS[@]}" > "$WORK/reference.log" 2>&1; then
  # its log: "network: resnet-50", "device: gpu(0)", then "batch size 32, ... image(s)/sec: N"
  # (a benchmark_score.py without --network/--batch-size runs them all: take only ours)
  THEIRS=$(awk -v n="$NETWORK" -v b="$BATCH" '/network: / {net = $NF} /device: gpu/ {g=1} /device: cpu/ {g=0}
    net == n && g && $0 ~ ("batch size +" b ",") && match($0, /images?\/sec: [0-9.]+/) {
      v = substr($0, RSTART, RLENGTH); sub(/.*: /, "", v); print v; exit}' "$WORK/reference.log")
  if [ -n "$THEIRS" ]; then THEIRS="$THEIRS images/s"
  else THEIRS="none: no 'batch size $BATCH' line for the GPU in its log"; failed=1; fi
else
  THEIRS="none: $(tail -n 1 "$WORK/reference.log")"; failed=1
fi

RATIO=$(python3 -c 'import sys
try: print(f"{float(sys.argv[1]) / float(sys.argv[2]):.3f}")
except ValueError: print("n/a")' "${OURS%% *}" "${THEIRS%% *}")
[ "$RATIO" != n/a ] || failed=1

cat <<EOF

gpu_check summary ($(hostname), GPU $GPU)
  image            $PINNED
  pull             $PULL_S s, $pulled
  runtime check    $RUNTIME_CHECK
  exclusivity      $EXCLUSIVE
  bench_tasks      $NETWORK batch $BATCH: $OURS
  benchmark_score  $NETWORK batch $BATCH: $THEIRS
  ratio            $RATIO (bench_tasks / benchmark_score; expected near 1)
EOF
exit $failed
