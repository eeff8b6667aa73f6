#!/usr/bin/env bash
# The main job on bundled data: plan GPT-3 175B on 30 nodes of 8 A100s that
# must survive f = 3 failures, then replan after two nodes of different
# pipelines fail. Tables on stdout, JSON in build/example/.
set -euo pipefail
cd "$(dirname "$0")/.."
profile=profiles/gpt3-175b-a100.handwritten.json
out=build/example
mkdir -p "$out"

build/bin/oobleck-plan instantiate --profile "$profile" --nodes 30 --fault-tolerance 3 \
  --global-microbatches 128 --json "$out/plan.json"
echo
echo "== node3 and node20 fail"
build/bin/oobleck-plan reconfigure --profile "$profile" --plan "$out/plan.json" \
  --lost node3,node20 --json "$out/after-failures.json"
