#!/usr/bin/env bash
# Recovery after a node loss against what users run today, side by side in
# one run: GPT-tiny on six processes, the same batch and optimizer.
#   oobleck:   six CPU-like nodes, three 2-node pipelines (f = 2); nodes are
#              killed during steps (SIGKILL), with joins between to stay at
#              f = 2; the job reconfigures live. Recovery = the kill to the
#              next completed step (median, from the metrics). Then workers
#              alone are killed (crash: their agents live), as torchrun's one
#              process is, and restarted in place (a worker forked from the
#              node's zygote takes each one's place).
#   torchrun:  the same training under PyTorch DDP (tools/torchrun_gpt_ddp.py:
#              Gloo on CPU, one thread per process, a checkpoint every step),
#              launched by torchrun --standalone --nproc_per_node=6. One
#              worker is killed during a step (SIGKILL); torchrun restarts all
#              six and they resume from the checkpoint. Recovery = the kill to
#              the next completed step, with --monitor_interval 0.01 s (torchrun
#              takes any interval above 0; its looks then cost about 3 % of a
#              core, at 0.001 s 10 %, taken from the workers) and with its
#              default of 5 s.
# Prints both, the ratios torchrun / oobleck, the breakdowns and the ceiling
# (torchrun's restart over oobleck's redone step alone)
# (oobleck-tools bench-torchrun; also in OUT/bench-torchrun.json).
# Needs Debian's python3-torch (torchrun): installed when missing
# (tools/install-packages.sh). Outputs in build/bench-vs-torchrun/ (OUT_DIR overrides it; emptied
# first). REPEATS (default 3) kills per monitor interval; the median counts.
# SHORT=1: one failure for oobleck and one kill per interval (1 to 2 minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT_DIR:-build/bench-vs-torchrun}
bin=build/bin
repeats=${REPEATS:-3}
if [ "${SHORT:-0}" = 1 ]; then repeats=${REPEATS:-1}; fi

tools/install-packages.sh bench-vs-torchrun python3-torch >&2  # (torchrun)

rm -rf "$out" && mkdir -p "$out"
tools/cluster-setup.sh tiny "$out" --nodes 6 --fault-tolerance 2 --global-microbatches 12

# Live recovery: failures with a join between them to stay at f = 2.
if [ "${SHORT:-0}" = 1 ]; then
  steps=10
  printf 'step:5,remove,node1\nstep:8,crash,node0\n' > "$out/inject.csv"
else
  steps=28
  cat > "$out/inject.csv" <<'CSV'
step:5,remove,node1
step:8,add,node6
step:11,remove,node3
step:14,add,node7
step:17,remove,node6
step:20,crash,node0
step:23,crash,node2
step:26,crash,node4
CSV
fi
echo "oobleck: $steps steps, $(grep -c remove "$out/inject.csv") nodes killed," \
  "$(grep -c crash "$out/inject.csv") workers crashed" >&2
"$bin/oobleck-run" --plan "$out/plan.json" --profile "$out/profile.json" --data "$out/tokens.bin" --seed 1 \
  --heartbeat-timeout-ms 5000 --steps "$steps" --inject "$out/inject.csv" --metrics "$out/live.jsonl" \
  > "$out/live.txt" 2> "$out/live.err"

tools/oobleck-tools bench-torchrun "$out/live.jsonl" --out "$out" --repeats "$repeats" --intervals 0.01 5 \
  --processes 6 --torchrun /usr/bin/torchrun -- \
  --profile "$out/profile.json" --plan "$out/plan.json" --data "$out/tokens.bin" --seed 1
