#!/usr/bin/env bash
# Recovery by cause against a restart of the whole job, measured side by side
# in one run: GPT-tiny on six CPU-like nodes, three 2-node pipelines (f = 2).
#   within f:  nodes are killed during steps (SIGKILL); the job reconfigures
#              live, copies the lost layers from surviving replicas and redoes
#              the step. Split into detection, planning, communicators, state
#              copy and the redone step (from the metrics).
#   crash:     a node's worker is killed, its agent lives: a worker forked
#              from the agent's zygote takes its place and reads its state
#              back from the agent's memory (restore: that read; the new worker's
#              start and communicators are printed beside it). The same
#              crashes again with --no-standby-workers, side by side: a new
#              process loads libtorch first.
#   past f:    more is lost than the replicas cover, and the job rolls back:
#              memory: node1 lost during step 5 (two pipelines of 3 and 2
#                nodes follow), then node0 and node2 during step 6: layers
#                held only by them are gone, but node4 held them before the
#                reconfiguration and its agent still has that snapshot
#                (step 4), so the snapshots of the nodes that took them do;
#              mirror: the first stage of every pipeline lost during step 5:
#                the snapshot of step 3 in the next nodes' memory (mirrored
#                every 4th step by default);
#              disk, no snapshots: the same losses with --snapshot-every 0,
#                from the checkpoint of step 3 (--checkpoint-every 2);
#              disk, a node and its mirror: five nodes (pipelines of 3 and 2,
#                f = 1); node0 and node3 (which hold the first layers) and
#                node1 and node4 (their mirrors) lost during step 5, node5
#                started: the checkpoint of step 3, once node5 has joined
#                (node2 alone cannot hold the model), so its start counts.
#              Each past-f row also reports the steps trained again and the
#              time until the interrupted step is done again.
#   master:    the master kills itself during step 5 (SIGKILL) and
#              oobleck-run --resume-master starts at once: from the kill to
#              the restarted master's generation (a new process, the agents
#              and workers reconnecting; they kept their state), and to the
#              next completed step.
#   restart:   the whole job starts again from a checkpoint saved after the
#              last completed step: detection (median within f) plus the time
#              from launching oobleck-run --resume to its first completed
#              step (processes, rendezvous, loading, the step). Saving the
#              checkpoint, tearing the old job down and training lost steps
#              again are not counted, in the restart's favour.
# Prints each cause beside the restart, with ratios (oobleck-tools
# bench-recovery), and writes them to OUT/result.json. Outputs in
# build/bench-recovery/ (OUT_DIR overrides it; the folder is emptied first).
# REPEATS (default 3) restarts are timed; the median is reported.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT_DIR:-build/bench-recovery}
bin=build/bin
repeats=${REPEATS:-3}
if ! [[ $repeats =~ ^[1-9][0-9]*$ ]]; then
  echo "bench-recovery: REPEATS must be a whole number from 1, not '$repeats'" >&2
  exit 2
fi
rm -rf "$out" && mkdir -p "$out"

tools/cluster-setup.sh tiny "$out" --nodes 6 --fault-tolerance 2 --global-microbatches 12
common=(--plan "$out/plan.json" --profile "$out/profile.json" --data "$out/tokens.bin" --seed 1
        --heartbeat-timeout-ms 5000)

# Runs oobleck-run with the injections on stdin: train NAME [ARGS...];
# metrics in OUT/NAME.jsonl, output in OUT/NAME.txt and .err (shown when it
# fails).
train() {
  local name=$1
  shift
  cat > "$out/$name.csv"
  echo "bench-recovery: $name" >&2
  if ! "$bin/oobleck-run" "$@" --inject "$out/$name.csv" --metrics "$out/$name.jsonl" \
      > "$out/$name.txt" 2> "$out/$name.err"; then
    echo "bench-recovery: the $name run failed:" >&2
    cat "$out/$name.err" >&2
    exit 1
  fi
}

# Within f: three losses, with a join between them to stay at f = 2, and
# three crashes. (An injection during step N waits, up to 10 s, for the
# snapshots before N; the first snapshot after a new generation or a restart
# is lost for now, so the crashes come where that is not one waited for.)
train live "${common[@]}" --steps 24 <<'CSV'
step:2,crash,node2
step:5,remove,node1
step:8,add,node6
step:11,remove,node3
step:13,add,node7
step:17,remove,node6
step:20,crash,node4
step:23,crash,node0
CSV

# The same crashes, each restarting a new process.
train crash-no-standby "${common[@]}" --steps 24 --no-standby-workers <<'CSV'
step:2,crash,node2
step:20,crash,node4
step:23,crash,node0
CSV

# The checkpoint the restarts start from: the state after step 4.
"$bin/oobleck-run" "${common[@]}" --steps 5 --checkpoint "$out/checkpoint" --checkpoint-every 5 \
  --metrics "$out/before.jsonl" > /dev/null 2>&1

train past-f-memory "${common[@]}" --steps 8 <<'CSV'
step:5,remove,node1
step:6,remove,node0
step:6,remove,node2
CSV
train past-f-mirror "${common[@]}" --steps 8 <<'CSV'
step:5,remove,node0
step:5,remove,node2
step:5,remove,node4
CSV
train past-f-disk "${common[@]}" --steps 8 --snapshot-every 0 --checkpoint "$out/past-f-disk-checkpoint" \
  --checkpoint-every 2 < "$out/past-f-mirror.csv"

pair=$out/node-and-mirror
tools/cluster-setup.sh tiny "$pair" --nodes 5 --fault-tolerance 1 --global-microbatches 8
train past-f-node-and-mirror --plan "$pair/plan.json" --profile "$pair/profile.json" --data "$pair/tokens.bin" \
  --seed 1 --heartbeat-timeout-ms 5000 --steps 8 --checkpoint "$out/past-f-node-and-mirror-checkpoint" \
  --checkpoint-every 2 <<'CSV'
step:5,remove,node0
step:5,remove,node1
step:5,remove,node3
step:5,remove,node4
step:5,add,node5
CSV

echo "step:5,kill-master,master" > "$out/master.csv"
echo "bench-recovery: master" >&2
if "$bin/oobleck-run" "${common[@]}" --steps 8 --state-dir "$out/master-state" --inject "$out/master.csv" \
    --metrics "$out/master.jsonl" > "$out/master.txt" 2> "$out/master.err"; then
  echo "bench-recovery: the master was to kill itself during step 5, and did not" >&2
  exit 1
fi
if ! "$bin/oobleck-run" --resume-master "$out/master-state" > "$out/master-resumed.txt" \
    2> "$out/master-resumed.err"; then
  echo "bench-recovery: the resumed master failed:" >&2
  cat "$out/master-resumed.err" >&2
  exit 1
fi

tools/oobleck-tools bench-recovery "$out/live.jsonl" "$out/checkpoint" --out "$out" --repeats "$repeats" \
  --master-restart "$out/master.jsonl" "$out/master-state" "$out/master.err" \
  --past-f memory "$out/past-f-memory.jsonl" "past f, from memory" \
  --past-f mirror "$out/past-f-mirror.jsonl" "past f, from mirrors" \
  --past-f checkpoint "$out/past-f-disk.jsonl" "past f, from disk (no snapshots)" \
  --past-f checkpoint "$out/past-f-node-and-mirror.jsonl" "past f, from disk (a node and its mirror)" \
  --crashes-without-standby "$out/crash-no-standby.jsonl" \
  --oobleck-run "$bin/oobleck-run" -- "${common[@]}"
