#!/usr/bin/env bash
# Executes notebooks/policy_comparison.ipynb headless against an oobleck-sim
# binary; fails when a cell fails (the notebook asserts its own checks).
# Nothing is written into the repository: the executed notebook and the
# simulator's outputs go to a temporary folder, removed afterwards unless
# OOBLECK_KEEP_OUTPUT=1.
#
# Usage: tests/notebooks/run-notebook.sh path/to/oobleck-sim [notebook.ipynb]
set -euo pipefail

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 path/to/oobleck-sim [notebook.ipynb]" >&2
  exit 2
fi
root="$(cd "$(dirname "$0")/../.." && pwd)"
sim="$1"
notebook="${2:-$root/notebooks/policy_comparison.ipynb}"

if [ ! -x "$sim" ]; then
  echo "run-notebook: $sim is not an executable oobleck-sim (build it with tools/setup.sh)" >&2
  exit 2
fi
if [ ! -f "$notebook" ]; then
  echo "run-notebook: no notebook at $notebook" >&2
  exit 2
fi
if ! command -v jupyter >/dev/null 2>&1 || ! jupyter nbconvert --version >/dev/null 2>&1; then
  echo "run-notebook: jupyter nbconvert is not installed; run tools/setup.sh (it installs jupyter-nbconvert, python3-ipykernel and python3-matplotlib)" >&2
  exit 1
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/oobleck-notebook.XXXXXX")"
if [ "${OOBLECK_KEEP_OUTPUT:-0}" = 1 ]; then
  echo "run-notebook: outputs kept in $work" >&2
else
  trap 'rm -rf "$work"' EXIT
fi

# Absolute paths: the kernel runs in the notebook's folder.
OOBLECK_SIM="$(cd "$(dirname "$sim")" && pwd)/$(basename "$sim")"
export OOBLECK_SIM
export OOBLECK_OUTPUT_DIR="$work/outputs"
export MPLCONFIGDIR="$work/matplotlib"   # matplotlib's cache, out of $HOME
export JUPYTER_RUNTIME_DIR="$work/runtime"
export PYDEVD_DISABLE_FILE_VALIDATION=1  # quiets a debugger warning at kernel start

started=$SECONDS
if ! jupyter nbconvert --to notebook --execute "$notebook" \
  --ExecutePreprocessor.timeout=600 \
  --ExecutePreprocessor.extra_arguments=--InteractiveShell.colors=NoColor \
  --output-dir "$work" --output executed.ipynb; then
  echo "run-notebook: $(basename "$notebook") failed after $((SECONDS - started)) s; the failing cell and its error are above" >&2
  exit 1
fi
echo "run-notebook: $(basename "$notebook") executed in $((SECONDS - started)) s" >&2
