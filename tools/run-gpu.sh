#!/usr/bin/env bash
# oobleck-run on a CUDA GPU, against the simulator's prediction. Profiles a
# GPT on the GPU (bf16), gives each node a memory budget that makes the
# model need two nodes, plans 5 nodes with f = 1 (pipelines of 2 and 3
# nodes), trains STEPS steps with every worker on the one GPU (stages
# exchange tensors through host memory with Gloo), trains the same steps in
# one process on the GPU, and compares: losses, and iteration and per-stage
# times against `oobleck-sim iteration` on the same profile and plan, both as
# planned (a GPU per node) and as run (one shared GPU). The same for a
# 1-node and a 2-node plan. Everything lands in OUT_DIR. Every run asks for
# deterministic kernels (oobleck-run --deterministic), without which fused
# attention's backward differs in its last bits from run to run. Exits 1
# when the losses differ from the one process's by more than 1e-4 (relative).
# Then what snapshots cost on the GPU (every step, the default, against
# none): the 5-node run again without and with them, SNAPSHOT_ROUNDS times
# alternated, the median steps side by side (snapshots.json).
#
#   tools/run-gpu.sh [BUILD_DIR] [OUT_DIR]     MODEL=gpt2-small SEQ=1024 MB=4 STEPS=12 DEVICE=cuda DTYPE=bf16
#                                              SNAPSHOT_ROUNDS=1
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-cuda}
out=${2:-$build/gpu-run}
model=${MODEL:-gpt2-small} seq=${SEQ:-1024} mb=${MB:-4} steps=${STEPS:-12}
device=${DEVICE:-cuda} dtype=${DTYPE:-bf16}
bin=$build/bin
mkdir -p "$out"

echo "== profile: $model, microbatch $mb x $seq, $dtype on $device" >&2
"$bin/oobleck-profile" measure --model "$model" --seq-len "$seq" --microbatch-size "$mb" --device "$device" \
  --dtype "$dtype" --out "$out/profile-1node.json" > "$out/profile.txt"
# The same profile with each node's memory cut until a pipeline needs two
# nodes: oobleck-plan then instantiates 5 nodes as pipelines of 2 and 3.
tools/oobleck-tools memory-budget "$out/profile-1node.json" "$out/profile.json" "$out/plan.json" \
  --nodes 5 --fault-tolerance 1 --global-microbatches 8 --pipelines 2 3 --oobleck-plan "$bin/oobleck-plan"
"$bin/oobleck-plan" instantiate --profile "$out/profile.json" --nodes 2 --fault-tolerance 0 \
  --global-microbatches 8 --json "$out/plan-2node.json" > /dev/null
"$bin/oobleck-plan" instantiate --profile "$out/profile-1node.json" --nodes 1 --fault-tolerance 0 \
  --global-microbatches 8 --json "$out/plan-1node.json" > /dev/null
"$bin/oobleck-run" tokenize --text executor/data/corpus.txt --out "$out/tokens.bin" > /dev/null

for run in 5node 2node 1node; do
  plan=$out/plan.json profile=$out/profile.json
  if [ "$run" != 5node ]; then plan=$out/plan-$run.json; fi
  if [ "$run" = 1node ]; then profile=$out/profile-1node.json; fi
  echo "== $run: oobleck-run on $device" >&2
  "$bin/oobleck-run" --plan "$plan" --profile "$profile" --data "$out/tokens.bin" --steps "$steps" \
    --device "$device" --deterministic --metrics "$out/run-$run.jsonl" --chrome-trace "$out/run-$run-trace.json" \
    > "$out/run-$run.txt"
  # As planned (every node its own GPU), and as this run is: one GPU shared
  # by every worker, float64 gradient sums (twice the fp32 bytes), and the
  # tied embedding's gradient all-reduced between first and last stages.
  for model_kind in planned as-run; do
    flags=()
    if [ "$model_kind" = as-run ]; then flags=(--shared-device --gradient-scale 2 --tied-embedding); fi
    "$bin/oobleck-sim" iteration --plan "$plan" --profile "$profile" "${flags[@]}" \
      --json "$out/sim-$run-$model_kind.json" --chrome-trace "$out/sim-$run-$model_kind-trace.json" > /dev/null
    echo "== $run: predicted ($model_kind) against measured" >&2
    tools/oobleck-tools compare-run-sim "$out/sim-$run-$model_kind.json" "$out/sim-$run-$model_kind-trace.json" \
      "$out/run-$run-trace.json" "$out/run-$run.jsonl" --json "$out/compare-$run-$model_kind.json" |
      tee "$out/compare-$run-$model_kind.txt"
  done
done

echo "== the same steps in one process on $device" >&2
"$bin/oobleck-run" --plan "$out/plan.json" --profile "$out/profile.json" --data "$out/tokens.bin" --steps "$steps" \
  --device "$device" --deterministic --single-process --metrics "$out/single.jsonl" > /dev/null
tools/oobleck-tools compare-losses "$out/run-5node.jsonl" "$out/single.jsonl" --table --json "$out/losses.json"

rounds=${SNAPSHOT_ROUNDS:-1}
pooled=(snapshots="$out/run-5node.jsonl")
for round in $(seq 1 "$rounds"); do
  for config in none:0 snapshots:1; do
    name=${config%%:*} every=${config#*:}
    if [ "$round" = 1 ] && [ "$name" = snapshots ]; then continue; fi  # the run above
    echo "== snapshots, round $round/$rounds: --snapshot-every $every" >&2
    "$bin/oobleck-run" --plan "$out/plan.json" --profile "$out/profile.json" --data "$out/tokens.bin" \
      --steps "$steps" --device "$device" --deterministic --snapshot-every "$every" \
      --metrics "$out/run-5node-$name-$round.jsonl" > /dev/null
    pooled+=("$name=$out/run-5node-$name-$round.jsonl")
  done
done
tools/oobleck-tools step-times "${pooled[@]}" --skip 3 --json "$out/snapshots.json"
