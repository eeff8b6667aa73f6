#!/usr/bin/env bash
# The live run, end to end on this machine: profile GPT-mini on this CPU
# (with 130 MB of memory per node, so that the model needs two nodes), plan
# it for 5 nodes with f = 1 (heterogeneous pipelines), and train 10 steps on
# the bundled corpus with one worker process per node, while a node is
# killed during step 3 and a new one joins during step 6. Then the same model
# trained by one process on the same batches, and the largest difference
# between the two runs' losses (exits 1 above 1e-4). Losses,
# reconfigurations and a per-stage timing summary on stdout; profile, plan,
# metrics, a plot and the last step's Chrome trace in build/live/ (OUT_DIR
# overrides it). STEPS overrides the 10 steps.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT_DIR:-build/live}
bin=build/bin
steps=${STEPS:-10}
tools/cluster-setup.sh mini "$out" --nodes 5 --fault-tolerance 1 --global-microbatches 8 --repeats 3
cat "$out/plan.txt" "$out/tokens.txt"
printf 'step:3,remove,node1\nstep:6,add,node5\n' > "$out/inject.csv"
common=(--plan "$out/plan.json" --profile "$out/profile.json" --data "$out/tokens.bin" --steps "$steps")
"$bin/oobleck-run" "${common[@]}" --inject "$out/inject.csv" --metrics "$out/metrics.jsonl" \
  --chrome-trace "$out/trace.json"
echo "== the same model in one process"
"$bin/oobleck-run" "${common[@]}" --single-process --metrics "$out/reference.jsonl" > /dev/null
tools/oobleck-tools compare-losses "$out/metrics.jsonl" "$out/reference.jsonl"
# Debian's python3 has matplotlib (tools/setup.sh installs it).
/usr/bin/python3 tools/oobleck-tools plot-live "$out/metrics.jsonl" "$out/live.svg" "$out/reference.jsonl"
echo "Wrote $out/metrics.jsonl, $out/trace.json and $out/live.svg (loss and time per step, reconfigurations marked)"
