#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ (clang, AddressSanitizer and
# UndefinedBehaviorSanitizer, no libtorch) into build-fuzz/ and runs each for
# a bounded time from its seed corpus (fuzz/corpus/<target>). Prints per
# target the executions per second and the coverage reached, writes a JSON
# summary, and exits 1 when a target crashed, hung, leaked or ran out of
# memory; the input that did it is kept under build-fuzz/findings/<target>/.
#
# Usage: tools/fuzz.sh [--list] [target...]   (default: every target)
#   FUZZ_SECONDS    seconds per target (default 30)
#   FUZZ_PARALLEL   targets run at once (default 1; at most 2 is sensible here)
#   FUZZ_TIMEOUT    seconds one input may take before it counts as a hang (default 10)
#   FUZZ_MAX_LEN    longest input in bytes (default 65536)
#   FUZZ_RSS_MB     memory limit in MiB (default 2048)
#   FUZZ_KEEP_GOING 1: go on after a finding (libFuzzer's fork mode) to collect several
#   FUZZ_BUILD_DIR  build folder (default build-fuzz; one configured for fuzzing is used as it is)
#   FUZZ_SUMMARY    JSON summary (default <build folder>/fuzz-summary.json)
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { echo "usage: tools/fuzz.sh [--list] [target...]" >&2; exit 2; }
whole_number() { [[ "$2" =~ ^[0-9]+$ ]] || { echo "fuzz: $1 must be a whole number, got '$2'" >&2; exit 2; }; }

seconds="${FUZZ_SECONDS:-30}"
parallel="${FUZZ_PARALLEL:-1}"
timeout="${FUZZ_TIMEOUT:-10}"
max_len="${FUZZ_MAX_LEN:-65536}"
rss_mb="${FUZZ_RSS_MB:-2048}"
keep_going="${FUZZ_KEEP_GOING:-0}"
build_dir="${FUZZ_BUILD_DIR:-build-fuzz}"
summary="${FUZZ_SUMMARY:-$build_dir/fuzz-summary.json}"
whole_number FUZZ_SECONDS "$seconds"; whole_number FUZZ_PARALLEL "$parallel"; whole_number FUZZ_TIMEOUT "$timeout"
whole_number FUZZ_MAX_LEN "$max_len"; whole_number FUZZ_RSS_MB "$rss_mb"; whole_number FUZZ_KEEP_GOING "$keep_going"
((parallel >= 1)) || { echo "fuzz: FUZZ_PARALLEL must be at least 1" >&2; exit 2; }

# The targets are the ones fuzz/CMakeLists.txt builds.
read -r -a all_targets < <(sed -n 's/^set(OOBLECK_FUZZ_TARGETS \(.*\))$/\1/p' fuzz/CMakeLists.txt)
((${#all_targets[@]})) || { echo "fuzz: no OOBLECK_FUZZ_TARGETS in fuzz/CMakeLists.txt" >&2; exit 1; }

targets=()
for argument in "$@"; do
  case "$argument" in
    --list) printf '%s\n' "${all_targets[@]}"; exit 0 ;;
    -h | --help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz: unknown option '$argument'" >&2; usage ;;
    *)
      if [[ " ${all_targets[*]} " != *" $argument "* ]]; then
        echo "fuzz: no target '$argument'; the targets: ${all_targets[*]}" >&2
        exit 2
      fi
      targets+=("$argument") ;;
  esac
done
((${#targets[@]})) || targets=("${all_targets[@]}")

# ---------------------------------------------------------------- setup
tools/install-packages.sh fuzz clang libclang-rt-14-dev

# ---------------------------------------------------------------- build
started=$SECONDS
echo "fuzz: building ${targets[*]} in $build_dir" >&2
# A folder already configured for fuzzing is used as it is: the sanitizer
# build configures one so (tools/sanitize.sh --with-fuzz-targets), whose
# libraries these targets then share.
if ! grep -qx 'OOBLECK_FUZZ:BOOL=ON' "$build_dir/CMakeCache.txt" 2>/dev/null; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
    -DOOBLECK_FUZZ=ON -DOOBLECK_BUILD_TESTS=OFF -DOOBLECK_BUILD_BENCHMARKS=OFF \
    -DCMAKE_DISABLE_FIND_PACKAGE_Torch=ON >/dev/null
fi
cmake --build "$build_dir" -j "$(nproc)" --target "${targets[@]/#/fuzz_}"
echo "fuzz: built in $((SECONDS - started)) s; fuzzing each target for $seconds s, $parallel at a time" >&2

# ---------------------------------------------------------------- fuzz
logs="$build_dir/logs"
mkdir -p "$logs"
fuzz_one() {
  local target=$1
  local corpus="$build_dir/corpus/$target" findings="$build_dir/findings/$target"
  local seeds="fuzz/corpus/$target" dictionary="fuzz/dictionaries/$target.dict"
  mkdir -p "$corpus" "$findings"
  local options=(-max_total_time="$seconds" -timeout="$timeout" -rss_limit_mb="$rss_mb" -max_len="$max_len"
                 -print_final_stats=1 -artifact_prefix="$findings/")
  if [ -f "$dictionary" ]; then options+=(-dict="$dictionary"); fi
  if ((keep_going)); then options+=(-fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1); fi
  # New inputs go into the first folder (the build's); the seeds are only read.
  "$build_dir/bin/fuzz_$target" "${options[@]}" "$corpus" "$seeds" >"$logs/$target.log" 2>&1
}

# What a log says: status, exec/s, cov, ft, corpus inputs, runs, findings.
report_one() {
  local target=$1 rc=$2 log="$logs/$target.log"
  local final execs cov ft runs status corpus_files findings
  # The last status line: "#N DONE cov: C ft: F corp: U/Sb exec/s: E ..." or,
  # in fork mode, "#N: cov: C ft: F corp: U exec/s: E ...".
  final=$(grep -E '^#[0-9]+:?[[:space:]].*cov: ' "$log" | tail -n 1 || true)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$final")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$final")
  runs=$(sed -n 's/^#\([0-9]*\).*/\1/p' <<<"$final")
  execs=$(sed -n 's/^stat::average_exec_per_sec: *\([0-9]*\)/\1/p' "$log" | tail -n 1)
  [ -n "$execs" ] || execs=$(sed -n 's/.* exec\/s:\{0,1\} \([0-9]*\).*/\1/p' <<<"$final")
  corpus_files=$(find "$build_dir/corpus/$target" -type f | wc -l)
  findings=$(find "$build_dir/findings/$target" -type f \( -name 'crash-*' -o -name 'timeout-*' -o -name 'oom-*' \
                  -o -name 'leak-*' \) | sort)
  if ((rc == 0)) && [ -z "$findings" ]; then
    status=ok
  elif [ -n "$findings" ]; then
    status=$(basename "$(head -n 1 <<<"$findings")" | cut -d- -f1)
  else
    status=error
  fi
  printf '%-19s %-7s exec/s %-7s cov %-6s ft %-6s corpus %-5s\n' "$target" "$status" "${execs:-?}" "${cov:-?}" \
    "${ft:-?}" "$corpus_files"
  if [ "$status" != ok ]; then
    echo "  log: $log" >&2
    grep -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error|terminate called|  what\(\))' "$log" | head -n 5 | sed 's/^/  /' >&2 || true
    while read -r finding; do
      [ -n "$finding" ] && echo "  input: $finding (keep it as tests/fuzz_regressions/$target/<name>)" >&2
    done <<<"$findings"
  fi
  # One JSON object per target, joined below.
  local finding_list=""
  if [ -n "$findings" ]; then finding_list=$(sed 's/.*/"&"/' <<<"$findings" | paste -sd, -); fi
  printf '{"target": "%s", "status": "%s", "seconds": %s, "execs_per_s": %s, "cov": %s, "ft": %s, "runs": %s, "corpus_files": %s, "findings": [%s]}' \
    "$target" "$status" "$seconds" "${execs:-null}" "${cov:-null}" "${ft:-null}" "${runs:-null}" "$corpus_files" \
    "$finding_list" >"$logs/$target.json"
  [ "$status" = ok ]
}

declare -A running=()
finished=()
collect() {  # waits for one target to end and records its exit status
  local name
  wait -n || true
  for name in "${!running[@]}"; do
    if ! kill -0 "${running[$name]}" 2>/dev/null; then
      local rc=0
      wait "${running[$name]}" || rc=$?
      finished+=("$name:$rc")
      unset "running[$name]"
    fi
  done
}
for target in "${targets[@]}"; do
  while ((${#running[@]} >= parallel)); do collect; done
  echo "fuzz: $target" >&2
  fuzz_one "$target" &
  running[$target]=$!
done
while ((${#running[@]})); do collect; done

echo "== fuzzing: $seconds s per target"
failed=()
entries=()
for target in "${targets[@]}"; do
  for entry in "${finished[@]}"; do
    if [ "${entry%%:*}" = "$target" ]; then
      report_one "$target" "${entry##*:}" || failed+=("$target")
      entries+=("$(cat "$logs/$target.json")")
    fi
  done
done
mkdir -p "$(dirname "$summary")"
{
  printf '{"seconds_per_target": %s, "max_len": %s, "rss_limit_mb": %s, "targets": [\n' "$seconds" "$max_len" "$rss_mb"
  for i in "${!entries[@]}"; do printf '  %s%s\n' "${entries[$i]}" "$( ((i + 1 < ${#entries[@]})) && echo , )"; done
  printf ']}\n'
} >"$summary"
echo "fuzz: summary in $summary; took $((SECONDS - started)) s in all" >&2
if ((${#failed[@]})); then
  echo "fuzz: FINDINGS in ${failed[*]}" >&2
  exit 1
fi
