#!/usr/bin/env bash
# Measures per-layer profiles of GPT-2 and GPT-3 models on this machine's
# first CUDA GPU with oobleck-profile, one file per model, microbatch size
# and dtype: OUT/MODEL-TAG-mbN-DTYPE.measured.json.
#
#   tools/measure-gpu.sh BUILD_DIR OUT_DIR TAG [MODEL:SEQ:MB:DTYPE ...]
#
# Without specs: GPT-2 medium and XL (1024 tokens) and GPT-3 1.3B and 2.7B
# (2048 tokens) in bf16 at microbatch sizes 1 and 4, and GPT-2 medium in fp32.
set -euo pipefail
build=${1:?build folder}
out=${2:?output folder}
tag=${3:?device tag, e.g. h200}
shift 3
specs=("$@")
if ((${#specs[@]} == 0)); then
  for mb in 1 4; do
    specs+=(gpt2-medium:1024:$mb:bf16 gpt2-xl:1024:$mb:bf16 gpt3-1.3b:2048:$mb:bf16 gpt3-2.7b:2048:$mb:bf16)
  done
  specs+=(gpt2-medium:1024:1:fp32 gpt2-medium:1024:4:fp32)
fi
mkdir -p "$out"
for spec in "${specs[@]}"; do
  IFS=: read -r model seq mb dtype <<<"$spec"
  file="$out/$model-$tag-mb$mb-$dtype.measured.json"
  echo "measure-gpu: $model, $seq tokens, microbatch $mb, $dtype -> $file" >&2
  "$build/bin/oobleck-profile" measure --model "$model" --seq-len "$seq" --microbatch-size "$mb" --device cuda \
    --dtype "$dtype" --out "$file"
done
