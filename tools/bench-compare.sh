#!/usr/bin/env bash
# Compares the planner's and the simulator's benchmarks (planner_benchmarks,
# sim_benchmarks) between BASE, a git revision (default HEAD~1), and the
# working tree.
#
#   tools/bench-compare.sh [--short] [--live|--live-short] [--history FILE] [BASE]
#
# BASE is exported into build-bench/base/ (only changed files are replaced,
# so ninja rebuilds only what changed) and built there without libtorch; the
# working tree's programs come from build/. Both use ccache with
# CCACHE_BASEDIR at the repository root, so that the two trees share their
# cache entries. The programs run alternately (base, current, then current,
# base, ...), ROUNDS processes a side of REPETITIONS repetitions each, with
# --benchmark_out_format=json; `oobleck-tools bench-compare` then merges the
# runs, lets Google Benchmark's compare.py (Debian: libbenchmark-tools) do
# its U test, prints a row per benchmark, and decides:
#   exit 1  a benchmark significantly slower (U test, p < alpha) by more than
#           its threshold (tests/benchmarks/thresholds.json: 10 % unless a
#           pattern there says otherwise), or a work_* counter grew at all
#           (counted work, e.g. DP states: exact, whatever the timing says);
#   exit 2  bad input, a missing tool, or BASE does not build;
#   exit 0  otherwise. Benchmarks and counters BASE lacks are shown as new.
# A timing regression is confirmed before it counts: the benchmarks found
# slower run again alone, with twice the rounds, and only a slowdown the
# second comparison finds too fails (--no-confirm: the first one decides).
# Modes:
#   --short (or SHORT=1): the quick benchmarks, 2 rounds x 3 repetitions,
#       min time 0.01 s: for CI (tools/test.sh).
#   default (long): every benchmark, 5 rounds x 4 repetitions, min time 0.2 s.
#   --live (long mode only): also runs tools/bench-recovery.sh,
#       bench-run-vs-sim.sh and bench-snapshots.sh in both trees, script by
#       script (needs build/bin/oobleck-run; builds oobleck-run, -profile,
#       -sim and -plan of both trees, BASE's with libtorch: slow when its
#       sources changed), outputs in OUT/live-SIDE-SCRIPT/, their printout in
#       OUT/live-SIDE.txt, and fails when a ratio they print moves by more
#       than live_tolerance (30 %). A script that fails is reported; its
#       ratios are then shown as gone or new.
#   --live-short (or LIVE_SHORT=1 with --live): --live with shorter settings:
#       REPEATS=1 for bench-recovery and STEPS=5 for bench-run-vs-sim, as
#       tools/test.sh runs them, ROUNDS=3 STEPS=8 WARM=3 for bench-snapshots
#       (tools/test.sh's single round of 4 steady steps moved its overheads
#       by 30-50 % between two runs of the same code on a shared machine).
#   --history FILE (long mode): appends the current tree's results (revision,
#       date, per benchmark the median time and counters) as a JSON line;
#       `tools/oobleck-tools bench-history FILE NAME OUT.svg` plots them.
# Others: --rounds N, --repetitions N, --min-time S, --filter REGEX,
#   --thresholds FILE, --counters-only (times shown, only counters judged),
#   --base-bin DIR / --current-bin DIR (prebuilt benchmark programs: nothing
#   is built for that side), --out DIR (default build-bench).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
started=$SECONDS

die() { echo "bench-compare: $*" >&2; exit 2; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

short="${SHORT:-0}"
live=0
live_short="${LIVE_SHORT:-0}"
history=""
base="HEAD~1"
base_given=0
counters_only=0
confirm=1
base_bin=""
current_bin=""
out="build-bench"
thresholds="tests/benchmarks/thresholds.json"
rounds="" repetitions="" min_time="" filter=""
while (($#)); do
  case "$1" in
    --short) short=1 ;;
    --long) short=0 ;;
    --live) live=1 ;;
    --live-short) live=1 live_short=1 ;;
    --history) [ $# -ge 2 ] || die "--history needs a file"; history="$2"; shift ;;
    --rounds) [ $# -ge 2 ] || die "--rounds needs a number"; rounds="$2"; shift ;;
    --repetitions) [ $# -ge 2 ] || die "--repetitions needs a number"; repetitions="$2"; shift ;;
    --min-time) [ $# -ge 2 ] || die "--min-time needs seconds"; min_time="$2"; shift ;;
    --filter) [ $# -ge 2 ] || die "--filter needs a regular expression"; filter="$2"; shift ;;
    --thresholds) [ $# -ge 2 ] || die "--thresholds needs a file"; thresholds="$2"; shift ;;
    --counters-only) counters_only=1 ;;
    --no-confirm) confirm=0 ;;
    --base-bin) [ $# -ge 2 ] || die "--base-bin needs a folder"; base_bin="$2"; shift ;;
    --current-bin) [ $# -ge 2 ] || die "--current-bin needs a folder"; current_bin="$2"; shift ;;
    --out) [ $# -ge 2 ] || die "--out needs a folder"; out="$2"; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) ((base_given == 0)) || die "one BASE revision at most (got $base and $1)"; base="$1"; base_given=1 ;;
  esac
  shift
done
[ "$short" = 1 ] || [ "$short" = 0 ] || die "SHORT must be 0 or 1, not $short"
[ "$live_short" = 1 ] || [ "$live_short" = 0 ] || die "LIVE_SHORT must be 0 or 1, not $live_short"
for number in "$rounds" "$repetitions"; do
  [ -z "$number" ] || [[ "$number" =~ ^[1-9][0-9]*$ ]] || die "--rounds and --repetitions take a positive whole number, not $number"
done
if [ "$short" = 1 ]; then
  rounds="${rounds:-2}" repetitions="${repetitions:-3}" min_time="${min_time:-0.01}"
  # The quick ones: the ones left out take seconds each (BM_ReplayLlama3,
  # the largest count trace, the recomputing template search) or repeat
  # what another size shows.
  filter="${filter:-^BM_(Templates/32|Instantiate|PlanCluster|PlanClusterOverNodes|Reconfigure|EventQueueHold/256|EventQueueCancel|Iteration|ReplayCountTrace/10000)(/|$)}"
  if ((live)) || [ -n "$history" ]; then die "--live and --history belong to the long mode"; fi
else
  rounds="${rounds:-5}" repetitions="${repetitions:-4}" min_time="${min_time:-0.2}"
  filter="${filter:-.}"
fi
[ -f "$thresholds" ] || die "no thresholds file $thresholds"

# Debian's python3 has scipy (compare.py's U test); another first on PATH may not.
python=python3
[ -x /usr/bin/python3 ] && python=/usr/bin/python3
compare_py="${BENCH_COMPARE_PY:-/usr/share/benchmark/compare.py}"
[ -f "$compare_py" ] || die "Google Benchmark's compare.py is not at $compare_py (Debian: apt-get install libbenchmark-tools; or set BENCH_COMPARE_PY)"
"$python" -c "import scipy.stats" 2> /dev/null || die "$python lacks scipy, which compare.py's U test needs (Debian: python3-scipy)"
programs=(planner_benchmarks sim_benchmarks)

mkdir -p "$out"
out="$(cd "$out" && pwd)"
# Both trees' objects are cached under paths relative to the root.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)

# Configures (when not yet) and builds the benchmark programs of the tree at
# $1 in $1/build, without libtorch; the programs that tree has go to stdout.
build_tree() {
  local tree="$1" label="$2" log="$out/build-$2.log" program
  if [ ! -f "$tree/build/build.ninja" ]; then
    if ! cmake -S "$tree" -B "$tree/build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" \
        -DCMAKE_DISABLE_FIND_PACKAGE_Torch=ON -DOOBLECK_BUILD_TESTS=ON -DOOBLECK_BUILD_BENCHMARKS=ON > "$log" 2>&1; then
      tail -20 "$log" >&2
      return 1
    fi
  fi
  local targets=()
  for program in "${programs[@]}"; do
    if ninja -C "$tree/build" -t query "$program" > /dev/null 2>&1; then targets+=("$program"); fi
  done
  ((${#targets[@]})) || { echo "no benchmark programs in $tree (is Google Benchmark installed?)" >&2; return 1; }
  if ! cmake --build "$tree/build" -j "$(nproc)" --target "${targets[@]}" >> "$log" 2>&1; then
    grep -m 20 -B2 -A8 "error\|FAILED" "$log" >&2 || tail -20 "$log" >&2
    return 1
  fi
  printf '%s\n' "${targets[@]}"
}

if [ -z "$base_bin" ]; then
  base_rev="$(git rev-parse --verify -q "$base^{commit}")" || die "unknown revision $base (a shallow clone may lack it: git fetch --deepen=1)"
  tree="$out/base"
  mkdir -p "$tree"
  if [ "$(cat "$tree/.revision" 2> /dev/null)" != "$base_rev" ]; then
    export_dir="$(mktemp -d "$out/.export.XXXXXX")"
    git archive "$base_rev" | tar -x -C "$export_dir"
    # Replaces only the files whose contents differ (and removes the ones
    # BASE lacks), so that ninja rebuilds only what changed since the last BASE.
    "$python" - "$export_dir" "$tree" << 'PY'
import filecmp, os, shutil, sys
new, tree = sys.argv[1:]
keep = {"build", ".revision"}
wanted = set()
for folder, dirs, files in os.walk(new):
    for name in files:
        relative = os.path.relpath(os.path.join(folder, name), new)
        wanted.add(relative)
        target = os.path.join(tree, relative)
        if not (os.path.isfile(target) and not os.path.islink(target) and filecmp.cmp(os.path.join(folder, name), target, shallow=False)):
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if os.path.lexists(target) and not os.path.isdir(target):
                os.remove(target)
            shutil.copy2(os.path.join(folder, name), target, follow_symlinks=False)
            os.utime(target)  # newer than any object built from the old contents
for folder, dirs, files in os.walk(tree):
    if folder == tree:
        dirs[:] = [d for d in dirs if d not in keep]
    for name in files:
        relative = os.path.relpath(os.path.join(folder, name), tree)
        if relative not in wanted and relative not in keep:
            os.remove(os.path.join(folder, name))
PY
    rm -rf "$export_dir"
    echo "$base_rev" > "$tree/.revision"
  fi
  echo "== bench-compare: building $base ($(git log -1 --format='%h %s' "$base_rev" | cut -c1-70)) in $tree/build"
  base_programs="$(build_tree "$tree" base)" || {
    echo "bench-compare: BASE $base does not build (log: $out/build-base.log)" >&2
    exit 2
  }
  base_bin="$tree/build/bin"
else
  base_rev="$(cd "$base_bin" && pwd)"
  base_programs="$(for p in "${programs[@]}"; do [ -x "$base_bin/$p" ] && echo "$p"; done || true)"
fi
if [ -z "$current_bin" ]; then
  echo "== bench-compare: building the working tree's benchmarks in build/"
  current_programs="$(build_tree "$root" current)" || { echo "bench-compare: the working tree does not build (log: $out/build-current.log)" >&2; exit 2; }
  current_bin="$root/build/bin"
else
  current_programs="$(for p in "${programs[@]}"; do [ -x "$current_bin/$p" ] && echo "$p"; done || true)"
fi
[ -n "$current_programs" ] || die "no benchmark programs in $current_bin"
build_s=$((SECONDS - started))

runs="$out/runs"
base_runs=() current_runs=()
run_side() {
  local side="$1" bin="$2" program="$3" round="$4" file="$runs/$1-$3-$4.json"
  if ! "$bin/$program" --benchmark_filter="$filter" --benchmark_repetitions="$repetitions" \
      --benchmark_min_time="$min_time" --benchmark_out="$file" --benchmark_out_format=json > "$runs/$side-$program-$round.txt" 2>&1; then
    tail -20 "$runs/$side-$program-$round.txt" >&2
    die "$bin/$program failed"
  fi
  # A program none of whose benchmarks the filter matches writes an empty
  # file (as when the confirmation runs only another program's benchmarks).
  [ -s "$file" ] || return 0
  if [ "$side" = base ]; then base_runs+=("$file"); else current_runs+=("$file"); fi
}
# Runs every round of both sides into a fresh $runs.
run_rounds() {
  rm -rf "$runs"
  mkdir -p "$runs"
  base_runs=() current_runs=()
  echo "== bench-compare: $rounds rounds x $repetitions repetitions a side, min time $min_time s, filter $filter"
  for ((round = 1; round <= rounds; round++)); do
    # Alternated, and which side goes first alternates too: a drift in the
    # machine's speed falls on both sides alike.
    order=(base current)
    if ((round % 2 == 0)); then order=(current base); fi
    for program in "${programs[@]}"; do
      grep -qx "$program" <<< "$current_programs" || continue
      for side in "${order[@]}"; do
        if [ "$side" = base ]; then
          if grep -qx "$program" <<< "$base_programs"; then run_side base "$base_bin" "$program" "$round"; fi
        else
          run_side current "$current_bin" "$program" "$round"
        fi
      done
    done
  done
  # BASE without any benchmark program: every row is new.
  if ((${#base_runs[@]} == 0)); then
    echo '{"context": {}, "benchmarks": []}' > "$runs/base-none.json"
    base_runs=("$runs/base-none.json")
  fi
}
run_rounds

live_args=()
if ((live)); then
  # The programs the live scripts run (tools/cluster-setup.sh, oobleck-run).
  live_targets=(oobleck-run oobleck-profile oobleck-sim oobleck-plan)
  if [ ! -x build/bin/oobleck-run ]; then
    echo "== bench-compare: --live skipped: build/bin/oobleck-run is not built (tools/setup.sh, with libtorch)"
  elif [ ! -d "$out/base" ]; then
    echo "== bench-compare: --live skipped: needs BASE built from a revision, not --base-bin"
  else
    live_started=$SECONDS
    echo "== bench-compare: live benchmarks (minutes): building ${live_targets[*]} of $base with libtorch, and of build/"
    # BASE's build was configured without libtorch; find_package(Torch) runs
    # again with the switch off, as tools/setup.sh's plain configure does.
    if ! cmake -S "$out/base" -B "$out/base/build" -DCMAKE_DISABLE_FIND_PACKAGE_Torch=OFF > "$out/build-base-live.log" 2>&1; then
      tail -20 "$out/build-base-live.log" >&2
      echo "bench-compare: BASE $base does not configure with libtorch (log: $out/build-base-live.log)" >&2
      exit 2
    fi
    ninja -C "$out/base/build" -t query oobleck-run > /dev/null 2>&1 ||
      die "cmake finds no libtorch for BASE $base (log: $out/build-base-live.log)"
    if ! cmake --build "$out/base/build" -j "$(nproc)" --target "${live_targets[@]}" >> "$out/build-base-live.log" 2>&1; then
      grep -m 20 -B2 -A8 "error\|FAILED" "$out/build-base-live.log" >&2 || tail -20 "$out/build-base-live.log" >&2
      echo "bench-compare: BASE $base does not build with libtorch (log: $out/build-base-live.log)" >&2
      exit 2
    fi
    # The working tree's too, so that they are not older than its sources.
    if ! cmake --build build -j "$(nproc)" --target "${live_targets[@]}" > "$out/build-current-live.log" 2>&1; then
      grep -m 20 -B2 -A8 "error\|FAILED" "$out/build-current-live.log" >&2 || tail -20 "$out/build-current-live.log" >&2
      echo "bench-compare: the working tree's live programs do not build (log: $out/build-current-live.log)" >&2
      exit 2
    fi
    live_build_s=$((SECONDS - live_started))
    : > "$out/live-base.txt"
    : > "$out/live-current.txt"
    # Script by script, the two trees one after the other (which goes first
    # alternates), each in its own output folder under $out.
    order=(base current)
    for script in bench-recovery.sh bench-run-vs-sim.sh bench-snapshots.sh; do
      settings=()
      if [ "$live_short" = 1 ]; then
        case "$script" in
          bench-recovery.sh) settings=(REPEATS=1) ;;
          bench-run-vs-sim.sh) settings=(STEPS=5) ;;
          bench-snapshots.sh) settings=(ROUNDS=3 STEPS=8 WARM=3) ;;
        esac
      fi
      for side in "${order[@]}"; do
        tree="$root"
        [ "$side" = base ] && tree="$out/base"
        [ -x "$tree/tools/$script" ] || { echo "   $side: no tools/$script"; continue; }
        script_started=$SECONDS
        echo "== $side: tools/$script ${settings[*]}" >> "$out/live-$side.txt"
        if (cd "$tree" && env "${settings[@]}" OUT_DIR="$out/live-$side-${script%.sh}" "tools/$script") \
            >> "$out/live-$side.txt" 2>&1; then
          echo "   $side: tools/$script ${settings[*]}: $((SECONDS - script_started)) s"
        else
          echo "   $side: tools/$script ${settings[*]} failed after $((SECONDS - script_started)) s (see $out/live-$side.txt)"
        fi
      done
      order=("${order[1]}" "${order[0]}")
    done
    echo "   live: $live_build_s s building, $((SECONDS - live_started)) s in all"
    live_args=(--live-base "$out/live-base.txt" --live-current "$out/live-current.txt")
  fi
fi

history_args=()
if [ -n "$history" ]; then
  revision="$(git rev-parse HEAD 2> /dev/null || echo unknown)"
  [ -z "$(git status --porcelain --untracked-files=no 2> /dev/null)" ] || revision="$revision-dirty"
  history_args=(--history "$history" --revision "$revision" --base-revision "$base_rev")
fi
judge_args=()
if ((counters_only)); then judge_args+=(--counters-only); fi

echo "== bench-compare: $base against the working tree"
status=0
"$python" tools/oobleck-tools bench-compare --base "${base_runs[@]}" --current "${current_runs[@]}" \
  --compare-py "$compare_py" --out "$out" --thresholds "$thresholds" "${judge_args[@]}" "${live_args[@]}" \
  "${history_args[@]}" || status=$?
# A timing regression alone is confirmed by a second run of just those
# benchmarks, twice the rounds: on a shared machine another process's load
# can fall on one side's runs (counted work needs no confirmation). The live
# ratios, already measured, are judged again as they were.
if [ "$status" = 1 ] && ((confirm)) && [ -s "$out/slower.txt" ] && [ ! -s "$out/grown.txt" ]; then
  filter="^($(sed 's/[][\\.*+?^$(){}|]/\\&/g' "$out/slower.txt" | paste -sd '|'))\$"
  rounds=$((2 * rounds))
  echo "== bench-compare: confirming what was slower, alone"
  run_rounds
  status=0
  "$python" tools/oobleck-tools bench-compare --base "${base_runs[@]}" --current "${current_runs[@]}" \
    --compare-py "$compare_py" --out "$out" --thresholds "$thresholds" "${judge_args[@]}" "${live_args[@]}" \
    || status=$?
  ((status != 0)) || echo "bench-compare: the first run's slowdown was not confirmed: timing noise"
fi
echo "bench-compare: ${build_s} s building, $((SECONDS - started)) s in all"
exit "$status"
