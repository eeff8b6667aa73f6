#!/usr/bin/env bash
# Measured against predicted, side by side in one run: profile GPT-mini on
# this CPU, plan a 2-node pipeline from that profile, predict its iteration
# with `oobleck-sim iteration`, train it live with `oobleck-run` (2 worker
# processes, 1 thread each) and print both times and their ratio; then train
# the same steps in one process on one thread, and print how much of a core's
# work each of the run's cores did, against what the plan's stages allow.
# Expects tools/setup.sh to have built build/. Outputs in build/bench-run/
# (OUT_DIR overrides it). STEPS (default 12) steps of MICROBATCHES (default
# 8) microbatches are trained.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT_DIR:-build/bench-run}
bin=build/bin
steps=${STEPS:-12}
microbatches=${MICROBATCHES:-8}

# Memory for one node too small for the whole model: the plan is one
# pipeline of two stages, one per process.
tools/cluster-setup.sh mini "$out" --nodes 2 --fault-tolerance 0 --global-microbatches "$microbatches" --repeats 5
# The optimizer streams its state at the copy bandwidth the profile measured.
tools/oobleck-tools sim-scenario "$out/profile.json" "$out/scenario.json"
# As oobleck-run trains: the tied embedding's gradient summed between the two
# stages, gradients summed in float64 (twice the fp32 bytes).
"$bin/oobleck-sim" iteration --plan "$out/plan.json" --profile "$out/profile.json" \
  --scenario "$out/scenario.json" --tied-embedding --gradient-scale 2 \
  --json "$out/sim.json" --chrome-trace "$out/sim-trace.json" > /dev/null
# (Without snapshots, which the iteration does not model: tools/bench-snapshots.sh
# measures what they cost.)
"$bin/oobleck-run" --plan "$out/plan.json" --profile "$out/profile.json" --data "$out/tokens.bin" \
  --steps "$steps" --threads 1 --snapshot-every 0 --metrics "$out/metrics.jsonl" --chrome-trace "$out/run-trace.json" \
  > "$out/run.txt"

"$bin/oobleck-run" --plan "$out/plan.json" --profile "$out/profile.json" --data "$out/tokens.bin" \
  --steps "$steps" --threads 1 --single-process --metrics "$out/single.jsonl" > /dev/null
tools/oobleck-tools run-vs-sim "$out/plan.json" "$out/sim.json" "$out/metrics.jsonl" --single "$out/single.jsonl"
echo "Chrome traces to open side by side: $out/run-trace.json and $out/sim-trace.json"
