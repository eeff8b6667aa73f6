#!/usr/bin/env bash
# What each addition to the cost model costs in planning time, side by side
# in one run: `oobleck-plan templates` for GPT-3 175B's analytic A100
# profile to 256 nodes at M = 98 (the speed goal: under 1 s), plain and
# with each addition on its own (recomputation chosen per stage,
# interleaving, stages over up to K nodes), then the additions together at
# K = 8; and `oobleck-plan instantiate` on 2,048 nodes (f = 4, B = 4,096)
# with its template searches and rounds over M. Each case runs RUNS times
# (default 3), the cases interleaved, on THREADS threads (default 1;
# "default": oobleck-plan's own, without --threads); prints
# the best and the median wall time of each, and writes them as JSON to
# OUT_DIR/planning-time.json (default build/bench-planning-time). BIN
# overrides the oobleck-plan to time (default build/bin/oobleck-plan).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${BIN:-build/bin/oobleck-plan}
out=${OUT_DIR:-build/bench-planning-time}
runs=${RUNS:-3}
threads=${THREADS:-1}
thread_args=(--threads "$threads")
[ "$threads" = default ] && thread_args=()
profile=profiles/gpt3-175b-a100.analytic.json
mkdir -p "$out"

templates="templates --profile $profile --max-nodes 256 --microbatches 98"
instantiate="instantiate --profile $profile --nodes 2048 --fault-tolerance 4 --global-microbatches 4096"
# label|goal in seconds|arguments
cases=(
  "templates, plain (K = 1)|1|$templates"
  "templates, --recompute auto|1|$templates --recompute auto"
  "templates, --interleave 2|1|$templates --interleave 2"
  "templates, --interleave 4|1|$templates --interleave 4"
  "templates, K = 2|1|$templates --tensor-parallel-nodes 2"
  "templates, K = 4|1|$templates --tensor-parallel-nodes 4"
  "templates, K = 8|1|$templates --tensor-parallel-nodes 8"
  "templates, K = 8, --recompute auto|1|$templates --tensor-parallel-nodes 8 --recompute auto"
  "templates, K = 8, --interleave 2|1|$templates --tensor-parallel-nodes 8 --interleave 2"
  "templates, K = 8, --interleave 4|1|$templates --tensor-parallel-nodes 8 --interleave 4"
  "templates, K = 8, --recompute auto --interleave 2|1|$templates --tensor-parallel-nodes 8 --recompute auto --interleave 2"
  "2,048 nodes with its searches, K = 1|0.5|$instantiate"
  "2,048 nodes with its searches, K = 2|0.5|$instantiate --tensor-parallel-nodes 2"
  "2,048 nodes with its searches, K = 4|0.5|$instantiate --tensor-parallel-nodes 4"
  "2,048 nodes with its searches, K = 8|0.5|$instantiate --tensor-parallel-nodes 8"
)

times="$out/times.tsv"
: > "$times"
for run in $(seq 1 "$runs"); do
  for i in "${!cases[@]}"; do
    IFS='|' read -r label goal args <<< "${cases[$i]}"
    echo "run $run/$runs: $label" >&2
    start=$(date +%s.%N)
    # shellcheck disable=SC2086  # (the arguments are words)
    "$bin" $args "${thread_args[@]}" > /dev/null 2> "$out/last-stderr.txt"
    end=$(date +%s.%N)
    printf '%s\t%s\t%s\t%s\t%s\n' "$i" "$label" "$goal" "$start" "$end" >> "$times"
  done
done

python3 - "$times" "$out/planning-time.json" "$threads" <<'EOF'
import json, os, statistics, sys
times, out, threads = sys.argv[1], sys.argv[2], sys.argv[3]
threads = None if threads == "default" else int(threads)  # (null: oobleck-plan's default)
cases = {}
for line in open(times):
    index, label, goal, start, end = line.rstrip("\n").split("\t")
    seconds = float(end) - float(start)
    case = cases.setdefault(int(index), {"case": label, "goal_s": float(goal), "seconds": []})
    case["seconds"].append(seconds)
rows = []
print(f"{'case':<52} {'best s':>7} {'median s':>9} {'goal s':>7}  met")
for index in sorted(cases):
    c = cases[index]
    best, median = min(c["seconds"]), statistics.median(c["seconds"])
    c.update(best_s=best, median_s=median, met=best < c["goal_s"])
    rows.append(c)
    print(f"{c['case']:<52} {best:>7.2f} {median:>9.2f} {c['goal_s']:>7.1f}  {'yes' if c['met'] else 'no'}")
tmp = out + ".tmp"  # (written whole, then moved into place)
with open(tmp, "w") as f:
    json.dump({"format": "oobleck.planning_time.v1", "threads": threads, "cases": rows}, f, indent=1)
os.replace(tmp, out)
EOF
