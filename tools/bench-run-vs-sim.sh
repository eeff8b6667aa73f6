#!/usr/bin/env bash
# Measured against predicted, side by side in one run: profile GPT-mini on
# this CPU, plan a 2-node pipeline from that profile, predict its iteration
# with `oobleck-sim iteration`, train it live with `oobleck-run` (2 worker
# processes, 1 thread each) and print both times and their ratio.
# Expects tools/setup.sh to have built build/. Outputs in build/bench-run/.
set -euo pipefail
cd "$(dirname "$0")/.."
out=build/bench-run
mkdir -p "$out"
bin=build/bin
steps=${STEPS:-12}

# Memory for one node too small for the whole model: the plan is one
# pipeline of two stages, one per process.
"$bin/oobleck-profile" measure --model gpt-mini --microbatch-size 4 --seq-len 128 --threads 1 --repeats 5 \
  --memory-bytes 130000000 --out "$out/profile.json" > "$out/profile.txt"
"$bin/oobleck-plan" instantiate --profile "$out/profile.json" --nodes 2 --fault-tolerance 0 \
  --global-microbatches 8 --json "$out/plan.json" > /dev/null
copy=$(python3 -c "import json; print(json.load(open('$out/profile.json'))['measured']['copy_bytes_per_s'])")
echo "{\"cluster\": {\"device_memory_bytes_per_s\": $copy}}" > "$out/scenario.json"
# As oobleck-run trains: the tied embedding's gradient summed between the two
# stages, gradients summed in float64 (twice the fp32 bytes).
"$bin/oobleck-sim" iteration --plan "$out/plan.json" --profile "$out/profile.json" \
  --scenario "$out/scenario.json" --tied-embedding --gradient-scale 2 \
  --json "$out/sim.json" --chrome-trace "$out/sim-trace.json" > /dev/null
"$bin/oobleck-run" tokenize --text executor/data/corpus.txt --out "$out/tokens.bin" > /dev/null
"$bin/oobleck-run" --plan "$out/plan.json" --profile "$out/profile.json" --data "$out/tokens.bin" \
  --steps "$steps" --threads 1 --metrics "$out/metrics.jsonl" --chrome-trace "$out/run-trace.json" > "$out/run.txt"

python3 - "$out" <<'PY'
import json, statistics, sys
out = sys.argv[1]
plan = json.load(open(f"{out}/plan.json"))
sim = json.load(open(f"{out}/sim.json"))
steps = [json.loads(line) for line in open(f"{out}/metrics.jsonl")]
measured = statistics.median(s["iteration_ms"] for s in steps[2:])  # after warm-up
predicted = sim["iteration_ms"]
shape = " + ".join(f"{len(p['nodes'])}-node pipeline, {p['microbatches']} microbatches" for p in plan["pipelines"])
print(f"plan: {shape}")
print(f"measured by oobleck-run (median of steps 2..{len(steps) - 1}): {measured:9.2f} ms")
print(f"predicted by oobleck-sim iteration:                 {predicted:9.2f} ms")
print(f"planner's formula:                                  {plan['iteration_ms']:9.2f} ms")
print(f"measured / predicted: {measured / predicted:.3f}")
PY
echo "Chrome traces to open side by side: $out/run-trace.json and $out/sim-trace.json"
