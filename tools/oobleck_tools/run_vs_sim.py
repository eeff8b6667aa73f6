"""A measured iteration against oobleck-sim's prediction (tools/bench-run-vs-sim.sh).

The median iteration oobleck-run measured after the warm-up steps, the one
`oobleck-sim iteration` predicted, the planner's formula, and their ratio.
With --single (the same plan's steps trained by `oobleck-run --single-process`
on one core), also the cores' worth: how much of one process's work each of
the run's cores did (one process's step over the nodes times the run's step),
against what the plan's stages allow in 1F1B on a one-pipeline plan, as its
profile times them (their work over S times the slowest stage for M + S - 1
microbatch slots), and what balanced stages would (M / (M + S - 1)).
With --max-error, exits 1 when |predicted / measured - 1| exceeds it.

  oobleck-tools run-vs-sim PLAN.json SIM.json METRICS.jsonl [--single SINGLE.jsonl] [--skip 2] [--max-error R]
"""
import statistics
import sys

from .common import InputError, add_measured_iteration_options, read_json, read_metrics, relative_error, require


def add_arguments(parser):
    parser.add_argument("plan", metavar="PLAN.json", help="oobleck-plan instantiate --json")
    parser.add_argument("sim", metavar="SIM.json", help="oobleck-sim iteration --json for that plan")
    parser.add_argument("metrics", metavar="METRICS.jsonl", help="oobleck-run --metrics for that plan")
    parser.add_argument("--single", metavar="SINGLE.jsonl",
                        help="oobleck-run --single-process --metrics for the same plan, on one core")
    add_measured_iteration_options(parser)


def cores_worth(path, pipelines, single_ms, measured):
    """Prints one process's step over the run's cores, and the bounds of a one-pipeline plan."""
    nodes = sum(len(p["nodes"]) for p in pipelines)
    print(f"one process (median of the same steps):             {single_ms:9.2f} ms")
    print(f"cores' worth: one process / ({nodes} cores x the run): {single_ms / (nodes * measured):.3f}")
    if len(pipelines) != 1:
        return
    stages = require(pipelines[0], "stages", path, lambda v: isinstance(v, list) and v, "a list of stages")
    try:
        work = [float(st["forward_ms"]) + float(st["backward_ms"]) for st in stages]
    except (KeyError, TypeError, ValueError):
        raise InputError(f"{path}: a stage without forward_ms and backward_ms") from None
    m, count = pipelines[0]["microbatches"], len(work)
    if m < 1 or max(work) <= 0:
        raise InputError(f"{path}: a pipeline without microbatches or stage times")
    slots = (m + count - 1) / m
    print(f"  what the plan's stages allow, as profiled:        {sum(work) / (count * max(work) * slots):.3f}"
          f" (slowest stage {max(work):.2f} of {sum(work):.2f} ms a microbatch)")
    print(f"  the most balanced stages would:                   {1 / slots:.3f}")


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
    if args.single:
        single = read_metrics(args.single, step_fields=("step", "iteration_ms")).steps
        first_step, last_step = counted[0]["step"], counted[-1]["step"]
        same = [s["iteration_ms"] for s in single if first_step <= s["step"] <= last_step]
        if not same:
            raise InputError(f"{args.single}: no steps {first_step}..{last_step}")
        cores_worth(args.plan, pipelines, statistics.median(same), measured)
    error = relative_error(predicted, measured)
    if args.max_error is not None and abs(error) > args.max_error:
        print(f"run-vs-sim: the prediction is off by {100 * error:+.1f} %, more than {100 * args.max_error:g} %",
              file=sys.stderr)
        return 1
    return 0
