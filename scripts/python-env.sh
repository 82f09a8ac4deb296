#!/usr/bin/env bash
# The Makefile's environments: find a Python for one side and (re)build its venv before pip runs.
#
#   scripts/python-env.sh find orchestrator|worker        prints the interpreter it would use
#   scripts/python-env.sh venv orchestrator|worker DIR    DIR is a venv of a suitable Python, ready for pip
#
# Which Pythons: the orchestrator (Airflow 3.3) runs on 3.10 to 3.13, the worker (MXNet 1.9.1,
# numpy 1.23.5) on 3.8 to 3.11. $PYTHON (orchestrator) or $WORKER_PYTHON (worker) chooses one;
# else the first that works of python3.11, 3.12, 3.13, 3.10 (3.11 first: the interpreter the tests
# and CI run on; worker: python3.11 … python3.8) on PATH,
# then pyenv's ~/.pyenv/versions/3.x.*. A candidate must run and have venv with ensurepip (Debian
# ships those as python3.x-venv). None found: one line naming what to install, exit 1.
#
# A venv is rebuilt from scratch when its Python no longer runs or is outside the side's range,
# or when its last install did not finish (DIR/.installing is left by an interrupted `make`):
# pip cannot be trusted to repair a half-written site-packages.
set -euo pipefail

usage() { echo "usage: $0 find|venv orchestrator|worker [DIR]" >&2; exit 2; }
[ $# -ge 2 ] || usage
action=$1 side=$2 dir=${3:-}

case $side in
  orchestrator) minors="11 12 13 10"; low=10; high=13; chosen=${PYTHON:-}; knob=PYTHON; why="Airflow 3.3" ;;
  worker) minors="11 10 9 8"; low=8; high=11; chosen=${WORKER_PYTHON:-}; knob=WORKER_PYTHON; why="MXNet 1.9.1" ;;
  *) usage ;;
esac

# 0 when "$1" is a working CPython 3.<minor in range> that can make a venv with pip
suitable() {
  "$1" - "$low" "$high" >/dev/null 2>&1 <<'EOF'
import sys, venv, ensurepip  # noqa: F401  (Debian's python3.x without python3.x-venv lacks ensurepip)
low, high = int(sys.argv[1]), int(sys.argv[2])
sys.exit(0 if sys.version_info[0] == 3 and low <= sys.version_info[1] <= high else 1)
EOF
}

find_python() {
  if [ -n "$chosen" ]; then
    if suitable "$chosen"; then echo "$chosen"; return 0; fi
    echo "$knob=$chosen is not a Python 3.$low to 3.$high with venv and ensurepip (the $side side, $why)" >&2
    return 1
  fi
  local minor candidate
  for minor in $minors; do
    for candidate in "$(command -v "python3.$minor" 2>/dev/null || true)" \
                     "$HOME"/.pyenv/versions/3."$minor".*/bin/python3."$minor"; do
      if [ -n "$candidate" ] && [ -x "$candidate" ] && suitable "$candidate"; then
        echo "$candidate"; return 0
      fi
    done
  done
  echo "no Python 3.$low to 3.$high found for the $side side ($why): install one (e.g. python3.$high" \
       "and python3.$high-venv, or pyenv install 3.$high) or name it with $knob=/path/to/python" >&2
  return 1
}

if [ "$action" = find ]; then find_python; exit; fi
[ "$action" = venv ] && [ -n "$dir" ] || usage

python=$(find_python)
if [ -e "$dir" ]; then
  reason=""
  if [ -e "$dir/.installing" ]; then reason="its last install did not finish"
  elif ! suitable "$dir/bin/python"; then reason="its Python does not run or is not 3.$low to 3.$high"
  fi
  if [ -n "$reason" ]; then
    echo "$dir: $reason; rebuilding it with $python" >&2
    rm -rf "$dir"
  fi
fi
if [ ! -x "$dir/bin/python" ]; then
  "$python" -m venv "$dir"
fi
touch "$dir/.installing"
