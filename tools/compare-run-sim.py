#!/usr/bin/env python3
"""Predicted against measured: one plan's iteration as oobleck-sim plays it
and as oobleck-run ran it. Per stage: forward and backward compute summed
over the step's microbatches (from the two Chrome traces, which share one
format); overall: the simulated iteration against the median measured
iteration time of the run's steps after the first (warm-up) ones.

  compare-run-sim.py SIM.json SIM_TRACE.json LIVE_TRACE.json METRICS.jsonl [--json OUT] [--skip N]
"""
import argparse
import json
import statistics


def stages(trace_path):
    doc = json.load(open(trace_path))
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    names, out = {}, {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            names[(e["pid"], e["tid"])] = e["args"]["name"]
    for e in events:
        if e.get("ph") != "X" or e.get("tid", 0) >= 1000:
            continue
        key = (e["pid"], e["tid"])
        s = out.setdefault(key, {"name": names.get(key, ""), "forward_ms": 0.0, "backward_ms": 0.0,
                                 "optimizer_ms": 0.0, "start": e["ts"], "end": e["ts"] + e["dur"]})
        kind = e["name"][:1]
        ms = e["dur"] / 1000.0
        if kind == "F":
            s["forward_ms"] += ms
        elif kind == "B":
            s["backward_ms"] += ms
        elif e["name"] == "optimizer":
            s["optimizer_ms"] += ms
        s["start"] = min(s["start"], e["ts"])
        s["end"] = max(s["end"], e["ts"] + e["dur"])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("sim", "sim_trace", "live_trace", "metrics"):
        ap.add_argument(name)
    ap.add_argument("--json", help="write the comparison here")
    ap.add_argument("--skip", type=int, default=2, help="warm-up steps left out of the measured median")
    a = ap.parse_args()
    sim_path, sim_trace, live_trace, metrics_path, out_path, skip = (a.sim, a.sim_trace, a.live_trace, a.metrics,
                                                                     a.json, a.skip)
    sim = json.load(open(sim_path))
    steps = [json.loads(l) for l in open(metrics_path) if l.strip()]
    steps = [s for s in steps if "event" not in s and "iteration_ms" in s]
    measured = statistics.median(s["iteration_ms"] for s in steps[skip:] or steps)
    predicted = sim["iteration_ms"]
    simulated, live = stages(sim_trace), stages(live_trace)
    rows = []
    print(f"{'stage':42s} {'sim F+B ms':>11s} {'run F+B ms':>11s} {'error':>8s}")
    for key in sorted(simulated):
        s, l = simulated[key], live.get(key)
        if l is None:
            continue
        p, m = s["forward_ms"] + s["backward_ms"], l["forward_ms"] + l["backward_ms"]
        rows.append({"stage": s["name"], "predicted_compute_ms": p, "measured_compute_ms": m,
                     "predicted_forward_ms": s["forward_ms"], "measured_forward_ms": l["forward_ms"],
                     "predicted_backward_ms": s["backward_ms"], "measured_backward_ms": l["backward_ms"],
                     "relative_error": p / m - 1})
        print(f"{s['name'][:42]:42s} {p:11.2f} {m:11.2f} {100 * (p / m - 1):+7.1f}%")
    print(f"{'iteration (median of steps ' + str(skip) + '+)':42s} {predicted:11.2f} {measured:11.2f} "
          f"{100 * (predicted / measured - 1):+7.1f}%")
    result = {"predicted_iteration_ms": predicted, "measured_iteration_ms": measured,
              "relative_error": predicted / measured - 1, "measured_steps": len(steps[skip:] or steps),
              "stages": rows}
    if out_path:
        with open(out_path, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
