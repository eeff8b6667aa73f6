#!/usr/bin/env bash
# A straggler live, under each choice side by side: GPT-mini measured on
# this CPU, one node slowed to FACTOR (default 0.4) of its CPU time by its
# agent from step 2 on (--inject step:2,slow,node1,FACTOR).
#   one-node pipelines: three nodes of one pipeline each (the model fits a
#       node), 6 microbatches. full: no slowdown; keep: the plan as it is
#       (--stragglers keep); evict: node1 removed at step 2, two pipelines
#       go on; re-split: node1's pipeline trains fewer microbatches once
#       flagged (a re-plan is the same here: a pipeline of one node has no
#       place to move it to); mitigate: whatever the controller prices best
#       (dropping node1 as a spare among the choices).
#   a 3-node pipeline (skipped with SHORT=1): five nodes of 130 MB, a
#       3-node and a 2-node pipeline, 8 microbatches; node1 holds the
#       3-node pipeline's middle stage, its heaviest. full, keep, re-split,
#       and re-plan (node1 moved to the lightest stage, its layers copied).
# For each run: the mean step time over the last WINDOW steps (default 6),
# and the cost model's prediction for those steps at the node speeds
# measured, on this machine's scale (the metrics' predicted_ms), with the
# choice the controller made. Six or five worker processes share this
# machine's cores: a throttled node frees CPU for the others, which the
# measured speeds (relative to the median node) take in.
# Outputs in build/bench-stragglers/ (OUT_DIR overrides it; emptied first);
# the summary also in OUT/bench-stragglers.json. STEPS (default 16).
# SHORT=1: the one-node pipelines only, 10 steps, a window of 4 (about a minute).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT_DIR:-build/bench-stragglers}
bin=build/bin
factor=${FACTOR:-0.4}
steps=${STEPS:-16}
window=${WINDOW:-6}
configs="one-node three-node"
if [ "${SHORT:-0}" = 1 ]; then steps=${STEPS:-10} window=${WINDOW:-4} configs="one-node"; fi
rm -rf "$out" && mkdir -p "$out"

# NODE_CPUS: each node's share of this machine's cores (oobleck-run
# --node-cpus, a cgroup quota): "auto" (the default) gives each node
# cores / nodes where quotas can be set (root), so that a throttled or
# evicted node frees no CPU for the others, as separate machines would not;
# 0 lets the nodes share all cores.
node_cpus=${NODE_CPUS:-auto}
if [ "$node_cpus" = auto ]; then
  node_cpus=0
  if [ "$(id -u)" -eq 0 ] && { [ -e /sys/fs/cgroup/cpu/cpu.cfs_quota_us ] || grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; }; then
    node_cpus=auto
  fi
fi

run() {  # CONFIG NAME FLAGS...
  local config=$1 name=$2
  shift 2
  echo "$config: $name" >&2
  local quota=()
  if [ "$node_cpus" = auto ]; then
    local nodes
    nodes=$(python3 -c "import json,sys; p=json.load(open(sys.argv[1])); print(sum(len(q['nodes']) for q in p['pipelines']) + len(p.get('spare_nodes', [])))" "$out/$config/plan.json")
    quota=(--node-cpus "$(python3 -c "print(round($(nproc) / $nodes, 3))")")
  elif [ "$node_cpus" != 0 ]; then
    quota=(--node-cpus "$node_cpus")
  fi
  "$bin/oobleck-run" --plan "$out/$config/plan.json" --profile "$out/$config/profile.json" \
    --data "$out/$config/tokens.bin" --seed 1 --steps "$steps" --heartbeat-timeout-ms 5000 \
    --metrics "$out/$config-$name.jsonl" "${quota[@]}" "$@" > /dev/null 2> "$out/$config-$name.err"
}

for config in $configs; do
  if [ "$config" = one-node ]; then
    tools/cluster-setup.sh mini "$out/$config" --nodes 3 --fault-tolerance 1 --global-microbatches 6 \
      --memory-mb 400 --repeats 2 > /dev/null
  else
    tools/cluster-setup.sh mini "$out/$config" --nodes 5 --fault-tolerance 1 --global-microbatches 8 \
      --repeats 2 > /dev/null
  fi
  echo "step:2,slow,node1,$factor" > "$out/$config/slow.csv"
  printf 'step:2,slow,node1,%s\nstep:2,remove,node1\n' "$factor" > "$out/$config/evict.csv"
  run "$config" full --stragglers keep
  run "$config" keep --stragglers keep --inject "$out/$config/slow.csv"
  if [ "$config" = one-node ]; then
    run "$config" evict --stragglers keep --inject "$out/$config/evict.csv"
  fi
  run "$config" resplit --stragglers resplit --inject "$out/$config/slow.csv"
  if [ "$config" = one-node ]; then
    run "$config" mitigate --stragglers mitigate --inject "$out/$config/slow.csv"
  fi
  if [ "$config" = three-node ]; then
    run "$config" replan --stragglers replan --inject "$out/$config/slow.csv"
  fi
done

python3 - "$out" "$steps" "$window" "$factor" "$configs" <<'PY'
import json, statistics, sys
out, steps, window, factor, configs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5].split()
def records(path):
    return [json.loads(line) for line in open(path)]
summary = {"factor": float(factor), "steps": steps, "window": window, "configs": {}}
print(f"a straggler at {factor} of its CPU from step 2, steady state over the last {window} of {steps} steps:")
for config in configs:
    rows = {}
    names = ["full", "keep", "evict", "resplit", "mitigate"] if config == "one-node" else ["full", "keep", "resplit", "replan"]
    for name in names:
        lines = records(f"{out}/{config}-{name}.jsonl")
        tail = [l for l in lines if l["kind"] == "step" and l["step"] >= steps - window]
        live = statistics.mean(l["iteration_ms"] for l in tail)
        predicted = [l["predicted_ms"] for l in tail if "predicted_ms" in l]
        gens = [l for l in lines if l["kind"] == "generation"]
        rows[name] = {"step_ms": live, "median_step_ms": statistics.median(l["iteration_ms"] for l in tail),
                      "predicted_ms": statistics.mean(predicted) if predicted else None,
                      "generations": len(gens), "microbatches": gens[-1].get("microbatches"),
                      "choices": [l["chosen"] for l in lines if l["kind"] == "speeds"],
                      "pipelines": gens[-1]["pipelines"]}
    summary["configs"][config] = rows
    print(f"\n{config} pipelines ({'3 nodes, 6 microbatches' if config == 'one-node' else '5 nodes: 3+2, 8 microbatches'}):")
    print(f"  {'choice':<9} {'step ms':>8} {'/ full':>7} {'/ keep':>7} {'model ms':>9} {'live/model':>10}  microbatches")
    for name, r in rows.items():
        model = f"{r['predicted_ms']:9.0f}" if r["predicted_ms"] else f"{'-':>9}"
        ratio = f"{r['step_ms'] / r['predicted_ms']:10.2f}" if r["predicted_ms"] else f"{'-':>10}"
        print(f"  {name:<9} {r['step_ms']:8.0f} {r['step_ms'] / rows['full']['step_ms']:7.2f} "
              f"{r['step_ms'] / rows['keep']['step_ms']:7.2f} {model} {ratio}  {r['microbatches']}"
              + (f"  ({', '.join(r['choices'])})" if r["choices"] else ""))
json.dump(summary, open(f"{out}/bench-stragglers.json", "w"), indent=1)
PY
