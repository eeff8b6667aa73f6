#!/usr/bin/env bash
# What tools/bench-compare.sh must catch, without depending on timing:
#   - the tree compared with itself exits 0 (work counters judged only, so
#     timing noise cannot fail it);
#   - a deliberate slowdown, a copy of the tree whose template search runs
#     every dynamic programme twice (twice the DP states, the same templates),
#     exits 1, the counter's growth reported;
#   - an unknown revision exits 2.
# Usage: bench-compare-regression.sh BIN [SCRATCH]
#   BIN: the folder with the tree's planner_benchmarks and sim_benchmarks;
#   SCRATCH: where the patched copy is built (default BIN/../bench-compare-test),
#   kept between runs so that ccache and ninja make a rebuild quick.
# Exit 77 (CTest: skipped) without Google Benchmark's compare.py or scipy.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
[ $# -ge 1 ] || { echo "usage: $0 BIN [SCRATCH]" >&2; exit 2; }
bin="$(cd "$1" && pwd)"
scratch="${2:-$bin/../bench-compare-test}"
mkdir -p "$scratch"
scratch="$(cd "$scratch" && pwd)"
python=python3
[ -x /usr/bin/python3 ] && python=/usr/bin/python3
if [ ! -f "${BENCH_COMPARE_PY:-/usr/share/benchmark/compare.py}" ] || ! "$python" -c "import scipy.stats" 2> /dev/null; then
  echo "SKIPPED: no Google Benchmark compare.py (libbenchmark-tools) or scipy here"
  exit 77
fi
quick=(--counters-only --rounds 1 --repetitions 2 --min-time 0.01)
failed=0

echo "== the tree against itself: exit 0"
status=0
"$root/tools/bench-compare.sh" "${quick[@]}" --filter '^BM_(Templates/32|Instantiate|EventQueueHold/256|Iteration/32)$' \
  --base-bin "$bin" --current-bin "$bin" --out "$scratch/self" > "$scratch/self.txt" 2>&1 || status=$?
if [ "$status" -ne 0 ]; then
  cat "$scratch/self.txt"
  echo "FAILED: the tree compared with itself exited $status, not 0"
  failed=1
fi

echo "== every template DP run twice: exit 1"
tree="$scratch/tree"
mkdir -p "$tree"
# The tree's files (not its builds), then the slowdown.
(cd "$root" && { git ls-files -co --exclude-standard 2> /dev/null || find . -path ./build -prune -o -path './build-*' -prune -o -type f -print; } |
  tar -c -T - -f -) | tar -x -C "$tree" 2> /dev/null || true  # the files' times kept: ninja rebuilds what changed
file="$tree/planner/src/templates.cpp"
if ! grep -q '^      search.solve(bound, rows);$' "$file"; then
  echo "FAILED: the slowdown patch no longer applies to planner/src/templates.cpp (update this test)"
  exit 1
fi
# (A second solve at the same bound sweeps anew: only one just under the
# last updates its table.)
sed -i 's|^      search.solve(bound, rows);$|&\n      search.solve(bound, rows);  // the deliberate slowdown|' "$file"
# Paths relative to the copy's root, as the tree's own build: ccache hits.
export CCACHE_BASEDIR="$tree"
launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
if ! { [ -f "$tree/build/build.ninja" ] || cmake -S "$tree" -B "$tree/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
         "${launcher[@]}" -DCMAKE_DISABLE_FIND_PACKAGE_Torch=ON > "$scratch/build.log" 2>&1; } ||
   ! cmake --build "$tree/build" -j "$(nproc)" --target planner_benchmarks >> "$scratch/build.log" 2>&1; then
  tail -30 "$scratch/build.log"
  echo "FAILED: the patched copy does not build"
  exit 1
fi
status=0
"$root/tools/bench-compare.sh" "${quick[@]}" --filter '^BM_Templates/32$' \
  --base-bin "$bin" --current-bin "$tree/build/bin" --out "$scratch/patched" > "$scratch/patched.txt" 2>&1 || status=$?
if [ "$status" -ne 1 ] || ! grep -q "work_dp_states: .* GREW" "$scratch/patched.txt"; then
  cat "$scratch/patched.txt"
  echo "FAILED: the slowdown exited $status, not 1 with work_dp_states grown"
  failed=1
fi
grep "work_dp_states" "$scratch/patched.txt" || true

echo "== an unknown revision: exit 2"
status=0
"$root/tools/bench-compare.sh" --short --out "$scratch/unknown" no-such-revision-here > "$scratch/unknown.txt" 2>&1 || status=$?
if [ "$status" -ne 2 ] || ! grep -q "unknown revision" "$scratch/unknown.txt"; then
  cat "$scratch/unknown.txt"
  echo "FAILED: an unknown revision exited $status, not 2"
  failed=1
fi

if ((failed)); then exit 1; fi
echo "bench-compare-regression: all three held"
