"""The planner's predicted iteration against the one the simulator plays, over a grid of profiles, node counts and f.

For each profile, node count N and fault tolerance f: `oobleck-plan
instantiate` chooses a plan, `oobleck-sim iteration` plays it, and the
planner's iteration_ms is compared with the played one. Prints the mean
error, how many cases are within --tolerance, and the worst cases; with
--json, every case.

Each case also gets the iteration reckoned here, from the plan's stages
and the profile's links, with each pipeline's steady state at 1F1B's
period: the longest of the slowest stage's forward and backward, of each
stage-to-stage transfer, and, for each run of consecutive stages s..e, (the
forwards and backwards of its stages plus both transfers between each pair
of them) / (e - s + 1). Stage s holds S - s microbatches in flight, and its
backward of microbatch m waits for the round trip through the later stages
before its forward of m + S - s can start; stage e's forward of m + S - s
precedes its backward of m + e - s + 1, so every run cycles. The planner
weighs the same period in its searches (planner/src/steady_period.h), so
the "cycle" column is a check on it written apart; the prediction itself
plays each pipeline's passes in 1F1B order (planner/src/played_pipeline.h),
and a planner priced at the slowest stage alone shows here how far that
misses.

  oobleck-tools plan-vs-sim [--bin build/bin] [--nodes 8 64 512 2048]
      [--fault-tolerance 0 4] [--global-microbatches 4096] [--tolerance 0.05]
      [--json OUT.json] PROFILE.json...

Exit 1 when a case is beyond the tolerance, 2 when a program fails for a
reason other than "no plan" (a case with no plan is listed and skipped).
"""
import json
import os
import sys
import tempfile

from .common import InputError, ProgramError, read_json, require, run_program, write_json


def add_arguments(parser):
    parser.add_argument("profiles", nargs="+", metavar="PROFILE.json", help="profiles to plan with")
    parser.add_argument("--bin", default="build/bin", help="folder of oobleck-plan and oobleck-sim (%(default)s)")
    parser.add_argument("--nodes", type=int, nargs="+", default=[8, 64, 512, 2048], help="node counts")
    parser.add_argument("--fault-tolerance", type=int, nargs="+", default=[0, 4], help="values of f")
    parser.add_argument("--global-microbatches", type=int, default=4096, help="B (%(default)s)")
    parser.add_argument("--tolerance", type=float, default=0.05,
                        help="largest |predicted / played - 1| accepted (default: %(default)g)")
    parser.add_argument("--json", metavar="OUT.json", help="write every case here")
    parser.add_argument("--worst", type=int, default=10, help="worst cases printed (%(default)s)")


def _stage_ms(stage, where):
    return (require(stage, "forward_ms", where) + require(stage, "backward_ms", where))


def cycle_bound_iteration_ms(plan, profile, where):
    """The plan's iteration with each pipeline's steady state at 1F1B's period
    (module docstring): its predicted iteration, less its pipelines' time,
    plus the slowest pipeline at that period."""
    hardware = require(profile, "hardware", where, lambda v: isinstance(v, dict), "an object")
    layers = require(profile, "layers", where, lambda v: isinstance(v, list), "a list")
    latency = require(hardware, "latency_ms", where)

    def transfer_ms(boundary, same_node, gpus):
        # Between nodes, over the network cards of the sending stage's GPUs.
        link = hardware["intra_node_bytes_per_s"] if same_node else hardware["inter_node_bytes_per_s"] * gpus
        return layers[boundary - 1]["output_bytes"] / link * 1000 + latency

    slowest_at_period = 0.0
    for p, pipeline in enumerate(require(plan, "pipelines", where, lambda v: isinstance(v, list), "a list")):
        stages = pipeline["stages"]
        m = pipeline["microbatches"]
        compute = [_stage_ms(s, f"{where}: pipelines[{p}]") for s in stages]
        transfers = [transfer_ms(stages[i]["layers"][1], stages[i]["node"] == stages[i + 1]["node"],
                                 stages[i].get("gpus", 1))
                     for i in range(len(stages) - 1)]
        first = sum(compute) + 2 * sum(transfers)
        count = len(stages)
        cycle = 0.0
        for s in range(count):
            run = 0.0
            for e in range(s, count):
                run += compute[e] + (2 * transfers[e - 1] if e > s else 0.0)
                cycle = max(cycle, run / (e - s + 1))
        period = max([max(compute), cycle] + transfers)
        slowest_at_period = max(slowest_at_period, first + (m - 1) * period)
    return require(plan, "iteration_ms", where) - require(plan, "pipelines_ms", where) + slowest_at_period


def one_case(bin_dir, profile_path, profile, nodes, f, microbatches, folder):
    name = os.path.basename(profile_path)
    plan_path = os.path.join(folder, f"{name}-{nodes}-{f}.plan.json")
    try:
        run_program(os.path.join(bin_dir, "oobleck-plan"), "instantiate", "--profile", profile_path, "--nodes",
                    str(nodes), "--fault-tolerance", str(f), "--global-microbatches", str(microbatches), "--json",
                    plan_path)
    except ProgramError as error:
        if "no plan" in str(error):
            return {"profile": name, "nodes": nodes, "fault_tolerance": f, "skipped": "no plan"}
        raise
    played = json.loads(run_program(os.path.join(bin_dir, "oobleck-sim"), "iteration", "--plan", plan_path,
                                    "--profile", profile_path, "--json", "-").stdout)
    plan = read_json(plan_path)
    predicted = require(plan, "iteration_ms", plan_path)
    played_ms = require(played, "iteration_ms", "oobleck-sim iteration")
    at_period = cycle_bound_iteration_ms(plan, profile, plan_path)
    return {"profile": name, "nodes": nodes, "fault_tolerance": f, "predicted_ms": predicted, "played_ms": played_ms,
            "error": predicted / played_ms - 1, "cycle_bound_ms": at_period, "cycle_bound_error": at_period / played_ms - 1}


def run(args):
    for value, flag in [(args.global_microbatches, "--global-microbatches")] + [(n, "--nodes") for n in args.nodes]:
        if value < 1:
            raise InputError(f"{flag}: expected positive integers, got {value}")
    if any(f < 0 for f in args.fault_tolerance):
        raise InputError("--fault-tolerance: expected non-negative integers")
    profiles = [(path, read_json(path)) for path in args.profiles]
    cases = []
    with tempfile.TemporaryDirectory(prefix="plan-vs-sim-") as folder:
        if os.isatty(2):
            print(file=sys.stderr)
        total = len(profiles) * len(args.nodes) * len(args.fault_tolerance)
        for path, profile in profiles:
            for nodes in args.nodes:
                for f in args.fault_tolerance:
                    cases.append(one_case(args.bin, path, profile, nodes, f, args.global_microbatches, folder))
                    print(f"plan-vs-sim: {len(cases)}/{total}", end="\r", flush=True, file=sys.stderr)
    compared = [c for c in cases if "skipped" not in c]
    if not compared:
        raise InputError("no case had a plan")
    within = sum(abs(c["error"]) <= args.tolerance for c in compared)
    within_cycle = sum(abs(c["cycle_bound_error"]) <= args.tolerance for c in compared)
    mean = sum(abs(c["error"]) for c in compared) / len(compared)
    mean_cycle = sum(abs(c["cycle_bound_error"]) for c in compared) / len(compared)
    print(f"{len(compared)} of {len(cases)} cases planned and played "
          f"(B = {args.global_microbatches} microbatches)")
    print(f"  the planner's prediction:   mean error {100 * mean:.1f} %, within {100 * args.tolerance:g} %: "
          f"{within} of {len(compared)}")
    print(f"  reckoned here (cycle):      mean error {100 * mean_cycle:.1f} %, within {100 * args.tolerance:g} %: "
          f"{within_cycle} of {len(compared)}")
    print(f"  worst cases:\n  {'profile':<44} {'nodes':>5} {'f':>2} {'predicted':>10} {'played':>10} {'error':>8}"
          f" {'cycle':>8}")
    for c in sorted(compared, key=lambda c: -abs(c["error"]))[:args.worst]:
        print(f"  {c['profile']:<44} {c['nodes']:>5} {c['fault_tolerance']:>2} {c['predicted_ms']:>10.1f} "
              f"{c['played_ms']:>10.1f} {100 * c['error']:>+7.1f}% {100 * c['cycle_bound_error']:>+7.1f}%")
    for c in cases:
        if "skipped" in c:
            print(f"  skipped: {c['profile']} at {c['nodes']} nodes, f = {c['fault_tolerance']}: {c['skipped']}")
    if args.json:
        write_json(args.json, {"format": "oobleck.plan-vs-sim.v1", "tolerance": args.tolerance,
                               "mean_error": mean, "within": within, "cycle_bound_mean_error": mean_cycle,
                               "cycle_bound_within": within_cycle, "cases": cases})
    return 0 if within == len(compared) else 1
