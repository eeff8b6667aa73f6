#!/usr/bin/env bash
# Regenerates the bundled profiles in profiles/: analytic GPT-3 and Llama
# profiles on A100 and H100 nodes, measured small GPT and Llama models on
# this machine's CPU and the analytic profile fitted to the GPT one. Expects tools/setup.sh to have built build/.
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

# Llama 2 and 3 at their published context lengths, one sequence a microbatch.
for spec in llama2-7b:a100:4096 llama2-7b:h100:4096 llama3-8b:h100:8192 llama2-70b:h100:4096 llama3-70b:h100:8192; do
  IFS=: read -r model hw seq <<< "$spec"
  "$profile" analytic --model "$model" --hardware "$hw-80gb" --microbatch-size 1 --seq-len "$seq" \
    --dtype bf16 --out "profiles/$model-$hw.analytic.json"
done

"$profile" measure --model gpt-mini --microbatch-size 4 --seq-len 128 --device cpu --threads 1 --repeats 9 \
  --out profiles/gpt-mini-cpu.measured.json
"$profile" analytic --model gpt-mini --hardware cpu --fit profiles/gpt-mini-cpu.measured.json \
  --microbatch-size 4 --seq-len 128 --dtype fp32 --out profiles/gpt-mini-cpu.analytic.json
"$profile" measure --model llama-mini --microbatch-size 4 --seq-len 128 --device cpu --threads 1 --repeats 9 \
  --out profiles/llama-mini-cpu.measured.json
