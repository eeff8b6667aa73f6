#!/usr/bin/env bash
# Builds the planner, the simulator, the recovery library and their tests
# with AddressSanitizer and UndefinedBehaviorSanitizer (no libtorch) into
# build-sanitize/, then runs those tests and replays the fuzz regression
# inputs (tests/fuzz_regressions). Any memory error, leak or undefined
# behaviour fails the run.
#
# Usage: tools/sanitize.sh [--build-only] [--with-fuzz-targets]
#   --with-fuzz-targets  build with clang and libFuzzer's coverage, and the fuzz targets too:
#                        FUZZ_BUILD_DIR=build-sanitize tools/fuzz.sh then builds nothing again
#   SANITIZE_BUILD_DIR  build folder (default build-sanitize)
#   SANITIZE_CXX        compiler (default g++; clang++ with --with-fuzz-targets)
set -euo pipefail
cd "$(dirname "$0")/.."

build_only=0
fuzz_targets=0
usage="usage: tools/sanitize.sh [--build-only] [--with-fuzz-targets]"
for argument in "$@"; do
  case "$argument" in
    --build-only) build_only=1 ;;
    --with-fuzz-targets) fuzz_targets=1 ;;
    -h | --help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "sanitize: unknown argument '$argument'; $usage" >&2; exit 2 ;;
  esac
done

build_dir="${SANITIZE_BUILD_DIR:-build-sanitize}"
compiler="${SANITIZE_CXX:-g++}"
fuzz_flags=()
fuzz_build=()
if ((fuzz_targets)); then
  tools/install-packages.sh sanitize clang libclang-rt-14-dev
  compiler="${SANITIZE_CXX:-clang++}"
  fuzz_flags=(-DOOBLECK_FUZZ=ON)
  fuzz_build=(fuzz_targets)
fi
if ! command -v "$compiler" >/dev/null; then
  echo "sanitize: no compiler $compiler (SANITIZE_CXX)" >&2
  exit 1
fi
tests=(common_tests recovery_tests planner_tests sim_tests fuzz_regression_tests)
# What runs, longest first, two at a time: sim_tests and planner_tests each
# in two parts of about equal time, so that the two cores end together:
# the simulator's grid of every bundled profile apart from its other cases,
# the planner's interleaved and threaded cases apart from the rest.
grid='planner and simulator: the predicted iteration against the played one*'
planner_part='*interleave*,*thread*'
runs=(sim_tests sim_tests planner_tests planner_tests common_tests recovery_tests fuzz_regression_tests)
run_names=(sim_tests-rest sim_tests-grid planner_tests-rest planner_tests-interleaved common_tests recovery_tests
           fuzz_regression_tests)
run_args=("-tce=$grid" "-tc=$grid" "-tce=$planner_part" "-tc=$planner_part" "" "" "")
started=$SECONDS

echo "sanitize: configuring $build_dir with $compiler" >&2
# -O1: what the sanitizers are made for, quicker to build than -O2 and still
# quick to run; assertions on; -g1 keeps line numbers in the stack traces.
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_CXX_COMPILER="$compiler" -DOOBLECK_SANITIZE=ON "${fuzz_flags[@]}" \
  -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" \
  -DOOBLECK_BUILD_BENCHMARKS=OFF -DCMAKE_DISABLE_FIND_PACKAGE_Torch=ON >/dev/null
echo "sanitize: building ${tests[*]} ${fuzz_build[*]}" >&2
cmake --build "$build_dir" -j "$(nproc)" --target "${tests[@]}" "${fuzz_build[@]}"
built=$SECONDS
echo "sanitize: built in $((built - started)) s" >&2
if ((build_only)); then exit 0; fi

# Leaks count as failures; undefined behaviour already stops the program
# (-fno-sanitize-recover); stack traces for both.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

logs="$build_dir/sanitize-logs"
mkdir -p "$logs"
failed=()
run_one() {
  local test=$1 name=$2 filter=$3 start=$SECONDS
  local args=(--no-intro=true)
  if [[ -n "$filter" ]]; then args+=("$filter"); fi
  if "$build_dir/bin/$test" "${args[@]}" >"$logs/$name.log" 2>&1; then
    echo "sanitize: $name passed ($((SECONDS - start)) s)" >&2
  else
    echo "sanitize: $name FAILED ($((SECONDS - start)) s); the end of $logs/$name.log:" >&2
    tail -n 40 "$logs/$name.log" >&2
    return 1
  fi
}

# Two at a time at most: each test program runs its own cases one by one.
jobs=$(( $(nproc) < 2 ? 1 : 2 ))
declare -A pids=()
for i in "${!runs[@]}"; do
  while ((${#pids[@]} >= jobs)); do
    wait -n || true
    for name in "${!pids[@]}"; do
      if ! kill -0 "${pids[$name]}" 2>/dev/null; then
        wait "${pids[$name]}" || failed+=("$name")
        unset "pids[$name]"
      fi
    done
  done
  run_one "${runs[$i]}" "${run_names[$i]}" "${run_args[$i]}" &
  pids[${run_names[$i]}]=$!
done
for name in "${!pids[@]}"; do
  wait "${pids[$name]}" || failed+=("$name")
done

echo "sanitize: built in $((built - started)) s, tested in $((SECONDS - built)) s" >&2
if ((${#failed[@]})); then
  echo "sanitize: FAILED: ${failed[*]} (logs in $logs)" >&2
  exit 1
fi
echo "sanitize: every test passed under AddressSanitizer and UndefinedBehaviorSanitizer" >&2
