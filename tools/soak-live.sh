#!/usr/bin/env bash
# Soak test of live recovery (not part of the default test run): GPT-tiny on
# six CPU-like nodes, three 2-node pipelines (f = 2), with --chaos killing
# random nodes at random moments (some during recoveries) and starting new
# ones. Then checks what must hold however the failures fell:
#   - at least MIN_FAILURES removals and MIN_JOINS joins happened;
#   - every step's loss equals the failure-free single-process run's
#     (relative difference <= 1e-4);
#   - every step trained the whole global batch, each sample exactly once,
#     and the steps ran 0..STEPS-1, each once;
#   - no process of the run is left.
# Usage: tools/soak-live.sh [SEED]; STEPS, EVENTS, MEAN_MS, MIN_FAILURES,
# MIN_JOINS override the defaults. Outputs in build/soak/.
set -euo pipefail
cd "$(dirname "$0")/.."
seed=${1:-1}
steps=${STEPS:-400}
events=${EVENTS:-120}
mean_ms=${MEAN_MS:-150}
out=build/soak
bin=build/bin
rm -rf "$out" && mkdir -p "$out"

tools/tiny-cluster.sh "$out"
common=(--plan "$out/plan.json" --profile "$out/profile.json" --data "$out/tokens.bin" --steps "$steps" --seed 5)

tag="soak-$$-$RANDOM"  # marks every process of the run (and only those), to find leftovers
start=$(date +%s)
OOBLECK_SOAK_TAG=$tag "$bin/oobleck-run" "${common[@]}" --chaos "$seed" --chaos-events "$events" --chaos-mean-ms "$mean_ms" \
  --heartbeat-timeout-ms 5000 --metrics "$out/live.jsonl" > "$out/live.txt" 2> "$out/live.err"
echo "soak: live run done in $(( $(date +%s) - start )) s"
"$bin/oobleck-run" "${common[@]}" --single-process --metrics "$out/reference.jsonl" > /dev/null
sleep 1
left=$(grep -l "OOBLECK_SOAK_TAG=$tag" /proc/[0-9]*/environ 2>/dev/null | wc -l || true)

python3 - "$out" "$steps" "$left" "${MIN_FAILURES:-50}" "${MIN_JOINS:-50}" <<'PY'
import json, sys
out, steps, left, min_failures, min_joins = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
live = [json.loads(l) for l in open(f"{out}/live.jsonl")]
reference = [json.loads(l)["loss"] for l in open(f"{out}/reference.jsonl")]
step_lines = [l for l in live if "step" in l and "event" not in l]
events = [l for l in live if l.get("event") == "reconfigured"]
plan = json.load(open(f"{out}/plan.json"))
batch = plan["global_microbatches"] * 2
# Every removal and join shows up in exactly one established reconfiguration.
established = [e for e in events if not e["superseded"]]
failures = sum(len(e["lost"]) for e in established)
joins = sum(len(e["added"]) for e in established)
worst = max(abs(s["loss"] - r) / abs(r) for s, r in zip(step_lines, reference))
problems = []
if [s["step"] for s in step_lines] != list(range(steps)): problems.append("steps are not 0..STEPS-1, each once")
if any(s["step_samples"] != batch for s in step_lines): problems.append("a step did not train the whole batch once")
if step_lines and step_lines[-1]["samples"] != steps * batch: problems.append("sample count is off")
if worst > 1e-4: problems.append(f"losses differ from the reference by {worst:.2e}")
if failures < min_failures: problems.append(f"only {failures} failures (want {min_failures})")
if joins < min_joins: problems.append(f"only {joins} joins (want {min_joins})")
if left: problems.append(f"{left} processes left")
recovery = sorted(e["recovery_ms"] for e in established if e["lost"])
print(f"soak: {steps} steps, {failures} failures and {joins} joins in {len(established)} reconfigurations "
      f"({len(events) - len(established)} superseded by a newer failure mid-recovery)")
if recovery:
    print(f"soak: recovery after a failure: median {recovery[len(recovery)//2]:.0f} ms, max {recovery[-1]:.0f} ms")
print(f"soak: largest relative loss difference to the single-process run: {worst:.2e}")
print(f"soak: processes left: {left}")
if problems:
    print("soak: FAILED: " + "; ".join(problems)); sys.exit(1)
print("soak: passed")
PY
/usr/bin/python3 tools/plot-live.py "$out/live.jsonl" "$out/live.svg" "$out/reference.jsonl"
echo "soak: plot in $out/live.svg"
