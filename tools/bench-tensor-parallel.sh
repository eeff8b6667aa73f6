#!/usr/bin/env bash
# One node of two GPUs (on this CPU: two worker processes of one thread
# each) trains GPT-mini as one stage at tensor-parallel degree 2 and as two
# stages at degree 1, alternately, ROUNDS times each on the same cores. The
# profile is measured first on the same cores as a 2-GPU node
# (oobleck-profile measure --gpus-per-node 2), and `oobleck-sim iteration`
# predicts each plan's iteration from it. Prints, per plan, the median
# measured step, its ratio to degree 1's, and the prediction with its error.
#   tools/bench-tensor-parallel.sh [OUT]   (ROUNDS=2 STEPS=8 REPEATS=5 by default)
# The programs are build/bin's, or OOBLECK_BIN's when set.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${OOBLECK_BIN:-$root/build/bin}"
out="${1:-$root/build/bench-tensor-parallel}"
rounds="${ROUNDS:-2}" steps="${STEPS:-8}" repeats="${REPEATS:-5}"
mkdir -p "$out"
echo "bench-tensor-parallel: measuring GPT-mini on a node of 2 workers" >&2
"$bin/oobleck-profile" measure --model gpt-mini --microbatch-size 4 --seq-len 128 --threads 1 --gpus-per-node 2 \
  --repeats "$repeats" --out "$out/profile.json" > "$out/profile.txt" 2> "$out/profile.err"
"$root/tools/oobleck-tools" sim-scenario "$out/profile.json" "$out/scenario.json"
"$bin/oobleck-run" tokenize --text "$root/executor/data/corpus.txt" --out "$out/tokens.bin" > /dev/null
# GPT-mini's eight layers (embedding, six blocks, head) on node0's two GPUs.
plan() {  # NAME STAGES
  cat > "$out/$1.json" <<JSON
{"format": "oobleck.plan.v1", "fault_tolerance": 0, "global_microbatches": 4, "microbatches": 4, "iteration_ms": 0,
 "pipelines": [{"microbatches": 4, "nodes": ["node0"], "template_nodes": 1, "iteration_ms": 0, "stages": $2}]}
JSON
  # As oobleck-run trains: the tied embedding's gradient summed between
  # stages, gradients summed in float64 (twice the fp32 bytes).
  "$bin/oobleck-sim" iteration --plan "$out/$1.json" --profile "$out/profile.json" --scenario "$out/scenario.json" \
    --tied-embedding --gradient-scale 2 --json "$out/$1-sim.json" --chrome-trace "$out/$1-sim-trace.json" > /dev/null
}
plan degree1 '[{"gpus": 1, "layers": [0, 4], "node": 0}, {"gpus": 1, "layers": [4, 8], "node": 0}]'
plan degree2 '[{"gpus": 2, "layers": [0, 8], "node": 0}]'
runs=()
for round in $(seq 1 "$rounds"); do
  for name in degree1 degree2; do
    echo "bench-tensor-parallel: round $round, $name" >&2
    "$bin/oobleck-run" --plan "$out/$name.json" --profile "$out/profile.json" --data "$out/tokens.bin" \
      --steps "$steps" --threads 1 --snapshot-every 0 --metrics "$out/$name-$round.jsonl" \
      --chrome-trace "$out/$name-$round-trace.json" > "$out/$name-$round.txt" 2>&1
    runs+=("$name=$out/$name-$round.jsonl")
  done
done
"$root/tools/oobleck-tools" step-times "${runs[@]}" --predicted "degree1=$out/degree1-sim.json" \
  --predicted "degree2=$out/degree2-sim.json" --json "$out/step-times.json"
echo "Chrome traces side by side: $out/degree2-1-trace.json and $out/degree2-sim-trace.json" >&2
