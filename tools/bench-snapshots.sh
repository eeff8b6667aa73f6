#!/usr/bin/env bash
# Snapshots in the agents' memory, measured side by side in one run: GPT-tiny
# on six CPU-like nodes, three 2-node pipelines (f = 2).
#   overhead:  the same job with --snapshot-every 1 and 0, alternated ROUNDS
#              times (default 3), STEPS steps each (default 12); the mean
#              iteration of steps 2.. of each, and their ratio.
#   restarts:  one run with a worker crash (restarted in place) and a node
#              loss (reconfigured): failure to the next completed step for
#              each, from the metrics.
# Outputs in build/bench-snapshots/ (OUT_DIR overrides it; emptied first).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT_DIR:-build/bench-snapshots}
bin=build/bin
rounds=${ROUNDS:-3}
steps=${STEPS:-12}
rm -rf "$out" && mkdir -p "$out"

tools/cluster-setup.sh tiny "$out" --nodes 6 --fault-tolerance 2 --global-microbatches 12
common=(--plan "$out/plan.json" --profile "$out/profile.json" --data "$out/tokens.bin" --seed 1
        --heartbeat-timeout-ms 5000)

for round in $(seq 1 "$rounds"); do
  for every in 1 0; do
    echo "round $round/$rounds: --snapshot-every $every" >&2
    "$bin/oobleck-run" "${common[@]}" --steps "$steps" --snapshot-every "$every" \
      --metrics "$out/overhead-$every-$round.jsonl" > /dev/null 2> "$out/overhead-$every-$round.err"
  done
done

cat > "$out/inject.csv" <<'CSV'
step:4,crash,node1
step:8,remove,node3
CSV
echo "crash and loss" >&2
"$bin/oobleck-run" "${common[@]}" --steps 12 --inject "$out/inject.csv" --metrics "$out/restarts.jsonl" \
  > /dev/null 2> "$out/restarts.err"

python3 - "$out" "$rounds" <<'PY'
import json, sys, statistics
out, rounds = sys.argv[1], int(sys.argv[2])
def lines(path):
    return [json.loads(l) for l in open(path)]
def mean_step(path):
    steps = [l["iteration_ms"] for l in lines(path) if l["kind"] == "step" and l["step"] >= 2]
    return statistics.mean(steps)
on = [mean_step(f"{out}/overhead-1-{r}.jsonl") for r in range(1, rounds + 1)]
off = [mean_step(f"{out}/overhead-0-{r}.jsonl") for r in range(1, rounds + 1)]
m_on, m_off = statistics.mean(on), statistics.mean(off)
r = lines(f"{out}/restarts.jsonl")
restart = next(l for l in r if l["kind"] == "restart")
loss = next(l for l in r if l["kind"] == "reconfiguration" and not l["superseded"])
result = {
    "format": "oobleck.bench-snapshots.v1",
    "step_ms_snapshots": m_on, "step_ms_none": m_off, "overhead": m_on / m_off - 1,
    "rounds_snapshots_ms": on, "rounds_none_ms": off,
    "crash_recovery_ms": restart["recovery_ms"], "crash_detect_ms": restart["detect_ms"],
    "crash_restore_ms": restart["restore_ms"],
    "loss_recovery_ms": loss["recovery_ms"], "loss_detect_ms": loss["detect_ms"],
}
json.dump(result, open(f"{out}/result.json", "w"), indent=1)
print(f"step with snapshots every step: {m_on:.1f} ms, without: {m_off:.1f} ms "
      f"(overhead {100 * (m_on / m_off - 1):+.1f} %, {rounds} rounds alternated)")
print(f"worker crash -> next step: {restart['recovery_ms']:.0f} ms (detect {restart['detect_ms']:.0f}, "
      f"restart and restore {restart['restore_ms']:.0f}); node loss -> next step: {loss['recovery_ms']:.0f} ms "
      f"(detect {loss['detect_ms']:.0f})")
PY
