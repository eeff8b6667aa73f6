"""Predicted against measured, per stage: oobleck-sim iteration against oobleck-run.

One plan's iteration as oobleck-sim plays it and as oobleck-run ran it. Per
stage: forward and backward compute summed over the step's microbatches (from
the two Chrome traces, which share one format); overall: the simulated
iteration against the median measured iteration time of the run's steps after
the first (warm-up) ones. With --max-error, exits 1 when the iteration's
relative error exceeds it.

  oobleck-tools compare-run-sim SIM.json SIM_TRACE.json LIVE_TRACE.json METRICS.jsonl
                                [--json OUT] [--skip 2] [--max-error R]
"""
import math
import statistics
import sys

from .common import InputError, add_measured_iteration_options, read_json, read_metrics, relative_error, require, write_json

# Chrome-trace threads from this id up are not stages (communication lanes).
FIRST_NON_STAGE_THREAD = 1000
# oobleck-sim's ops of a tensor-parallel stage's all-reduces: "TP all-reduce F3".
TP_ALLREDUCE_PREFIX = "TP all-reduce "


def add_arguments(parser):
    parser.add_argument("sim", metavar="SIM.json", help="oobleck-sim iteration --json")
    parser.add_argument("sim_trace", metavar="SIM_TRACE.json", help="oobleck-sim iteration --chrome-trace")
    parser.add_argument("live_trace", metavar="LIVE_TRACE.json", help="oobleck-run --chrome-trace")
    parser.add_argument("metrics", metavar="METRICS.jsonl", help="oobleck-run --metrics of the same run")
    parser.add_argument("--json", metavar="OUT", help="write the comparison here")
    add_measured_iteration_options(parser, "|predicted / measured - 1| of the iteration")


def stages(trace_path):
    """(pid, stage) -> that stage's forward, backward and optimizer time in a
    Chrome trace.

    oobleck-sim gives each stage one thread and shows a tensor-parallel pass
    as its compute followed by its all-reduces. oobleck-run gives each worker
    one thread, stage * gpus_per_node + shard, and its passes already contain
    their all-reduces (drawn nested inside them): shard 0 stands for its stage
    and the nested spans are not counted twice."""
    doc = read_json(trace_path)
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise InputError(f"{trace_path}: no traceEvents list")
    about = doc.get("otherData", {}) if isinstance(doc, dict) else {}
    live = isinstance(about, dict) and about.get("source") == "oobleck-run"
    gpus = about.get("gpus_per_node", 1) if live else 1
    if not isinstance(gpus, (int, float)) or gpus < 1 or gpus != int(gpus):
        raise InputError(f"{trace_path}: otherData.gpus_per_node: expected a positive integer, got {gpus!r}")
    gpus = int(gpus)
    names, out = {}, {}
    try:
        for index, e in enumerate(events):
            if e.get("ph") == "M" and e.get("name") == "thread_name":
                names[(e["pid"], e["tid"])] = e["args"]["name"]
        for index, e in enumerate(events):
            if e.get("ph") != "X" or e.get("tid", 0) >= FIRST_NON_STAGE_THREAD:
                continue
            if e["tid"] % gpus != 0:
                continue
            if live and e["name"].startswith(TP_ALLREDUCE_PREFIX):
                continue
            key = (e["pid"], e["tid"] // gpus)
            s = out.setdefault(key, {"name": names.get((e["pid"], e["tid"]), ""), "forward_ms": 0.0, "backward_ms": 0.0,
                                     "optimizer_ms": 0.0, "start": e["ts"], "end": e["ts"] + e["dur"]})
            ms = e["dur"] / 1000.0
            name = e["name"].removeprefix(TP_ALLREDUCE_PREFIX)
            if name.startswith("F"):
                s["forward_ms"] += ms
            elif name.startswith("B"):
                s["backward_ms"] += ms
            elif e["name"] == "optimizer":
                s["optimizer_ms"] += ms
            s["start"] = min(s["start"], e["ts"])
            s["end"] = max(s["end"], e["ts"] + e["dur"])
    except (KeyError, TypeError, AttributeError) as error:
        detail = f"no {error}" if isinstance(error, KeyError) else "malformed"
        raise InputError(f"{trace_path}: trace event {index}: {detail}") from None
    return out


def percent(error):
    return f"{100 * error:+7.1f}%" if math.isfinite(error) else "    inf"


def run(args):
    sim = read_json(args.sim)
    predicted = require(sim, "iteration_ms", args.sim)
    steps = read_metrics(args.metrics, step_fields=("step", "iteration_ms")).steps
    if not steps:
        raise InputError(f"{args.metrics}: no step lines")
    counted = steps[args.skip:] or steps
    measured = statistics.median(s["iteration_ms"] for s in counted)
    simulated, live = stages(args.sim_trace), stages(args.live_trace)
    rows = []
    print(f"{'stage':42s} {'sim F+B ms':>11s} {'run F+B ms':>11s} {'error':>8s}")
    for key in sorted(simulated):
        s, l = simulated[key], live.get(key)
        if l is None:
            continue
        p, m = s["forward_ms"] + s["backward_ms"], l["forward_ms"] + l["backward_ms"]
        error = relative_error(p, m)
        rows.append({"stage": s["name"], "predicted_compute_ms": p, "measured_compute_ms": m,
                     "predicted_forward_ms": s["forward_ms"], "measured_forward_ms": l["forward_ms"],
                     "predicted_backward_ms": s["backward_ms"], "measured_backward_ms": l["backward_ms"],
                     "relative_error": error})
        print(f"{s['name'][:42]:42s} {p:11.2f} {m:11.2f} {percent(error)}")
    error = relative_error(predicted, measured)
    print(f"{'iteration (median of steps ' + str(args.skip) + '+)':42s} {predicted:11.2f} {measured:11.2f} "
          f"{percent(error)}")
    if args.json:
        write_json(args.json, {"predicted_iteration_ms": predicted, "measured_iteration_ms": measured,
                               "relative_error": error, "measured_steps": len(counted), "stages": rows})
    if args.max_error is not None and abs(error) > args.max_error:
        print(f"compare-run-sim: the iteration's prediction is off by {100 * error:+.1f} %, more than "
              f"{100 * args.max_error:g} %", file=sys.stderr)
        return 1
    return 0
