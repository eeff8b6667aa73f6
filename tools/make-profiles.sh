#!/usr/bin/env bash
# Regenerates the bundled profiles in profiles/: analytic GPT-3 profiles on
# A100 and H100 nodes, a measured small GPT on this machine's CPU and the
# analytic profile fitted to it. Expects tools/setup.sh to have built build/.
set -euo pipefail
cd "$(dirname "$0")/.."
profile=build/bin/oobleck-profile

for hw in a100 h100; do
  for spec in gpt3-1.3b:4 gpt3-2.7b:4 gpt3-6.7b:2 gpt3-13b:1 gpt3-175b:1; do
    model=${spec%%:*} mb=${spec##*:}
    "$profile" analytic --model "$model" --hardware "$hw-80gb" --microbatch-size "$mb" --seq-len 2048 \
      --dtype bf16 --out "profiles/$model-$hw.analytic.json"
  done
done

"$profile" measure --model gpt-mini --microbatch-size 4 --seq-len 128 --device cpu --threads 1 --repeats 9 \
  --out profiles/gpt-mini-cpu.measured.json
"$profile" analytic --model gpt-mini --hardware cpu --fit profiles/gpt-mini-cpu.measured.json \
  --microbatch-size 4 --seq-len 128 --dtype fp32 --out profiles/gpt-mini-cpu.analytic.json
