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
# Prints both, their ratio, and the breakdown. Outputs in build/bench-recovery/.
# REPEATS (default 3) restarts are timed; the median is reported.
set -euo pipefail
cd "$(dirname "$0")/.."
out=build/bench-recovery
bin=build/bin
rm -rf "$out" && mkdir -p "$out"

tools/tiny-cluster.sh "$out"
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

python3 - "$out" "$bin/oobleck-run" "${REPEATS:-3}" "${common[@]}" <<'PY'
import json, os, statistics, subprocess, sys, time
out, program, repeats, common = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
events = [json.loads(l) for l in open(f"{out}/live.jsonl")]
failures = [e for e in events if e.get("event") == "reconfigured" and not e["superseded"] and e["lost"]]
if not failures:
    sys.exit("bench-recovery: no reconfiguration after a failure in the live run")
def median(key): return statistics.median(e[key] for e in failures)
recovery = median("recovery_ms")
detect = median("detect_ms")

# Restart: launch to the first completed step, polled on the metrics file.
launches = []
for i in range(repeats):
    metrics = f"{out}/restart-{i}.jsonl"
    start = time.monotonic()
    job = subprocess.Popen([program, *common, "--steps", "6", "--resume", f"{out}/checkpoint", "--metrics", metrics],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first = None
    while job.poll() is None or first is None:
        if first is None and os.path.exists(metrics) and os.path.getsize(metrics) > 0:
            first = (time.monotonic() - start) * 1000
        if job.poll() is not None and first is None:
            sys.exit(f"bench-recovery: the restarted job exited with {job.returncode} before a step")
        time.sleep(0.002)
    launches.append(first)
launch = statistics.median(launches)
restart = detect + launch

print(f"live recovery after a failure (median of {len(failures)}), failure to the next completed step:")
for key, name in [("detect_ms", "detection"), ("plan_ms", "planning (reconfigure)"),
                  ("communicators_ms", "communicators rebuilt"), ("copy_ms", "layer states copied"),
                  ("resume_ms", "the interrupted step, redone")]:
    print(f"  {name:32s} {median(key):9.1f} ms")
print(f"  {'total':32s} {recovery:9.1f} ms   (each: " + ", ".join(f"{e['recovery_ms']:.0f}" for e in failures) + " ms)")
print(f"restart from a checkpoint of the last step (median of {repeats}):")
print(f"  {'detection':32s} {detect:9.1f} ms")
print(f"  {'launch to first completed step':32s} {launch:9.1f} ms   (each: " + ", ".join(f"{t:.0f}" for t in launches) + " ms)")
print(f"  {'total':32s} {restart:9.1f} ms")
print(f"restart / recovery: {restart / recovery:.1f}x")
PY
