#!/usr/bin/env bash
# Runs every test (CTest prints the summary), the validation report, the sanitizer build's tests, the
# fuzz targets briefly, then the benchmarks in a short mode against the
# previous commit's (tools/bench-compare.sh: fails on a slowdown). Expects
# tools/setup.sh to have built build/.
set -euo pipefail
cd "$(dirname "$0")/.."
ctest --test-dir build --output-on-failure -j "$(nproc)"
echo "== the iteration model against published measurements (oobleck-sim validate; fails beyond tests/validation/suite.json's bounds)"
build/bin/oobleck-sim validate
echo "== sanitizers: the planner, the simulator, the recovery rule and their tests under AddressSanitizer and UBSan"
echo "   (clang; the same build makes the fuzz targets)"
tools/sanitize.sh --with-fuzz-targets
echo "== fuzz targets (short: ${FUZZ_SECONDS:-20} s each, two at a time; FUZZ_SECONDS=600 tools/fuzz.sh for longer)"
FUZZ_BUILD_DIR=build-sanitize FUZZ_SECONDS="${FUZZ_SECONDS:-20}" FUZZ_PARALLEL="${FUZZ_PARALLEL:-2}" tools/fuzz.sh
echo "== benchmarks: the previous commit against this tree (short mode; tools/bench-compare.sh [BASE] for the long one)"
if git rev-parse --verify -q 'HEAD~1^{commit}' > /dev/null 2>&1; then
  tools/bench-compare.sh --short HEAD~1
else
  echo "bench-compare: skipped: this clone has no previous commit to compare with (a shallow clone: git fetch --deepen=1);"
  echo "the benchmarks once each instead"
  build/bin/planner_benchmarks --benchmark_min_time=0.05
  build/bin/sim_benchmarks --benchmark_min_time=0.05
fi
echo "== planning time, addition by addition (short: 1 run; RUNS=3 tools/bench-planning-time.sh for best and median)"
RUNS=1 tools/bench-planning-time.sh
if [ -x build/bin/oobleck-run ]; then
  echo "== oobleck-run against oobleck-sim iteration (short: 5 steps; run tools/bench-run-vs-sim.sh for more)"
  STEPS=5 tools/bench-run-vs-sim.sh
  echo "== live recovery against a checkpoint restart (short: 1 restart; run tools/bench-recovery.sh for more)"
  REPEATS=1 tools/bench-recovery.sh
  echo "== snapshots: step time with and without, a crash against a loss (short: 1 round; run tools/bench-snapshots.sh for more)"
  ROUNDS=1 STEPS=6 WARM=2 tools/bench-snapshots.sh
  echo "== a straggler under keep, evict and re-split (short: 10 steps, one-node pipelines; run tools/bench-stragglers.sh for more)"
  SHORT=1 tools/bench-stragglers.sh
  echo "== training speed against plain PyTorch, one thread (short: 2 steps; run tools/bench-train-efficiency.sh for more)"
  tools/bench-train-efficiency.sh --short
fi
