#!/usr/bin/env bash
# The live run, end to end on this machine: profile GPT-mini on this CPU
# (with 130 MB of memory per node, so that the model needs two nodes), plan
# it for 5 nodes with f = 1 (heterogeneous pipelines), and train 10 steps on
# the bundled corpus with one worker process per node. Losses and a
# per-stage timing summary on stdout; profile, plan, metrics and the last
# step's Chrome trace in build/live/.
set -euo pipefail
cd "$(dirname "$0")/.."
out=build/live
mkdir -p "$out"
bin=build/bin
"$bin/oobleck-profile" measure --model gpt-mini --microbatch-size 4 --seq-len 128 --threads 1 --repeats 3 \
  --memory-bytes 130000000 --out "$out/profile.json" > /dev/null
"$bin/oobleck-plan" instantiate --profile "$out/profile.json" --nodes 5 --fault-tolerance 1 \
  --global-microbatches 8 --json "$out/plan.json"
"$bin/oobleck-run" tokenize --text executor/data/corpus.txt --out "$out/tokens.bin"
"$bin/oobleck-run" --plan "$out/plan.json" --profile "$out/profile.json" --data "$out/tokens.bin" \
  --steps "${STEPS:-10}" --metrics "$out/metrics.jsonl" --chrome-trace "$out/trace.json"
echo "Wrote $out/metrics.jsonl and $out/trace.json"
