#!/usr/bin/env bash
# The main job on bundled data: replay the p3 spot-instance trace (11.4 h,
# 32 nodes at peak, 167 losses) with GPT-3 175B on 8-GPU A100 nodes and
# compare four recovery policies. Table on stdout; JSON, timeline CSV and an
# SVG plot in build/example/.
set -euo pipefail
cd "$(dirname "$0")/.."
out=build/example
mkdir -p "$out"

build/bin/oobleck-sim replay --trace traces/p3-trace.csv \
  --profile profiles/gpt3-175b-a100.analytic.json \
  --fault-tolerance 1 --global-microbatches 256 --policy all \
  --json "$out/replay.json" --timeline "$out/timeline.csv" --plot "$out/policies.svg"
echo
echo "Wrote $out/replay.json, $out/timeline.csv and $out/policies.svg"
