"""A measured iteration against oobleck-sim's prediction (tools/bench-run-vs-sim.sh).

The median iteration oobleck-run measured after the warm-up steps, the one
`oobleck-sim iteration` predicted, the planner's formula, and their ratio.
With --max-error, exits 1 when |predicted / measured - 1| exceeds it.

  oobleck-tools run-vs-sim PLAN.json SIM.json METRICS.jsonl [--skip 2] [--max-error R]
"""
import statistics
import sys

from .common import InputError, add_measured_iteration_options, read_json, read_metrics, relative_error, require


def add_arguments(parser):
    parser.add_argument("plan", metavar="PLAN.json", help="oobleck-plan instantiate --json")
    parser.add_argument("sim", metavar="SIM.json", help="oobleck-sim iteration --json for that plan")
    parser.add_argument("metrics", metavar="METRICS.jsonl", help="oobleck-run --metrics for that plan")
    add_measured_iteration_options(parser)


def run(args):
    plan = read_json(args.plan)
    sim = read_json(args.sim)
    steps = read_metrics(args.metrics, step_fields=("step", "iteration_ms")).steps
    if not steps:
        raise InputError(f"{args.metrics}: no step lines")
    pipelines = require(plan, "pipelines", args.plan, lambda v: isinstance(v, list), "a list")
    planned = require(plan, "iteration_ms", args.plan)
    predicted = require(sim, "iteration_ms", args.sim)
    counted = steps[args.skip:] or steps
    measured = statistics.median(s["iteration_ms"] for s in counted)
    try:
        shape = " + ".join(f"{len(p['nodes'])}-node pipeline, {p['microbatches']} microbatches" for p in pipelines)
    except (KeyError, TypeError):
        raise InputError(f"{args.plan}: a pipeline without nodes or microbatches") from None
    first = counted[0]["step"]
    print(f"plan: {shape}")
    print(f"measured by oobleck-run (median of steps {first}..{steps[-1]['step']}): {measured:9.2f} ms")
    print(f"predicted by oobleck-sim iteration:                 {predicted:9.2f} ms")
    print(f"planner's formula:                                  {planned:9.2f} ms")
    print(f"measured / predicted: {measured / predicted:.3f}")
    error = relative_error(predicted, measured)
    if args.max_error is not None and abs(error) > args.max_error:
        print(f"run-vs-sim: the prediction is off by {100 * error:+.1f} %, more than {100 * args.max_error:g} %",
              file=sys.stderr)
        return 1
    return 0
