#!/usr/bin/env bash
# Recovery against restart, measured side by side in one run: GPT-tiny on six
# CPU-like nodes, three 2-node pipelines (f = 2).
#   oobleck:  nodes are killed during steps (SIGKILL); the job reconfigures
#             live and redoes the step. Recovery = failure to the next
#             completed step, split into detection, planning, communicators,
#             state copy and the redone step (from the metrics).
#   restart:  the whole job starts again from a checkpoint saved after the
#             last completed step: detection (as measured above) plus the
#             time from launching oobleck-run --resume to its first
#             completed step (processes, rendezvous, loading, the step).
#             Saving the checkpoint and tearing the old job down are not
#             counted, in the restart's favour.
# Prints both, their ratio, and the breakdown (oobleck-tools bench-recovery).
# Outputs in build/bench-recovery/ (OUT_DIR overrides it; the folder is
# emptied first). REPEATS (default 3) restarts are timed; the median is
# reported.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT_DIR:-build/bench-recovery}
bin=build/bin
rm -rf "$out" && mkdir -p "$out"

tools/cluster-setup.sh tiny "$out" --nodes 6 --fault-tolerance 2 --global-microbatches 12
common=(--plan "$out/plan.json" --profile "$out/profile.json" --data "$out/tokens.bin" --seed 1
        --heartbeat-timeout-ms 5000)

# Live recovery: three failures, with a join between them to stay at f = 2.
cat > "$out/inject.csv" <<'CSV'
step:5,remove,node1
step:8,add,node6
step:11,remove,node3
step:14,add,node7
step:17,remove,node6
CSV
"$bin/oobleck-run" "${common[@]}" --steps 20 --inject "$out/inject.csv" --metrics "$out/live.jsonl" \
  > "$out/live.txt" 2> "$out/live.err"

# The checkpoint the restarts start from: the state after step 4.
"$bin/oobleck-run" "${common[@]}" --steps 5 --checkpoint "$out/checkpoint" --checkpoint-every 5 \
  --metrics "$out/before.jsonl" > /dev/null 2>&1

tools/oobleck-tools bench-recovery "$out/live.jsonl" "$out/checkpoint" --out "$out" --repeats "${REPEATS:-3}" \
  --oobleck-run "$bin/oobleck-run" -- "${common[@]}"
