#!/usr/bin/env bash
# Snapshots in the agents' memory, measured side by side in one run: GPT-tiny
# on six CPU-like nodes, three 2-node pipelines (f = 2).
#   overhead:  the same job with --snapshot-every 1 (mirrored every 4th, the
#              default), with every snapshot mirrored too, and without,
#              alternated ROUNDS times (default 3), STEPS steps each (default
#              24), the order rotated each round (on this machine the first
#              run of a round is a few per cent slower, whichever it is);
#              the mean and median iteration of the steady state, steps
#              WARM.. (default 12: the agents make their snapshot memory in
#              the first snapshots, and fresh pages cost far more than the
#              copies into them), and their ratios.
#   restarts:  one run with a worker crash (restarted in place) and a node
#              loss (reconfigured): failure to the next completed step for
#              each, from the metrics.
# Outputs in build/bench-snapshots/ (OUT_DIR overrides it; emptied first).
# MODEL=mini NODES=5 FAULT_TOLERANCE=1 MICROBATCHES=10 measures GPT-mini
# instead (its state per worker about ten times GPT-tiny's).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT_DIR:-build/bench-snapshots}
bin=build/bin
rounds=${ROUNDS:-3}
steps=${STEPS:-24}
warm=${WARM:-12}
rm -rf "$out" && mkdir -p "$out"

tools/cluster-setup.sh "${MODEL:-tiny}" "$out" --nodes "${NODES:-6}" --fault-tolerance "${FAULT_TOLERANCE:-2}" \
  --global-microbatches "${MICROBATCHES:-12}"
common=(--plan "$out/plan.json" --profile "$out/profile.json" --data "$out/tokens.bin" --seed 1
        --heartbeat-timeout-ms 5000)

configs=("snapshots:--snapshot-every 1" "mirrored:--snapshot-every 1 --mirror-every 1" "none:--snapshot-every 0")
for round in $(seq 1 "$rounds"); do
  for k in 0 1 2; do
    config=${configs[$(((round - 1 + k) % 3))]}
    name=${config%%:*} flags=${config#*:}
    echo "round $round/$rounds: $flags" >&2
    # shellcheck disable=SC2086  # the flags are words
    "$bin/oobleck-run" "${common[@]}" --steps "$steps" $flags \
      --metrics "$out/overhead-$name-$round.jsonl" > /dev/null 2> "$out/overhead-$name-$round.err"
  done
done

cat > "$out/inject.csv" <<'CSV'
step:4,crash,node1
step:8,remove,node3
CSV
echo "crash and loss" >&2
"$bin/oobleck-run" "${common[@]}" --steps 12 --inject "$out/inject.csv" --metrics "$out/restarts.jsonl" \
  > /dev/null 2> "$out/restarts.err"

python3 - "$out" "$rounds" "$warm" <<'PY'
import json, sys, statistics
out, rounds, warm = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def lines(path):
    return [json.loads(l) for l in open(path)]
def steady(name):
    return [l["iteration_ms"] for r in range(1, rounds + 1) for l in lines(f"{out}/overhead-{name}-{r}.jsonl")
            if l["kind"] == "step" and l["step"] >= warm]
on, mirrored, off = steady("snapshots"), steady("mirrored"), steady("none")
# Paired by round (the three ran back to back): each round's ratio, and
# their mean with a 95 % interval (Student's t), which says whether an
# overhead is told apart from this machine's noise.
def paired(name):
    ratios = []
    for r in range(1, rounds + 1):
        def mean_of(n):
            return statistics.mean(l["iteration_ms"] for l in lines(f"{out}/overhead-{n}-{r}.jsonl")
                                   if l["kind"] == "step" and l["step"] >= warm)
        ratios.append(mean_of(name) / mean_of("none") - 1)
    mean = statistics.mean(ratios)
    if len(ratios) < 2:
        return mean, None
    t95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}.get(len(ratios) - 1, 2.2)
    return mean, t95 * statistics.stdev(ratios) / len(ratios) ** 0.5
def interval(name):
    mean, half = paired(name)
    return f"{100 * mean:+.1f} %" + ("" if half is None else f" ± {100 * half:.1f} %")
m_on, m_mirrored, m_off = statistics.mean(on), statistics.mean(mirrored), statistics.mean(off)
med_on, med_mirrored, med_off = statistics.median(on), statistics.median(mirrored), statistics.median(off)
r = lines(f"{out}/restarts.jsonl")
restart = next(l for l in r if l["kind"] == "restart")
loss = next(l for l in r if l["kind"] == "reconfiguration" and not l["superseded"])
result = {
    "format": "oobleck.bench-snapshots.v3",
    "steady_from_step": warm, "rounds": rounds,
    "step_ms_snapshots": m_on, "step_ms_mirrored_every_step": m_mirrored, "step_ms_none": m_off,
    "overhead": m_on / m_off - 1, "overhead_mirrored_every_step": m_mirrored / m_off - 1,
    "median_step_ms_snapshots": med_on, "median_step_ms_mirrored_every_step": med_mirrored,
    "median_step_ms_none": med_off, "median_overhead": med_on / med_off - 1,
    "paired_overhead": paired("snapshots")[0], "paired_overhead_95": paired("snapshots")[1],
    "paired_overhead_mirrored_every_step": paired("mirrored")[0],
    "paired_overhead_mirrored_every_step_95": paired("mirrored")[1],
    "crash_recovery_ms": restart["recovery_ms"], "crash_detect_ms": restart["detect_ms"],
    "crash_restore_ms": restart["restore_ms"],
    "loss_recovery_ms": loss["recovery_ms"], "loss_detect_ms": loss["detect_ms"],
}
json.dump(result, open(f"{out}/result.json", "w"), indent=1)
print(f"steady step (steps {warm}.., {rounds} rounds alternated), mean / median:\n"
      f"  without snapshots:                             {m_off:.1f} / {med_off:.1f} ms\n"
      f"  snapshots every step, mirrored every 4th:      {m_on:.1f} / {med_on:.1f} ms "
      f"({100 * (m_on / m_off - 1):+.1f} % / {100 * (med_on / med_off - 1):+.1f} %)\n"
      f"  snapshots every step, every one mirrored:      {m_mirrored:.1f} / {med_mirrored:.1f} ms "
      f"({100 * (m_mirrored / m_off - 1):+.1f} % / {100 * (med_mirrored / med_off - 1):+.1f} %)\n"
      f"  paired by round (mean, 95 % interval): mirrored every 4th {interval('snapshots')}, "
      f"every one mirrored {interval('mirrored')}")
print(f"worker crash -> next step: {restart['recovery_ms']:.0f} ms (detect {restart['detect_ms']:.0f}, "
      f"restart and restore {restart['restore_ms']:.0f}); node loss -> next step: {loss['recovery_ms']:.0f} ms "
      f"(detect {loss['detect_ms']:.0f})")
PY
