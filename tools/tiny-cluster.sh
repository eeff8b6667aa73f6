#!/usr/bin/env bash
# Sets up a small live run in folder OUT (used by the soak and recovery
# scripts): GPT-tiny on six CPU-like nodes with too little memory for the
# model on one node, planned with f = 2 as three 2-node pipelines of 12
# microbatches, and the bundled corpus as tokens. Writes OUT/hw.json,
# OUT/profile.json, OUT/plan.json and OUT/tokens.bin.
set -euo pipefail
out=$1
bin=build/bin
cat > "$out/hw.json" <<'JSON'
{"name": "small nodes", "gpus_per_node": 1, "gpu_memory_bytes": 4e6, "peak_fp32_flops_per_s": 1e11,
 "memory_bytes_per_s": 2e10, "intra_node_bytes_per_s": 2e9, "inter_node_bytes_per_s": 2e9, "latency_ms": 0.05}
JSON
"$bin/oobleck-profile" analytic --model gpt-tiny --hardware "$out/hw.json" --microbatch-size 2 --seq-len 32 \
  --dtype fp32 --out "$out/profile.json" > /dev/null
"$bin/oobleck-plan" instantiate --profile "$out/profile.json" --nodes 6 --fault-tolerance 2 \
  --global-microbatches 12 --json "$out/plan.json" > /dev/null 2>&1
"$bin/oobleck-run" tokenize --text executor/data/corpus.txt --out "$out/tokens.bin" > /dev/null
