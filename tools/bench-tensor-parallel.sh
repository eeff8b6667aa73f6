#!/usr/bin/env bash
# One node of two GPUs (on this CPU: two worker processes of one thread
# each) trains GPT-mini as one stage at tensor-parallel degree 2 and as two
# stages at degree 1, alternately, ROUNDS times each on the same cores, and
# prints the median step time of each with their ratio.
#   tools/bench-tensor-parallel.sh [OUT]        (ROUNDS=2 STEPS=8 by default)
# The programs are build/bin's, or OOBLECK_BIN's when set.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${OOBLECK_BIN:-$root/build/bin}"
out="${1:-$root/build/bench-tensor-parallel}"
rounds="${ROUNDS:-2}" steps="${STEPS:-8}"
mkdir -p "$out"
cat > "$out/hw.json" <<JSON
{"name": "this CPU as 2-GPU nodes", "gpus_per_node": 2, "gpu_memory_bytes": 1e9, "peak_fp32_flops_per_s": 2e10,
 "memory_bytes_per_s": 1e10, "intra_node_bytes_per_s": 2e9, "inter_node_bytes_per_s": 2e9, "latency_ms": 0.05}
JSON
"$bin/oobleck-profile" analytic --model gpt-mini --hardware "$out/hw.json" --microbatch-size 4 --seq-len 128 \
  --dtype fp32 --out "$out/profile.json" > /dev/null
"$bin/oobleck-run" tokenize --text "$root/executor/data/corpus.txt" --out "$out/tokens.bin" > /dev/null
# GPT-mini's eight layers (embedding, six blocks, head) on node0's two GPUs.
plan() {  # NAME STAGES
  cat > "$out/$1.json" <<JSON
{"format": "oobleck.plan.v1", "fault_tolerance": 0, "global_microbatches": 4, "microbatches": 4, "iteration_ms": 0,
 "pipelines": [{"microbatches": 4, "nodes": ["node0"], "template_nodes": 1, "iteration_ms": 0, "stages": $2}]}
JSON
}
plan degree1 '[{"gpus": 1, "layers": [0, 4], "node": 0}, {"gpus": 1, "layers": [4, 8], "node": 0}]'
plan degree2 '[{"gpus": 2, "layers": [0, 8], "node": 0}]'
runs=()
for round in $(seq 1 "$rounds"); do
  for name in degree1 degree2; do
    echo "bench-tensor-parallel: round $round, $name" >&2
    "$bin/oobleck-run" --plan "$out/$name.json" --profile "$out/profile.json" --data "$out/tokens.bin" \
      --steps "$steps" --threads 1 --metrics "$out/$name-$round.jsonl" > "$out/$name-$round.txt" 2>&1
    runs+=("$name=$out/$name-$round.jsonl")
  done
done
"$root/tools/oobleck-tools" step-times "${runs[@]}"
