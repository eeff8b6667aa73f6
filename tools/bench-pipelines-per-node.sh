#!/usr/bin/env bash
# Pipelines sharing a node against one pipeline over the whole node, live
# and predicted, side by side in one run: GPT-mini measured on this CPU as
# one node of two "GPUs" (a worker process each, 1 thread) with memory for
# the whole model on one of them; `oobleck-plan instantiate
# --pipelines-per-node 1` gives one pipeline of two stages, `2` two
# one-stage pipelines (data parallel within the node). Each plan is
# predicted by `oobleck-sim iteration` (as oobleck-run trains: the tied
# embedding's gradient summed between stages, float64 gradient sums) and
# trained live ROUNDS times (default 2, alternated), STEPS steps each
# (default 8); prints the median steps, their ratio and each prediction's
# error. Outputs in build/bench-pipelines-per-node/ (OUT_DIR overrides it).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT_DIR:-build/bench-pipelines-per-node}
bin=build/bin
rounds=${ROUNDS:-2}
steps=${STEPS:-8}
rm -rf "$out" && mkdir -p "$out"

tools/cluster-setup.sh mini "$out" --nodes 1 --fault-tolerance 0 --global-microbatches 8 --gpus-per-node 2 \
  --memory-mb 400 --repeats 3
tools/oobleck-tools sim-scenario "$out/profile.json" "$out/scenario.json"
measured=() predicted=()
for r in 1 2; do
  "$bin/oobleck-plan" instantiate --profile "$out/profile.json" --nodes 1 --fault-tolerance 0 \
    --global-microbatches 8 --pipelines-per-node "$r" --json "$out/plan-r$r.json" > "$out/plan-r$r.txt"
  "$bin/oobleck-sim" iteration --plan "$out/plan-r$r.json" --profile "$out/profile.json" \
    --scenario "$out/scenario.json" --tied-embedding --gradient-scale 2 --json "$out/sim-r$r.json" > /dev/null
  predicted+=("R$r=$out/sim-r$r.json")
done
for round in $(seq 1 "$rounds"); do
  for r in 1 2; do
    echo "round $round/$rounds: --pipelines-per-node $r" >&2
    "$bin/oobleck-run" --plan "$out/plan-r$r.json" --profile "$out/profile.json" --data "$out/tokens.bin" \
      --steps "$steps" --threads 1 --snapshot-every 0 --metrics "$out/run-r$r-$round.jsonl" > /dev/null
    measured+=("R$r=$out/run-r$r-$round.jsonl")
  done
done
args=()
for p in "${predicted[@]}"; do args+=(--predicted "$p"); done
tools/oobleck-tools step-times "${measured[@]}" "${args[@]}" --json "$out/step-times.json"
